//! Whole trees in and out of a process-tier sandbox as tar streams
//! (`put_tar`, `get_tar`, and `sandboxctl cp` of directories): unpacked
//! and packed as the sandbox's user beneath its workspace, so a hostile
//! archive is refused by name leaving nothing behind, and a link the
//! sandbox planted leads nowhere.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sandboxd_client::{ClientError, SandboxError, SandboxdClient, Scope, TarStreamError};
use sandboxd_tests::noise::noise;
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

/// Runs `script` in session `id`'s sandbox and waits for it to exit 0.
async fn run(client: &SandboxdClient, id: &str, script: &str) {
    sandboxd_tests::commands::run_ok(client, id, script, WAIT).await;
}

async fn put(
    client: &SandboxdClient,
    id: &str,
    dir: &str,
    tar: Vec<u8>,
) -> Result<u64, TarStreamError> {
    client
        .put_tar_from(Scope::Session, id, dir, Cursor::new(tar))
        .await
}

async fn get(client: &SandboxdClient, id: &str, path: &str) -> Result<Vec<u8>, TarStreamError> {
    let mut out = Vec::new();
    client
        .get_tar_into(Scope::Session, id, path, &mut out)
        .await?;
    Ok(out)
}

fn refusal(result: Result<impl std::fmt::Debug, TarStreamError>) -> SandboxError {
    match result {
        Err(TarStreamError::Call(ClientError::Sandbox(error))) => error,
        other => panic!("expected the daemon's refusal, got {other:?}"),
    }
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// One entry with its name and link name written raw into the header,
/// past the tar crate's own checks: how a hostile archive is made.
fn raw_entry(
    tar: &mut tar::Builder<Vec<u8>>,
    name: &[u8],
    kind: tar::EntryType,
    link: &[u8],
    data: &[u8],
) {
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.as_old_mut().linkname[..link.len()].copy_from_slice(link);
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    header.set_mtime(1_700_000_000);
    header.set_cksum();
    tar.append(&header, data).unwrap();
}

fn file_entry(tar: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32, data: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(data.len() as u64);
    header.set_mtime(1_600_000_000);
    tar.append_data(&mut header, name, data).unwrap();
}

fn link_entry(tar: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, target: &str) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(0o777);
    header.set_size(0);
    header.set_mtime(1_600_000_000);
    tar.append_link(&mut header, name, target).unwrap();
}

fn dir_entry(tar: &mut tar::Builder<Vec<u8>>, name: &str, mode: u32) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(mode);
    header.set_size(0);
    header.set_mtime(1_500_000_000);
    tar.append_data(&mut header, name, std::io::empty())
        .unwrap();
}

/// What an archive holds: per name, its kind, mode, uid, link and bytes.
type Listing = BTreeMap<String, (tar::EntryType, u32, u64, Option<String>, Vec<u8>)>;

fn listing(archive: &[u8]) -> Listing {
    let mut listed = BTreeMap::new();
    for entry in tar::Archive::new(archive).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry
            .path()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let header = entry.header().clone();
        let link = entry
            .link_name()
            .unwrap()
            .map(|link| link.to_string_lossy().into_owned());
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        let kind = header.entry_type();
        listed.insert(
            name,
            (
                kind,
                header.mode().unwrap(),
                header.uid().unwrap(),
                link,
                data,
            ),
        );
    }
    listed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_in_and_out_whole_owned_by_the_sandbox() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "t1").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "t1");
    let uid = std::fs::metadata(&workspace).unwrap().uid();
    assert_ne!(uid, 0);
    let big = noise(100 << 20);
    let mut tar = tar::Builder::new(Vec::new());
    dir_entry(&mut tar, "tree", 0o750);
    file_entry(&mut tar, "tree/a.txt", 0o4640, b"alpha\n");
    file_entry(&mut tar, "tree/run.sh", 0o755, b"#!/bin/sh\n");
    dir_entry(&mut tar, "tree/empty", 0o700);
    dir_entry(&mut tar, "tree/ro", 0o555);
    file_entry(&mut tar, "tree/ro/inside", 0o444, b"read only\n");
    link_entry(&mut tar, "tree/link", tar::EntryType::Symlink, "a.txt");
    link_entry(&mut tar, "tree/hard", tar::EntryType::Link, "tree/a.txt");
    file_entry(&mut tar, "tree/deep/er/big.bin", 0o600, &big);
    let sent = put(&client, "t1", "", tar.into_inner().unwrap())
        .await
        .unwrap_or_else(|error| panic!("put_tar: {error}\n{}", daemon.log_text()));
    assert!(sent > big.len() as u64);

    let tree = workspace.join("tree");
    let mode = |path: &str| std::fs::symlink_metadata(tree.join(path)).unwrap().mode() & 0o7777;
    assert_eq!(mode(""), 0o750);
    assert_eq!(mode("a.txt"), 0o640, "setuid dropped");
    assert_eq!(mode("run.sh"), 0o755);
    assert_eq!(mode("empty"), 0o700);
    assert_eq!((mode("ro"), mode("ro/inside")), (0o555, 0o444));
    assert_eq!(
        std::fs::read_link(tree.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let (a, hard) = (
        tree.join("a.txt").metadata().unwrap(),
        tree.join("hard").metadata().unwrap(),
    );
    assert_eq!(a.ino(), hard.ino(), "a hard link, not a copy");
    assert_eq!(a.mtime(), 1_600_000_000);
    assert!(std::fs::read(tree.join("deep/er/big.bin")).unwrap() == big);
    for path in [
        "",
        "a.txt",
        "link",
        "empty",
        "ro/inside",
        "deep",
        "deep/er/big.bin",
    ] {
        let meta = std::fs::symlink_metadata(tree.join(path)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (uid, uid), "{path}");
    }
    assert!(
        names(&workspace)
            .iter()
            .all(|name| !name.starts_with(".sandboxd")),
        "{:?}",
        names(&workspace)
    );

    let stream = get(&client, "t1", "tree").await.unwrap();
    // The thread that made it ends with it.
    let pid = daemon.pid().unwrap();
    assert!(
        sandboxd_tests::wait_until(WAIT, || tar_threads(pid) == 0),
        "{} tar threads left",
        tar_threads(pid)
    );
    let listed = listing(&stream);
    let names: Vec<&str> = listed.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "tree",
            "tree/a.txt",
            "tree/deep",
            "tree/deep/er",
            "tree/deep/er/big.bin",
            "tree/empty",
            "tree/hard",
            "tree/link",
            "tree/ro",
            "tree/ro/inside",
            "tree/run.sh"
        ]
    );
    let (kind, mode, owner, _, data) = &listed["tree/a.txt"];
    assert_eq!(
        (*kind, *mode, *owner, data.as_slice()),
        (
            tar::EntryType::Regular,
            0o640,
            u64::from(uid),
            &b"alpha\n"[..]
        )
    );
    assert!(listed["tree/deep/er/big.bin"].4 == big);
    assert_eq!(listed["tree/link"].0, tar::EntryType::Symlink);
    assert_eq!(listed["tree/link"].3.as_deref(), Some("a.txt"));
    assert_eq!(listed["tree/hard"].0, tar::EntryType::Link);
    assert_eq!(listed["tree/hard"].3.as_deref(), Some("tree/a.txt"));
    assert_eq!(listed["tree/empty"].0, tar::EntryType::Directory);

    // Resumed from an offset behind the session's position: the same bytes.
    let middle = stream.len() as u64 / 2;
    let again = client
        .get_tar(Scope::Session, "t1", "tree", middle, 4096)
        .await
        .unwrap();
    assert!(again.data == stream[middle as usize..middle as usize + 4096]);
    let ahead = client
        .get_tar(Scope::Session, "t1", "tree", middle + 100_000, 4096)
        .await
        .unwrap();
    assert!(ahead.data == stream[middle as usize + 100_000..middle as usize + 104_096]);
    // A file alone, and the workspace as a whole.
    let single = listing(&get(&client, "t1", "tree/run.sh").await.unwrap());
    assert_eq!(single.keys().collect::<Vec<_>>(), ["run.sh"]);
    let whole = listing(&get(&client, "t1", "").await.unwrap());
    assert!(whole.contains_key("tree/ro/inside"), "{:?}", whole.keys());
    // Only the session left mid-way above still has its thread (it ends
    // when the session idles out).
    assert!(tar_threads(pid) <= 1, "{}", tar_threads(pid));
}

/// The daemon's threads making tar streams now.
fn tar_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim() == "sandboxd-tar-out")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_or_broken_archive_is_refused_by_name_leaving_nothing() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "t2").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "t2");
    run(&client, "t2", "mkdir -p target/sub").await;
    use tar::EntryType::{Block, Char, Fifo, Link, Regular, Symlink};
    let cases: [(&[u8], tar::EntryType, &[u8], &str); 10] = [
        (b"/abs", Regular, b"", "absolute"),
        (b"../up", Regular, b"", "'..'"),
        (b"sub/../../x", Regular, b"", "'..'"),
        (b"null", Char, b"", "device node"),
        (b"disk", Block, b"", "device node"),
        (b"pipe", Fifo, b"", "FIFO"),
        (b"sub/etc", Symlink, b"/etc", "absolute path"),
        (b"sub/up", Symlink, b"../../../x", "leads out"),
        (b"hard", Link, b"/etc/passwd", "no file earlier"),
        (b"hard2", Link, b"missing", "no file earlier"),
    ];
    for (name, kind, link, why) in cases {
        let mut tar = tar::Builder::new(Vec::new());
        file_entry(&mut tar, "good.txt", 0o644, b"fine");
        raw_entry(&mut tar, name, kind, link, b"");
        let error = refusal(put(&client, "t2", "target", tar.into_inner().unwrap()).await);
        let shown = String::from_utf8_lossy(name).to_string();
        let message = error.to_string();
        assert!(
            matches!(error, SandboxError::InvalidArgument(_)),
            "{error:?}"
        );
        assert!(
            message.contains(&format!("'{shown}'")) && message.contains(why),
            "{shown}: {message}"
        );
        assert_eq!(names(&workspace.join("target")), ["sub"], "{shown}");
        assert!(names(&workspace.join("target/sub")).is_empty());
    }
    // A NUL in a name (only a PAX record can carry one).
    let mut tar = tar::Builder::new(Vec::new());
    tar.append_pax_extensions([("path", &b"a\0b"[..])]).unwrap();
    file_entry(&mut tar, "placeholder", 0o644, b"x");
    let error = refusal(put(&client, "t2", "target", tar.into_inner().unwrap()).await);
    assert!(error.to_string().contains("NUL"), "{error}");
    // Truncated inside a file's data, and not a tar at all.
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "good.txt", 0o644, b"fine");
    file_entry(&mut tar, "cut.bin", 0o644, &noise(10_000));
    let mut cut = tar.into_inner().unwrap();
    cut.truncate(6000);
    let error = refusal(put(&client, "t2", "target", cut).await);
    assert!(error.to_string().contains("truncated"), "{error}");
    let error = refusal(put(&client, "t2", "target", noise(4096)).await);
    assert!(
        error.to_string().contains("not a whole tar stream"),
        "{error}"
    );
    assert_eq!(names(&workspace.join("target")), ["sub"]);
    // A directory where a file is, and the reverse: refused before moving.
    run(&client, "t2", "echo keep > target/file").await;
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "new.txt", 0o644, b"new");
    file_entry(&mut tar, "file/inner", 0o644, b"x");
    let error = refusal(put(&client, "t2", "target", tar.into_inner().unwrap()).await);
    assert!(error.to_string().contains("'file'"), "{error}");
    assert_eq!(names(&workspace.join("target")), ["file", "sub"]);
    // The daemon keeps serving: a good archive merges into what is there.
    let mut tar = tar::Builder::new(Vec::new());
    raw_entry(
        &mut tar,
        b"pax_global_header",
        tar::EntryType::XGlobalHeader,
        b"",
        b"",
    );
    file_entry(&mut tar, "sub/added", 0o600, b"added");
    file_entry(&mut tar, "file", 0o644, b"replaced");
    put(&client, "t2", "target", tar.into_inner().unwrap())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(workspace.join("target/file")).unwrap(),
        b"replaced"
    );
    assert_eq!(
        std::fs::read(workspace.join("target/sub/added")).unwrap(),
        b"added"
    );
    assert_eq!(names(&workspace.join("target")), ["file", "sub"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_past_the_disk_limit_leaves_nothing_and_a_paused_sandbox_takes_one() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[limits]\ndisk = \"8m\"".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "t3").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "t3");
    // 10 MiB of files: the limit is passed mid-stream, not at its end.
    let mut tar = tar::Builder::new(Vec::new());
    for name in ["one", "two", "three", "four", "five"] {
        file_entry(&mut tar, name, 0o644, &noise(2 << 20));
    }
    let error = refusal(put(&client, "t3", "", tar.into_inner().unwrap()).await);
    assert!(
        error.to_string().contains("[limits] disk = 8 MiB"),
        "{error}"
    );
    let left: Vec<String> = names(&workspace)
        .into_iter()
        .filter(|name| name != ".sandboxd")
        .collect();
    assert!(
        !left
            .iter()
            .any(|name| ["one", "two", "three"].contains(&name.as_str())
                || name.starts_with(".sandboxd-part")
                || name.starts_with(".sandboxd-tar")),
        "{left:?}"
    );

    client.pause(Scope::Session, "t3").await.unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "while-paused/f", 0o644, b"in");
    put(&client, "t3", "", tar.into_inner().unwrap())
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(workspace.join("while-paused/f")).unwrap(),
        b"in"
    );
    let back = listing(&get(&client, "t3", "while-paused").await.unwrap());
    assert_eq!(back["while-paused/f"].4, b"in");
}

/// `archive` put into `dir` with one call per piece between `cuts`;
/// answers the last call's result, after checking that nothing appeared
/// in the workspace before it.
async fn put_cut(
    client: &SandboxdClient,
    workspace: &Path,
    dir: &str,
    archive: &[u8],
    cuts: &[usize],
) -> Result<sandboxd_client::PutReport, ClientError> {
    let shown = |dir: &Path| -> Vec<String> {
        let names = names(dir).into_iter();
        names
            .filter(|name| !name.starts_with(".sandboxd-tar-in-"))
            .collect()
    };
    let before = shown(workspace);
    let mut bounds = vec![0];
    bounds.extend_from_slice(cuts);
    bounds.push(archive.len());
    for pair in bounds.windows(2) {
        let last = pair[1] == archive.len();
        let chunk = sandboxd_client::PutChunk {
            path: dir.into(),
            offset: pair[0] as u64,
            data: archive[pair[0]..pair[1]].to_vec(),
            last,
            mode: 0,
        };
        let report = client.put_tar(Scope::Session, "t5", &chunk).await;
        if last || report.is_err() {
            return report;
        }
        assert_eq!(report.unwrap().received, pair[1] as u64);
        assert_eq!(
            shown(workspace),
            before,
            "nothing appears before the last chunk"
        );
    }
    unreachable!("the last chunk answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_cut_anywhere_appears_whole_at_its_end_and_a_late_refusal_leaves_nothing() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "t5").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "t5");
    let long = format!("{}/{}", "d".repeat(110), "f".repeat(120));
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, &long, 0o644, &noise(3000));
    file_entry(&mut tar, "small", 0o4755, b"small");
    let archive = tar.into_inner().unwrap();
    // Inside the long name's header, inside the long name, inside the
    // file's header and its data.
    put_cut(&client, &workspace, "", &archive, &[100, 530, 1100, 2000])
        .await
        .unwrap();
    assert_eq!(std::fs::read(workspace.join(&long)).unwrap(), noise(3000));
    let mode = std::fs::metadata(workspace.join("small")).unwrap().mode();
    assert_eq!(mode & 0o7777, 0o755, "setuid dropped");
    // A resumed put must come at the offset taken, told by it.
    let first = sandboxd_client::PutChunk {
        path: "late".into(),
        offset: 0,
        data: archive[..700].to_vec(),
        last: false,
        mode: 0,
    };
    run(&client, "t5", "mkdir late").await;
    client.put_tar(Scope::Session, "t5", &first).await.unwrap();
    let mut wrong = first.clone();
    wrong.offset = 600;
    let error = client
        .put_tar(Scope::Session, "t5", &wrong)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("resume at offset 700"),
        "{error}"
    );
    // A hostile entry in the last chunk, after good ones: nothing stays.
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "ok", 0o644, b"ok");
    raw_entry(&mut tar, b"../out", tar::EntryType::Regular, b"", b"x");
    let hostile = tar.into_inner().unwrap();
    let error = put_cut(&client, &workspace, "late", &hostile, &[600])
        .await
        .unwrap_err();
    assert!(error.to_string().contains("'../out'"), "{error}");
    assert!(names(&workspace.join("late")).is_empty());
    // The put left at offset 700 went when the next one started over.
    let staged = || {
        names(&workspace)
            .iter()
            .any(|name| name.starts_with(".sandboxd-tar"))
    };
    let waited = std::time::Instant::now();
    while staged() {
        assert!(waited.elapsed() < WAIT, "{:?}", names(&workspace));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A root-owned 0600 file of the test's own, outside the workspace.
fn secret(daemon: &TestDaemon) -> PathBuf {
    let path = daemon.state_dir().join("tar-secret-of-the-test");
    std::fs::write(&path, b"root only").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_links_are_neither_written_through_nor_read() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "t4").await;
    let client = daemon.client().await;
    let workspace = daemon.workspace(Scope::Session, "t4");
    let secret = secret(&daemon);
    let outside = daemon.dir().join("outside-dir");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&secret, workspace.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("outdir")).unwrap();
    std::fs::hard_link(&secret, workspace.join("hard")).unwrap();

    let error = refusal(get(&client, "t4", "").await);
    assert!(
        matches!(error, SandboxError::PermissionDenied(_)),
        "{error:?}"
    );
    assert!(error.to_string().contains("'hard'"), "{error}");
    // Into the link out: refused; through it by name: refused before
    // anything moves; over the links: they are replaced.
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "x", 0o644, b"x");
    let error = refusal(put(&client, "t4", "outdir", tar.into_inner().unwrap()).await);
    assert!(
        matches!(error, SandboxError::PermissionDenied(_)),
        "{error:?}"
    );
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "outdir/planted", 0o644, b"x");
    refusal(put(&client, "t4", "", tar.into_inner().unwrap()).await);
    assert!(names(&outside).is_empty());
    let mut tar = tar::Builder::new(Vec::new());
    file_entry(&mut tar, "link", 0o644, b"over the link");
    file_entry(&mut tar, "hard", 0o644, b"over the hard link");
    put(&client, "t4", "", tar.into_inner().unwrap())
        .await
        .unwrap();
    assert_eq!(std::fs::read(&secret).unwrap(), b"root only");
    let meta = std::fs::metadata(&secret).unwrap();
    assert_eq!(
        (meta.uid(), meta.mode() & 0o7777, meta.nlink()),
        (0, 0o600, 1)
    );
    assert!(!std::fs::symlink_metadata(workspace.join("link"))
        .unwrap()
        .is_symlink());
    assert_eq!(
        std::fs::read(workspace.join("hard")).unwrap(),
        b"over the hard link"
    );

    // A symlink out is stored as a link, its target never read.
    std::fs::remove_file(workspace.join("link")).unwrap();
    std::os::unix::fs::symlink(&secret, workspace.join("link")).unwrap();
    let stream = get(&client, "t4", "").await.unwrap();
    let listed = listing(&stream);
    assert_eq!(listed["link"].0, tar::EntryType::Symlink);
    assert_eq!(listed["link"].3.as_deref(), Some(secret.to_str().unwrap()));
    assert_eq!(listed["outdir"].0, tar::EntryType::Symlink);
    assert!(!stream.windows(9).any(|window| window == b"root only"));
    std::fs::remove_file(&secret).unwrap();
}

/// `sandboxctl` against `daemon` with `stdin` as its input.
fn sandboxctl_with_stdin(daemon: &TestDaemon, args: &[&str], stdin: &Path) -> std::process::Output {
    let mut command = Command::new(sandboxd_tests::binaries::sandboxctl());
    command
        .args(args)
        .env(sandboxd_client::SOCKET_ENV, daemon.socket())
        .env_remove("RUST_LOG")
        .stdin(std::fs::File::open(stdin).unwrap());
    sandboxd_tests::run_with_timeout(command, Duration::from_secs(60))
}

fn ok(output: std::process::Output) -> std::process::Output {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxctl_copies_directories_both_ways_and_tar_streams_on_dash() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "t5").await;
    let workspace = daemon.workspace(Scope::Session, "t5");
    let uid = std::fs::metadata(&workspace).unwrap().uid();
    let local = daemon.dir().join("local-tree");
    std::fs::create_dir_all(local.join("sub/empty")).unwrap();
    std::fs::write(local.join("sub/f.txt"), b"hello").unwrap();
    std::fs::set_permissions(
        local.join("sub/f.txt"),
        std::fs::Permissions::from_mode(0o751),
    )
    .unwrap();
    std::os::unix::fs::symlink("sub/f.txt", local.join("link")).unwrap();

    // In: into an existing directory under its own name, then to a new name.
    ok(daemon.sandboxctl(&["cp", local.to_str().unwrap(), "session:t5:"]));
    let landed = workspace.join("local-tree");
    assert_eq!(std::fs::read(landed.join("sub/f.txt")).unwrap(), b"hello");
    assert_eq!(
        landed.join("sub/f.txt").metadata().unwrap().mode() & 0o777,
        0o751
    );
    assert_eq!(landed.join("sub/f.txt").metadata().unwrap().uid(), uid);
    assert!(landed.join("sub/empty").is_dir());
    assert_eq!(
        std::fs::read_link(landed.join("link")).unwrap(),
        Path::new("sub/f.txt")
    );
    ok(daemon.sandboxctl(&["cp", local.to_str().unwrap(), "session:t5:renamed"]));
    assert_eq!(
        std::fs::read(workspace.join("renamed/sub/f.txt")).unwrap(),
        b"hello"
    );

    // Out: to a new local name, then into an existing directory.
    let out = daemon.dir().join("out");
    ok(daemon.sandboxctl(&["cp", "session:t5:renamed", out.to_str().unwrap()]));
    assert_eq!(std::fs::read(out.join("sub/f.txt")).unwrap(), b"hello");
    assert_eq!(
        std::fs::read_link(out.join("link")).unwrap(),
        Path::new("sub/f.txt")
    );
    assert!(out.join("sub/empty").is_dir());
    ok(daemon.sandboxctl(&["cp", "session:t5:renamed", out.to_str().unwrap()]));
    assert_eq!(
        std::fs::read(out.join("renamed/sub/f.txt")).unwrap(),
        b"hello"
    );

    // `-` both ways is a tar stream.
    let streamed = ok(daemon.sandboxctl(&["cp", "session:t5:renamed", "-"]));
    let listed = listing(&streamed.stdout);
    assert_eq!(listed["renamed/sub/f.txt"].4, b"hello");
    let tar_file = daemon.dir().join("in.tar");
    std::fs::write(&tar_file, &streamed.stdout).unwrap();
    std::fs::create_dir(workspace.join("from-stdin")).unwrap();
    std::os::unix::fs::chown(workspace.join("from-stdin"), Some(uid), Some(uid)).unwrap();
    ok(sandboxctl_with_stdin(
        &daemon,
        &["cp", "-", "session:t5:from-stdin"],
        &tar_file,
    ));
    assert_eq!(
        std::fs::read(workspace.join("from-stdin/renamed/sub/f.txt")).unwrap(),
        b"hello"
    );
    // A file still goes as its bytes.
    let file = ok(daemon.sandboxctl(&["cp", "session:t5:renamed/sub/f.txt", "-"]));
    assert_eq!(file.stdout, b"hello");
}
