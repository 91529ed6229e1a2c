//! `put_tar`'s upload sessions: one per (workspace, target directory),
//! each a thread that unpacks the stream as its chunks arrive
//! ([`super::tar_in`]) and holds one chunk at a time. A chunk at offset 0
//! starts a put over (its staging directory goes with the one before); a
//! later one must come at the offset the put has taken so far, or it is
//! refused naming that offset, so a put resumes as an upload does. A put
//! without a call for [`IDLE`] is abandoned (its thread removes its
//! staging directory and ends), as is one a daemon left when it stopped:
//! the start of the next removes its staging ([`remove_abandoned_puts`]). At
//! most [`MAX_SESSIONS`] run at once.
//!
//! The disk limit's room is measured (a walk of the workspace) when a put
//! starts and again once [`REMEASURE`] has passed; in between, the put's
//! own bytes count against the room last measured. A walk per chunk cost
//! a tree's worth of `stat`s per MiB, more the larger the workspace.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::OFlags;
use sandboxd_protocol::{PutChunk, PutReport, SandboxError};
use tokio::sync::mpsc;

use super::as_owner::Owner;
use super::beneath::{components, Beneath};
use super::chunk_reader::{Answer, ChunkReader, Piece, Room, Tally};
use super::tar_in::{self, Job, STAGING_PREFIX};
use super::{ops, Failure, Told};
use crate::drivers::idle_sessions::IdleSessions;

/// A put without a call for this long is abandoned (as a download
/// session is).
pub const IDLE: Duration = super::downloads::IDLE;
/// At most this many puts at once (a thread and a chunk each): a new one
/// past it abandons the one unused longest.
const MAX_SESSIONS: usize = 64;
/// A put measures the workspace again once this has passed, to see what
/// else filled it meanwhile (the sandbox itself, another put).
const REMEASURE: Duration = Duration::from_secs(1);

/// Staging directories are told apart by this, within a daemon's life.
static SERIAL: AtomicU64 = AtomicU64::new(0);

type Key = (PathBuf, String);

/// The put sessions of a daemon: each holds the feed of a put under way
/// (`None` when there is none; the idle watch sets it back to `None`,
/// which ends the put's thread).
pub struct Uploads {
    sessions: IdleSessions<Key, Option<Feed>>,
}

impl Default for Uploads {
    fn default() -> Self {
        Uploads {
            sessions: IdleSessions::new(IDLE, MAX_SESSIONS),
        }
    }
}

/// Where a put goes: whose workspace, as whom, and how failures are told.
pub struct Target {
    pub owner: Option<Owner>,
    pub workspace: PathBuf,
    pub told: Told,
}

struct Feed {
    /// Whose put it is: a chunk as another owner finds no put under way.
    owner: Option<Owner>,
    /// Dropped when the put is abandoned: the thread's next read fails.
    pieces: mpsc::Sender<Piece>,
    answers: mpsc::Receiver<Result<Answer, SandboxError>>,
    /// The bytes of the stream the thread took.
    received: u64,
    /// When the workspace was last measured for the disk limit.
    measured: Option<Instant>,
}

impl Uploads {
    /// One chunk of a tar stream into the directory `chunk.path`; `room`,
    /// awaited only when the workspace is due to be measured, answers what
    /// the disk limit allows it now (`None`: no limit).
    pub async fn put(
        &self,
        target: Target,
        chunk: PutChunk,
        room: impl Future<Output = Result<Option<u64>, SandboxError>>,
    ) -> Result<PutReport, SandboxError> {
        let key = (target.workspace.clone(), components(&chunk.path).join("/"));
        let told = target.told.clone();
        let target_owner = target.owner;
        let session = self.sessions.session(&key);
        let mut held = session.state.lock().await;
        if chunk.offset == 0 {
            *held = Some(start(target, &chunk.path)?);
        }
        let Some(feed) = held.as_mut().filter(|feed| feed.owner == target_owner) else {
            if held.is_none() {
                drop(held);
                self.sessions.forget(&key, &session);
            }
            return Err(told.error(Failure::NoUpload));
        };
        session.touch();
        if feed.received != chunk.offset {
            return Err(told.error(Failure::Resume(feed.received)));
        }
        let room = match feed.measured {
            Some(at) if at.elapsed() < REMEASURE => Room::AsBefore,
            _ => {
                let room = Room::Measured(room.await?);
                feed.measured = Some(Instant::now());
                room
            }
        };
        let (length, last) = (chunk.data.len() as u64, chunk.last);
        let piece = Piece {
            data: chunk.data,
            last,
            room,
        };
        // A thread that ended has its answer waiting.
        let _ = feed.pieces.send(piece).await;
        let answer = feed.answers.recv().await;
        session.touch();
        match answer {
            Some(Ok(Answer::Taken)) if !last => {
                feed.received += length;
                Ok(PutReport {
                    received: feed.received,
                    complete: false,
                })
            }
            Some(Ok(_)) => {
                *held = None;
                drop(held);
                self.sessions.forget(&key, &session);
                Ok(PutReport {
                    received: chunk.offset + length,
                    complete: true,
                })
            }
            Some(Err(error)) => {
                *held = None;
                drop(held);
                self.sessions.forget(&key, &session);
                Err(error)
            }
            None => {
                *held = None;
                drop(held);
                self.sessions.forget(&key, &session);
                Err(SandboxError::Internal(
                    "the unpacking thread ended without an answer".into(),
                ))
            }
        }
    }
}

/// A new put into `path` of `target`'s workspace: its thread, and the
/// feed that hands it chunks.
fn start(target: Target, path: &str) -> Result<Feed, SandboxError> {
    let owner = target.owner;
    let (send, pieces) = mpsc::channel(1);
    let (answers, answered) = mpsc::channel(1);
    let job = Job {
        owner: target.owner,
        workspace: target.workspace,
        path: path.to_string(),
        staging: format!("{STAGING_PREFIX}{}", SERIAL.fetch_add(1, Ordering::Relaxed)),
        told: target.told,
    };
    std::thread::Builder::new()
        .name("sandboxd-tar-in".into())
        .spawn(move || {
            let tally = Rc::new(Tally::default());
            let reader = ChunkReader::new(pieces, answers, tally.clone());
            tar_in::run(job, reader, tally);
        })
        .map_err(|error| {
            SandboxError::Unavailable(format!("cannot start a file thread: {error}"))
        })?;
    Ok(Feed {
        owner,
        pieces: send,
        answers: answered,
        received: 0,
        measured: None,
    })
}

/// Removes the staging directories a daemon that stopped mid-put left at
/// the top of the workspaces in `sandboxes`; answers how many. Blocking.
pub fn remove_abandoned_puts(sandboxes: &Path) -> usize {
    let mut removed = 0;
    for workspace in super::super::workspaces::disk::workspaces_in(sandboxes) {
        let Ok(beneath) = Beneath::open(&sandboxes.join(&workspace.base)) else {
            continue;
        };
        let Ok(top) = beneath.open_at(&[], OFlags::RDONLY | OFlags::DIRECTORY) else {
            continue;
        };
        let Ok(dir) = rustix::fs::Dir::read_from(&top) else {
            continue;
        };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(STAGING_PREFIX) && ops::remove(&beneath, &name, true).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_dir::TestDir;
    use std::time::Instant;

    fn target(workspace: &Path, path: &str) -> Target {
        Target {
            owner: None,
            workspace: workspace.to_path_buf(),
            told: Told {
                verb: "write",
                path: path.to_string(),
                what: "the test's sandbox".into(),
                limit: 1 << 20,
            },
        }
    }

    async fn no_limit() -> Result<Option<u64>, SandboxError> {
        Ok(None)
    }

    fn chunk(path: &str, offset: u64, data: &[u8], last: bool) -> PutChunk {
        PutChunk {
            path: path.into(),
            offset,
            data: data.to_vec(),
            last,
            mode: 0,
        }
    }

    /// `archive` into `dir` cut at `cuts`, with the room `limit` leaves
    /// the workspace at each call; answers the last call's result, after
    /// checking nothing appeared in `dir` before it.
    async fn put_cut(
        uploads: &Uploads,
        workspace: &Path,
        dir: &str,
        archive: &[u8],
        cuts: &[usize],
        limit: Option<u64>,
    ) -> Result<PutReport, SandboxError> {
        let shown = |dir: &Path| -> Vec<String> {
            let names = names(dir).into_iter();
            names
                .filter(|name| !name.starts_with(STAGING_PREFIX))
                .collect()
        };
        let before = shown(&workspace.join(dir));
        let mut bounds = vec![0];
        bounds.extend(cuts.iter().copied().filter(|cut| *cut < archive.len()));
        bounds.push(archive.len());
        for pair in bounds.windows(2) {
            let last = pair[1] == archive.len();
            let data = &archive[pair[0]..pair[1]];
            let put = chunk(dir, pair[0] as u64, data, last);
            let room = async {
                let used = super::super::super::workspaces::disk::bytes_on_disk(workspace);
                Ok(limit.map(|limit| limit.saturating_sub(used)))
            };
            let report = uploads.put(target(workspace, dir), put, room).await;
            if last || report.is_err() {
                return report;
            }
            assert_eq!(report.unwrap().received, pair[1] as u64);
            assert_eq!(
                shown(&workspace.join(dir)),
                before,
                "nothing before the end"
            );
        }
        unreachable!("the last chunk answers")
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn file(tar: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o4755);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, name, data).unwrap();
    }

    /// A file with a long name (a GNU long-name entry before its header),
    /// a directory, a symlink and a hard link.
    fn archive(long: &str) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        file(&mut tar, long, &[7; 3000]);
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        tar.append_data(&mut header, "d", std::io::empty()).unwrap();
        file(&mut tar, "d/f", b"inner");
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        tar.append_link(&mut header, "d/up", "../d/f").unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Link);
        header.set_size(0);
        tar.append_link(&mut header, "hard", "d/f").unwrap();
        tar.into_inner().unwrap()
    }

    #[tokio::test]
    async fn an_archive_cut_inside_headers_and_long_names_unpacks_whole() {
        let dir = TestDir::new("tar-cuts");
        std::fs::create_dir(dir.0.join("t")).unwrap();
        let long = format!("{}/{}", "n".repeat(120), "m".repeat(130));
        let archive = archive(&long);
        let uploads = Uploads::default();
        // Inside the long name's header, inside its name, inside the
        // file's header, one byte at a time through a header, and blocks
        // cut one byte either side.
        let cuts: Vec<Vec<usize>> = vec![
            vec![100, 600, 1100],
            vec![511, 513, 1023, 1025, 1535],
            (1..700).collect(),
            (1..archive.len() / 333).map(|n| n * 333).collect(),
        ];
        for cuts in cuts {
            let report = put_cut(&uploads, &dir.0, "t", &archive, &cuts, None).await;
            assert!(report.unwrap().complete);
            let t = dir.0.join("t");
            assert_eq!(std::fs::read(t.join(&long)).unwrap(), [7; 3000]);
            assert_eq!(std::fs::read(t.join("hard")).unwrap(), b"inner");
            assert_eq!(std::fs::read(t.join("d/up")).unwrap(), b"inner");
            let mode = std::fs::metadata(t.join(&long)).unwrap().permissions();
            assert_eq!(
                std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
                0o755
            );
            assert_eq!(names(&dir.0), ["t"], "no staging left");
            std::fs::remove_dir_all(&t).unwrap();
            std::fs::create_dir(&t).unwrap();
        }
    }

    #[tokio::test]
    async fn a_hostile_entry_in_the_last_chunk_or_the_disk_limit_leaves_nothing() {
        let dir = TestDir::new("tar-refused");
        std::fs::create_dir(dir.0.join("t")).unwrap();
        let uploads = Uploads::default();
        let mut tar = tar::Builder::new(Vec::new());
        file(&mut tar, "good", &[1; 5000]);
        let good = tar.get_ref().len();
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..5].copy_from_slice(b"../up");
        header.set_size(1);
        header.set_cksum();
        tar.append(&header, &b"x"[..]).unwrap();
        let hostile = tar.into_inner().unwrap();
        let error = put_cut(&uploads, &dir.0, "t", &hostile, &[700, good], None)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("'../up'"), "{error}");
        assert!(names(&dir.0.join("t")).is_empty());
        assert_eq!(names(&dir.0), ["t"]);
        // 3 files of 64 KiB, room for 2: the limit is passed mid-stream.
        let mut tar = tar::Builder::new(Vec::new());
        for name in ["one", "two", "three"] {
            file(&mut tar, name, &[2; 64 << 10]);
        }
        let big = tar.into_inner().unwrap();
        let cuts: Vec<usize> = (1..big.len() / 10_000).map(|n| n * 10_000).collect();
        // The staging directory's own block is counted too.
        let limit = super::super::super::workspaces::disk::bytes_on_disk(&dir.0) + (140 << 10);
        let error = put_cut(&uploads, &dir.0, "t", &big, &cuts, Some(limit))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("disk limit"), "{error}");
        assert!(names(&dir.0.join("t")).is_empty());
        assert_eq!(names(&dir.0), ["t"]);
    }

    #[tokio::test]
    async fn a_put_resumes_only_at_its_offset_and_an_abandoned_one_is_removed() {
        let dir = TestDir::new("tar-resume");
        let uploads = Uploads::default();
        let archive = archive("name");
        let error = uploads
            .put(
                target(&dir.0, ""),
                chunk("", 512, &archive[512..], true),
                no_limit(),
            )
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("start it at offset 0"),
            "{error}"
        );
        let first = chunk("", 0, &archive[..700], false);
        uploads
            .put(target(&dir.0, ""), first, no_limit())
            .await
            .unwrap();
        let wrong = chunk("", 512, &archive[512..], true);
        let error = uploads
            .put(target(&dir.0, ""), wrong, no_limit())
            .await
            .unwrap_err();
        assert!(
            error.to_string().contains("resume at offset 700"),
            "{error}"
        );
        let staging = |dir: &Path| {
            names(dir)
                .into_iter()
                .filter(|name| name.starts_with(STAGING_PREFIX))
                .count()
        };
        assert_eq!(staging(&dir.0), 1);
        // Abandoned: the sessions go, and the thread takes its staging.
        drop(uploads);
        let waited = Instant::now();
        while staging(&dir.0) > 0 {
            assert!(waited.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(names(&dir.0).is_empty());
    }

    #[test]
    fn headers_past_their_bound_are_refused_and_leftovers_removed_at_start() {
        let dir = TestDir::new("tar-leftovers");
        let base = sandboxd_protocol::naming::base_name(sandboxd_protocol::Scope::Session, "s-1");
        let workspace = dir.0.join(&base);
        let left = workspace.join(format!("{STAGING_PREFIX}3/a/b"));
        std::fs::create_dir_all(&left).unwrap();
        std::fs::write(left.join("f"), b"x").unwrap();
        std::fs::write(workspace.join("kept"), b"x").unwrap();
        assert_eq!(remove_abandoned_puts(&dir.0), 1);
        assert_eq!(names(&workspace), ["kept"]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::GNULongName);
        header.set_size(2 << 20);
        header.set_cksum();
        tar.append(&header, &vec![b'a'; 2 << 20][..]).unwrap();
        let archive = tar.into_inner().unwrap();
        let cuts: Vec<usize> = (1..4).map(|n| n << 20).collect();
        let uploads = Uploads::default();
        let error = runtime
            .block_on(put_cut(&uploads, &workspace, "", &archive, &cuts, None))
            .unwrap_err();
        assert!(error.to_string().contains("pass 1024 KiB"), "{error}");
        assert_eq!(names(&workspace), ["kept"]);
    }
}
