//! Files in and out of a docker-tier sandbox (`put_file`, `get_file`,
//! `stat_file`, `list_files`, `remove_file`, `put_tar`, `get_tar`) against
//! the real engine on this machine, through its archive endpoints: what
//! goes in is the container user's, what the sandbox planted (a link to
//! the container's `/etc`) is neither written nor read through, and what
//! that user could not read is not handed out.
//!
//! The runner image has no `rm`, which a removal needs (the Engine API
//! deletes nothing), so most tests run on an image made from it with this
//! host's `rm` and `cat` and a stand-in `/etc/passwd` whose text a leak
//! would show; one test runs on the bare image and sees the removal
//! refused by name. Gated like every docker test: without an engine a loud
//! SKIPPED line, or a failure under `SANDBOXD_REQUIRE_DOCKER=1`. Every test
//! uses ids of its own and removes what it made, by label, even when it
//! fails.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::OnceLock;

use sandboxd_client::{ClientError, FileType, PutChunk, SandboxError, SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::derived_image::derived_image;
use sandboxd_tests::docker_image::{
    docker, docker_options_on, engine_ready, unique_id, volume_dir, volumes_of, Cleanup, TEST_IMAGE,
};
use sandboxd_tests::{sandbox_env, TestDaemon};

/// The runner image with `rm`, `cat` and a stand-in `/etc/passwd`.
const FILES_IMAGE: &str = "sandboxd-test-runner-files:latest";
/// The stand-in `/etc/passwd` of that image: a leak would show this text.
const PASSWD: &str = "root:x:0:0:sandboxd-files-test-marker:/root:/bin/sh\n";
const CHUNK: usize = sandboxd_protocol::files::MAX_FILE_CHUNK as usize;
/// The container's user, as `[docker] user` defaults it.
const USER: u32 = 65534;

fn files_image() -> &'static str {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(problem) = BUILT.get_or_init(build_files_image) {
        panic!("cannot make {FILES_IMAGE}: {problem}");
    }
    FILES_IMAGE
}

/// The runner image with `rm` and `cat`, and the stand-in `/etc/passwd`.
fn build_files_image() -> Result<(), String> {
    derived_image(FILES_IMAGE, &["rm", "cat"], |root| {
        std::fs::create_dir_all(root.join("etc")).map_err(|error| error.to_string())?;
        std::fs::write(root.join("etc/passwd"), PASSWD).map_err(|error| error.to_string())
    })
}

/// One daemon and one running session sandbox. Fields drop in order: the
/// daemon first, then what the engine holds for the id.
struct Sandbox {
    daemon: TestDaemon,
    client: SandboxdClient,
    id: String,
    _cleanup: Cleanup,
}

/// `None` (after a loud SKIPPED line) when no engine answers.
async fn sandbox(test: &str, image: Option<&'static str>) -> Option<Sandbox> {
    if !engine_ready(test) {
        return None;
    }
    let image = image.unwrap_or_else(files_image);
    let id = unique_id(test);
    let cleanup = Cleanup::new(&[&id]);
    let daemon = TestDaemon::start(docker_options_on(image, ""));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-files");
    client
        .ensure(Scope::Session, &id, &env)
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    Some(Sandbox {
        daemon,
        client,
        id,
        _cleanup: cleanup,
    })
}

impl Sandbox {
    /// The workspace volume's directory on this host, to look from outside.
    fn workspace(&self) -> PathBuf {
        let volumes = volumes_of(&self.id);
        assert_eq!(volumes.len(), 1, "{volumes:?}");
        volume_dir(&volumes[0])
    }

    /// What `cat PATH` prints in the container (as root, from outside).
    fn cat(&self, path: &str) -> String {
        let output = docker(&[
            "exec",
            &base_name(Scope::Session, &self.id),
            "/usr/bin/cat",
            path,
        ]);
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    async fn upload(&self, path: &str, data: &[u8], mode: u32) -> Result<u64, ClientError> {
        upload_with(&self.client, &self.id, path, data, mode, false).await
    }

    async fn download(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        let mut data = Vec::new();
        loop {
            let chunk = self
                .client
                .get_file(
                    Scope::Session,
                    &self.id,
                    path,
                    data.len() as u64,
                    CHUNK as u32,
                )
                .await?;
            assert_eq!(chunk.offset, data.len() as u64);
            data.extend_from_slice(&chunk.data);
            if chunk.eof {
                assert_eq!(chunk.size, data.len() as u64);
                return Ok(data);
            }
        }
    }

    async fn put_tar(&self, dir: &str, archive: &[u8]) -> Result<u64, ClientError> {
        upload_with(&self.client, &self.id, dir, archive, 0, true).await
    }

    /// The whole tar stream of `path`, read `max` bytes at a time.
    async fn get_tar(&self, path: &str, max: u32) -> Result<Vec<u8>, ClientError> {
        let mut data = Vec::new();
        loop {
            let chunk = self
                .client
                .get_tar(Scope::Session, &self.id, path, data.len() as u64, max)
                .await?;
            data.extend_from_slice(&chunk.data);
            assert_eq!(chunk.size, data.len() as u64);
            if chunk.eof {
                return Ok(data);
            }
        }
    }

    fn refused<T: std::fmt::Debug>(&self, result: Result<T, ClientError>) -> SandboxError {
        match result {
            Err(ClientError::Sandbox(error)) => error,
            other => panic!(
                "expected a refusal, got {other:?}\n{}",
                self.daemon.log_text()
            ),
        }
    }
}

/// Sends `data` in chunks of [`CHUNK`] bytes, as a file or an archive.
async fn upload_with(
    client: &SandboxdClient,
    id: &str,
    path: &str,
    data: &[u8],
    mode: u32,
    tar: bool,
) -> Result<u64, ClientError> {
    let pieces: Vec<&[u8]> = data.chunks(CHUNK).collect();
    let last = pieces.len().saturating_sub(1);
    let mut offset = 0;
    for (index, piece) in pieces.into_iter().enumerate() {
        let chunk = PutChunk {
            path: path.to_string(),
            offset,
            data: piece.to_vec(),
            last: index == last,
            mode,
        };
        let report = if tar {
            client.put_tar(Scope::Session, id, &chunk).await?
        } else {
            client.put_file(Scope::Session, id, &chunk).await?
        };
        assert_eq!(report.complete, index == last);
        offset = report.received;
    }
    Ok(offset)
}

/// An archive of `entries`: (name, kind, mode, data or link target).
fn archive(entries: &[(&str, tar::EntryType, u32, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, kind, mode, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(*kind);
        header.set_mode(*mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(1_700_000_000);
        if kind.is_symlink() || kind.is_hard_link() {
            header.set_size(0);
            let target = std::str::from_utf8(data).unwrap();
            builder.append_link(&mut header, name, target).unwrap();
        } else {
            header.set_size(data.len() as u64);
            // Raw names: the builder's own path checks would refuse the
            // hostile ones these tests send.
            header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
    }
    builder.into_inner().unwrap()
}

/// Every entry of `stream`: (name, kind, mode, uid, gid, data or link).
fn entries(stream: &[u8]) -> Vec<(String, tar::EntryType, u32, u64, u64, Vec<u8>)> {
    let mut reading = tar::Archive::new(stream);
    let mut found = Vec::new();
    for entry in reading.entries().expect("a tar stream") {
        let mut entry = entry.expect("an entry");
        let header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        if let Some(link) = entry.link_name().unwrap() {
            data = link.to_string_lossy().into_owned().into_bytes();
        }
        found.push((
            entry.path().unwrap().to_string_lossy().into_owned(),
            header.entry_type(),
            header.mode().unwrap() & 0o7777,
            header.uid().unwrap(),
            header.gid().unwrap(),
            data,
        ));
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_and_a_tree_go_in_and_come_out_as_the_containers_user() {
    let Some(sandbox) = sandbox("files-round", None).await else {
        return;
    };
    let data: Vec<u8> = (0..(2 * CHUNK + 12_345) as u32)
        .map(|n| (n % 251) as u8)
        .collect();
    let started = std::time::Instant::now();
    let sent = sandbox
        .upload("big.bin", &data, 0o4755)
        .await
        .expect("upload");
    let put_in = started.elapsed();
    assert_eq!(sent, data.len() as u64);
    assert_eq!(sandbox.download("big.bin").await.expect("download"), data);
    eprintln!(
        "{} bytes: put in {put_in:?}, read back in {:?}",
        data.len(),
        started.elapsed() - put_in
    );
    let stat = sandbox
        .client
        .stat_file(Scope::Session, &sandbox.id, "big.bin")
        .await
        .unwrap();
    assert_eq!(
        (stat.file_type, stat.size, stat.mode),
        (FileType::File, data.len() as u64, 0o755)
    );
    let on_host = std::fs::metadata(sandbox.workspace().join("big.bin")).unwrap();
    assert_eq!(
        (on_host.uid(), on_host.gid()),
        (USER, USER),
        "owned by the container's user"
    );
    assert_eq!(on_host.permissions().mode() & 0o7777, 0o755, "no setuid");
    let middle = sandbox
        .client
        .get_file(
            Scope::Session,
            &sandbox.id,
            "big.bin",
            CHUNK as u64 + 7,
            100,
        )
        .await
        .unwrap();
    assert_eq!(middle.data, &data[CHUNK + 7..CHUNK + 107]);
    assert!(!middle.eof);

    // A resume at the wrong offset names the right one.
    let first = PutChunk {
        path: "part".into(),
        offset: 0,
        data: vec![1; 10],
        last: false,
        mode: 0o644,
    };
    sandbox
        .client
        .put_file(Scope::Session, &sandbox.id, &first)
        .await
        .unwrap();
    let wrong = PutChunk {
        offset: 4,
        ..first.clone()
    };
    let error = sandbox.refused(
        sandbox
            .client
            .put_file(Scope::Session, &sandbox.id, &wrong)
            .await,
    );
    assert!(
        matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("resume at offset 10")),
        "{error:?}"
    );
    let error = sandbox.refused(
        sandbox
            .client
            .stat_file(Scope::Session, &sandbox.id, "part")
            .await,
    );
    assert!(
        matches!(error, SandboxError::NotFound(_)),
        "nothing placed before the last chunk: {error:?}"
    );

    use tar::EntryType::{Directory, Regular, Symlink};
    let tree = archive(&[
        ("d/", Directory, 0o750, b""),
        ("d/f", Regular, 0o4640, b"in the tree"),
        ("d/l", Symlink, 0o777, b"f"),
        ("top", Regular, 0o600, b"top"),
    ]);
    std::fs::create_dir(sandbox.workspace().join("tree")).unwrap();
    std::fs::set_permissions(
        sandbox.workspace().join("tree"),
        PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::chown(sandbox.workspace().join("tree"), Some(USER), Some(USER)).unwrap();
    sandbox.put_tar("tree", &tree).await.expect("put_tar");
    let listed = sandbox
        .client
        .list_files(Scope::Session, &sandbox.id, "tree/d")
        .await
        .unwrap();
    let shown: Vec<(&str, FileType, u32)> = listed
        .entries
        .iter()
        .map(|entry| (entry.name.as_str(), entry.file_type, entry.mode))
        .collect();
    assert_eq!(
        shown,
        [
            ("f", FileType::File, 0o640),
            ("l", FileType::Symlink, 0o777)
        ]
    );
    for name in ["tree/d", "tree/d/f", "tree/d/l", "tree/top"] {
        let meta = std::fs::symlink_metadata(sandbox.workspace().join(name)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (USER, USER), "{name}");
    }
    // Read back in small pieces: the session goes on from each offset.
    let stream = sandbox.get_tar("tree", 1000).await.expect("get_tar");
    let got = entries(&stream);
    let names: Vec<&str> = got
        .iter()
        .map(|entry| entry.0.trim_end_matches('/'))
        .collect();
    assert_eq!(
        names,
        ["tree", "tree/d", "tree/d/f", "tree/d/l", "tree/top"]
    );
    for (name, _, _, uid, gid, _) in &got {
        assert_eq!((*uid, *gid), (u64::from(USER), u64::from(USER)), "{name}");
    }
    assert_eq!(
        (got[2].2, got[2].5.as_slice()),
        (0o640, &b"in the tree"[..])
    );
    assert_eq!((got[3].1, got[3].5.as_slice()), (Symlink, &b"f"[..]));
    assert_eq!(
        sandbox.get_tar("tree", CHUNK as u32).await.unwrap(),
        stream,
        "one read, the same stream"
    );

    let error = sandbox.refused(
        sandbox
            .client
            .remove_file(Scope::Session, &sandbox.id, "tree", false)
            .await,
    );
    assert!(
        matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("not empty")),
        "{error:?}"
    );
    sandbox
        .client
        .remove_file(Scope::Session, &sandbox.id, "tree/d/l", false)
        .await
        .unwrap();
    assert!(
        sandbox.workspace().join("tree/d/f").exists(),
        "a link removed, not what it points at"
    );
    sandbox
        .client
        .remove_file(Scope::Session, &sandbox.id, "tree", true)
        .await
        .unwrap();
    assert!(!sandbox.workspace().join("tree").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_links_lead_nowhere_and_the_unreadable_stays_unread() {
    let Some(sandbox) = sandbox("files-links", None).await else {
        return;
    };
    let workspace = sandbox.workspace();
    std::os::unix::fs::symlink("/etc/passwd", workspace.join("pw")).unwrap();
    std::os::unix::fs::symlink("/etc", workspace.join("etcdir")).unwrap();
    std::fs::create_dir(workspace.join("sub")).unwrap();
    std::fs::write(workspace.join("sub/f"), b"inside").unwrap();
    for mine in ["sub", "sub/f"] {
        std::os::unix::fs::chown(workspace.join(mine), Some(USER), Some(USER)).unwrap();
    }
    std::os::unix::fs::symlink("sub", workspace.join("inner")).unwrap();
    let leads_out = |error: &SandboxError, path: &str| matches!(error, SandboxError::PermissionDenied(m) if m.contains("leads out") && m.contains(&format!("'{path}'")));
    for path in ["pw", "etcdir/passwd"] {
        let error = sandbox.refused(sandbox.download(path).await);
        assert!(leads_out(&error, path), "{error:?}");
        let error = sandbox.refused(sandbox.get_tar(path, CHUNK as u32).await);
        assert!(leads_out(&error, path), "{error:?}");
    }
    assert_eq!(
        sandbox.download("inner/f").await.unwrap(),
        b"inside",
        "a link inside is followed"
    );
    let stat = sandbox
        .client
        .stat_file(Scope::Session, &sandbox.id, "pw")
        .await
        .unwrap();
    assert_eq!(stat.file_type, FileType::Symlink, "stat does not follow");

    let error = sandbox.refused(sandbox.upload("etcdir/passwd", b"owned\n", 0o644).await);
    assert!(leads_out(&error, "etcdir/passwd"), "{error:?}");
    sandbox
        .upload("pw", b"replaced\n", 0o644)
        .await
        .expect("a file in place of the link");
    assert!(std::fs::symlink_metadata(workspace.join("pw"))
        .unwrap()
        .is_file());
    use tar::EntryType::{Char, Regular, Symlink};
    let through = archive(&[("etcdir/evil", Regular, 0o644, b"evil")]);
    let error = sandbox.refused(sandbox.put_tar("", &through).await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("'etcdir/evil'") && m.contains("symbolic link")),
        "{error:?}"
    );
    assert_eq!(
        sandbox.cat("/etc/passwd"),
        PASSWD,
        "the container's /etc/passwd is untouched"
    );
    assert_eq!(sandbox.cat("/etc/evil"), "");

    for (entries, name) in [
        (vec![("../x", Regular, 0o644, &b"x"[..])], "../x"),
        (vec![("/abs", Regular, 0o644, &b"x"[..])], "/abs"),
        (vec![("up", Symlink, 0o777, &b"../../etc"[..])], "up"),
        (
            vec![
                ("ok", Regular, 0o644, &b"x"[..]),
                ("dev", Char, 0o644, &b""[..]),
            ],
            "dev",
        ),
    ] {
        let error = sandbox.refused(sandbox.put_tar("sub", &archive(&entries)).await);
        assert!(
            matches!(&error, SandboxError::InvalidArgument(m) if m.contains(&format!("'{name}'"))),
            "{error:?}"
        );
    }
    assert!(
        !workspace.join("sub/ok").exists(),
        "a refused archive puts nothing in"
    );

    // Root's own file, mode 0600: the engine could read it, the user cannot.
    std::fs::write(workspace.join("sub/secret"), b"root only").unwrap();
    std::fs::set_permissions(
        workspace.join("sub/secret"),
        PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let error = sandbox.refused(sandbox.download("sub/secret").await);
    assert!(
        matches!(&error, SandboxError::PermissionDenied(m) if m.contains("sub/secret")),
        "{error:?}"
    );
    let error = sandbox.refused(sandbox.get_tar("", CHUNK as u32).await);
    assert!(
        matches!(&error, SandboxError::PermissionDenied(m) if m.contains("sub/secret")),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_a_missing_rm_and_a_missing_sandbox_are_named() {
    let Some(sandbox) = sandbox("files-bare", Some(TEST_IMAGE)).await else {
        return;
    };
    sandbox.upload("f", b"x", 0o644).await.unwrap();
    let error = sandbox.refused(
        sandbox
            .client
            .remove_file(Scope::Session, &sandbox.id, "f", false)
            .await,
    );
    assert!(
        matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("has none") && m.contains("'f'")),
        "{error:?}"
    );
    let error = sandbox.refused(sandbox.download("nope").await);
    assert!(
        matches!(&error, SandboxError::NotFound(m) if m.contains("'nope'")),
        "{error:?}"
    );
    std::fs::create_dir(sandbox.workspace().join("dir")).unwrap();
    let error = sandbox.refused(sandbox.download("dir").await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("is a directory")),
        "{error:?}"
    );
    let error = sandbox.refused(sandbox.upload("dir", b"x", 0o644).await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("is a directory")),
        "{error:?}"
    );
    let error = sandbox.refused(sandbox.upload("f/under", b"x", 0o644).await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("not a directory")),
        "{error:?}"
    );
    let error = sandbox.refused(sandbox.put_tar("", b"not a tar stream at all").await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("tar")),
        "{error:?}"
    );

    let missing = unique_id("files-none");
    let chunk = PutChunk {
        path: "f".into(),
        offset: 0,
        data: b"x".to_vec(),
        last: true,
        mode: 0o644,
    };
    let error = sandbox.refused(
        sandbox
            .client
            .put_file(Scope::Session, &missing, &chunk)
            .await,
    );
    assert!(
        matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("no container") && m.contains(&missing)),
        "{error:?}"
    );
    let error = sandbox.refused(
        sandbox
            .client
            .get_tar(Scope::Session, &missing, "", 0, 10)
            .await,
    );
    assert!(
        matches!(&error, SandboxError::FailedPrecondition(m) if m.contains("ensure it first")),
        "{error:?}"
    );
    assert!(
        volumes_of(&missing).is_empty(),
        "nothing made for a missing sandbox"
    );
}

/// The daemon's open descriptors on its download copies (unlinked files
/// under `<state_dir>/docker/downloads`).
fn download_copies(sandbox: &Sandbox) -> usize {
    let pid = sandbox.daemon.pid().expect("the daemon runs");
    let downloads = sandbox.daemon.state_dir().join("docker/downloads");
    let prefix = downloads.display().to_string();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter(|target| target.display().to_string().starts_with(&prefix))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_file_and_its_tree_come_out_chunk_by_chunk_from_one_copy() {
    let Some(sandbox) = sandbox("files-chunks", None).await else {
        return;
    };
    // Written from outside, as the container's user: 12 chunks and a bit.
    let size = 12 * CHUNK + 4321;
    let mut seed = 0x9e37_79b9_u32;
    let data: Vec<u8> = (0..size)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed as u8
        })
        .collect();
    let workspace = sandbox.workspace();
    std::fs::create_dir(workspace.join("tree")).unwrap();
    let file = workspace.join("tree/large.bin");
    std::fs::write(&file, &data).unwrap();
    for path in [workspace.join("tree"), file.clone()] {
        std::os::unix::fs::chown(&path, Some(USER), Some(USER)).unwrap();
    }
    assert_eq!(download_copies(&sandbox), 0);

    let first = sandbox
        .client
        .get_file(
            Scope::Session,
            &sandbox.id,
            "tree/large.bin",
            0,
            CHUNK as u32,
        )
        .await
        .expect("the first chunk");
    assert_eq!((first.size, first.eof), (size as u64, false));
    assert_eq!(download_copies(&sandbox), 1, "one copy, kept between calls");
    // Another call on the container goes through meanwhile: the engine's
    // archive is not held open between chunks.
    let stat = sandbox
        .client
        .stat_file(Scope::Session, &sandbox.id, "tree/large.bin")
        .await
        .expect("a stat between chunks");
    assert_eq!(stat.size, size as u64);
    // Later chunks come from the copy made at offset 0, not from the file
    // as it is now.
    std::fs::write(&file, b"changed since").unwrap();
    let mut read = first.data;
    while read.len() < size {
        let chunk = sandbox
            .client
            .get_file(
                Scope::Session,
                &sandbox.id,
                "tree/large.bin",
                read.len() as u64,
                CHUNK as u32,
            )
            .await
            .expect("a later chunk");
        read.extend_from_slice(&chunk.data);
        assert_eq!(chunk.eof, read.len() == size, "at {}", read.len());
    }
    assert!(read == data, "the chunks put together are the file");
    assert_eq!(download_copies(&sandbox), 0, "the copy ends with the read");

    // A new read at offset 0 starts a new copy in place of the old one.
    std::fs::write(&file, &data).unwrap();
    let stream = sandbox.get_tar("tree", 3 * CHUNK as u32 / 2).await.unwrap();
    assert_eq!(download_copies(&sandbox), 0);
    let found = entries(&stream);
    let names: Vec<&str> = found
        .iter()
        .map(|entry| entry.0.trim_end_matches('/'))
        .collect();
    assert_eq!(names, ["tree", "tree/large.bin"]);
    assert!(found[1].5 == data, "the file in the tree is the file");
    for _ in 0..2 {
        let chunk = sandbox
            .client
            .get_tar(Scope::Session, &sandbox.id, "tree", 0, CHUNK as u32)
            .await
            .unwrap();
        assert_eq!(chunk.data[..], stream[..CHUNK]);
        assert_eq!(download_copies(&sandbox), 1, "a restart replaces its copy");
    }
    let past = sandbox
        .client
        .get_tar(
            Scope::Session,
            &sandbox.id,
            "tree",
            stream.len() as u64 + 1,
            10,
        )
        .await;
    assert!(matches!(
        sandbox.refused(past),
        SandboxError::InvalidArgument(message) if message.contains("past the end")
    ));
    assert_eq!(download_copies(&sandbox), 0, "a refused read ends its copy");
    // A copy left by an unfinished read ends with the container.
    sandbox
        .client
        .get_file(Scope::Session, &sandbox.id, "tree/large.bin", 0, 10)
        .await
        .unwrap();
    assert_eq!(download_copies(&sandbox), 1);
    sandbox
        .client
        .deprovision(Scope::Session, &sandbox.id, true)
        .await
        .expect("deprovision");
    assert_eq!(download_copies(&sandbox), 0, "ended with its container");
}

/// A sandbox whose workspace is a 4 MiB tmpfs: its volume made here,
/// before the daemon's first ensure, as the daemon would name it.
async fn sandbox_on_small_disk(test: &str) -> Option<Sandbox> {
    if !engine_ready(test) {
        return None;
    }
    let id = unique_id(test);
    let cleanup = Cleanup::new(&[&id]);
    let volume = format!("{}-workspace", base_name(Scope::Session, &id));
    let label = format!("{}={id}", sandboxd_protocol::naming::LABEL_SANDBOX_ID);
    let made = docker(&[
        "volume",
        "create",
        "--label",
        &label,
        "--driver",
        "local",
        "--opt",
        "type=tmpfs",
        "--opt",
        "device=tmpfs",
        "--opt",
        "o=size=4m,uid=65534,gid=65534,mode=0700",
        &volume,
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let daemon = TestDaemon::start(docker_options_on(files_image(), ""));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-files");
    client
        .ensure(Scope::Session, &id, &env)
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    Some(Sandbox {
        daemon,
        client,
        id,
        _cleanup: cleanup,
    })
}

/// The names in the workspace, as the sandbox's own listing shows them.
async fn listed(sandbox: &Sandbox, path: &str) -> Vec<String> {
    let list = sandbox
        .client
        .list_files(Scope::Session, &sandbox.id, path)
        .await
        .expect("list");
    list.entries.into_iter().map(|entry| entry.name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_the_engine_fails_part_way_leaves_nothing_of_it() {
    let Some(mut sandbox) = sandbox_on_small_disk("files-full").await else {
        return;
    };
    let old = b"the file as it was".to_vec();
    sandbox
        .upload("keep.txt", &old, 0o644)
        .await
        .expect("a small put");
    // What the runner wrote, and the file.
    let before = listed(&sandbox, ".").await;
    assert!(before.contains(&"keep.txt".to_string()), "{before:?}");
    let big = vec![7u8; 6 << 20];
    // The disk fills part way through the engine's unpacking.
    let failed = sandbox.upload("keep.txt", &big, 0o644).await;
    let error = sandbox.refused(failed);
    assert!(format!("{error:?}").contains("space"), "{error:?}");
    assert_eq!(
        sandbox.download("keep.txt").await.unwrap(),
        old,
        "as it was"
    );
    assert_eq!(listed(&sandbox, ".").await, before, "no staging left");

    // An archive: a small file, then one the disk cannot hold.
    let filling = archive(&[
        ("a.txt", tar::EntryType::Regular, 0o644, b"first"),
        ("d/big", tar::EntryType::Regular, 0o644, &big),
        ("z.txt", tar::EntryType::Regular, 0o644, b"last"),
    ]);
    let error = sandbox.refused(sandbox.put_tar(".", &filling).await);
    assert!(format!("{error:?}").contains("space"), "{error:?}");
    assert_eq!(listed(&sandbox, ".").await, before, "nothing unpacked");

    // An entry where a directory is: refused before anything goes in.
    sandbox
        .put_tar(".", &archive_of_dir("d"))
        .await
        .expect("a directory");
    let over_a_dir = archive(&[
        ("a.txt", tar::EntryType::Regular, 0o644, b"first"),
        ("d", tar::EntryType::Regular, 0o644, b"not a dir"),
    ]);
    let error = sandbox.refused(sandbox.put_tar(".", &over_a_dir).await);
    assert!(
        matches!(&error, SandboxError::InvalidArgument(m) if m.contains("is a directory")),
        "{error:?}"
    );
    let mut with_d = [vec!["d".to_string()], before.clone()].concat();
    with_d.sort();
    assert_eq!(listed(&sandbox, ".").await, with_d);

    // A staging an earlier daemon left (recorded, then killed mid-put) is
    // removed when the next daemon starts.
    sandbox.daemon.kill();
    let name = ".sandboxd-staging-00000000000000aa";
    let staged = sandbox.workspace().join(name);
    std::fs::create_dir_all(staged.join("sub")).unwrap();
    std::fs::write(staged.join("sub/part"), b"half").unwrap();
    let records = sandbox.daemon.state_dir().join("docker/staging");
    let container = base_name(Scope::Session, &sandbox.id);
    std::fs::write(
        records.join("00000000000000aa"),
        format!("{container}\n/workspace\n{name}\n"),
    )
    .unwrap();
    sandbox.daemon.launch();
    sandbox.daemon.wait_ready();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while staged.exists() || records.join("00000000000000aa").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the left staging stayed\n{}",
            sandbox.daemon.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(sandbox.workspace().join("keep.txt").exists());
}

/// An archive of one directory `name`.
fn archive_of_dir(name: &str) -> Vec<u8> {
    archive(&[(name, tar::EntryType::Directory, 0o755, b"")])
}
