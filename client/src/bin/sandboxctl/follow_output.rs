//! A command's two streams printed as `exec` and `attach` print them: its
//! stdout to sandboxctl's stdout and its stderr to sandboxctl's stderr, as
//! they come, then its end turned into sandboxctl's exit code.
//!
//! Each stream is escaped when it goes to a terminal
//! ([`crate::terminal_text`]) unless `--raw` (or `exec -t`, whose terminal
//! is the command's); into a pipe or a file the bytes pass exactly. Bytes
//! the daemon dropped before they were read are said on stderr, never
//! skipped silently.

use std::io::{self, IsTerminal as _, Write};

use futures::StreamExt as _;
use sandboxd_client::{CommandProof, ExecHandle, ExitReason, OutputEvent, OutputFollower};

use crate::failure::Failure;
use crate::terminal_text::TerminalText;

/// Where a stream goes.
#[derive(Clone, Copy)]
enum Target {
    Stdout,
    Stderr,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Stdout => "stdout",
            Target::Stderr => "stderr",
        }
    }

    fn is_terminal(self) -> bool {
        match self {
            Target::Stdout => io::stdout().is_terminal(),
            Target::Stderr => io::stderr().is_terminal(),
        }
    }

    fn write(self, bytes: &[u8]) -> io::Result<()> {
        fn all(mut out: impl Write, bytes: &[u8]) -> io::Result<()> {
            out.write_all(bytes).and_then(|()| out.flush())
        }
        match self {
            Target::Stdout => all(io::stdout().lock(), bytes),
            Target::Stderr => all(io::stderr().lock(), bytes),
        }
    }
}

/// Prints both streams from their first byte still kept to the command's
/// end, and answers its proof. `raw`: no escaping, even on a terminal.
pub async fn print_both(handle: &ExecHandle, raw: bool) -> Result<CommandProof, Failure> {
    let (proof, _) = futures::try_join!(
        print_stream(handle.stdout(), Target::Stdout, raw),
        print_stream(handle.stderr(), Target::Stderr, raw),
    )?;
    Ok(proof)
}

async fn print_stream(
    mut follower: OutputFollower,
    target: Target,
    raw: bool,
) -> Result<CommandProof, Failure> {
    let mut escaping = (!raw && target.is_terminal()).then(TerminalText::default);
    // A closed stdout (`| head`) stops the printing, not the following:
    // the exit code is still the command's.
    let mut open = true;
    let mut print = |bytes: &[u8]| {
        if open {
            if let Err(error) = target.write(bytes) {
                open = false;
                if error.kind() != io::ErrorKind::BrokenPipe {
                    eprintln!(
                        "sandboxctl: cannot write the command's {}: {error}",
                        target.name()
                    );
                }
            }
        }
    };
    while let Some(event) = follower.next().await {
        match event? {
            OutputEvent::Bytes { data, .. } => match escaping.as_mut() {
                Some(text) => print(text.escape(&data).as_bytes()),
                None => print(&data),
            },
            OutputEvent::Dropped { offset, count } => eprintln!(
                "sandboxctl: {count} bytes of the command's {} before byte {offset} were dropped (the daemon's store for it was full) before they could be read",
                target.name()
            ),
            OutputEvent::Ended(proof) => {
                if let Some(text) = escaping.as_mut() {
                    print(text.finish().as_bytes());
                }
                return Ok(proof);
            }
        }
    }
    Err(Failure::Output(format!(
        "the command's {} ended without its proof",
        target.name()
    )))
}

/// sandboxctl's exit for a command that ended: its shell code (the code,
/// 128 + N for signal N, 124 at its timeout), and a line on stderr when it
/// did not simply exit, so a 124 or 137 is not taken for the program's own.
pub fn ended(handle: &ExecHandle, proof: &CommandProof) -> Result<String, Failure> {
    if !matches!(proof.reason, ExitReason::Exited { .. }) {
        eprintln!(
            "sandboxctl: command {} ended: {}",
            handle.command_id(),
            proof.reason
        );
    }
    match u8::try_from(proof.shell_code().clamp(0, 255)) {
        Ok(0) => Ok(String::new()),
        Ok(code) => Err(Failure::Exit(code)),
        Err(_) => Err(Failure::Exit(1)),
    }
}
