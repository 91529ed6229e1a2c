//! Files in and out of a process-tier sandbox (`put_file`, `get_file`,
//! `stat_file`, `list_files`, `remove_file`): done as the sandbox's user,
//! beneath its workspace, so what the sandbox plants (a symlink out, a hard
//! link to a root-owned file) leads nowhere, and an upload past the disk
//! limit leaves nothing behind.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxd_client::{ClientError, FileType, PutChunk, SandboxError, SandboxdClient, Scope};
use sandboxd_tests::noise::noise;
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);
const CHUNK: usize = sandboxd_protocol::files::MAX_FILE_CHUNK as usize;

/// Runs `script` in session `id`'s sandbox and waits for it to exit 0.
async fn run(client: &SandboxdClient, id: &str, script: &str) {
    sandboxd_tests::commands::run_ok(client, id, script, WAIT).await;
}

/// Uploads `data` to `path` in chunks of [`CHUNK`] bytes.
async fn upload(
    client: &SandboxdClient,
    id: &str,
    path: &str,
    data: &[u8],
    mode: u32,
) -> Result<u64, ClientError> {
    let mut offset = 0;
    let pieces: Vec<&[u8]> = if data.is_empty() {
        vec![data]
    } else {
        data.chunks(CHUNK).collect()
    };
    let last = pieces.len() - 1;
    for (index, piece) in pieces.into_iter().enumerate() {
        let chunk = PutChunk {
            path: path.to_string(),
            offset,
            data: piece.to_vec(),
            last: index == last,
            mode,
        };
        offset = client.put_file(Scope::Session, id, &chunk).await?.received;
    }
    Ok(offset)
}

/// The whole file at `path`, read in chunks of [`CHUNK`] bytes.
async fn download(client: &SandboxdClient, id: &str, path: &str) -> Result<Vec<u8>, ClientError> {
    let mut data = Vec::new();
    loop {
        let chunk = client
            .get_file(Scope::Session, id, path, data.len() as u64, CHUNK as u32)
            .await?;
        data.extend_from_slice(&chunk.data);
        if chunk.eof {
            return Ok(data);
        }
    }
}

fn sandbox_error(result: Result<impl std::fmt::Debug, ClientError>) -> SandboxError {
    match result {
        Err(ClientError::Sandbox(error)) => error,
        other => panic!("expected the daemon's refusal, got {other:?}"),
    }
}

fn no_partial_left(workspace: &Path) {
    let names: Vec<String> = std::fs::read_dir(workspace)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|name| name.starts_with(".sandboxd-part")),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_goes_in_and_out_whole_owned_by_the_sandbox() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "f1").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "f1");
    let sandbox_uid = std::fs::metadata(&workspace).unwrap().uid();
    assert_ne!(sandbox_uid, 0);
    let data = noise(3 * CHUNK + 12_345);
    let sent = upload(&client, "f1", "big.bin", &data, 0o4755)
        .await
        .unwrap_or_else(|error| panic!("put: {error}\n{}", daemon.log_text()));
    assert_eq!(sent, data.len() as u64);
    let on_host = std::fs::metadata(workspace.join("big.bin")).unwrap();
    assert_eq!((on_host.uid(), on_host.gid()), (sandbox_uid, sandbox_uid));
    assert_eq!(
        on_host.permissions().mode() & 0o7777,
        0o755,
        "setuid dropped"
    );
    assert!(download(&client, "f1", "big.bin").await.unwrap() == data);
    no_partial_left(&workspace);

    let stat = client
        .stat_file(Scope::Session, "f1", "big.bin")
        .await
        .unwrap();
    assert_eq!(
        (stat.file_type, stat.size, stat.mode),
        (FileType::File, data.len() as u64, 0o755)
    );
    run(
        &client,
        "f1",
        "mkdir -p d/e && echo hi > d/e/f && chmod 600 d/e/f",
    )
    .await;
    let listed = client.list_files(Scope::Session, "f1", "").await.unwrap();
    let names: Vec<(&str, FileType)> = listed
        .entries
        .iter()
        .map(|entry| (entry.name.as_str(), entry.file_type))
        .collect();
    assert!(names.contains(&("big.bin", FileType::File)), "{names:?}");
    assert!(names.contains(&("d", FileType::Dir)), "{names:?}");
    // What the sandbox wrote, read back as it.
    assert_eq!(download(&client, "f1", "d/e/f").await.unwrap(), b"hi\n");

    let in_the_way = sandbox_error(upload(&client, "f1", "d", b"x", 0o644).await);
    assert!(
        in_the_way.to_string().contains("is a directory"),
        "{in_the_way}"
    );
    no_partial_left(&workspace);
    let refused = sandbox_error(client.remove_file(Scope::Session, "f1", "d", false).await);
    assert!(refused.to_string().contains("not empty"), "{refused}");
    client
        .remove_file(Scope::Session, "f1", "d", true)
        .await
        .unwrap();
    client
        .remove_file(Scope::Session, "f1", "big.bin", false)
        .await
        .unwrap();
    assert!(!workspace.join("d").exists() && !workspace.join("big.bin").exists());
    let gone = sandbox_error(client.stat_file(Scope::Session, "f1", "big.bin").await);
    assert!(matches!(gone, SandboxError::NotFound(_)), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_resumes_at_its_offset_and_works_on_a_stopped_sandbox() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "f2").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "f2");
    let put = |offset: u64, data: &[u8], last: bool| PutChunk {
        path: "resumed.txt".into(),
        offset,
        data: data.to_vec(),
        last,
        mode: 0o644,
    };
    let first = client
        .put_file(Scope::Session, "f2", &put(0, b"hello ", false))
        .await
        .unwrap();
    assert_eq!((first.received, first.complete), (6, false));
    assert!(
        !workspace.join("resumed.txt").exists(),
        "nothing before the last chunk"
    );
    let wrong = sandbox_error(
        client
            .put_file(Scope::Session, "f2", &put(3, b"x", true))
            .await,
    );
    assert!(wrong.to_string().contains("resume at offset 6"), "{wrong}");
    client
        .put_file(Scope::Session, "f2", &put(6, b"world", true))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(workspace.join("resumed.txt")).unwrap(),
        b"hello world"
    );
    no_partial_left(&workspace);

    // Stopped, its workspace kept: files still move, as its user.
    client
        .deprovision(Scope::Session, "f2", true)
        .await
        .unwrap();
    upload(&client, "f2", "after-stop", b"kept", 0o600)
        .await
        .unwrap();
    assert_eq!(
        download(&client, "f2", "after-stop").await.unwrap(),
        b"kept"
    );
    let owner = std::fs::metadata(workspace.join("after-stop"))
        .unwrap()
        .uid();
    assert_eq!(owner, std::fs::metadata(&workspace).unwrap().uid());
    client
        .deprovision(Scope::Session, "f2", false)
        .await
        .unwrap();
    let none = sandbox_error(client.stat_file(Scope::Session, "f2", "after-stop").await);
    assert!(none.to_string().contains("no workspace"), "{none}");
}

/// A root-owned 0600 file of the test's own, on the workspace's file
/// system (so a hard link to it can be made), outside the workspace.
fn secret(daemon: &TestDaemon) -> PathBuf {
    let path = daemon.state_dir().join("secret-of-the-test");
    std::fs::write(&path, b"root only").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn untouched(secret: &Path) {
    assert_eq!(std::fs::read(secret).unwrap(), b"root only");
    let meta = std::fs::metadata(secret).unwrap();
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o7777), (0, 0o600));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_and_planted_links_lead_nowhere() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "f3").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "f3");
    let secret = secret(&daemon);
    for bad in ["/etc/passwd", "../f1/x", "a/../../x", "a\0b"] {
        let error = sandbox_error(client.stat_file(Scope::Session, "f3", bad).await);
        assert!(
            matches!(&error, SandboxError::InvalidArgument(message) if message.starts_with("path")),
            "{bad:?}: {error:?}"
        );
    }
    // Planted from inside the sandbox: links out, absolute and relative.
    let host_secret = secret.display().to_string();
    run(
        &client,
        "f3",
        &format!("ln -s {host_secret} link && ln -s / root && ln -s ../../../../../../.. up"),
    )
    .await;
    for escape in ["link", "root/etc/shadow", "up/etc/shadow"] {
        let error = sandbox_error(download(&client, "f3", escape).await);
        assert!(
            matches!(error, SandboxError::PermissionDenied(_)),
            "get {escape}: {error:?}"
        );
    }
    for escape in ["root/tmp/planted", "up/tmp/planted"] {
        let error = sandbox_error(upload(&client, "f3", escape, b"x", 0o644).await);
        assert!(
            matches!(error, SandboxError::PermissionDenied(_)),
            "put {escape}: {error:?}"
        );
        let error = sandbox_error(client.remove_file(Scope::Session, "f3", escape, true).await);
        assert!(
            matches!(error, SandboxError::PermissionDenied(_)),
            "rm {escape}: {error:?}"
        );
        let error = sandbox_error(client.stat_file(Scope::Session, "f3", escape).await);
        assert!(
            matches!(error, SandboxError::PermissionDenied(_)),
            "stat {escape}: {error:?}"
        );
    }
    assert!(!Path::new("/tmp/planted").exists());
    // The link itself is what stat shows and remove removes; a put
    // replaces it with a file, never writing through it.
    let stat = client
        .stat_file(Scope::Session, "f3", "link")
        .await
        .unwrap();
    assert_eq!(stat.file_type, FileType::Symlink);
    upload(&client, "f3", "link", b"replaced", 0o644)
        .await
        .unwrap();
    assert!(!std::fs::symlink_metadata(workspace.join("link"))
        .unwrap()
        .is_symlink());
    client
        .remove_file(Scope::Session, "f3", "root", true)
        .await
        .unwrap();
    assert!(Path::new("/etc/passwd").exists());
    untouched(&secret);

    // A hard link to the root-only file (the test makes it: the kernel's
    // protected_hardlinks keeps the sandbox from it): not read, not
    // truncated; a put puts a new file in its place.
    std::fs::hard_link(&secret, workspace.join("hard")).unwrap();
    let error = sandbox_error(download(&client, "f3", "hard").await);
    assert!(
        matches!(error, SandboxError::PermissionDenied(_)),
        "{error:?}"
    );
    upload(&client, "f3", "hard", b"new", 0o644).await.unwrap();
    untouched(&secret);
    assert_eq!(std::fs::metadata(&secret).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(workspace.join("hard")).unwrap(), b"new");
    // And the daemon keeps serving.
    assert_eq!(download(&client, "f3", "link").await.unwrap(), b"replaced");
    std::fs::remove_file(&secret).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_past_the_disk_limit_is_refused_leaving_nothing() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\ndisk = \"1m\"".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "f4").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "f4");
    let error = sandbox_error(upload(&client, "f4", "too-big", &noise(2 * CHUNK), 0o644).await);
    assert!(
        error.to_string().contains("[limits] disk = 1 MiB"),
        "{error}\n{}",
        daemon.log_text()
    );
    assert!(!workspace.join("too-big").exists());
    no_partial_left(&workspace);
    upload(&client, "f4", "small", b"fits", 0o644)
        .await
        .unwrap();
    assert_eq!(download(&client, "f4", "small").await.unwrap(), b"fits");
}
