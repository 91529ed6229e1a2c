//! How a file call's failures are worded: each names the path as the
//! caller gave it and the sandbox, as the other tiers' do, and reads the
//! word a script refused with (see [`super::scripts`]).

use sandboxd_protocol::SandboxError;

use super::super::exec::end::Said;
use super::run::Ended;
use super::scripts::REFUSED;

/// What a failure is told with.
pub struct Told {
    pub verb: &'static str,
    pub path: String,
    pub what: String,
}

/// The tools the scripts run, for the refusal of an image without one.
const TOOLS: &str = "`sh`, `tar`, `dd`, `stat`, `cat`, `wc`, `mv`, `rm`";

impl Told {
    fn path(&self) -> String {
        self.path.escape_debug().to_string()
    }

    /// The exec's stream failed or overran.
    pub fn stream(&self, why: &str) -> SandboxError {
        SandboxError::Unavailable(format!(
            "cannot {} '{}' in {}: its exec in the pod failed: {why}",
            self.verb,
            self.path(),
            self.what
        ))
    }

    /// An upload's chunk came with no upload under way.
    pub fn no_upload(&self) -> SandboxError {
        SandboxError::FailedPrecondition(format!(
            "no upload of '{}' to {} is under way: start it at offset 0",
            self.path(),
            self.what
        ))
    }

    /// An upload's chunk is not where the upload stands.
    pub fn resume(&self, held: u64) -> SandboxError {
        SandboxError::FailedPrecondition(format!(
            "the upload of '{}' to {} holds {held} bytes: resume it at offset {held}, or start \
             over at 0",
            self.path(),
            self.what
        ))
    }

    pub fn host(&self, error: std::io::Error) -> SandboxError {
        SandboxError::Internal(format!(
            "cannot keep the upload of '{}' to {} on the daemon's host: {error}",
            self.path(),
            self.what
        ))
    }

    /// An archive's entry refused before anything reached the pod.
    pub fn refused_entry(&self, name: &str, why: &str) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "the archive for '{}' in {} has an entry '{}' that is refused: {why}; nothing of it \
             was unpacked",
            self.path(),
            self.what,
            name.escape_debug()
        ))
    }

    pub fn corrupt(&self, why: &str) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "the archive for '{}' in {} cannot be read as tar: {why}; nothing of it was unpacked",
            self.path(),
            self.what
        ))
    }

    pub fn workspace_itself(&self) -> SandboxError {
        SandboxError::InvalidArgument(format!(
            "path '{}' names the workspace of {}, not a file in it",
            self.path(),
            self.what
        ))
    }

    /// Why a script that ended with `ended` failed; `Ok` when it did not.
    pub fn outcome(&self, ended: &Ended) -> Result<(), SandboxError> {
        let said = String::from_utf8_lossy(&ended.stderr);
        let code = match &ended.said {
            Said::Code(0) => return Ok(()),
            Said::Code(code) => *code,
            Said::Broken(why) => {
                return Err(SandboxError::FailedPrecondition(format!(
                    "cannot {} '{}' in {}: the exec of its script did not run to an exit code \
                     ({why}); the runner image must have a POSIX `sh`; stderr: {}",
                    self.verb,
                    self.path(),
                    self.what,
                    said.trim()
                )))
            }
        };
        let word = said
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("sandboxd-files: "));
        match word {
            Some(word) if code == REFUSED => Err(self.refusal(word, &said)),
            _ => Err(SandboxError::FailedPrecondition(format!(
                "cannot {} '{}' in {} (as the container's user, in its pod): {} (exit code {code})",
                self.verb,
                self.path(),
                self.what,
                said.trim()
            ))),
        }
    }

    /// A script's refusal (`word`, after everything it wrote in `said`).
    fn refusal(&self, word: &str, said: &str) -> SandboxError {
        let (path, what, verb) = (self.path(), &self.what, self.verb);
        let (head, detail) = word.split_once(' ').unwrap_or((word, ""));
        match head {
            "missing" => SandboxError::FailedPrecondition(format!(
                "cannot {verb} '{path}' in {what}: the image of its pod has no `{detail}` (files \
                 move through {TOOLS} run in the runner container through pods/exec, as `kubectl \
                 cp` does)"
            )),
            "absent" => SandboxError::NotFound(format!(
                "'{path}' does not exist in the workspace of {what}"
            )),
            "noparent" => SandboxError::NotFound(format!(
                "the directory of '{path}' does not exist in the workspace of {what}"
            )),
            "notdir" => {
                SandboxError::InvalidArgument(format!("'{path}' in {what} is not a directory"))
            }
            "isdir" => SandboxError::InvalidArgument(format!("'{path}' in {what} is a directory")),
            "notregular" => SandboxError::InvalidArgument(format!(
                "'{path}' in {what} is not a regular file: cannot {verb} it"
            )),
            "denied" => SandboxError::PermissionDenied(format!(
                "the sandbox's user may not {verb} '{path}' in {what}"
            )),
            "notempty" => SandboxError::FailedPrecondition(format!(
                "'{path}' in {what} is a directory that is not empty: remove it recursively"
            )),
            "short" => SandboxError::Unavailable(format!(
                "the upload of '{path}' reached the pod of {what} incomplete (its exec stream \
                 broke); nothing was placed: send it again"
            )),
            "untar" => SandboxError::InvalidArgument(format!(
                "`tar` in the pod of {what} could not unpack the archive for '{path}': {}; \
                 nothing of it was placed",
                said.lines()
                    .filter(|line| !line.starts_with("sandboxd-files: "))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            "unreadable" => {
                SandboxError::FailedPrecondition(format!("`dd` could not read '{path}' in {what}"))
            }
            "conflict" => self.conflict(detail),
            _ => SandboxError::Internal(format!(
                "cannot {verb} '{path}' in {what}: its script said '{}'",
                word.escape_debug()
            )),
        }
    }

    /// An archive that would not fit what is in its destination.
    fn conflict(&self, detail: &str) -> SandboxError {
        let (kind, at) = detail.split_once(' ').unwrap_or((detail, ""));
        let at = at.strip_prefix("./").unwrap_or(at).escape_debug();
        let why = match kind {
            "link" => format!("'{at}' is a symbolic link where the archive has a directory (it is not written through)"),
            "file" => format!("'{at}' is not a directory where the archive has one"),
            "dir" => format!("'{at}' is a directory where the archive has a file"),
            _ => format!("the sandbox's user may not write in '{at}'"),
        };
        let error = format!(
            "the archive for '{}' in {} was not unpacked: {why}; nothing of it was placed",
            self.path(),
            self.what
        );
        match kind {
            "denied" => SandboxError::PermissionDenied(error),
            _ => SandboxError::FailedPrecondition(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn told() -> Told {
        Told {
            verb: "unpack into",
            path: "d".into(),
            what: "session 's' (sbx-ses-1)".into(),
        }
    }

    fn said(code: i32, stderr: &str) -> Ended {
        Ended {
            said: Said::Code(code),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_script_s_word_is_told_by_name() {
        assert!(told().outcome(&said(0, "")).is_ok());
        let no_tar = told().outcome(&said(3, "sandboxd-files: missing tar\n"));
        assert!(
            matches!(&no_tar, Err(SandboxError::FailedPrecondition(m)) if m.contains("has no `tar`")),
            "{no_tar:?}"
        );
        let conflict = told().outcome(&said(3, "sandboxd-files: conflict link ./d/a b\n"));
        assert!(
            matches!(&conflict, Err(SandboxError::FailedPrecondition(m)) if m.contains("'d/a b' is a symbolic link")),
            "{conflict:?}"
        );
        let other = told().outcome(&said(2, "tar: x: Cannot open: Permission denied\n"));
        assert!(
            matches!(&other, Err(SandboxError::FailedPrecondition(m)) if m.contains("Cannot open") && m.contains("exit code 2")),
            "{other:?}"
        );
    }
}
