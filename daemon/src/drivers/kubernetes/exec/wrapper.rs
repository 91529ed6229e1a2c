//! The `sh` a command is started through in its pod, and the one line it
//! says before the command runs.
//!
//! pods/exec runs an argv in a container and tells nothing else: not the
//! process's pid, not a working directory or environment of the caller's.
//! So the command is started as `sh -c WRAPPER sandboxd-exec DIR NAME=value…
//! -- ARGV…`: the wrapper drops the runner's token from its environment,
//! goes to the working directory (DIR is relative: an exec starts in its
//! container's working directory, the workspace; a symlink there leads
//! nowhere the container could not go anyway), exports the command's variables, checks
//! that the program exists, writes `sandboxd-exec: pid N` (its own pid in
//! the pod's pid namespace) on stdout, and `exec`s the command in its own
//! place — so the pid it wrote is the command's. A directory or program
//! that is not there is said instead (`sandboxd-exec: workdir`,
//! `sandboxd-exec: program`), before anything runs. The runner image must
//! have a POSIX `sh`.

use sandboxd_protocol::SandboxError;

use super::super::shapes::WORKSPACE;
use crate::sandbox_key::SandboxKey;
use crate::started_command::CommandSpec;

/// The wrapper script (`$0` is `sandboxd-exec`, `$1` the directory).
const SCRIPT: &str = concat!(
    "unset STIGMER_TOKEN; ",
    "cd -- \"$1\" 2>/dev/null || { echo 'sandboxd-exec: workdir'; exit 126; }; shift; ",
    "while [ \"$1\" != -- ]; do export \"$1\"; shift; done; shift; ",
    "command -v \"$1\" >/dev/null 2>&1 || { echo 'sandboxd-exec: program'; exit 127; }; ",
    "echo \"sandboxd-exec: pid $$\"; ",
    "exec \"$@\"",
);

/// The longest first line the wrapper writes, with room to spare.
pub const MAX_LINE: usize = 64;

/// The argv pods/exec is given for `spec`.
pub fn argv(spec: &CommandSpec) -> Vec<String> {
    // Relative: an exec starts in its container's working directory, the
    // workspace (`workingDir` in the pod template).
    let dir = match spec.workdir.as_deref() {
        Some(relative) if !relative.is_empty() => relative.trim_start_matches('/').to_string(),
        _ => ".".to_string(),
    };
    let mut argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        SCRIPT.to_string(),
        "sandboxd-exec".to_string(),
        dir,
    ];
    if spec.pty.is_some() && !spec.env.iter().any(|(name, _)| name == "TERM") {
        argv.push("TERM=xterm".to_string());
    }
    argv.extend(
        spec.env
            .iter()
            .map(|(name, value)| format!("{name}={value}")),
    );
    argv.push("--".to_string());
    argv.extend(spec.argv.iter().cloned());
    argv
}

/// What the wrapper's first line said.
#[derive(Debug, PartialEq, Eq)]
pub enum Said {
    /// The command runs, with this pid in the pod.
    Pid(u32),
    /// The working directory is not there: nothing ran.
    NoWorkdir,
    /// The program is not there: nothing ran.
    NoProgram,
}

/// Reads the wrapper's line (without its `\n`; a terminal adds `\r`).
pub fn parse(line: &[u8]) -> Option<Said> {
    let text = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
    match text.strip_prefix("sandboxd-exec: ")? {
        "workdir" => Some(Said::NoWorkdir),
        "program" => Some(Said::NoProgram),
        other => other.strip_prefix("pid ")?.parse().ok().map(Said::Pid),
    }
}

/// The caller's error for a wrapper that refused to start `spec`.
pub fn refusal(key: &SandboxKey, spec: &CommandSpec, said: &Said) -> SandboxError {
    match said {
        Said::NoWorkdir => SandboxError::InvalidArgument(format!(
            "workdir '{}' is not a directory of {}'s workspace ({WORKSPACE} in its pod)",
            spec.workdir.as_deref().unwrap_or_default(),
            key.what()
        )),
        Said::NoProgram | Said::Pid(_) => SandboxError::InvalidArgument(format!(
            "argv[0] '{}' cannot be run in {}: its pod has no such program (not found in its PATH, or not executable)",
            spec.argv[0],
            key.what()
        )),
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_protocol::{CommandLimits, Expectation, PtySize};

    use super::super::super::shapes::TOKEN_KEY;
    use super::*;

    fn spec() -> CommandSpec {
        CommandSpec {
            id: "0".repeat(32),
            tag: None,
            timeout_ms: None,
            argv: vec!["ls".into(), "-l".into(), "a b".into()],
            env: vec![("GREETING".into(), "hello world; $(rm -rf /)".into())],
            workdir: Some("src/app".into()),
            stdin: false,
            pty: None,
            limits: CommandLimits::default(),
            expect: Expectation::default(),
        }
    }

    #[test]
    fn the_argv_carries_dir_env_and_command_as_words_never_as_script() {
        let argv = argv(&spec());
        assert_eq!(&argv[..2], ["sh", "-c"]);
        assert!(
            !argv[2].contains("hello"),
            "nothing of the request is in the script"
        );
        assert_eq!(
            &argv[3..],
            [
                "sandboxd-exec",
                "src/app",
                "GREETING=hello world; $(rm -rf /)",
                "--",
                "ls",
                "-l",
                "a b"
            ]
        );
        let mut tty = spec();
        tty.pty = Some(PtySize { rows: 24, cols: 80 });
        tty.workdir = None;
        let argv = super::argv(&tty);
        assert_eq!(argv[4], ".");
        assert_eq!(argv[5], "TERM=xterm");
    }

    #[test]
    fn the_runners_token_is_never_the_commands() {
        assert!(SCRIPT.starts_with(&format!("unset {TOKEN_KEY}; ")));
    }

    #[test]
    fn the_first_line_is_read_strictly() {
        assert_eq!(parse(b"sandboxd-exec: pid 42"), Some(Said::Pid(42)));
        assert_eq!(parse(b"sandboxd-exec: pid 42\r"), Some(Said::Pid(42)));
        assert_eq!(parse(b"sandboxd-exec: workdir"), Some(Said::NoWorkdir));
        assert_eq!(parse(b"sandboxd-exec: program"), Some(Said::NoProgram));
        assert_eq!(parse(b"sandboxd-exec: pid x"), None);
        assert_eq!(parse(b"hello"), None);
        assert_eq!(parse(b"\xff"), None);
    }

    /// The script itself, run by this host's `sh` as a pod's would run it.
    #[test]
    fn the_script_says_its_pid_then_becomes_the_command() {
        let dir = std::env::temp_dir();
        let run = |args: &[&str]| {
            let mut argv = vec!["-c", SCRIPT, "sandboxd-exec"];
            argv.extend_from_slice(args);
            let output = std::process::Command::new("sh")
                .args(&argv)
                .env("STIGMER_TOKEN", "secret")
                .output()
                .expect("sh");
            (
                String::from_utf8_lossy(&output.stdout).into_owned(),
                output.status.code(),
            )
        };
        let dir = dir.to_str().unwrap();
        let (out, code) = run(&[
            dir,
            "A=1 2",
            "--",
            "sh",
            "-c",
            "echo $$ \"$A\" \"$STIGMER_TOKEN\" \"$PWD\"; exit 3",
        ]);
        let mut lines = out.lines();
        let said = parse(lines.next().unwrap().as_bytes());
        let Some(Said::Pid(pid)) = said else {
            panic!("{out}")
        };
        assert_eq!(lines.next().unwrap(), format!("{pid} 1 2  {dir}"));
        assert_eq!(code, Some(3));
        let (out, code) = run(&["/no/such/dir", "--", "true"]);
        assert_eq!(
            (out.as_str(), code),
            ("sandboxd-exec: workdir\n", Some(126))
        );
        let (out, code) = run(&[dir, "--", "no-such-program-here"]);
        assert_eq!(
            (out.as_str(), code),
            ("sandboxd-exec: program\n", Some(127))
        );
    }
}
