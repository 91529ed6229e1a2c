//! Running the `nft` tool.
//!
//! Why the tool and not a crate: the rule that matters here,
//! `socket cgroupv2 level N "PATH"`, cannot be said in nft's JSON (nft
//! 1.0.6 rejects the key, "Invalid socket key value"), and the `nftables`
//! crate, which speaks that JSON, has no `level` either. nft's own rule
//! language is its stable interface, and the script is small enough to
//! read (see [`super::ruleset`]). Hand-written netlink would be far more.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use crate::child_output::{output_within, WaitError};

/// How long one nft call may take before it is killed and counted as
/// failed: nft answers in milliseconds, so only a wedged kernel or tool
/// (or a machine stalled far past any deadline) reaches it, and then
/// nothing waits on it for ever.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The elements of set `name` as a whitespace-flattened listing (`nft
/// list table …`) writes them: the text between `elements = {` and `}`.
pub fn listed_elements<'a>(flat: &'a str, name: &str) -> Option<&'a str> {
    let set = &flat[flat.find(&format!("set {name} {{"))?..];
    let elements = &set[set.find("elements = {")? + "elements = {".len()..];
    Some(&elements[..elements.find('}')?])
}

/// The `nft` executable found on `PATH`.
#[derive(Debug, Clone)]
pub struct Nft {
    program: PathBuf,
    /// The bound on each call: see [`CALL_TIMEOUT`] and [`Nft::bounded`].
    timeout: Duration,
}

impl Nft {
    /// Looks `nft` up on the daemon's `PATH`.
    pub fn find() -> Result<Nft, String> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join("nft"))
            .find(|candidate| is_executable(candidate))
            .map(|program| Nft {
                program,
                timeout: CALL_TIMEOUT,
            })
            .ok_or_else(|| {
                format!(
                    "the nft tool (nftables) is not on the daemon's PATH ({})",
                    std::env::join_paths(std::env::split_paths(&path))
                        .map(|joined| joined.to_string_lossy().into_owned())
                        .unwrap_or_default()
                )
            })
    }

    /// The same tool with each call bounded by `timeout` instead.
    pub fn bounded(&self, timeout: Duration) -> Nft {
        Nft {
            program: self.program.clone(),
            timeout,
        }
    }

    /// Applies `script` as one transaction (`nft -f -`).
    pub fn apply(&self, script: &str) -> Result<(), String> {
        let child = self
            .start_apply(script)
            .map_err(|error| format!("cannot run {}: {error}", self.program.display()))?;
        self.finish_apply(child)
    }

    /// [`Nft::apply`] with a failure to start nft kept as the error it was
    /// (descriptor exhaustion must still be told as such).
    pub fn apply_keeping_errno(&self, script: &str) -> io::Result<()> {
        let child = self.start_apply(script)?;
        self.finish_apply(child).map_err(io::Error::other)
    }

    fn start_apply(&self, script: &str) -> io::Result<Child> {
        let mut child = Command::new(&self.program)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            // A failed write shows up as nft's own error below.
            let _ = stdin.write_all(script.as_bytes());
        }
        Ok(child)
    }

    fn finish_apply(&self, child: Child) -> Result<(), String> {
        let output = self.wait(child)?;
        self.answer(&output, "load the rules").map(drop)
    }

    /// `nft list tables`.
    pub fn list_tables(&self) -> Result<String, String> {
        let output = self.run(&["list", "tables"])?;
        self.answer(&output, "list tables")
    }

    /// `nft list table <spec>`.
    pub fn list_table(&self, spec: &str) -> Result<String, String> {
        let output = self.run(&["list", "table", spec])?;
        self.answer(&output, &format!("list table {spec}"))
    }

    /// `nft delete table <spec>`.
    pub fn delete_table(&self, spec: &str) -> Result<(), String> {
        let output = self.run(&["delete", "table", spec])?;
        self.answer(&output, &format!("delete table {spec}"))
            .map(drop)
    }

    fn run(&self, args: &[&str]) -> Result<Output, String> {
        let child = Command::new(&self.program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| format!("cannot run {}: {error}", self.program.display()))?;
        self.wait(child)
    }

    /// Collects the child's output, killing it once the bound passes (see
    /// [`crate::child_output`]).
    fn wait(&self, child: Child) -> Result<Output, String> {
        output_within(child, self.timeout).map_err(|error| match error {
            WaitError::TimedOut => format!(
                "{} did not answer within {:?} and was killed",
                self.program.display(),
                self.timeout
            ),
            WaitError::Wait(error) => {
                format!("cannot wait for {}: {error}", self.program.display())
            }
        })
    }

    /// Stdout on success; nft's first error line, and the action, otherwise.
    fn answer(&self, output: &Output, action: &str) -> Result<String, String> {
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let reason = first_error(&stderr);
        Err(format!(
            "nft could not {action} ({}): {reason}",
            output.status
        ))
    }
}

/// nft's first error line in its messages (the tool's stderr, the
/// library's error buffer), else its first line.
pub fn first_error(messages: &str) -> &str {
    messages
        .lines()
        .find(|line| line.contains("Error"))
        .or_else(|| messages.lines().next())
        .unwrap_or("no message")
        .trim()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
