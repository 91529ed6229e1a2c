//! An archive put in, read from its partial on the daemon's host: checked
//! whole, and written anew for the pod, before anything of it reaches the
//! pod, with the rules every tier shares ([`archive_names`]).
//!
//! Refused by its name: an absolute name, a `..`, a NUL, a device node or
//! FIFO, a sparse entry, a hard link to a name that is no file earlier in
//! the archive, a symbolic link that leads out of the workspace (judged by
//! its text, from where it would stand; an absolute target is read from
//! `/workspace`, where the container sees it), an archive that ends
//! inside an entry's data. The copy the pod gets has plain names, every
//! mode masked to its permission bits and no owner names (its `tar`, run as
//! the container's user, does not restore owners).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use sandboxd_protocol::files::PERMISSION_BITS;
use tar::EntryType;

use super::super::shapes::WORKSPACE;
use crate::drivers::archive_names::{entry_parts, plain_name, shown, symlink_stays_inside};

/// Why an archive was not taken.
#[derive(Debug)]
pub enum Checked {
    /// An entry, by its name, and why.
    Refused {
        name: String,
        why: String,
    },
    /// No whole, well-formed archive.
    Corrupt(String),
    Io(std::io::Error),
}

impl From<std::io::Error> for Checked {
    fn from(error: std::io::Error) -> Self {
        Checked::Io(error)
    }
}

fn corrupt(error: std::io::Error) -> Checked {
    Checked::Corrupt(error.to_string())
}

/// Checks every entry of the archive `kept` and writes the pod's copy of
/// it to `to`; `depth` is how many directories below the workspace it is
/// unpacked. The copy's size.
pub fn check_and_copy(kept: &Path, to: &Path, depth: usize) -> Result<u64, Checked> {
    let length = std::fs::metadata(kept)?.len();
    let mut reading = tar::Archive::new(BufReader::new(File::open(kept)?));
    let mut writing = tar::Builder::new(BufWriter::new(File::create(to)?));
    let mut files: HashSet<String> = HashSet::new();
    for entry in reading.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let raw = entry.path_bytes().into_owned();
        let refuse = |why: String| Checked::Refused {
            name: shown(&raw),
            why,
        };
        let parts = entry_parts(&raw).map_err(|why| refuse(why.to_string()))?;
        let name = plain_name(&raw).map_err(|why| refuse(why.to_string()))?;
        if entry.raw_file_position().saturating_add(entry.size()) > length {
            return Err(Checked::Corrupt(format!(
                "it ends inside the data of '{}' (truncated)",
                shown(&raw)
            )));
        }
        let kind = entry.header().entry_type();
        if name.is_empty() {
            match kind {
                EntryType::Directory | EntryType::XGlobalHeader => continue,
                _ => return Err(refuse("its name names no file".into())),
            }
        }
        let levels = depth + parts.len() - 1;
        copy_entry(&mut writing, &mut entry, &name, levels, &mut files).map_err(|checked| {
            match checked {
                Checked::Refused { why, .. } => refuse(why),
                other => other,
            }
        })?;
    }
    let file = writing
        .into_inner()?
        .into_inner()
        .map_err(|error| error.into_error())?;
    file.sync_all()?;
    Ok(file.metadata()?.len())
}

/// Appends the pod's copy of `entry` (named `name`, `levels` directories
/// below the workspace) to `writing`, or refuses it (the refusal's name is
/// the caller's to give); `files` are the archive's files so far.
fn copy_entry<R: std::io::Read>(
    writing: &mut tar::Builder<BufWriter<File>>,
    entry: &mut tar::Entry<R>,
    name: &str,
    levels: usize,
    files: &mut HashSet<String>,
) -> Result<(), Checked> {
    let refuse = |why: String| Checked::Refused {
        name: String::new(),
        why,
    };
    let mut header = entry.header().clone();
    header.set_mode(header.mode()? & PERMISSION_BITS);
    header.set_uid(0);
    header.set_gid(0);
    header.set_username("")?;
    header.set_groupname("")?;
    match entry.header().entry_type() {
        EntryType::Regular | EntryType::Continuous => {
            header.set_entry_type(EntryType::Regular);
            header.set_size(entry.size());
            writing.append_data(&mut header, name, entry)?;
            files.insert(name.to_string());
        }
        EntryType::Directory => {
            header.set_size(0);
            writing.append_data(&mut header, format!("{name}/"), std::io::empty())?;
        }
        EntryType::Symlink => {
            let target = entry.link_name_bytes().unwrap_or_default().into_owned();
            symlink_stays_inside(&target, levels, Some(WORKSPACE)).map_err(refuse)?;
            let target = String::from_utf8_lossy(&target).into_owned();
            header.set_size(0);
            writing.append_link(&mut header, name, &target)?;
        }
        EntryType::Link => {
            let target = entry.link_name_bytes().unwrap_or_default().into_owned();
            let plain = plain_name(&target).ok();
            let Some(plain) = plain.filter(|plain| files.contains(plain)) else {
                return Err(refuse(format!(
                    "it is a hard link to '{}', which is no file earlier in the archive",
                    shown(&target)
                )));
            };
            header.set_size(0);
            writing.append_link(&mut header, name, &plain)?;
        }
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            return Err(refuse("it is a device node or a FIFO".into()));
        }
        other => {
            return Err(refuse(format!(
                "it is of a kind not unpacked here ({other:?})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(dir: &Path, build: impl FnOnce(&mut tar::Builder<File>)) -> std::path::PathBuf {
        let path = dir.join("in.tar");
        let mut builder = tar::Builder::new(File::create(&path).unwrap());
        build(&mut builder);
        builder.finish().unwrap();
        path
    }

    fn entry(kind: EntryType, mode: u32, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header
    }

    #[test]
    fn a_good_archive_is_copied_with_its_modes_masked() {
        let dir = crate::test_dir::TestDir::new("k8s-archive-good");
        let kept = archive(&dir.0, |b| {
            b.append_data(
                &mut entry(EntryType::Directory, 0o755, 0),
                "d/",
                std::io::empty(),
            )
            .unwrap();
            b.append_data(&mut entry(EntryType::Regular, 0o4755, 2), "d/f", &b"hi"[..])
                .unwrap();
            b.append_link(&mut entry(EntryType::Symlink, 0o777, 0), "d/l", "f")
                .unwrap();
            b.append_link(&mut entry(EntryType::Link, 0o644, 0), "d/h", "d/f")
                .unwrap();
        });
        let copy = dir.0.join("copy.tar");
        check_and_copy(&kept, &copy, 1).expect("taken");
        let mut copied = tar::Archive::new(File::open(&copy).unwrap());
        let modes: Vec<(String, u32)> = copied
            .entries()
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                let name = entry.path().unwrap().to_string_lossy().into_owned();
                (name, entry.header().mode().unwrap())
            })
            .collect();
        assert!(modes.contains(&("d/f".to_string(), 0o755)), "{modes:?}");
        assert_eq!(modes.len(), 4);
    }

    #[test]
    fn hostile_entries_are_refused_by_name() {
        let dir = crate::test_dir::TestDir::new("k8s-archive-bad");
        type Build = Box<dyn FnOnce(&mut tar::Builder<File>)>;
        let cases: Vec<(&str, Build)> = vec![
            (
                "../x",
                Box::new(|b| {
                    let mut header = entry(EntryType::Regular, 0o644, 1);
                    header.as_old_mut().name[..4].copy_from_slice(b"../x");
                    header.set_cksum();
                    b.append(&header, &b"x"[..]).unwrap();
                }),
            ),
            (
                "out",
                Box::new(|b| {
                    b.append_link(&mut entry(EntryType::Symlink, 0o777, 0), "out", "../../etc")
                        .unwrap();
                }),
            ),
            (
                "abs",
                Box::new(|b| {
                    b.append_link(
                        &mut entry(EntryType::Symlink, 0o777, 0),
                        "abs",
                        "/etc/passwd",
                    )
                    .unwrap();
                }),
            ),
            (
                "hard",
                Box::new(|b| {
                    b.append_link(&mut entry(EntryType::Link, 0o644, 0), "hard", "/etc/shadow")
                        .unwrap();
                }),
            ),
            (
                "dev",
                Box::new(|b| {
                    b.append_data(
                        &mut entry(EntryType::Char, 0o644, 0),
                        "dev",
                        std::io::empty(),
                    )
                    .unwrap();
                }),
            ),
        ];
        for (name, build) in cases {
            let kept = archive(&dir.0, build);
            match check_and_copy(&kept, &dir.0.join("copy.tar"), 0) {
                Err(Checked::Refused { name: refused, .. }) => assert_eq!(refused, name),
                other => panic!("{name}: expected a refusal, got {other:?}"),
            }
        }
    }
}
