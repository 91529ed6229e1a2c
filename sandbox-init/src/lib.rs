//! What runs inside a process-tier sandbox before, beside or as its
//! runner, exec'd by the daemon:
//! - [`init`]: a sandbox's PID 1 under `isolation = "full"`;
//! - [`view_holder`]: the PID 1 of a view prepared ahead of its sandbox;
//! - [`parked_runner`]: a runner parked ahead of its sandbox, which execs
//!   the runner once told what to run;
//! - [`piped_runner`]: the same under gVisor, told through pipes.
//!
//! Why a crate (and the daemon package's small `sandboxd-init` binary) of
//! its own: each of these roles is an exec, once per sandbox started cold
//! and twice per sandbox prepared ahead, and an exec of the daemon's own
//! binary (tokio, tarpc, bollard, kube: 18 MiB of text, 33,000
//! relocations) costs 1.1–1.6 ms of CPU and 256–262 page faults, where
//! `sandboxd-init`, which links only this crate, std and libc, costs
//! 0.6–0.9 ms and 69–73 (release builds, `perf stat -r 300`, 2-vCPU host).
//! On a busy host that CPU is the rate at which sandboxes start. The
//! daemon still plays every role itself ([`run_role`] in its `main`) when
//! no trusted `sandboxd-init` of the same build stands next to it, and
//! `status` says which binary is in use.

pub mod init;
pub mod parked_runner;
pub mod piped_runner;
pub mod privileges;
pub mod view_holder;

use std::ffi::OsStr;
use std::process::ExitCode;

/// Which build this is: the version and a digest of this crate's sources
/// (see `build.rs`). The daemon uses a `sandboxd-init` only when its stamp
/// is the daemon's own, so the two ends of every role (its arguments, the
/// parked runner's messages) always come from the same sources.
pub const STAMP: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("SOURCE_DIGEST"));

/// The argument that makes `sandboxd-init` print [`STAMP`] and exit.
pub const STAMP_ARG: &str = "--stamp";

/// Runs the role that `arg` (a binary's first argument) names, if it names
/// one: what the binary then returns.
pub fn run_role(arg: &OsStr) -> Option<ExitCode> {
    if arg == init::ARG {
        Some(init::run_init_process())
    } else if arg == view_holder::ARG {
        Some(view_holder::run_view_holder())
    } else if arg == parked_runner::ARG {
        Some(parked_runner::run_parked_runner())
    } else if arg == piped_runner::ARG {
        Some(piped_runner::run_piped_runner())
    } else {
        None
    }
}

/// The `sandboxd-init` binary's `main`: a role, or its stamp.
pub fn main() -> ExitCode {
    let arg = std::env::args_os().nth(1).unwrap_or_default();
    if let Some(code) = run_role(&arg) {
        return code;
    }
    if arg == STAMP_ARG {
        println!("{STAMP}");
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "sandboxd-init: not a command to run by hand; the sandboxd daemon execs it \
         as a sandbox's init, a prepared view's holder or a parked runner \
         ({STAMP_ARG} prints its build's stamp)"
    );
    ExitCode::from(2)
}
