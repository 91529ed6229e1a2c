//! Copy-and-truncate rotation of one runner output file (see the module
//! above for why, and what it costs).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// How far past the copy's start a line break is looked for, so the rotated
/// file starts at a line rather than mid-line.
const ALIGN_WINDOW: u64 = 4096;

/// When `current` is longer than `max_size`: copies its newest `max_size`
/// bytes (from a line start when one is near) to `rotated`, replacing it,
/// and truncates `current` to zero. Returns the offset in `current` the
/// copy started at, or `None` when no rotation was needed (or the file does
/// not exist).
pub fn copy_truncate(current: &Path, rotated: &Path, max_size: u64) -> io::Result<Option<u64>> {
    // The usual answer, in one system call (this runs for every running
    // sandbox every second): the file is within the cap, or gone.
    match std::fs::metadata(current) {
        Ok(metadata) if metadata.len() <= max_size => return Ok(None),
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let mut file = match OpenOptions::new().read(true).write(true).open(current) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    // Created before the size is taken: what the runner writes from then
    // until the truncation below is lost unless the copy catches it, and
    // creating a file can be slow (an inode allocation).
    let temporary = rotated.with_extension("1.tmp");
    let mut copy = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o640)
        .open(&temporary)?;
    let len = file.metadata()?.len();
    if len <= max_size {
        drop(copy);
        let _ = std::fs::remove_file(&temporary);
        return Ok(None);
    }
    let start = line_start_after(&mut file, len - max_size, len)?;
    file.seek(SeekFrom::Start(start))?;
    // At most the cap, so the rotated file keeps its bound: what the runner
    // appends past that while this copies is lost with the truncation below,
    // as is anything between the copy and the truncation (the copytruncate
    // trade-off). A runner writing faster than this copies cannot keep it going.
    let copied = io::copy(&mut (&mut file).take(max_size), &mut copy)?;
    // Right after the copy: what lands between the two is lost.
    file.set_len(0)?;
    copy.flush()?;
    drop(copy);
    std::fs::rename(&temporary, rotated)?;
    tracing::trace!(
        bytes = copied,
        from = start,
        "copied a runner log before truncating it"
    );
    Ok(Some(start))
}

/// The first offset after a line break in `[from, from + ALIGN_WINDOW)`,
/// or `from` itself when there is none.
fn line_start_after(file: &mut File, from: u64, len: u64) -> io::Result<u64> {
    let window = ALIGN_WINDOW.min(len - from);
    let mut bytes = vec![0; window as usize];
    file.seek(SeekFrom::Start(from))?;
    file.read_exact(&mut bytes)?;
    Ok(match bytes.iter().position(|&byte| byte == b'\n') {
        Some(at) if from + at as u64 + 1 < len => from + at as u64 + 1,
        _ => from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn under_the_cap_nothing_happens() {
        let dir = dir("under");
        let current = dir.0.join("a.log");
        std::fs::write(&current, "one\ntwo\n").unwrap();
        assert_eq!(
            copy_truncate(&current, &dir.0.join("a.log.1"), 8).unwrap(),
            None
        );
        assert_eq!(std::fs::read_to_string(&current).unwrap(), "one\ntwo\n");
        assert!(!dir.0.join("a.log.1").exists());
        assert_eq!(
            copy_truncate(&dir.0.join("missing.log"), &dir.0.join("m.1"), 8).unwrap(),
            None
        );
    }

    #[test]
    fn over_the_cap_the_newest_lines_move_and_appends_restart_at_zero() {
        let dir = dir("over");
        let current = dir.0.join("a.log");
        let rotated = dir.0.join("a.log.1");
        std::fs::write(&rotated, "an older rotation\n").unwrap();
        let text: String = (0..100).map(|n| format!("line {n:03}\n")).collect();
        std::fs::write(&current, &text).unwrap();
        // The runner's descriptor: O_APPEND, opened before the rotation.
        let mut runner = OpenOptions::new().append(true).open(&current).unwrap();

        let from = copy_truncate(&current, &rotated, 50)
            .unwrap()
            .expect("rotated");
        let kept = std::fs::read_to_string(&rotated).unwrap();
        assert!(kept.len() <= 50, "{kept:?}");
        assert!(
            kept.starts_with("line ") && kept.ends_with("line 099\n"),
            "{kept:?}"
        );
        assert_eq!(
            &text[from as usize..],
            kept,
            "the offset maps the copy back"
        );
        assert_eq!(std::fs::metadata(&current).unwrap().len(), 0);

        runner.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read_to_string(&current).unwrap(), "after\n");
        assert!(!dir.0.join("a.log.1.tmp").exists());
    }
}
