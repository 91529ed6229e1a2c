//! `[limits] state_reserve`: the free space the state directory's file
//! system keeps. Per-workspace limits alone do not stop many sandboxes
//! (or one whose limit is large) from filling the disk every other
//! sandbox, and the daemon's own ledger, write to. Below the reserve, new
//! sandboxes are refused, running ones that are writing are stopped
//! (`disk-full`, see [`watcher`](super::watcher)), and `status` is
//! degraded, each naming the file system and its free space.

use std::path::{Path, PathBuf};

use sandboxd_protocol::show_bytes;

use crate::config::StateReserve;

/// The reserve and the file system it is kept on.
#[derive(Debug, Clone)]
pub struct Reserve {
    pub configured: StateReserve,
    /// A directory on the file system (the sandboxes' directory).
    dir: PathBuf,
    /// How messages name the file system: its device and mount point.
    name: String,
}

/// Free and total bytes, as `statvfs` tells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Available to unprivileged writers (`f_bavail`): what runners get.
    pub free: u64,
    pub size: u64,
    /// `size` less what is free to root (`f_bfree`).
    pub used: u64,
}

impl Reserve {
    /// The reserve on the file system of `dir`; `None` when it is `0`.
    pub fn on(configured: StateReserve, dir: &Path) -> Option<Reserve> {
        if configured.is_off() {
            return None;
        }
        Some(Reserve {
            configured,
            dir: dir.to_path_buf(),
            name: file_system_of(dir),
        })
    }

    /// The space on the file system now. Blocking (one `statvfs`).
    pub fn space(&self) -> Option<Space> {
        space_of(&self.dir)
    }

    /// Why the file system is below the reserve, if it is. Blocking.
    pub fn shortfall(&self) -> Option<String> {
        self.shortfall_in(self.space()?)
    }

    /// [`Reserve::shortfall`] for a `space` already read.
    pub fn shortfall_in(&self, space: Space) -> Option<String> {
        let reserve = self.configured.bytes_of(space.size);
        (space.free < reserve).then(|| {
            format!(
                "the state directory's file system {} has {} free, below [limits] state_reserve {} ({})",
                self.name,
                show_bytes(space.free),
                show_bytes(reserve),
                self.configured.shown()
            )
        })
    }

    /// What `status` says.
    pub fn shown(&self) -> String {
        format!(
            "state reserve {} kept free on {}",
            self.configured.shown(),
            self.name
        )
    }
}

/// Free, total and used bytes of the file system of `dir`. Blocking.
pub fn space_of(dir: &Path) -> Option<Space> {
    let stat = nix::sys::statvfs::statvfs(dir).ok()?;
    let unit = stat.fragment_size();
    let size = stat.blocks() * unit;
    Some(Space {
        free: stat.blocks_available() * unit,
        size,
        used: size.saturating_sub(stat.blocks_free() * unit),
    })
}

/// `<device> mounted on <mount point>` for the file system of `dir`, from
/// `/proc/self/mountinfo` (the longest mount point that holds it).
fn file_system_of(dir: &Path) -> String {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let best = mounts
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let point = unescape(fields.get(4)?);
            let after = fields.iter().position(|field| *field == "-")?;
            let source = unescape(fields.get(after + 2)?);
            dir.starts_with(&point).then_some((point, source))
        })
        .max_by_key(|(point, _)| point.len());
    match best {
        Some((point, source)) => format!("{source} mounted on {point}"),
        None => dir.display().to_string(),
    }
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|code| u8::from_str_radix(code, 8).ok()) {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_above_the_free_space_names_the_file_system_and_its_space() {
        let dir = std::env::temp_dir();
        assert!(Reserve::on(StateReserve::Bytes(0), &dir).is_none());
        let reserve = Reserve::on(StateReserve::Percent(99.9), &dir).unwrap();
        let space = reserve.space().unwrap();
        assert!(space.size > 0 && space.free <= space.size);
        let short = reserve
            .shortfall_in(Space {
                free: 1 << 20,
                ..space
            })
            .unwrap();
        assert!(
            short.contains("mounted on") && short.contains("1 MiB free"),
            "{short}"
        );
        let roomy = Reserve::on(StateReserve::Bytes(1), &dir).unwrap();
        assert_eq!(roomy.shortfall_in(space), None);
        assert_eq!(unescape(r"/mnt/a\040b"), "/mnt/a b");
    }
}
