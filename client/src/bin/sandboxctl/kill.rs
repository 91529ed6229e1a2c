//! `sandboxctl kill`: sends a signal to a command in a sandbox (its
//! process group), as `docker kill` does to a container. A tag is resolved
//! to the command that has it once, and that command's id is what gets the
//! signal and what is printed.

use sandboxd_client::{CommandRef, SandboxdClient, Scope};

use crate::Failure;

/// The signals by name, as `kill -l` lists them on Linux.
const NAMES: [(&str, i32); 31] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// `TERM`, `SIGTERM`, `sigkill`, `9`: a signal by name (with or without
/// `SIG`, any case) or by number (1 to 64).
pub fn signal_number(text: &str) -> Result<i32, String> {
    if let Ok(number) = text.parse::<i32>() {
        return if (1..=64).contains(&number) {
            Ok(number)
        } else {
            Err(format!("{number} is not a signal number (1 to 64)"))
        };
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    NAMES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, number)| *number)
        .ok_or_else(|| {
            format!("'{text}' is not a signal (a name like TERM, SIGKILL, HUP, or a number like 9)")
        })
}

/// Signals the command and answers its id (as JSON: its id and the
/// signal's number).
pub async fn send(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    command: CommandRef,
    signal: i32,
    json: bool,
) -> Result<String, Failure> {
    let handle = client.attach(scope, id, command).await?;
    handle.signal(signal).await?;
    let answer = serde_json::json!({ "command_id": handle.command_id(), "signal": signal });
    crate::emit(json, &answer, |_| format!("{}\n", handle.command_id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_or_number() {
        assert_eq!(signal_number("TERM"), Ok(libc::SIGTERM));
        assert_eq!(signal_number("SIGKILL"), Ok(libc::SIGKILL));
        assert_eq!(signal_number("sigint"), Ok(libc::SIGINT));
        assert_eq!(signal_number("9"), Ok(9));
        assert_eq!(signal_number("34"), Ok(34));
        for bad in ["0", "65", "-9", "TERMINATE", ""] {
            assert!(signal_number(bad).is_err(), "{bad}");
        }
        assert!(signal_number("FOO").unwrap_err().contains("'FOO'"));
    }
}
