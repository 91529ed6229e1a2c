//! What an archive put into a workspace may hold, checked over the whole
//! archive before anything of it is written: every entry's name stays in
//! the directory it is unpacked into, every symlink stays in the
//! workspace from its place, every hard link names a file of the archive
//! itself, and no device node or FIFO comes in. Refusals name the entry.

use std::collections::HashSet;
use std::fs::File;

use super::Failure;

/// What the check found: the bytes the archive's files hold.
pub struct Checked {
    pub bytes: u64,
}

use crate::drivers::archive_names::{entry_parts, shown, symlink_stays_inside};

fn refused(name: &[u8], why: impl Into<String>) -> Failure {
    Failure::BadEntry {
        name: shown(name),
        why: why.into(),
    }
}

/// A tar error: the stream is not a whole, well-formed archive.
pub fn corrupt(error: std::io::Error) -> Failure {
    Failure::Corrupt(error.to_string())
}

/// Checks every entry of the archive in `file`; `depth` is how many
/// directories below the workspace the archive is unpacked.
pub fn check(file: &File, depth: usize) -> Result<Checked, Failure> {
    use tar::EntryType;
    let length = file.metadata()?.len();
    let mut archive = tar::Archive::new(file);
    let mut files: HashSet<Vec<u8>> = HashSet::new();
    let mut bytes: u64 = 0;
    for entry in archive.entries_with_seek().map_err(corrupt)? {
        let entry = entry.map_err(corrupt)?;
        let name = entry.path_bytes().into_owned();
        let parts = entry_parts(&name).map_err(|why| refused(&name, why))?;
        // Seeking past a short last entry succeeds: its end is checked here.
        if entry.raw_file_position().saturating_add(entry.size()) > length {
            return Err(Failure::Corrupt(format!(
                "it ends inside the data of '{}' (truncated)",
                shown(&name)
            )));
        }
        let kind = entry.header().entry_type();
        if parts.is_empty() && kind != EntryType::Directory && kind != EntryType::XGlobalHeader {
            return Err(refused(&name, "its name names no file"));
        }
        match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                bytes = bytes.saturating_add(entry.size());
                files.insert(parts.join(&b'/'));
            }
            EntryType::Directory | EntryType::XGlobalHeader => {}
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default();
                symlink_stays_inside(&target, depth + parts.len() - 1, None)
                    .map_err(|why| refused(&name, why))?;
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default();
                let inside = entry_parts(&target)
                    .ok()
                    .is_some_and(|target| files.contains(&target.join(&b'/')));
                if !inside {
                    return Err(refused(
                        &name,
                        format!(
                            "it is a hard link to '{}', which is no file earlier in the archive",
                            shown(&target)
                        ),
                    ));
                }
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                return Err(refused(&name, "it is a device node or a FIFO"));
            }
            other => {
                return Err(refused(
                    &name,
                    format!("it is of a kind not unpacked here ({other:?})"),
                ));
            }
        }
    }
    Ok(Checked { bytes })
}
