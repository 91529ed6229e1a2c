//! The workspace catalog: which sandbox each workspace on disk belongs to,
//! and when it was last used. Base names are hashes of ids, so without it
//! a workspace left by an unclean stop would be a nameless directory.
//!
//! One append-only journal, `<state dir>/ledger/workspaces` (the ledger
//! directory is root's, 0700: out of every runner's reach), with a line
//! per event:
//!
//! ```text
//! + <unix ms> <base name> <scope> <id>   a runner of it started or ended then
//! - <base name>                          its workspace was removed
//! u <base name> <uid>                    its incarnation's uid (`-`: none)
//! ```
//!
//! The uid is kept here so an incarnation keeps it across daemon restarts
//! for as long as its workspace lives; a deprovision clears it, so the
//! next ensure makes a new incarnation.
//!
//! The id is the rest of the line: ids may hold spaces, never a control
//! character. A line whose base name is not the one its scope and id hash
//! to is skipped. Unlike the spawn ledger, the catalog survives a restart
//! (a kept workspace outlives its runner); it is rewritten with only the
//! live entries at start and whenever dead lines pile up.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use sandboxd_protocol::{naming, Scope};

use crate::sandbox_key::SandboxKey;

/// The journal's name in the ledger directory.
pub const JOURNAL: &str = "workspaces";
const JOURNAL_TMP: &str = "workspaces.tmp";
/// Below this many lines since the last rewrite, the journal is left to grow.
const COMPACT_AFTER_LINES: usize = 4096;

/// What the catalog knows of one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogEntry {
    pub scope: Scope,
    pub id: String,
    /// When a runner of it last started or ended, in Unix milliseconds.
    pub last_active_ms: u64,
    /// Its incarnation's uid, once one was given.
    pub uid: Option<String>,
}

pub struct Catalog {
    dir: PathBuf,
    journal: Mutex<Journal>,
}

struct Journal {
    /// Opened with `O_APPEND`.
    file: File,
    entries: HashMap<String, CatalogEntry>,
    lines_since_compaction: usize,
}

impl Catalog {
    /// Replays the journal in `dir`, rewrites it with the live entries and
    /// opens it for appending. Blocking; call at start.
    pub fn open(dir: &Path) -> io::Result<Catalog> {
        let path = dir.join(JOURNAL);
        let entries = match std::fs::read_to_string(&path) {
            Ok(text) => replay(&path, &text),
            Err(error) if error.kind() == io::ErrorKind::NotFound => HashMap::new(),
            Err(error) => return Err(error),
        };
        let file = compact(dir, &entries)?;
        Ok(Catalog {
            dir: dir.to_path_buf(),
            journal: Mutex::new(Journal {
                file,
                entries,
                lines_since_compaction: 0,
            }),
        })
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `key`'s sandbox was in use at `at_ms` (a runner started or
    /// ended). Unsynced, like the spawn ledger: one append.
    pub fn note_active(&self, key: &SandboxKey, at_ms: u64) {
        let mut journal = self.journal();
        let text = format!(
            "+ {at_ms} {} {} {}\n",
            key.base_name,
            key.scope.as_str(),
            key.id
        );
        if let Err(error) = journal.file.write_all(text.as_bytes()) {
            tracing::warn!(name = %key.base_name, %error, "cannot record a workspace in the catalog");
        }
        journal.lines_since_compaction += 1;
        let uid = journal
            .entries
            .get(&key.base_name)
            .and_then(|entry| entry.uid.clone());
        journal.entries.insert(
            key.base_name.clone(),
            CatalogEntry {
                scope: key.scope,
                id: key.id.clone(),
                last_active_ms: at_ms,
                uid,
            },
        );
        self.compact_if_due(&mut journal);
    }

    /// `base`'s incarnation uid, if it has one.
    pub fn uid_of(&self, base: &str) -> Option<String> {
        self.journal()
            .entries
            .get(base)
            .and_then(|entry| entry.uid.clone())
    }

    /// Records (or with `None` clears) `base`'s incarnation uid. An entry
    /// must exist ([`Self::note_active`] first); else nothing is kept.
    pub fn set_uid(&self, base: &str, uid: Option<&str>) {
        let mut journal = self.journal();
        let Some(entry) = journal.entries.get_mut(base) else {
            return;
        };
        if entry.uid.as_deref() == uid {
            return;
        }
        entry.uid = uid.map(str::to_string);
        let line = format!("u {base} {}\n", uid.unwrap_or("-"));
        if let Err(error) = journal.file.write_all(line.as_bytes()) {
            tracing::warn!(name = base, %error, "cannot record a sandbox uid in the catalog");
        }
        journal.lines_since_compaction += 1;
        self.compact_if_due(&mut journal);
    }

    /// Forgets `base`'s workspace, which is gone.
    pub fn forget(&self, base: &str) {
        let mut journal = self.journal();
        if journal.entries.remove(base).is_none() {
            return;
        }
        if let Err(error) = journal.file.write_all(format!("- {base}\n").as_bytes()) {
            tracing::warn!(name = base, %error, "cannot remove a workspace from the catalog");
        }
        journal.lines_since_compaction += 1;
        self.compact_if_due(&mut journal);
    }

    /// Every entry, by base name.
    pub fn entries(&self) -> HashMap<String, CatalogEntry> {
        self.journal().entries.clone()
    }

    /// Runs `decide` on `base`'s entry (or `None`) under the catalog's lock,
    /// so no `note_active` of it can come in between.
    pub fn with_entry<T>(&self, base: &str, decide: impl FnOnce(Option<&CatalogEntry>) -> T) -> T {
        decide(self.journal().entries.get(base))
    }

    fn compact_if_due(&self, journal: &mut Journal) {
        if journal.lines_since_compaction < COMPACT_AFTER_LINES
            || journal.lines_since_compaction < 2 * journal.entries.len()
        {
            return;
        }
        match compact(&self.dir, &journal.entries) {
            Ok(file) => journal.file = file,
            Err(error) => {
                tracing::warn!(dir = %self.dir.display(), %error, "cannot compact the workspace catalog; still appending to it")
            }
        }
        journal.lines_since_compaction = 0;
    }
}

/// Writes `entries` to a new journal, renames it over the old one and
/// returns it opened for appending.
fn compact(dir: &Path, entries: &HashMap<String, CatalogEntry>) -> io::Result<File> {
    let tmp = dir.join(JOURNAL_TMP);
    super::super::trash::remove(&tmp)?;
    let mut file = OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let text: String = entries
        .iter()
        .map(|(base, entry)| {
            let uid = entry
                .uid
                .as_ref()
                .map_or_else(String::new, |uid| format!("u {base} {uid}\n"));
            format!(
                "+ {} {base} {} {}\n{uid}",
                entry.last_active_ms,
                entry.scope.as_str(),
                entry.id
            )
        })
        .collect();
    file.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, dir.join(JOURNAL))?;
    Ok(file)
}

/// The entries a journal leaves, by base name; bad lines are skipped with
/// a warning.
fn replay(path: &Path, text: &str) -> HashMap<String, CatalogEntry> {
    let mut entries = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        match parse(line) {
            Some(Event::Active(base, mut entry)) => {
                // An activity line keeps the uid an earlier line gave.
                entry.uid = entries
                    .remove(&base)
                    .and_then(|earlier: CatalogEntry| earlier.uid);
                entries.insert(base, entry);
            }
            Some(Event::Removed(base)) => {
                entries.remove(&base);
            }
            Some(Event::Uid(base, uid)) => {
                if let Some(entry) = entries.get_mut(&base) {
                    entry.uid = uid;
                }
            }
            None => {
                tracing::warn!(path = %path.display(), line = index + 1, "skipping a malformed workspace catalog line")
            }
        }
    }
    entries
}

enum Event {
    Active(String, CatalogEntry),
    Removed(String),
    Uid(String, Option<String>),
}

fn parse(line: &str) -> Option<Event> {
    if let Some(base) = line.strip_prefix("- ") {
        return (!base.is_empty() && !base.contains(' ')).then(|| Event::Removed(base.to_string()));
    }
    if let Some(rest) = line.strip_prefix("u ") {
        let (base, uid) = rest.split_once(' ')?;
        let valid = uid == "-" || (uid.len() == 32 && uid.bytes().all(|b| b.is_ascii_hexdigit()));
        return (valid && !base.is_empty())
            .then(|| Event::Uid(base.to_string(), (uid != "-").then(|| uid.to_string())));
    }
    let mut words = line.strip_prefix("+ ")?.splitn(4, ' ');
    let last_active_ms = words.next()?.parse().ok()?;
    let base = words.next()?;
    let scope: Scope = words.next()?.parse().ok()?;
    let id = words.next()?;
    if id.is_empty() || naming::base_name(scope, id) != base {
        return None;
    }
    Some(Event::Active(
        base.to_string(),
        CatalogEntry {
            scope,
            id: id.to_string(),
            last_active_ms,
            uid: None,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;

    fn dir(name: &str) -> TestDir {
        TestDir::new(&format!("catalog-{name}"))
    }

    #[test]
    fn entries_survive_a_reopen_with_ids_that_hold_spaces_and_removals_stick() {
        let dir = dir("reopen");
        let kept = SandboxKey::new(Scope::Session, "a session id with spaces");
        let removed = SandboxKey::new(Scope::Workflow, "wf-1");
        {
            let catalog = Catalog::open(&dir.0).unwrap();
            catalog.note_active(&kept, 1000);
            catalog.note_active(&removed, 2000);
            catalog.note_active(&kept, 3000);
            catalog.forget(&removed.base_name);
        }
        let catalog = Catalog::open(&dir.0).unwrap();
        let entries = catalog.entries();
        assert_eq!(
            entries,
            HashMap::from([(
                kept.base_name.clone(),
                CatalogEntry {
                    scope: Scope::Session,
                    id: "a session id with spaces".into(),
                    last_active_ms: 3000,
                    uid: None,
                }
            )])
        );
        // Rewritten at open: one line per live entry.
        let text = std::fs::read_to_string(dir.0.join(JOURNAL)).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn a_uid_survives_a_reopen_and_activity_until_cleared() {
        let dir = dir("uid");
        let key = SandboxKey::new(Scope::Session, "s1");
        let uid = "0123456789abcdef0123456789abcdef";
        {
            let catalog = Catalog::open(&dir.0).unwrap();
            catalog.set_uid(&key.base_name, Some(uid));
            assert_eq!(catalog.uid_of(&key.base_name), None, "no entry, no uid");
            catalog.note_active(&key, 1);
            catalog.set_uid(&key.base_name, Some(uid));
            catalog.note_active(&key, 2);
        }
        // Replayed from the journal as appended (an activity line after the uid's).
        let text = std::fs::read_to_string(dir.0.join(JOURNAL)).unwrap();
        let replayed = replay(Path::new("workspaces"), &text);
        assert_eq!(replayed[&key.base_name].uid.as_deref(), Some(uid), "{text}");
        let catalog = Catalog::open(&dir.0).unwrap();
        assert_eq!(catalog.uid_of(&key.base_name).as_deref(), Some(uid));
        catalog.set_uid(&key.base_name, None);
        drop(catalog);
        let catalog = Catalog::open(&dir.0).unwrap();
        assert_eq!(catalog.uid_of(&key.base_name), None);
        assert!(catalog.entries().contains_key(&key.base_name));
    }

    #[test]
    fn lines_that_do_not_hash_to_their_name_or_do_not_parse_are_skipped() {
        let good = SandboxKey::new(Scope::Connect, "req-1");
        let text = format!(
            "+ 5 sbx-ses-000000000000 session forged\ngarbage\n+ x {} connect req-1\n+ 7 {} connect req-1\n- \n",
            good.base_name, good.base_name
        );
        let entries = replay(Path::new("workspaces"), &text);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[&good.base_name].last_active_ms, 7);
    }
}
