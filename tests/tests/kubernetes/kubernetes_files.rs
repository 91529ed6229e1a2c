//! The file calls on the kubernetes tier, with the real `sandboxd
//! --driver kubernetes`: through pods/exec of `tar`, `dd`, `stat` and `rm`
//! in the runner container. Against the in-process STAND-IN API server,
//! whose pods/exec is a STAND-IN FOR THE KUBELET: the scripts run as local
//! processes of this test, fenced so that the pod's workspace is a
//! directory of this test seen at `/workspace` and nothing else is
//! writable (see `tests/src/k8s_standin/kubelet.rs`); what that proves is
//! the daemon's side (its checks, its scripts, its streams by offset), not
//! what a real image and kubelet do. Against a real cluster
//! (`SANDBOXD_TEST_KUBECONFIG`) the same calls run in real pods (the
//! runner image then needs `tar`, `dd`, `stat`, `cat`, `wc`, `mv`, `rm`);
//! the looks at the workspace from the host are the stand-in's only.

use std::io::{Cursor, Read};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sandboxd_client::{ClientError, SandboxError, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_protocol::{FileType, PutChunk};

use crate::kubernetes_commands::{running_sandbox, setup, Setup};

/// The directory of this test that is the pod's `/workspace` (stand-in only).
fn host_workspace(setup: &Setup, id: &str) -> Option<PathBuf> {
    let pod = format!("{}-pod", base_name(Scope::Session, id));
    setup.cluster.standin_quietly()?.workspace_of(&pod)
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(1_700_000_000);
    header
}

/// A small tree: a directory, files with their modes, a symlink, a hard link.
fn tree() -> Vec<u8> {
    use tar::EntryType::{Directory, Link, Regular, Symlink};
    let mut b = tar::Builder::new(Vec::new());
    b.append_data(&mut header(Directory, 0o750, 0), "d/", std::io::empty())
        .unwrap();
    b.append_data(&mut header(Regular, 0o640, 5), "d/f", &b"hello"[..])
        .unwrap();
    b.append_data(&mut header(Regular, 0o4755, 3), "d/x.sh", &b"#!\n"[..])
        .unwrap();
    b.append_link(&mut header(Symlink, 0o777, 0), "d/link", "f")
        .unwrap();
    b.append_link(&mut header(Link, 0o640, 0), "d/hard", "d/f")
        .unwrap();
    b.append_data(&mut header(Directory, 0o700, 0), "d/e/", std::io::empty())
        .unwrap();
    b.into_inner().unwrap()
}

/// Every entry of a tar stream: name, kind, mode, link target, contents.
fn entries(stream: &[u8]) -> Vec<(String, tar::EntryType, u32, String, Vec<u8>)> {
    let mut archive = tar::Archive::new(Cursor::new(stream));
    let mut found = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let kind = entry.header().entry_type();
        let mode = entry.header().mode().unwrap() & 0o7777;
        let link = entry
            .link_name()
            .unwrap()
            .map(|link| link.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        found.push((name, kind, mode, link, data));
    }
    found
}

fn refusal<T: std::fmt::Debug>(result: Result<T, ClientError>) -> SandboxError {
    match result {
        Err(ClientError::Sandbox(error)) => error,
        other => panic!("expected the daemon's refusal, got {other:?}"),
    }
}

/// The names in a directory of the host, the fence's own left out.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_goes_in_and_comes_out_with_its_modes_and_links() {
    let host_before = Path::new("/workspace").exists();
    let setup = setup("files-tree").await;
    if !running_sandbox(&setup, "k-tree").await {
        return;
    }
    let client = &setup.client;
    let sent = client
        .put_tar_from(Scope::Session, "k-tree", "", Cursor::new(tree()))
        .await
        .expect("put_tar");
    assert!(sent > 0);

    if let Some(ws) = host_workspace(&setup, "k-tree") {
        assert_eq!(std::fs::read(ws.join("d/f")).unwrap(), b"hello");
        let mode = |path: &str| std::fs::symlink_metadata(ws.join(path)).unwrap().mode() & 0o7777;
        assert_eq!(mode("d"), 0o750);
        assert_eq!(mode("d/f"), 0o640);
        assert_eq!(mode("d/x.sh"), 0o755, "setuid is dropped");
        assert_eq!(mode("d/e"), 0o700);
        assert_eq!(
            std::fs::read_link(ws.join("d/link")).unwrap(),
            Path::new("f")
        );
        let inode = |path: &str| std::fs::metadata(ws.join(path)).unwrap().ino();
        assert_eq!(inode("d/hard"), inode("d/f"), "a hard link stays one");
        assert_eq!(names(&ws), ["d"], "no staging directory is left");
    }
    assert_eq!(
        Path::new("/workspace").exists(),
        host_before,
        "the host's /workspace is never touched"
    );

    let mut out = Vec::new();
    client
        .get_tar_into(Scope::Session, "k-tree", "d", &mut out)
        .await
        .expect("get_tar");
    let got = entries(&out);
    let find = |name: &str| {
        got.iter()
            .find(|entry| entry.0.trim_end_matches('/') == name)
            .unwrap_or_else(|| {
                panic!(
                    "{name} not in {:?}",
                    got.iter().map(|e| &e.0).collect::<Vec<_>>()
                )
            })
    };
    assert_eq!(find("d").1, tar::EntryType::Directory);
    // One of the two names of the file holds its bytes, the other links
    // to it (which `tar` met first is the directory's order).
    let (f, hard) = (find("d/f"), find("d/hard"));
    let (bytes, link) = match f.1 {
        tar::EntryType::Link => (hard, f),
        _ => (f, hard),
    };
    assert_eq!((bytes.2, bytes.4.as_slice()), (0o640, &b"hello"[..]));
    assert_eq!(link.1, tar::EntryType::Link);
    assert_eq!(link.3, bytes.0);
    assert_eq!(find("d/x.sh").2, 0o755);
    assert_eq!(
        (find("d/link").1, find("d/link").3.as_str()),
        (tar::EntryType::Symlink, "f")
    );
    assert_eq!(find("d/e").2, 0o700);

    // The whole workspace: its entries, none for the workspace itself.
    let mut all = Vec::new();
    client
        .get_tar_into(Scope::Session, "k-tree", "", &mut all)
        .await
        .expect("get_tar of the workspace");
    assert!(entries(&all).iter().all(|entry| entry.0.starts_with("d")));

    // sandboxctl cp and ls, as on the other tiers.
    let local = setup.cluster.dir().join("up.bin");
    let data: Vec<u8> = (0..(1u32 << 20) + 4321)
        .map(|n| (n * 7 % 253) as u8)
        .collect();
    std::fs::write(&local, &data).unwrap();
    let ctl = |args: &[&str]| {
        let output = setup.daemon.sandboxctl(args);
        assert!(
            output.status.success(),
            "sandboxctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    ctl(&["cp", local.to_str().unwrap(), "session:k-tree:d/up.bin"]);
    assert!(ctl(&["cp", "session:k-tree:d/up.bin", "-"]) == data);
    let listed = String::from_utf8(ctl(&["ls", "session", "k-tree", "d"])).unwrap();
    let row = listed
        .lines()
        .find(|line| line.starts_with("up.bin "))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains(&data.len().to_string()), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_and_hostile_archives_are_refused_by_name_and_place_nothing() {
    let host_before = Path::new("/workspace").exists();
    let setup = setup("files-bad").await;
    // The paths are refused before any pod is needed; the archives' checks
    // only where a kubelet runs the pod.
    let runs = running_sandbox(&setup, "k-bad").await;
    let raw = sandboxd_tests::raw::tarpc_client(setup.daemon.socket()).await;
    let ctx = || sandboxd_tests::raw::context(std::time::Duration::from_secs(30));
    for (path, words) in [
        ("/etc/evil", "is absolute"),
        ("a/../../evil", "'..'"),
        ("a\0b", "NUL"),
    ] {
        let chunk = PutChunk {
            path: path.into(),
            offset: 0,
            data: b"x".to_vec(),
            last: true,
            mode: 0o644,
        };
        let answer = raw
            .put_file(ctx(), Scope::Session, "k-bad".into(), chunk)
            .await
            .expect("an answer");
        match answer {
            Err(SandboxError::InvalidArgument(message)) => {
                assert!(message.contains(words), "{path:?}: {message}")
            }
            other => panic!("{path:?}: {other:?}"),
        }
    }
    if !runs {
        return;
    }

    // A good entry first, then a hostile one: nothing of it is placed.
    let hostile = |second: &dyn Fn(&mut tar::Builder<Vec<u8>>)| {
        let mut b = tar::Builder::new(Vec::new());
        b.append_data(
            &mut header(tar::EntryType::Regular, 0o644, 2),
            "good",
            &b"ok"[..],
        )
        .unwrap();
        second(&mut b);
        b.into_inner().unwrap()
    };
    let up = hostile(&|b| {
        let mut h = header(tar::EntryType::Regular, 0o644, 1);
        h.as_old_mut().name[..7].copy_from_slice(b"../evil");
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
    });
    let out = hostile(&|b| {
        b.append_link(
            &mut header(tar::EntryType::Symlink, 0o777, 0),
            "out",
            "/etc",
        )
        .unwrap();
    });
    for (archive, name) in [(up, "../evil"), (out, "out")] {
        let sent = setup
            .client
            .put_tar_from(Scope::Session, "k-bad", "", Cursor::new(archive))
            .await;
        let message = format!("{sent:?}");
        assert!(
            message.contains(&format!("'{name}'")) && message.contains("refused"),
            "{message}"
        );
    }

    // An archive with a directory where the workspace has a file: refused
    // naming it, and its other entries not placed either.
    let file = PutChunk {
        path: "c".into(),
        offset: 0,
        data: b"file".to_vec(),
        last: true,
        mode: 0o644,
    };
    setup
        .client
        .put_file(Scope::Session, "k-bad", &file)
        .await
        .expect("put c");
    let mut b = tar::Builder::new(Vec::new());
    b.append_data(
        &mut header(tar::EntryType::Regular, 0o644, 1),
        "a/x",
        &b"x"[..],
    )
    .unwrap();
    b.append_data(
        &mut header(tar::EntryType::Regular, 0o644, 1),
        "c/y",
        &b"y"[..],
    )
    .unwrap();
    let sent = setup
        .client
        .put_tar_from(
            Scope::Session,
            "k-bad",
            "",
            Cursor::new(b.into_inner().unwrap()),
        )
        .await;
    let message = format!("{sent:?}");
    assert!(message.contains("'c' is not a directory"), "{message}");

    if let Some(ws) = host_workspace(&setup, "k-bad") {
        assert_eq!(
            names(&ws),
            ["c"],
            "nothing else was placed, no staging left"
        );
        assert_eq!(std::fs::read(ws.join("c")).unwrap(), b"file");
        let mode = std::fs::metadata(ws.join("c"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
    }
    assert_eq!(Path::new("/workspace").exists(), host_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_list_read_by_offset_and_remove() {
    let setup = setup("files-stat").await;
    if !running_sandbox(&setup, "k-stat").await {
        return;
    }
    let client = &setup.client;
    let id = "k-stat";
    let data: Vec<u8> = (0..200_000u32).map(|n| (n % 241) as u8).collect();
    let chunk = PutChunk {
        path: "notes.bin".into(),
        offset: 0,
        data: data.clone(),
        last: true,
        mode: 0o600,
    };
    client
        .put_file(Scope::Session, id, &chunk)
        .await
        .expect("put_file");
    let mut tree = tar::Builder::new(Vec::new());
    tree.append_data(
        &mut header(tar::EntryType::Regular, 0o644, 1),
        "dir/sub/f",
        &b"f"[..],
    )
    .unwrap();
    client
        .put_tar_from(
            Scope::Session,
            id,
            "",
            Cursor::new(tree.into_inner().unwrap()),
        )
        .await
        .expect("put_tar");

    let stat = client
        .stat_file(Scope::Session, id, "notes.bin")
        .await
        .expect("stat");
    assert_eq!(
        (stat.file_type, stat.size, stat.mode),
        (FileType::File, 200_000, 0o600)
    );
    assert!(stat.mtime_unix_ms > 0);
    let root = client
        .stat_file(Scope::Session, id, "")
        .await
        .expect("stat of the workspace");
    assert_eq!((root.name.as_str(), root.file_type), (".", FileType::Dir));

    let list = client
        .list_files(Scope::Session, id, "")
        .await
        .expect("list");
    let listed: Vec<(&str, FileType)> = list
        .entries
        .iter()
        .map(|entry| (entry.name.as_str(), entry.file_type))
        .collect();
    assert_eq!(
        listed,
        [("dir", FileType::Dir), ("notes.bin", FileType::File)]
    );
    assert!(!list.truncated);
    let sub = client
        .list_files(Scope::Session, id, "dir")
        .await
        .expect("list dir");
    assert_eq!(sub.entries.len(), 1);
    assert_eq!(sub.entries[0].name, "sub");

    let piece = client
        .get_file(Scope::Session, id, "notes.bin", 70_000, 1000)
        .await
        .expect("get_file");
    assert_eq!(piece.data, data[70_000..71_000]);
    assert_eq!((piece.size, piece.eof), (200_000, false));
    let tail = client
        .get_file(Scope::Session, id, "notes.bin", 199_990, 1000)
        .await
        .expect("get_file at the end");
    assert_eq!((tail.data.as_slice(), tail.eof), (&data[199_990..], true));

    let missing = refusal(client.stat_file(Scope::Session, id, "missing").await);
    assert!(
        matches!(&missing, SandboxError::NotFound(m) if m.contains("'missing'")),
        "{missing:?}"
    );
    let full = refusal(client.remove_file(Scope::Session, id, "dir", false).await);
    assert!(format!("{full:?}").contains("not empty"), "{full:?}");
    client
        .remove_file(Scope::Session, id, "dir", true)
        .await
        .expect("remove -r");
    client
        .remove_file(Scope::Session, id, "notes.bin", false)
        .await
        .expect("remove");
    let after = client
        .list_files(Scope::Session, id, "")
        .await
        .expect("list after");
    assert!(after.entries.is_empty(), "{:?}", after.entries);
}
