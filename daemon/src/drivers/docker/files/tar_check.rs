//! An archive put in, read from its partial on the host: checked whole
//! before anything reaches the engine, then written anew for it.
//!
//! Refused by its name: an absolute name, a `..`, a device node or FIFO,
//! a sparse entry, a hard link to a name that is not a plain one in the
//! archive, a symbolic link that leads out of the workspace (judged by its
//! text, from where it would stand). The copies the engine gets (staged
//! and placing, see [`super::staging`]) have every owner set to the
//! container's user, every mode masked to its permission bits, no
//! directory entry for a directory that already exists (so its owner and
//! mode stay), and an entry of the user's own for each missing parent (the
//! engine would make one owned by root).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::Path;

use sandboxd_protocol::files::PERMISSION_BITS;
use tar::EntryType;

use super::user::ContainerUser;
use crate::drivers::archive_names;
use crate::drivers::docker::spec::WORKSPACE;

/// An entry refused, by its name, and why.
#[derive(Debug)]
pub enum Checked {
    Refused { name: String, why: String },
    Io(std::io::Error),
}

impl From<std::io::Error> for Checked {
    fn from(error: std::io::Error) -> Self {
        Checked::Io(error)
    }
}

/// What the first pass found: the directories the archive needs, by
/// relative name (its own directory entries and every entry's parents),
/// each with the first entry that needs it (to name it in a refusal).
#[derive(Debug, Default)]
pub struct Needs {
    pub dirs: BTreeMap<String, String>,
    /// The entries that are not directories, by relative name.
    pub others: Vec<String>,
}

/// Reads every entry of `archive`, refusing the first bad one; `dest` is
/// the destination's components below the workspace.
pub fn check(archive: &Path, dest: &[String]) -> Result<Needs, Checked> {
    let mut needs = Needs::default();
    let mut reading = tar::Archive::new(BufReader::new(File::open(archive)?));
    for entry in reading.entries()? {
        let entry = entry?;
        let name = plain_name(&entry.path_bytes())?;
        let Some(name) = name else { continue };
        let kind = entry.header().entry_type();
        let refuse = |why: &str| Checked::Refused {
            name: name.clone(),
            why: why.to_string(),
        };
        match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::Directory => {}
            EntryType::Symlink => {
                let target = entry.link_name_bytes().unwrap_or_default();
                if let Some(why) = leads_out(dest, &name, &target) {
                    return Err(refuse(&why));
                }
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().unwrap_or_default();
                if !matches!(plain_name(&target), Ok(Some(_))) {
                    return Err(refuse(
                        "it is a hard link to a name outside the archive's directory",
                    ));
                }
            }
            EntryType::Char | EntryType::Block => return Err(refuse("it is a device node")),
            EntryType::Fifo => return Err(refuse("it is a FIFO")),
            EntryType::GNUSparse => return Err(refuse("it is a sparse file, which is not taken")),
            _ => {
                return Err(refuse(
                    "it is of a kind that is not a file, a directory or a link",
                ))
            }
        }
        for dir in Path::new(&name).ancestors().skip(1) {
            if !dir.as_os_str().is_empty() {
                let dir = dir.to_string_lossy().into_owned();
                needs.dirs.entry(dir).or_insert_with(|| name.clone());
            }
        }
        if kind == EntryType::Directory {
            needs.dirs.entry(name.clone()).or_insert(name);
        } else {
            needs.others.push(name);
        }
    }
    Ok(needs)
}

/// The entry's name made plain (no `.` parts, no trailing `/`); `None`
/// for the destination itself (`./`). Absolute names, `..` and NUL
/// refused (see [`archive_names::entry_parts`]).
fn plain_name(bytes: &[u8]) -> Result<Option<String>, Checked> {
    let name = archive_names::plain_name(bytes).map_err(|why| Checked::Refused {
        name: String::from_utf8_lossy(bytes).into_owned(),
        why: why.to_string(),
    })?;
    Ok((!name.is_empty()).then_some(name))
}

/// Why a link at `name` (in the destination `dest`) to `target` leaves the
/// workspace, or `None`: read as text from where it stands, an absolute
/// target read from `/workspace`, where the container sees it.
fn leads_out(dest: &[String], name: &str, target: &[u8]) -> Option<String> {
    let levels = dest.len() + name.split('/').count() - 1;
    archive_names::symlink_stays_inside(target, levels, Some(WORKSPACE)).err()
}

/// The engine's two copies of an archive (see [`super::staging`]): the
/// entries under the staging directory, with the data, and the placing
/// one, each regular file a hard link to its staged copy.
pub struct Copies {
    pub staged: std::path::PathBuf,
    pub placing: std::path::PathBuf,
    /// The staging directory's name.
    pub staging: String,
}

/// Writes the engine's copies of `archive` (see the module doc);
/// `existing` are the needed directories that are there already. Answers
/// their sizes.
pub fn rewrite(
    archive: &Path,
    copies: &Copies,
    user: ContainerUser,
    existing: &BTreeSet<String>,
) -> Result<(u64, u64), Checked> {
    let mut reading = tar::Archive::new(BufReader::new(File::open(archive)?));
    let mut out = Writers {
        staged: tar::Builder::new(BufWriter::new(File::create(&copies.staged)?)),
        placing: tar::Builder::new(BufWriter::new(File::create(&copies.placing)?)),
        staging: copies.staging.clone(),
        user,
    };
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(EntryType::Directory);
    header.set_size(0);
    out.owned(&mut header, 0o700)?;
    let top = format!("{}/", copies.staging);
    out.staged.append_data(&mut header, top, std::io::empty())?;
    let mut made = BTreeSet::new();
    for entry in reading.entries()? {
        let mut entry = entry?;
        let Some(name) = plain_name(&entry.path_bytes())? else {
            continue;
        };
        // Parents first, each once: the archive's own entry, or one made here.
        let parents: Vec<&Path> = Path::new(&name).ancestors().skip(1).collect();
        for dir in parents.into_iter().rev().filter_map(Path::to_str) {
            if !dir.is_empty() && !existing.contains(dir) && made.insert(dir.to_string()) {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(EntryType::Directory);
                header.set_size(0);
                out.directory(&mut header, dir, 0o755)?;
            }
        }
        let mut header = entry.header().clone();
        let mode = header.mode()?;
        match header.entry_type() {
            EntryType::Directory => {
                if !existing.contains(&name) && made.insert(name.clone()) {
                    out.directory(&mut header, &name, mode)?;
                }
            }
            kind @ (EntryType::Symlink | EntryType::Link) => {
                let target = entry.link_name_bytes().unwrap_or_default().into_owned();
                let target = String::from_utf8_lossy(&target).into_owned();
                out.owned(&mut header, mode)?;
                if kind == EntryType::Link {
                    let target = plain_name(target.as_bytes())?.unwrap_or_default();
                    out.hard_link(&mut header, &name, &target)?;
                } else {
                    out.symlink(&mut header, &name, &target)?;
                }
            }
            _ => {
                out.owned(&mut header, mode)?;
                header.set_size(entry.size());
                out.file(&mut header, &name, &mut entry)?;
            }
        }
    }
    out.finish()
}

/// The two copies being written.
struct Writers {
    staged: tar::Builder<BufWriter<File>>,
    placing: tar::Builder<BufWriter<File>>,
    staging: String,
    user: ContainerUser,
}

impl Writers {
    /// Owned by the container's user, the mode masked to its permission bits.
    fn owned(&self, header: &mut tar::Header, mode: u32) -> std::io::Result<()> {
        header.set_uid(self.user.uid);
        header.set_gid(self.user.gid);
        header.set_mode(mode & PERMISSION_BITS);
        header.set_username("")?;
        header.set_groupname("")
    }

    fn staged_name(&self, name: &str) -> String {
        format!("{}/{name}", self.staging)
    }

    /// A directory is made in both: in the staging for what goes in it,
    /// in place with its own owner and mode.
    fn directory(
        &mut self,
        header: &mut tar::Header,
        name: &str,
        mode: u32,
    ) -> std::io::Result<()> {
        self.owned(header, mode)?;
        let staged = format!("{}/", self.staged_name(name));
        self.staged.append_data(header, staged, std::io::empty())?;
        self.placing
            .append_data(header, format!("{name}/"), std::io::empty())
    }

    /// A symbolic link is made in both: in place, and staged for a hard
    /// link of the archive that names it.
    fn symlink(
        &mut self,
        header: &mut tar::Header,
        name: &str,
        target: &str,
    ) -> std::io::Result<()> {
        let staged = self.staged_name(name);
        self.staged.append_link(header, &staged, target)?;
        self.placing.append_link(header, name, target)
    }

    /// A hard link to a name in the archive: to that name's staged copy.
    fn hard_link(
        &mut self,
        header: &mut tar::Header,
        name: &str,
        target: &str,
    ) -> std::io::Result<()> {
        let target = self.staged_name(target);
        self.placing.append_link(header, name, &target)
    }

    /// A file's data goes to the staging; in place, a hard link to it.
    fn file(
        &mut self,
        header: &mut tar::Header,
        name: &str,
        data: &mut impl std::io::Read,
    ) -> std::io::Result<()> {
        let staged = self.staged_name(name);
        self.staged.append_data(header, &staged, data)?;
        header.set_entry_type(EntryType::Link);
        header.set_size(0);
        self.placing.append_link(header, name, &staged)
    }

    fn finish(self) -> Result<(u64, u64), Checked> {
        let mut sizes = [0; 2];
        for (size, builder) in sizes.iter_mut().zip([self.staged, self.placing]) {
            let file = builder
                .into_inner()?
                .into_inner()
                .map_err(|error| error.into_error())?;
            *size = file.metadata()?.len();
        }
        Ok((sizes[0], sizes[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_judged_from_where_they_stand() {
        let dest = vec!["d".to_string()];
        let out = |dest: &[String], name: &str, target: &str| {
            leads_out(dest, name, target.as_bytes()).is_some()
        };
        assert!(!out(&dest, "a/link", "../x"));
        assert!(!out(&dest, "a/link", "../../x"));
        assert!(out(&dest, "a/link", "../../../x"));
        assert!(out(&[], "link", "../x"));
        assert!(out(&dest, "link", "/etc/passwd"));
        assert!(!out(&dest, "link", "/workspace/d/x"));
        assert!(out(&dest, "link", "/workspace/../etc"));
        assert!(out(&dest, "link", "/workspaces"));
    }

    #[test]
    fn names_are_plain_or_refused() {
        assert_eq!(plain_name(b"./a//b/").unwrap().as_deref(), Some("a/b"));
        assert_eq!(plain_name(b"./").unwrap(), None);
        for bad in [&b"/etc/passwd"[..], b"a/../../x"] {
            assert!(matches!(plain_name(bad), Err(Checked::Refused { .. })));
        }
    }
}
