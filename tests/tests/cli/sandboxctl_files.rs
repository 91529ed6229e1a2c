//! `sandboxctl cp` and `sandboxctl ls` against a real daemon: a file of
//! several chunks goes in and comes back byte for byte (to a file and to
//! stdout), a directory is listed, and bad ends are refused by name.

use std::os::unix::fs::MetadataExt;
use std::process::Output;

use sandboxd_client::Scope;
use sandboxd_tests::{Options, TestDaemon};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `sandboxctl` and asserts its exit code, showing both streams when
/// it is not the one wanted.
#[track_caller]
fn ctl(daemon: &TestDaemon, args: &[&str], wanted: i32) -> Output {
    let output = daemon.sandboxctl(args);
    assert_eq!(
        output.status.code(),
        Some(wanted),
        "sandboxctl {args:?}\nstdout: {}\nstderr: {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_sends_and_fetches_a_file_and_ls_lists_it() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "cp1").await;
    let workspace = daemon.workspace(Scope::Session, "cp1");
    let data: Vec<u8> = (0..(2 << 20) + 777)
        .map(|n: u32| (n * 31 % 251) as u8)
        .collect();
    let local = daemon.dir().join("upload.bin");
    std::fs::write(&local, &data).unwrap();

    let sent = ctl(
        &daemon,
        &["cp", local.to_str().unwrap(), "session:cp1:copy.bin"],
        0,
    );
    assert!(text(&sent.stdout).contains(&format!("{} bytes", data.len())));
    assert!(std::fs::read(workspace.join("copy.bin")).unwrap() == data);
    let owner = std::fs::metadata(workspace.join("copy.bin")).unwrap().uid();
    assert_eq!(owner, std::fs::metadata(&workspace).unwrap().uid());

    let to_stdout = ctl(&daemon, &["cp", "session:cp1:copy.bin", "-"], 0);
    assert!(to_stdout.stdout == data, "{} bytes", to_stdout.stdout.len());
    let back = daemon.dir().join("back.bin");
    ctl(
        &daemon,
        &["cp", "session:cp1:copy.bin", back.to_str().unwrap()],
        0,
    );
    assert!(std::fs::read(&back).unwrap() == data);

    let listed = text(&ctl(&daemon, &["ls", "session", "cp1"], 0).stdout);
    assert!(listed.starts_with("NAME"), "{listed}");
    let row = listed
        .lines()
        .find(|line| line.starts_with("copy.bin "))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        row.contains("file") && row.contains(&data.len().to_string()),
        "{row}"
    );
    let json = text(&ctl(&daemon, &["--json", "ls", "session", "cp1"], 0).stdout);
    assert!(json.contains("\"copy.bin\""), "{json}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ends_are_refused_by_name() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "cp2").await;
    let local = daemon.dir().join("small.txt");
    std::fs::write(&local, b"small").unwrap();
    let local = local.to_str().unwrap();
    let absolute = ctl(&daemon, &["cp", local, "session:cp2:/etc/passwd"], 1);
    assert!(
        text(&absolute.stderr).contains("absolute"),
        "{}",
        text(&absolute.stderr)
    );
    let up = ctl(&daemon, &["cp", "session:cp2:../x", "-"], 1);
    assert!(text(&up.stderr).contains("'..'"), "{}", text(&up.stderr));
    let both_local = ctl(&daemon, &["cp", local, "/tmp/elsewhere"], 2);
    assert!(text(&both_local.stderr).contains("SCOPE:ID:PATH"));
    let missing = ctl(&daemon, &["cp", "session:cp2:missing", "-"], 1);
    assert!(
        text(&missing.stderr).contains("does not exist"),
        "{}",
        text(&missing.stderr)
    );
    assert!(!std::path::Path::new("/tmp/elsewhere").exists());
}
