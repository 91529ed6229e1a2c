//! `sandboxctl logs`: a sandbox's output, read through the daemon one
//! bounded chunk at a time.
//!
//! Each call returns at most [`MAX_LOG_CHUNK`] bytes and a cursor; the
//! command asks again from that cursor until the daemon says it is at the
//! end, and with `--follow` keeps asking every [`FOLLOW_POLL`]. The daemon
//! carries the cursor across rotations and container restarts; output lost
//! before it could be read (rotated away, or gone with a removed container)
//! is reported on stderr as a gap, never skipped silently. Once a follow
//! has caught up it asks only for the generation writing now
//! (`LogStart::Generation`): it ends, exit 0, after that generation's last
//! bytes with one line on stderr naming how it ended (an exit code, a
//! signal, out of memory), whether the sandbox was deprovisioned, kept its
//! workspace, or its runner just exited; it never reads into the next
//! generation. A follow whose sandbox is gone without a word (the daemon
//! answers "no such sandbox") ends cleanly too, saying so.
//!
//! Runner output is untrusted. On a terminal, control characters other than
//! newline, tab and a CRLF line end are shown escaped
//! ([`crate::terminal_text`]), so an escape sequence in it cannot drive the
//! admin's terminal; into a pipe or file it passes byte for byte.

use std::io::{self, IsTerminal, Write};
use std::time::Duration;

use clap::Args;
use sandboxd_client::{ClientError, LogStart, SandboxError, SandboxdClient, Shown, MAX_LOG_CHUNK};

use super::{Context, Run};
use crate::args::SandboxArgs;
use crate::failure::Failure;
use crate::terminal_text::{complete_utf8_prefix, TerminalText};

/// Print a sandbox's output (its runner's stdout and stderr).
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Only the last N lines [default: everything still kept].
    #[arg(long, value_name = "N")]
    pub tail: Option<u32>,
    /// Keep printing new output as it is written, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print the runner's bytes as they are even on a terminal
    /// [default: control characters escaped on a terminal; pipes always
    /// get the bytes].
    #[arg(long)]
    pub raw: bool,
}

impl Run for LogsArgs {
    fn check(&self) -> Result<(), SandboxError> {
        self.sandbox.check()
    }

    /// Streams the output as it arrives rather than returning it: it may
    /// not end.
    async fn run(self, context: &Context) -> Result<String, Failure> {
        self.print(&context.connect().await?, context.json).await?;
        Ok(String::new())
    }
}

/// How often `--follow` asks for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

impl LogsArgs {
    /// Prints the output from `--tail` lines back (or from the beginning),
    /// then follows it when asked. Ends quietly when stdout is closed.
    async fn print(&self, client: &SandboxdClient, json: bool) -> Result<(), Failure> {
        let (SandboxArgs { scope, id }, follow) = (&self.sandbox, self.follow);
        let stdout = io::stdout();
        let mut out = Output::new(stdout.is_terminal() && !self.raw, json);
        let mut start = match self.tail {
            Some(lines) => LogStart::Tail { lines },
            None => LogStart::Beginning,
        };
        let mut followed = false;
        let mut caught_up = false;
        loop {
            let chunk = match client.logs(*scope, id, start, MAX_LOG_CHUNK).await {
                Ok(chunk) => chunk,
                // A follow whose sandbox went away has simply come to its end.
                Err(ClientError::Sandbox(SandboxError::NotFound(_))) if followed => {
                    eprintln!(
                        "sandboxctl: {scope} {}: sandbox deprovisioned; its output ends here",
                        Shown(id)
                    );
                    break;
                }
                Err(error) => return Err(error.into()),
            };
            followed = follow;
            if chunk.gap {
                eprintln!(
                    "sandboxctl: some output of {scope} {id} was lost before it was read (rotated away, or gone with a removed container)"
                );
            }
            let write = out.write(&mut stdout.lock(), &chunk.data, chunk.gap);
            if !written(write.and_then(|()| stdout.lock().flush()))? {
                return Ok(());
            }
            if let Some(how) = chunk.ended.as_deref().filter(|_| follow) {
                eprintln!(
                    "sandboxctl: {scope} {}: {}; its output ends here",
                    Shown(id),
                    Shown(how)
                );
                break;
            }
            // Caught up: from now on only the generation writing now, so the
            // follow ends with it and never reads into the next one.
            caught_up |= follow && chunk.at_end;
            start = if caught_up {
                LogStart::Generation(chunk.next)
            } else {
                LogStart::After(chunk.next)
            };
            if chunk.at_end {
                if !follow {
                    break;
                }
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        }
        let finish = out.finish(&mut stdout.lock());
        written(finish.and_then(|()| stdout.lock().flush())).map(|_| ())
    }
}

/// Whether a write reached stdout: false when stdout is closed (its reader
/// is gone, which is no error), a failure for any other error.
fn written(result: io::Result<()>) -> Result<bool, Failure> {
    match result {
        Ok(()) => Ok(true),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(error) => Err(Failure::Output(format!("cannot write the output: {error}"))),
    }
}

/// How chunks reach stdout: raw bytes, escaped text for a terminal, or one
/// JSON object per chunk.
struct Output {
    terminal: bool,
    json: bool,
    /// The terminal's escaping, which joins characters cut by chunks.
    text: TerminalText,
    /// For JSON: the start of a UTF-8 character cut by a chunk boundary,
    /// kept for the next chunk so it is not shown as two replacement
    /// characters.
    pending: Vec<u8>,
}

impl Output {
    fn new(terminal: bool, json: bool) -> Self {
        Output {
            terminal,
            json,
            text: TerminalText::default(),
            pending: Vec::new(),
        }
    }

    fn write(&mut self, out: &mut impl Write, data: &[u8], gap: bool) -> io::Result<()> {
        if self.json {
            self.pending.extend_from_slice(data);
            let complete = complete_utf8_prefix(&self.pending);
            let text = String::from_utf8_lossy(&self.pending[..complete]).into_owned();
            self.pending.drain(..complete);
            return json_line(out, &text, gap);
        }
        if self.terminal {
            return out.write_all(self.text.escape(data).as_bytes());
        }
        out.write_all(data)
    }

    /// Writes what is left of a cut character.
    fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.json {
            let text = String::from_utf8_lossy(&self.pending).into_owned();
            self.pending.clear();
            return json_line(out, &text, false);
        }
        out.write_all(self.text.finish().as_bytes())
    }
}

fn json_line(out: &mut impl Write, text: &str, gap: bool) -> io::Result<()> {
    if text.is_empty() && !gap {
        return Ok(());
    }
    let line = serde_json::json!({ "data": text, "gap": gap });
    writeln!(out, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(terminal: bool, json: bool, chunks: &[&[u8]]) -> String {
        let mut output = Output::new(terminal, json);
        let mut out = Vec::new();
        for chunk in chunks {
            output.write(&mut out, chunk, false).unwrap();
        }
        output.finish(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn pipes_get_the_bytes_unchanged() {
        let mut out = Vec::new();
        let mut output = Output::new(false, false);
        output.write(&mut out, b"a\x1b[2Jb\xff\n", false).unwrap();
        assert_eq!(out, b"a\x1b[2Jb\xff\n");
    }

    #[test]
    fn terminals_get_escape_sequences_escaped() {
        assert_eq!(
            written(true, false, &[b"red \x1b[31mtext\x07\n\tok\r\n"]),
            "red \\u{1b}[31mtext\\u{7}\n\tok\r\n"
        );
    }

    #[test]
    fn a_character_cut_by_a_chunk_boundary_is_joined() {
        let text = "naïve ✓\n".as_bytes();
        let cut = text.len() - 3; // inside the three bytes of ✓
        assert_eq!(
            written(true, false, &[&text[..cut], &text[cut..]]),
            "naïve ✓\n"
        );
        assert_eq!(written(true, false, &[b"x\xe2\x9c"]), "x\\xe2\\x9c");
    }

    #[test]
    fn json_is_one_object_per_chunk() {
        let text = written(false, true, &[b"one\n", b"", b"two\n"]);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                serde_json::json!({"data": "one\n", "gap": false}),
                serde_json::json!({"data": "two\n", "gap": false})
            ]
        );
    }

    #[test]
    fn logs_takes_tail_and_follow() {
        use crate::cli::{parse, Command};
        let Some(Command::Logs(args)) = parse(&["logs", "workflow", "wf-1", "--tail", "20", "-f"])
            .unwrap()
            .command
        else {
            panic!("not logs")
        };
        assert_eq!(args.sandbox.scope, sandboxd_client::Scope::Workflow);
        assert_eq!((args.tail, args.follow, args.raw), (Some(20), true, false));
        let Some(Command::Logs(args)) = parse(&["logs", "session", "s", "--raw"]).unwrap().command
        else {
            panic!("not logs")
        };
        assert!(args.raw);
        let Some(Command::Logs(args)) = parse(&["logs", "session", "s"]).unwrap().command else {
            panic!("not logs")
        };
        assert_eq!((args.tail, args.follow), (None, false));
        let error = parse(&["logs", "session", "s", "--tail", "-1"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
    }
}
