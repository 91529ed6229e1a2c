//! A workspace handed over to its sandbox's own uid (after `run_as` is
//! dropped, as the README tells operators to do) gets only what its
//! previous owner owned, through no link: a file of root's hard-linked
//! into it (the link made as root here, as a host without
//! `protected_hardlinks` would let the runner make it) and a file of
//! root's made in it stay root's, a symbolic link to root's file leads the
//! hand-over nowhere, and the runner's own files are handed over and
//! usable.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use sandboxd_client::{CommandRef, ExitReason, OutputStream, Scope};
use sandboxd_tests::commands::{read_all, shell};
use sandboxd_tests::{procs, Options, TestDaemon, NOBODY, RUNNER_UIDS};

const WAIT: Duration = Duration::from_secs(30);

/// `sh -c script` in session `id`: its code and output.
async fn run(daemon: &TestDaemon, id: &str, script: &str) -> (i32, String) {
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let (stdout, proof) = read_all(&client, id, &command, OutputStream::Stdout, WAIT).await;
    let (stderr, _) = read_all(&client, id, &command, OutputStream::Stderr, WAIT).await;
    let code = match proof.reason {
        ExitReason::Exited { code } => code,
        reason => panic!("{script}: {reason:?}"),
    };
    let shown = String::from_utf8_lossy(&stdout).to_string() + &String::from_utf8_lossy(&stderr);
    (code, shown)
}

fn owner(path: &Path) -> (u32, u32) {
    let metadata = std::fs::symlink_metadata(path).unwrap();
    (metadata.uid(), metadata.gid())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_link_to_roots_file_stays_roots_through_the_hand_over() {
    // Before: every runner is nobody, sharing the host's view.
    let mut daemon = TestDaemon::start(Options {
        extra_toml: format!("run_as = \"{NOBODY}:{NOBODY}\"\nisolation = \"uid-cgroup\""),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "att").await;
    let workspace = daemon.workspace(Scope::Session, "att");
    let outside = daemon.dir().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let secret = outside.join("secret");
    std::fs::write(&secret, "root's only").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The runner's own files, and a symbolic link to root's file.
    let (code, shown) = run(
        &daemon,
        "att",
        &format!(
            "mkdir d && echo mine > d/f && ln -s {} link && ln {} d/own-link; echo made",
            secret.display(),
            secret.display()
        ),
    )
    .await;
    assert_eq!(code, 0, "{shown}");
    assert!(
        !workspace.join("d/own-link").exists() || owner(&workspace.join("d/own-link")).0 == 0,
        "{shown}"
    );
    // The hard link protected_hardlinks refused the runner, made as root;
    // and a file of root's in the workspace.
    std::fs::hard_link(&secret, workspace.join("d/stolen")).unwrap();
    std::fs::write(workspace.join("roots"), "root's too").unwrap();
    daemon.stop();

    // After: run_as dropped, each sandbox its own uid.
    let config = std::fs::read_to_string(daemon.config_path()).unwrap();
    let without = config.replace(&format!("run_as = \"{NOBODY}:{NOBODY}\""), "");
    assert_ne!(config, without);
    std::fs::write(daemon.config_path(), without).unwrap();
    daemon.launch();
    daemon.wait_ready();
    let pid = sandboxd_tests::start_session(&daemon, "att").await;
    let uid = procs::uid_of(pid).unwrap();
    assert!(RUNNER_UIDS.contains(&uid), "{uid}");

    for path in ["", "d", "d/f", "link"] {
        assert_eq!(owner(&workspace.join(path)), (uid, uid), "{path:?}");
    }
    for path in ["d/stolen", "roots"] {
        assert_eq!(
            owner(&workspace.join(path)),
            (0, 0),
            "{path:?} was handed over"
        );
    }
    assert_eq!(owner(&secret), (0, 0), "root's file was handed over");
    let log = daemon.log_since_launch();
    assert!(
        log.contains("left entries as they were") && log.contains("d/stolen"),
        "{log}"
    );

    // The sandbox works on its own files; root's stays out of its reach.
    let (code, shown) = run(
        &daemon,
        "att",
        "id -u; cat d/f && echo more >> d/f && echo new > d/g && echo wrote; cat d/stolen link",
    )
    .await;
    assert_ne!(code, 0, "read root's file: {shown}");
    assert!(
        shown.starts_with(&format!("{uid}\nmine\nwrote\n")),
        "{shown}"
    );
    assert!(!shown.contains("root's only"), "{shown}");
    assert!(shown.contains("Permission denied"), "{shown}");
}
