//! `sandboxd-example-runner`: a runner to try sandboxd with, shipped with
//! the daemon so the first `cargo build` gives a daemon that can run a
//! sandbox. It is never used unless named (`--runner-command`): the
//! default runner command stays `stigmer-runner`, and `sandboxctl status`
//! says when this one is in use.
//!
//! It prints the environment contract it received (the token only as
//! "set, N bytes", never its value), then a heartbeat line every
//! `--heartbeat SECONDS` (default 5), and on SIGTERM or SIGINT prints
//! `got SIGTERM, bye` and exits 0, as a well-behaved runner does.

use std::time::Duration;

/// The variables the daemon gives every runner (the process tier's
/// contract; the container tiers give the same names).
const CONTRACT: [&str; 6] = [
    "STIGMER_TASK_QUEUE",
    "MODE",
    "WORKSPACE_ROOT_DIR",
    "HOME",
    "STIGMER_BACKEND_ENDPOINT",
    "TEMPORAL_SERVICE_ADDRESS",
];

/// The one secret in the contract: shown as set or not, and its length.
const TOKEN: &str = "STIGMER_TOKEN";

fn main() {
    let heartbeat = match parse_args(std::env::args().skip(1).collect()) {
        Ok(heartbeat) => heartbeat,
        Err(problem) => {
            eprintln!("sandboxd-example-runner: {problem}");
            eprintln!("usage: sandboxd-example-runner [--heartbeat SECONDS]");
            std::process::exit(2);
        }
    };
    // Blocked before anything is printed, so a SIGTERM sent while the
    // program starts is pending and ends the first wait at once.
    let signals = block_stop_signals();
    for line in contract_lines(|name| std::env::var_os(name)) {
        println!("{line}");
    }
    let mut beats = 0u64;
    loop {
        match wait_for_signal(&signals, heartbeat) {
            Some(signal) => {
                println!("got {signal}, bye");
                std::process::exit(0);
            }
            None => {
                beats += 1;
                println!("heartbeat {beats}");
            }
        }
    }
}

/// `--heartbeat SECONDS` (a whole number, at least 1), else 5 seconds.
fn parse_args(args: Vec<String>) -> Result<Duration, String> {
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => Ok(Duration::from_secs(5)),
        ["--heartbeat", seconds] => match seconds.parse::<u64>() {
            Ok(seconds) if seconds > 0 => Ok(Duration::from_secs(seconds)),
            _ => Err(format!(
                "--heartbeat wants a whole number of seconds, at least 1, not '{seconds}'"
            )),
        },
        _ => Err(format!("unexpected arguments: {}", args.join(" "))),
    }
}

/// The lines that describe what this runner was given: who it runs as,
/// where, and each contract variable (values quoted, so a control
/// character cannot forge a line; the token never shown).
fn contract_lines(get: impl Fn(&str) -> Option<std::ffi::OsString>) -> Vec<String> {
    let mut lines = vec![format!(
        "sandboxd-example-runner {}: pid {}, uid {}, gid {}, cwd {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        unsafe { libc::getuid() },
        // SAFETY: as above.
        unsafe { libc::getgid() },
        std::env::current_dir()
            .map(|dir| format!("{:?}", dir.display().to_string()))
            .unwrap_or_else(|error| format!("unknown ({error})")),
    )];
    for name in CONTRACT {
        lines.push(match get(name) {
            Some(value) => format!("  {name}={:?}", value.to_string_lossy()),
            None => format!("  {name} not set"),
        });
    }
    lines.push(match get(TOKEN) {
        Some(value) => format!("  {TOKEN} set ({} bytes)", value.len()),
        None => format!("  {TOKEN} not set"),
    });
    lines
}

/// Blocks SIGTERM and SIGINT in this (only) thread and returns the set.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain libc calls on a zeroed, then initialised, signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`: its name, or `None` on timeout.
fn wait_for_signal(set: &libc::sigset_t, timeout: Duration) -> Option<&'static str> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let wait = libc::timespec {
            tv_sec: left.as_secs() as libc::time_t,
            tv_nsec: left.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `set` is an initialised signal set, `wait` a valid
        // timespec; no siginfo is asked for.
        let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &wait) };
        match signal {
            libc::SIGTERM => return Some("SIGTERM"),
            libc::SIGINT => return Some("SIGINT"),
            // EAGAIN (the timeout) or EINTR: look at the clock again.
            _ => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn the_token_is_shown_by_length_only() {
        let lines = contract_lines(|name| match name {
            "STIGMER_TOKEN" => Some(OsString::from("s3cr3t-value")),
            "STIGMER_TASK_QUEUE" => Some(OsString::from("session:ses_1\nforged")),
            _ => None,
        });
        let text = lines.join("\n");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("  STIGMER_TOKEN set (12 bytes)"), "{text}");
        assert!(
            text.contains("  STIGMER_TASK_QUEUE=\"session:ses_1\\nforged\""),
            "{text}"
        );
        assert!(text.contains("  MODE not set"), "{text}");
    }

    #[test]
    fn a_bad_heartbeat_is_refused_by_name() {
        assert_eq!(parse_args(vec![]), Ok(Duration::from_secs(5)));
        assert_eq!(
            parse_args(vec!["--heartbeat".into(), "2".into()]),
            Ok(Duration::from_secs(2))
        );
        let error = parse_args(vec!["--heartbeat".into(), "banana".into()]).unwrap_err();
        assert!(error.contains("'banana'"), "{error}");
        assert!(parse_args(vec!["--heartbeat".into(), "0".into()]).is_err());
    }
}
