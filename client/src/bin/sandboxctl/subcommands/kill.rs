//! `sandboxctl kill`: sends a signal to a command in a sandbox (its
//! process group), as `docker kill` does to a container. A tag is resolved
//! to the command that has it once, and that command's id is what gets the
//! signal and what is printed.

use clap::Args;
use sandboxd_client::SandboxError;
use sandboxd_protocol::validate_command;

use super::{Context, Run};
use crate::args::{CommandArgs, SandboxArgs};
use crate::failure::Failure;
use crate::render::emit;

/// Send a signal to a command (its process group) and print its id.
#[derive(Debug, Args)]
#[command(override_usage = "sandboxctl kill [OPTIONS] <SCOPE> <ID> <COMMAND_ID | --tag <TAG>>")]
pub struct KillArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    /// A name (TERM, SIGKILL, HUP) or a number (9).
    #[arg(long, short = 's', value_name = "SIGNAL", default_value = "TERM",
          value_parser = signal_number)]
    pub signal: i32,
}

impl Run for KillArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()?;
        validate_command::command_ref(&self.command.command_ref())
    }

    /// Signals the command and answers its id (as JSON: its id and the
    /// signal's number).
    async fn run(self, context: &Context) -> Result<String, Failure> {
        let SandboxArgs { scope, id } = &self.sandbox;
        let client = context.connect().await?;
        let handle = client
            .attach(*scope, id, self.command.command_ref())
            .await?;
        handle.signal(self.signal).await?;
        let answer =
            serde_json::json!({ "command_id": handle.command_id(), "signal": self.signal });
        emit(context.json, &answer, |_| {
            format!("{}\n", handle.command_id())
        })
    }
}

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
fn signal_number(text: &str) -> Result<i32, String> {
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

    #[test]
    fn attach_and_kill_name_one_command_by_id_or_tag() {
        use crate::cli::{parse, Command};
        use sandboxd_client::CommandRef;
        let cli = parse(&["kill", "session", "s", "--tag", "build", "-s", "KILL"]).unwrap();
        let Some(Command::Kill(KillArgs {
            command, signal, ..
        })) = cli.command
        else {
            panic!("not kill")
        };
        assert_eq!(command.command_ref(), CommandRef::Tag("build".into()));
        assert_eq!(signal, 9);
        let cli = parse(&["attach", "session", "s", "abc"]).unwrap();
        let Some(Command::Attach(args)) = cli.command else {
            panic!("not attach")
        };
        assert_eq!(args.command.command_ref(), CommandRef::Id("abc".into()));
        assert!(!args.raw);
        assert!(parse(&["attach", "session", "s"]).is_err());
        assert!(parse(&["kill", "session", "s", "abc", "--tag", "t"]).is_err());
    }
}
