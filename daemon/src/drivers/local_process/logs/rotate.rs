//! In-place rotation of one runner output file: the live file is renamed
//! over the rotated one and a fresh, empty file takes its name.
//!
//! Nothing is copied and no temporary file is made, so rotation works on a
//! full file system: the rename frees the old rotated file's blocks (once
//! no reader holds it open) before anything is allocated, and an empty
//! file needs no data block. Only when even the fresh file cannot be made
//! (no inode left, the descriptor limit) is the live file truncated in
//! place instead, its bytes counted as dropped.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What a rotation did.
#[derive(Debug)]
pub enum Rotated {
    /// The live file is now the rotated one; this is the fresh live file.
    Renamed(File),
    /// The live file was emptied in place; no rotated file is left (it would
    /// not be the one before the live file any more).
    Truncated,
}

/// A new, empty output file at `path`: written only by the daemon (the
/// runner gets a pipe), readable by root's group as every output file is.
pub fn create_fresh(path: &Path) -> io::Result<File> {
    File::options()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(path)
}

/// Rotates `live`, the file at `current`, into `rotated`.
pub fn rotate(current: &Path, rotated: &Path, live: &File) -> Rotated {
    match std::fs::rename(current, rotated) {
        Ok(()) => match create_fresh(current) {
            Ok(fresh) => return Rotated::Renamed(fresh),
            Err(error) => {
                tracing::warn!(log = %current.display(), %error, "cannot create a fresh output file; truncating the live one in place");
                if let Err(error) = std::fs::rename(rotated, current) {
                    // The live file keeps the rotated name: emptied, it is
                    // still where readers look next (see `Files::open`).
                    tracing::warn!(log = %current.display(), %error, "cannot give the live output file its name back");
                    truncate(live, current);
                    return Rotated::Truncated;
                }
            }
        },
        Err(error) => {
            tracing::warn!(log = %current.display(), %error, "cannot rename the output file; truncating it in place");
        }
    }
    remove_rotated(rotated);
    truncate(live, current);
    Rotated::Truncated
}

/// Deletes the rotated file, if there is one.
pub fn remove_rotated(rotated: &Path) {
    match std::fs::remove_file(rotated) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => {
            tracing::warn!(log = %rotated.display(), %error, "cannot remove a rotated output file");
        }
        _ => {}
    }
}

/// Empties the live file; freeing blocks needs none, so this works on a
/// full file system.
pub fn truncate(live: &File, path: &Path) {
    if let Err(error) = live.set_len(0) {
        tracing::warn!(log = %path.display(), %error, "cannot truncate an output file");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    struct Dir(std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let path =
            std::env::temp_dir().join(format!("sandboxd-rotate-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Dir(path)
    }

    #[test]
    fn the_live_file_becomes_the_rotated_one_and_a_fresh_one_takes_its_name() {
        let dir = dir("renamed");
        let (current, rotated) = (dir.0.join("a.log"), dir.0.join("a.log.1"));
        std::fs::write(&rotated, "an older rotation\n").unwrap();
        let mut live = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&current)
            .unwrap();
        live.write_all(b"the live output\n").unwrap();

        let Rotated::Renamed(mut fresh) = rotate(&current, &rotated, &live) else {
            panic!("did not rename");
        };
        assert_eq!(
            std::fs::read_to_string(&rotated).unwrap(),
            "the live output\n"
        );
        assert_eq!(std::fs::read(&current).unwrap(), b"");
        fresh.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(&current).unwrap(), "after\n");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&current).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn without_a_fresh_file_the_live_one_is_emptied_and_the_rotated_one_removed() {
        let dir = dir("truncated");
        let (current, rotated) = (dir.0.join("a.log"), dir.0.join("a.log.1"));
        std::fs::write(&rotated, "an older rotation\n").unwrap();
        let live = File::options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&current)
            .unwrap();
        (&live).write_all(b"the live output\n").unwrap();
        // A directory in the rotated file's place: the rename fails.
        std::fs::remove_file(&rotated).unwrap();
        std::fs::create_dir(&rotated).unwrap();
        std::fs::write(rotated.join("x"), "x").unwrap();

        assert!(matches!(
            rotate(&current, &rotated, &live),
            Rotated::Truncated
        ));
        assert_eq!(std::fs::read(&current).unwrap(), b"");
    }
}
