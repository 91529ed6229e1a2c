//! The process tier's disk limits cannot be hidden from, and one sandbox
//! cannot fill the state directory's file system for all the others.
//!
//! Attacks from inside real runners (commands started with `exec`, under
//! a watcher, as on a file system without project quotas): a file
//! unlinked and held open, a tree deeper than `PATH_MAX`, many empty
//! files past `[limits] disk_inodes` — each gets its runner stopped with
//! the limit as the reason, while a sandbox under the limits runs on. A
//! writer at full speed is stopped within a small overshoot. Below
//! `[limits] state_reserve`, ensures are refused and `status` is degraded,
//! naming the file system, and a writing sandbox is stopped `disk-full`
//! while an idle one is not.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use sandboxd_client::{ExitInfo, ExitReason, HealthVerdict, ProbeState, SandboxdClient, Scope};
use sandboxd_tests::commands::shell;
use sandboxd_tests::procs::{run, wait_until};
use sandboxd_tests::{make_test_dir, sandbox_env, Options, TestDaemon};

/// Long enough for several watcher passes on a loaded machine.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

fn limited(limits: &str) -> Options {
    Options {
        extra_toml: format!("[limits]\n{limits}"),
        ..Options::default()
    }
}

async fn start(daemon: &TestDaemon, id: &str) {
    sandboxd_tests::start_session(daemon, id).await;
}

/// Runs `script` with python3 in the workspace of `id`, in the background
/// of the sandbox (the command runs until stopped).
async fn run_python(daemon: &TestDaemon, client: &SandboxdClient, id: &str, script: &str) {
    let workspace = daemon.workspace(Scope::Session, id);
    std::fs::write(workspace.join("attack.py"), script).unwrap();
    // A command starts in its workspace (`/workspace` in a view).
    client
        .exec(Scope::Session, id, &shell("exec python3 attack.py"))
        .await
        .unwrap_or_else(|error| panic!("exec in {id}: {error}\n{}", daemon.log_text()));
}

/// Waits until `id`'s runner is gone; its last exit.
async fn stopped(daemon: &TestDaemon, client: &SandboxdClient, id: &str) -> ExitInfo {
    for _ in 0..(STOP_TIMEOUT.as_millis() / 50) {
        let info = client.describe(Scope::Session, id).await.unwrap();
        if info.state == ProbeState::Absent {
            return info.last_exit.expect("an exit");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} was not stopped; log:\n{}", daemon.log_text());
}

/// Deprovisions `id` and waits until the daemon's trash is empty (its
/// workspace deleted, however deep).
async fn remove(daemon: &TestDaemon, client: &SandboxdClient, id: &str) {
    client.deprovision(Scope::Session, id, false).await.unwrap();
    assert!(
        wait_until(STOP_TIMEOUT, || daemon.trash_entries().is_empty()),
        "the trash still holds {:?}; log:\n{}",
        daemon.trash_entries(),
        daemon.log_text()
    );
}

const HOLD: &str = "import time\nprint('written', flush=True)\ntime.sleep(600)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_held_open_deep_trees_and_many_files_are_counted() {
    let daemon = TestDaemon::start(limited("disk = \"8m\"\ndisk_inodes = 2500"));
    let client = daemon.client().await;
    for id in ["unlinked", "deep", "many", "modest"] {
        start(&daemon, id).await;
    }
    // 24 MiB in a file with no name left, still open.
    let unlinked = "import os\nf = open('hidden', 'wb')\nos.unlink('hidden')\nfor _ in range(24):\n    f.write(b'x' * (1 << 20))\nf.flush()\nos.fsync(f.fileno())\n";
    run_python(&daemon, &client, "unlinked", &format!("{unlinked}{HOLD}")).await;
    // 24 MiB at the bottom of 2100 nested directories: a path of 4200
    // bytes, past PATH_MAX.
    let deep = "import os\nfd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)\nfor _ in range(2100):\n    os.mkdir('d', dir_fd=fd)\n    inner = os.open('d', os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)\n    os.close(fd)\n    fd = inner\nf = os.open('data', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)\nfor _ in range(24):\n    os.write(f, b'x' * (1 << 20))\nos.fsync(f)\n";
    run_python(&daemon, &client, "deep", &format!("{deep}{HOLD}")).await;
    // 3000 empty files: no bytes to speak of, past 2500 inodes.
    let many = "for i in range(3000):\n    open('e%d' % i, 'w').close()\n";
    run_python(&daemon, &client, "many", &format!("{many}{HOLD}")).await;
    // Under both limits: 2 MiB in 100 files.
    let modest = "for i in range(100):\n    open('m%d' % i, 'wb').write(b'x' * 20000)\n";
    run_python(&daemon, &client, "modest", &format!("{modest}{HOLD}")).await;

    for id in ["unlinked", "deep"] {
        let exit = stopped(&daemon, &client, id).await;
        assert_eq!(
            exit.reason,
            ExitReason::DiskLimit {
                limit_bytes: 8 << 20
            },
            "{id}"
        );
        assert_eq!(exit.to_string(), "stopped: disk limit (8 MiB)");
    }
    let exit = stopped(&daemon, &client, "many").await;
    assert_eq!(
        exit.reason,
        ExitReason::DiskInodeLimit { limit_inodes: 2500 }
    );
    assert_eq!(exit.to_string(), "stopped: disk-inodes (limit 2500 files)");
    let log = daemon.log_text();
    assert!(log.contains("held open"), "the log names the deleted file");
    assert!(log.contains("outgrew [limits] disk_inodes"));

    // Not started again while over the inode limit.
    let error = client
        .ensure(Scope::Session, "many", &sandbox_env("q:many", "tok"))
        .await
        .expect_err("a workspace over the inode limit must not start");
    assert!(error.to_string().contains("2500 files"), "{error}");

    // The sandbox under its limits runs on, and its commands work.
    assert_eq!(
        client.probe(Scope::Session, "modest").await.unwrap(),
        ProbeState::Running
    );
    let ran = client
        .exec(Scope::Session, "modest", &shell("echo still here"))
        .await
        .unwrap();
    let (output, proof) = sandboxd_tests::commands::read_all(
        &client,
        "modest",
        &sandboxd_client::CommandRef::Id(ran.command_id),
        sandboxd_client::OutputStream::Stdout,
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&output), "still here\n");
    assert_eq!(proof.exit_code, Some(0));

    // The daemon removes a tree deeper than PATH_MAX.
    for id in ["unlinked", "deep", "many", "modest"] {
        remove(&daemon, &client, id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_at_full_speed_overshoots_its_limit_by_little() {
    const LIMIT: u64 = 64 << 20;
    // DISK_HOLES_DAEMON: another sandboxd build, to compare overshoots.
    let other = std::env::var_os("DISK_HOLES_DAEMON").map(PathBuf::from);
    let daemon = TestDaemon::start(Options {
        runner_args: vec!["--fill-when".into(), "fill-request".into()],
        extra_toml: "[limits]\ndisk = \"64m\"".to_string(),
        daemon_binary: other.clone(),
        ..Options::default()
    });
    let client = daemon.client().await;
    start(&daemon, "fast").await;
    let workspace = daemon.workspace(Scope::Session, "fast");
    std::fs::write(workspace.join(".fill-request"), (3u64 << 30).to_string()).unwrap();
    std::fs::rename(
        workspace.join(".fill-request"),
        workspace.join("fill-request"),
    )
    .unwrap();
    let began = std::time::Instant::now();
    let exit = stopped(&daemon, &client, "fast").await;
    let took = began.elapsed();
    let written =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(workspace.join("fill")).unwrap())
            * 512;
    let overshoot = written.saturating_sub(LIMIT);
    eprintln!(
        "overshoot: wrote {} MiB against a 64 MiB limit ({} MiB over, {:.1}x the limit) before the stop, {took:?} after the fill was asked for",
        written >> 20,
        overshoot >> 20,
        written as f64 / LIMIT as f64
    );
    if other.is_none() {
        assert_eq!(exit.reason, ExitReason::DiskLimit { limit_bytes: LIMIT });
        assert!(overshoot < 512 << 20, "overshot by {} MiB", overshoot >> 20);
    }
    std::fs::remove_file(workspace.join("fill")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_the_state_reserve_ensures_are_refused_and_status_is_degraded() {
    // No real file system has 99.9 % of itself free.
    let daemon = TestDaemon::start(limited("state_reserve = \"99.9%\""));
    let client = daemon.client().await;
    let error = client
        .ensure(Scope::Session, "refused", &sandbox_env("q:refused", "tok"))
        .await
        .expect_err("below the reserve, no sandbox starts");
    let error = error.to_string();
    assert!(
        error.contains("mounted on")
            && error.contains("free")
            && error.contains("state_reserve")
            && error.contains("(99.9%)"),
        "{error}"
    );
    let status = client.status().await.unwrap();
    assert_eq!(
        status.health.verdict,
        HealthVerdict::Degraded,
        "{:?}",
        status.health
    );
    assert!(
        status
            .health
            .reasons
            .iter()
            .any(|reason| reason.contains("state_reserve") && reason.contains("mounted on")),
        "{:?}",
        status.health
    );
}

/// A small ext4 loop-mounted for a state directory whose free space is
/// the test's alone, unmounted and removed when dropped (after the daemon
/// on it: declare it first).
struct SmallDisk {
    dir: PathBuf,
    mount: PathBuf,
}

impl SmallDisk {
    fn make() -> Result<SmallDisk, String> {
        let dir = make_test_dir().into_path();
        let mount = dir.join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let image = dir.join("image");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(384 << 20)
            .unwrap();
        let disk = SmallDisk { dir, mount };
        run(Command::new("mkfs.ext4")
            .args(["-q", "-m", "0"])
            .arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(&disk.mount))?;
        std::fs::set_permissions(
            &disk.mount,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        Ok(disk)
    }

    fn free(&self) -> u64 {
        let stat = nix::sys::statvfs::statvfs(&self.mount).unwrap();
        stat.blocks_available() * stat.fragment_size()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = wait_until(Duration::from_secs(20), || {
            run(Command::new("umount").arg(&self.mount)).is_ok()
        });
        if !unmounted {
            let _ = run(Command::new("umount").arg("-l").arg(&self.mount));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_writing_below_the_reserve_is_stopped_disk_full_and_an_idle_one_is_not() {
    let disk = match SmallDisk::make() {
        Ok(disk) => disk,
        Err(refused) => {
            eprintln!("skipping: no loop-mounted file system could be made here ({refused})");
            return;
        }
    };
    {
        // The reserve is all but 96 MiB of what is free now.
        let reserve = disk.free() - (96 << 20);
        let daemon = TestDaemon::start(Options {
            state_dir: Some(disk.mount.join("state")),
            ..limited(&format!("state_reserve = {reserve}"))
        });
        let client = daemon.client().await;
        start(&daemon, "idle").await;
        start(&daemon, "writer").await;
        let healthy = client.status().await.unwrap().health;
        assert!(
            !healthy
                .reasons
                .iter()
                .any(|reason| reason.contains("state_reserve")),
            "{healthy:?}"
        );
        // Writes 4 MiB at a time until stopped: past the reserve, and
        // still writing when the watcher looks.
        let writer = "import os, time\nf = open('big', 'wb')\nwhile True:\n    try:\n        f.write(b'x' * (4 << 20))\n        f.flush()\n        os.fsync(f.fileno())\n    except OSError:\n        pass\n    time.sleep(0.02)\n";
        run_python(&daemon, &client, "writer", writer).await;
        let exit = stopped(&daemon, &client, "writer").await;
        assert_eq!(exit.reason, ExitReason::DiskFull, "{exit}");
        assert_eq!(exit.to_string(), "stopped: disk-full");
        assert_eq!(
            client.probe(Scope::Session, "idle").await.unwrap(),
            ProbeState::Running,
            "a sandbox that is not writing runs on"
        );
        let status = client.status().await.unwrap();
        assert_eq!(
            status.health.verdict,
            HealthVerdict::Degraded,
            "{:?}",
            status.health
        );
        let error = client
            .ensure(Scope::Session, "new", &sandbox_env("q:new", "tok"))
            .await
            .expect_err("below the reserve, no sandbox starts");
        assert!(error.to_string().contains("state_reserve"), "{error}");

        // Space back: sandboxes start again.
        remove(&daemon, &client, "writer").await;
        assert!(wait_until(STOP_TIMEOUT, || disk.free() > reserve));
        start(&daemon, "new").await;
        remove(&daemon, &client, "new").await;
        remove(&daemon, &client, "idle").await;
    }
    drop(disk);
}
