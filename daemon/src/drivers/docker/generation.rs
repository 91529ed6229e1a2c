//! How many runners each sandbox has had, across restarts of the daemon.
//!
//! A container's labels are fixed at creation, so the label
//! `stigmer.ai/generation` can only say which generation created it. Starts
//! of an existing container, and recreations after an operator removed it,
//! are counted here instead: one small file per sandbox under
//! `<state_dir>/docker/generations/<base name>`, written *before* the start
//! or create it counts (the intent first, as containerd records it), so a
//! daemon killed in between never hands out the same generation twice.
//! The sandbox's generation is the larger of the file and the label, so a
//! lost state directory only costs the count of restarts, never the
//! mapping: that lives in the engine's labels.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::sandbox_key::SandboxKey;

pub struct Generations {
    dir: PathBuf,
}

impl Generations {
    /// `<state_dir>/docker/generations`, created 0700 if missing.
    pub fn prepare(state_dir: &Path) -> io::Result<Generations> {
        let dir = state_dir.join("docker").join("generations");
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        Ok(Generations { dir })
    }

    fn file(&self, key: &SandboxKey) -> PathBuf {
        self.dir.join(&key.base_name)
    }

    /// The last generation handed out for this sandbox; 0 if none.
    pub fn read(&self, key: &SandboxKey) -> u64 {
        fs::read_to_string(self.file(key))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Records `generation` as handed out (through a rename, so a reader
    /// never sees half a number).
    pub fn record(&self, key: &SandboxKey, generation: u64) -> io::Result<()> {
        let temporary = self.dir.join(format!(".{}.tmp", key.base_name));
        fs::write(&temporary, format!("{generation}\n"))?;
        fs::rename(&temporary, self.file(key))
    }

    /// Forgets the sandbox: the next one by this id starts at generation 1.
    pub fn forget(&self, key: &SandboxKey) {
        match fs::remove_file(self.file(key)) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(scope = %key.scope, id = %key.shown_id(), %error, "cannot remove the generation file")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::Scope;

    #[test]
    fn records_reads_and_forgets() {
        let state =
            std::env::temp_dir().join(format!("sandboxd-generations-{}", std::process::id()));
        let generations = Generations::prepare(&state).unwrap();
        let key = SandboxKey::new(Scope::Session, "../../etc/passwd");
        assert_eq!(generations.read(&key), 0);
        generations.record(&key, 3).unwrap();
        assert_eq!(generations.read(&key), 3);
        assert!(
            state
                .join("docker/generations")
                .join(&key.base_name)
                .is_file(),
            "named by the base name only"
        );
        generations.forget(&key);
        generations.forget(&key);
        assert_eq!(generations.read(&key), 0);
        fs::remove_dir_all(&state).unwrap();
    }
}
