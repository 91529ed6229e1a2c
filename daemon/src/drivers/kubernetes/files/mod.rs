//! Files in and out of a kubernetes-tier sandbox's workspace (see
//! [`sandboxd_protocol::files`]), the way `kubectl cp` moves them: through
//! `pods/exec` in the runner container of the sandbox's running pod, where
//! a small POSIX `sh` script runs the image's own `tar` (an archive in or
//! out), `dd` (a file's bytes from an offset), `stat`, `rm` and `mv`. So
//! the work is done as the container's user, in the container: the kernel
//! checks its permissions, and what it writes is its own. Paths are
//! relative to the workspace, the container's working directory
//! (`/workspace`); an absolute one, a `..` or a NUL is refused by name
//! before any exec. A symbolic link in the workspace is followed as the
//! container's user would follow it: it leads nowhere the container could
//! not go anyway (the commands' wrapper says the same), except that an
//! upload replaces a link rather than write through it.
//!
//! An upload (a file, or an archive) is kept on the daemon's host until
//! its last chunk ([`crate::drivers::upload_partials`]); an archive is then
//! checked whole and written anew ([`archive`], with the rules every tier
//! shares), and only then does anything reach the pod: a file is written
//! beside its place and moved over it; an archive is unpacked by `tar` into
//! a hidden staging directory in its destination, checked against what is
//! there, and moved into place ([`scripts`]); on any failure the staging
//! directory is removed. Reads are served by offset in bounded pieces: a
//! file with `dd` from its offset, one exec per chunk; a tree's tar stream
//! from an exec kept open between the calls of one download ([`downloads`]).
//!
//! Rooms: `run` (one exec and what it said), `scripts` (the `sh` run in the
//! pod), `told` (the refusals' words), `archive`, `put` (`put_file`,
//! `put_tar`), `read` (`get_file`, `stat_file`, `list_files`,
//! `remove_file`), `downloads` (`get_tar`).

mod archive;
mod downloads;
mod put;
mod read;
mod run;
mod scripts;
mod told;

use std::path::Path;

use sandboxd_protocol::{ProbeState, SandboxError};

use super::exec::end::Said;
use super::exec::refused::{kubelet_unreached, no_kubelet_answered, Place};
use super::observe::{state_of, Lookup};
use super::Inner;
use crate::drivers::upload_partials::Partials;
use crate::provisioner::SandboxKey;
pub use downloads::Downloads;
use told::Told;

/// What the file calls keep beside the cluster.
pub struct Files {
    partials: Partials,
    downloads: Downloads,
}

impl Files {
    /// `<state_dir>/kubernetes/uploads`, created 0700 if missing.
    pub fn prepare(state_dir: &Path) -> std::io::Result<Files> {
        Ok(Files {
            partials: Partials::prepare(&state_dir.join("kubernetes").join("uploads"))?,
            downloads: Downloads::default(),
        })
    }
}

/// One file call on one running pod: where, and how it is told.
pub struct FileCall {
    place: Place,
    told: Told,
}

/// The path as the scripts take it: its components joined after `./` (so
/// no name is read as an option), `.` for the workspace itself.
fn script_path(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect();
    match parts.is_empty() {
        true => ".".to_string(),
        false => format!("./{}", parts.join("/")),
    }
}

impl FileCall {
    /// The sandbox's running pod, for a call that will `verb` `path`;
    /// the path is checked again here (the server checked it first): the
    /// scripts rely on it.
    async fn open(
        inner: &Inner,
        key: &SandboxKey,
        verb: &'static str,
        path: &str,
    ) -> Result<FileCall, SandboxError> {
        sandboxd_protocol::validate_files::path(path)?;
        let told = Told {
            verb,
            path: path.to_string(),
            what: key.what(),
        };
        let running = match inner.lookup(key).await? {
            Lookup::Ours(deployment) => state_of(&deployment) == ProbeState::Running,
            Lookup::Absent | Lookup::Foreign => {
                return Err(SandboxError::FailedPrecondition(format!(
                    "{} does not exist in namespace '{}': ensure it first",
                    told.what, inner.cluster.namespace
                )))
            }
        };
        if !running {
            return Err(SandboxError::FailedPrecondition(format!(
                "cannot {verb} files in {}: it is stopped (its Deployment is scaled to 0, or being \
                 deleted), and its files move only through its running pod: ensure it first",
                told.what
            )));
        }
        let doing = format!("{verb} files in");
        let pod = super::exec::running_pod(inner, key, &doing).await?;
        Ok(FileCall {
            place: Place::of(&pod),
            told,
        })
    }

    /// What the call could not do, for its errors.
    fn context(&self) -> String {
        format!(
            "cannot {} '{}' in {} (pod {})",
            self.told.verb,
            self.told.path.escape_debug(),
            self.told.what,
            self.place.pod
        )
    }

    /// Why a script that ended with `ended` failed (`Ok` when it did not);
    /// an exec the API server could not take to a kubelet is said as such,
    /// never blamed on the image.
    fn outcome(&self, ended: &run::Ended) -> Result<(), SandboxError> {
        match &ended.said {
            Said::Broken(why) if kubelet_unreached(why) => {
                Err(no_kubelet_answered(&self.context(), &self.place, why))
            }
            _ => self.told.outcome(ended),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_given_to_the_scripts_plain() {
        assert_eq!(script_path(""), ".");
        assert_eq!(script_path("./"), ".");
        assert_eq!(script_path("a//b/./c/"), "./a/b/c");
        assert_eq!(script_path("-x"), "./-x");
    }
}
