//! `sandboxctl`'s own start (the peers section: `--only-peers` and the full
//! run): the wall time from the spawn of `sandboxctl --socket S probe
//! session ID` (an absent sandbox: its loading, its runtime, the connect,
//! the protocol handshake, the cheapest call, its exit) to its exit, against
//! the same spawn and exit of
//! - the peers' static program with no libc (`first-clock`): a plain exec,
//!   the goal's baseline;
//! - a static glibc program that returns at once: the start every program
//!   linked with glibc pays before its `main` (on a VM where `cpuid` traps,
//!   glibc's CPU and cache probing is most of it);
//! - and, in this process, the client library's connect, handshake and
//!   probe: the calls without a process around them.
//!
//! Taken in turn, the order rotating each round, after one untimed start
//! of each; the processes are spawned and waited for on a blocking thread,
//! so no runtime's child reaping is in their figures.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{SandboxdClient, Scope};

use crate::report::{Goal, Row};
use crate::stats::Samples;

/// The static glibc program: it only returns.
const GLIBC_SOURCE: &str = "int main(void) { return 0; }\n";

/// What is started, and how.
pub struct Programs {
    pub static_exec: PathBuf,
    pub glibc_exec: PathBuf,
    pub sandboxctl: PathBuf,
    pub socket: PathBuf,
}

/// The figures, one sample per round each.
pub struct CliStart {
    pub static_exec: Samples,
    pub glibc_exec: Samples,
    pub sandboxctl: Samples,
    pub library: Samples,
}

/// Builds the static glibc program into `dir` (`cc -static`).
pub fn build_glibc_program(dir: &Path) -> anyhow::Result<PathBuf> {
    crate::peers_program::compile(
        dir,
        "returns-static-glibc",
        GLIBC_SOURCE,
        &["-static", "-O2"],
    )
}

/// `rounds` of each, in turn.
pub async fn measure(programs: Programs, rounds: usize) -> anyhow::Result<CliStart> {
    let pid = std::process::id();
    let mut figures = CliStart {
        static_exec: Samples::with_capacity(rounds),
        glibc_exec: Samples::with_capacity(rounds),
        sandboxctl: Samples::with_capacity(rounds),
        library: Samples::with_capacity(rounds),
    };
    let programs = std::sync::Arc::new(programs);
    for round in 0..=rounds {
        let id = format!("cli-start-{pid}-{round}");
        let timed = {
            let programs = programs.clone();
            let id = id.clone();
            tokio::task::spawn_blocking(move || run_processes(&programs, &id, round))
                .await
                .context("the blocking thread that spawns the programs")??
        };
        let library = library_start(&programs.socket, &id).await?;
        // Round 0 is the untimed warm-up.
        if round > 0 {
            figures.static_exec.push(timed[0]);
            figures.glibc_exec.push(timed[1]);
            figures.sandboxctl.push(timed[2]);
            figures.library.push(library);
        }
    }
    Ok(figures)
}

/// The three processes' times to their exits, in the order [static, glibc,
/// sandboxctl], started in an order that rotates with `round`.
fn run_processes(programs: &Programs, id: &str, round: usize) -> anyhow::Result<[Duration; 3]> {
    let mut times = [Duration::ZERO; 3];
    for turn in 0..3 {
        let which = (round + turn) % 3;
        let mut command = match which {
            0 => Command::new(&programs.static_exec),
            1 => Command::new(&programs.glibc_exec),
            _ => {
                let mut command = Command::new(&programs.sandboxctl);
                command
                    .arg("--socket")
                    .arg(&programs.socket)
                    .args(["probe", "session", id]);
                command
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let started = Instant::now();
        let status = command
            .status()
            .with_context(|| format!("run {:?}", command.get_program()))?;
        times[which] = started.elapsed();
        if !status.success() {
            bail!("{:?} exited with {status}", command.get_program());
        }
    }
    Ok(times)
}

/// The client library's connect (with its handshake) and a probe of `id`.
async fn library_start(socket: &Path, id: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let client = SandboxdClient::connect(socket)
        .await
        .with_context(|| format!("connect to {}", socket.display()))?;
    client
        .probe(Scope::Session, id)
        .await
        .with_context(|| format!("probe {id}"))?;
    let took = started.elapsed();
    drop(client);
    Ok(took)
}

fn ms(samples: &Samples, p: f64) -> f64 {
    samples.percentile_us(p) / 1e3
}

/// The rows: sandboxctl's start against a plain exec (the goal) and
/// against glibc's own start; the static glibc program against a plain
/// exec; the library's calls in process.
pub fn rows(figures: &CliStart) -> Vec<Row> {
    let plain = (
        "spawn to exit of a static program with no libc (first-clock)",
        &figures.static_exec,
    );
    let glibc = (
        "spawn to exit of a static glibc program that returns",
        &figures.glibc_exec,
    );
    let ctl = (
        "`sandboxctl probe` (absent sandbox) spawn to exit",
        &figures.sandboxctl,
    );
    let library = (
        "client library in process: connect, handshake, probe",
        &figures.library,
    );
    // `figure`'s percentile `p` against `baseline`'s.
    let row = |(what, samples): (&str, &Samples),
               (base, base_samples): (&str, &Samples),
               p: u8,
               goal| Row {
        row: "ctl",
        what: format!("{what} p{p}"),
        unit: "ms",
        value: ms(samples, f64::from(p)),
        baseline_what: format!("{base} p{p}"),
        baseline: Some(ms(base_samples, f64::from(p))),
        goal,
    };
    vec![
        row(ctl, plain, 50, Goal::RatioAtMost(1.5)),
        row(ctl, plain, 99, Goal::Info),
        row(ctl, glibc, 50, Goal::Info),
        row(glibc, plain, 50, Goal::Info),
        row(library, ctl, 50, Goal::Info),
    ]
}

/// One line of the peers' summary.
pub fn summary(figures: &CliStart) -> String {
    format!(
        "sandboxctl's start, spawn to exit p50 / p99 (ms), {} rounds: first-clock {:.2} / {:.2}, \
         static glibc program {:.2} / {:.2}, `sandboxctl probe` {:.2} / {:.2}; \
         in process, connect + handshake + probe {:.2} / {:.2}\n",
        figures.sandboxctl.len(),
        ms(&figures.static_exec, 50.0),
        ms(&figures.static_exec, 99.0),
        ms(&figures.glibc_exec, 50.0),
        ms(&figures.glibc_exec, 99.0),
        ms(&figures.sandboxctl, 50.0),
        ms(&figures.sandboxctl, 99.0),
        ms(&figures.library, 50.0),
        ms(&figures.library, 99.0),
    )
}
