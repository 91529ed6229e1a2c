//! What the daemon must know to follow a docker-tier command again after
//! it restarts: one small file per live command under
//! `<state_dir>/docker/commands/<command id>`, written once the exec has a
//! pid and removed once its proof is known. A daemon that stops (or dies)
//! while the command runs leaves the file; the next one reads it at start
//! and follows the exec to its end through the engine, which keeps the
//! exec (and its exit code) as long as its container lives.
//!
//! The output cannot come back: the engine gives an exec's streams to the
//! one client that started it, once.

use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use sandboxd_protocol::Scope;
use serde::{Deserialize, Serialize};

/// One command, as its start left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub id: String,
    pub scope: Scope,
    pub sandbox_id: String,
    pub tag: Option<String>,
    pub argv: Vec<String>,
    pub pty: bool,
    pub started_at_unix_ms: u64,
    pub timeout_ms: Option<u64>,
    pub exec_id: String,
    pub container: String,
    /// Its host pid.
    pub pid: u32,
    /// The sandbox incarnation it runs in.
    pub uid: String,
    pub generation: u64,
}

pub struct CommandRecords {
    dir: PathBuf,
}

impl CommandRecords {
    /// `<state_dir>/docker/commands`, created 0700 if missing.
    pub fn prepare(state_dir: &Path) -> io::Result<CommandRecords> {
        let dir = state_dir.join("docker").join("commands");
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        Ok(CommandRecords { dir })
    }

    /// Keeps `record` (through a rename, so a reader never sees half).
    pub fn write(&self, record: &CommandRecord) -> io::Result<()> {
        let text = serde_json::to_vec(record).map_err(io::Error::other)?;
        let temporary = self.dir.join(format!(".{}.tmp", record.id));
        fs::write(&temporary, text)?;
        fs::rename(&temporary, self.dir.join(&record.id))
    }

    /// Lets `id`'s record go: its proof is known.
    pub fn remove(&self, id: &str) {
        match fs::remove_file(self.dir.join(id)) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(command = %id, %error, "cannot remove a command's record"),
        }
    }

    /// Every record kept; one that cannot be read is logged and removed
    /// (it could never be followed), as are leftover temporary files.
    pub fn read_all(&self) -> Vec<CommandRecord> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot read the commands' records");
                return Vec::new();
            }
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let parsed = fs::read(&path)
                .map_err(|error| error.to_string())
                .and_then(|text| {
                    serde_json::from_slice::<CommandRecord>(&text)
                        .map_err(|error| error.to_string())
                });
            match parsed {
                Ok(record) if path.file_name() == Some(record.id.as_ref()) => records.push(record),
                Ok(_) | Err(_) => {
                    tracing::warn!(file = %path.display(), "removing a command record that cannot be followed");
                    let _ = fs::remove_file(&path);
                }
            }
        }
        records.sort_by_key(|record| record.started_at_unix_ms);
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> CommandRecord {
        CommandRecord {
            id: id.to_string(),
            scope: Scope::Session,
            sandbox_id: "ses_1".into(),
            tag: Some("build".into()),
            argv: vec!["sleep".into(), "30".into()],
            pty: false,
            started_at_unix_ms: 1,
            timeout_ms: Some(5_000),
            exec_id: "abc".into(),
            container: "def".into(),
            pid: 42,
            uid: "u".into(),
            generation: 1,
        }
    }

    #[test]
    fn a_record_is_read_back_until_removed_and_garbage_goes() {
        let dir = crate::test_dir::TestDir::new("command-records");
        let dir = &dir.0;
        let records = CommandRecords::prepare(dir).unwrap();
        records.write(&record("a1")).unwrap();
        fs::write(dir.join("docker/commands/junk"), b"{").unwrap();
        assert_eq!(records.read_all(), vec![record("a1")]);
        assert!(!dir.join("docker/commands/junk").exists());
        records.remove("a1");
        assert!(records.read_all().is_empty());
    }
}
