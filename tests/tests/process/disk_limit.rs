//! `[limits] disk` on the process tier, end to end: where the state
//! directory's file system has no project quotas, a watcher stops a runner
//! whose workspace outgrew the limit (and spares one under it), with the
//! reason in `describe`; the next ensure starts it only once it is back
//! under. On a loop-mounted ext4 (or XFS) with project quotas, a write
//! past the limit fails with EDQUOT inside the runner, which goes on.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sandboxd_client::{ProbeState, Scope};
use sandboxd_tests::procs::{run, wait_until};
use sandboxd_tests::{make_test_dir, sandbox_env, Options, TestDaemon};

const LIMIT: u64 = 1 << 20;
/// Long enough for several watcher passes on a loaded machine.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

fn limited(state_dir: Option<PathBuf>) -> Options {
    Options {
        runner_args: vec!["--fill-when".into(), "fill-request".into()],
        extra_toml: "[limits]\ndisk = \"1m\"".to_string(),
        state_dir,
        ..Options::default()
    }
}

async fn start(daemon: &TestDaemon, id: &str) -> u32 {
    sandboxd_tests::start_session(daemon, id).await
}

/// Asks the runner of `id` to write `bytes` into its workspace and waits
/// for its `fill:` line; returns it.
fn fill(daemon: &TestDaemon, id: &str, bytes: u64) -> String {
    let workspace = daemon.workspace(Scope::Session, id);
    std::fs::write(workspace.join(".fill-request"), bytes.to_string()).unwrap();
    std::fs::rename(
        workspace.join(".fill-request"),
        workspace.join("fill-request"),
    )
    .unwrap();
    let log = daemon.runner_log(Scope::Session, id);
    let line = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .find(|line| line.starts_with("runner-fixture: fill:"))
            .map(str::to_string)
    };
    assert!(
        wait_until(STOP_TIMEOUT, || line().is_some()),
        "{id} did not report its fill; daemon log:\n{}",
        daemon.log_text()
    );
    line().unwrap()
}

async fn disk_feature(daemon: &TestDaemon) -> sandboxd_client::IsolationFeature {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "disk-limit")
        .expect("a disk-limit feature in status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_stops_a_runner_over_the_limit_and_spares_one_under_it() {
    let daemon = TestDaemon::start(limited(None));
    let feature = disk_feature(&daemon).await;
    eprintln!("disk-limit: {feature:?}");
    if !feature.detail.contains("watcher") {
        eprintln!("skipping: this state directory's file system enforces project quotas, so no watcher runs (see the quota test)");
        return;
    }
    assert!(
        feature.in_force && feature.detail.starts_with("1 MiB"),
        "{feature:?}"
    );

    start(&daemon, "small").await;
    let big = start(&daemon, "big").await;
    // The small one first: the pass that stops the big one started after
    // the small one's fill, so it measured it too.
    assert_eq!(
        fill(&daemon, "small", 100 * 1024),
        "runner-fixture: fill: ok"
    );
    assert_eq!(fill(&daemon, "big", 2 * LIMIT), "runner-fixture: fill: ok");
    let client = daemon.client().await;
    let mut stopped = None;
    for _ in 0..(STOP_TIMEOUT.as_millis() / 50) {
        let info = client.describe(Scope::Session, "big").await.unwrap();
        if info.state == ProbeState::Absent {
            stopped = Some(info);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let info =
        stopped.unwrap_or_else(|| panic!("big was not stopped; log:\n{}", daemon.log_text()));
    let exit = info.last_exit.expect("an exit");
    assert_eq!(exit.disk_limit_bytes, Some(LIMIT));
    assert_eq!(exit.to_string(), "stopped: disk limit (1 MiB)");
    assert!(sandboxd_tests::procs::pid_is_gone(big));
    assert!(daemon.log_text().contains("outgrew [limits] disk"));
    assert!(info
        .isolation
        .iter()
        .any(|feature| feature.name == "disk-limit"));
    assert_eq!(
        client.probe(Scope::Session, "small").await.unwrap(),
        ProbeState::Running,
        "a runner under the limit is left alone"
    );

    // Kept, and not started again while over the limit.
    let workspace = daemon.workspace(Scope::Session, "big");
    assert!(workspace.join("fill").exists(), "the workspace is kept");
    let error = client
        .ensure(Scope::Session, "big", &sandbox_env("q:big", "tok"))
        .await
        .expect_err("a workspace over the limit must not start");
    assert!(
        error.to_string().contains("over the disk limit (1 MiB)"),
        "{error}"
    );
    // Back under: it starts.
    std::fs::remove_file(workspace.join("fill")).unwrap();
    std::fs::remove_file(workspace.join("fill-request")).unwrap();
    start(&daemon, "big").await;
}

/// A loop-mounted file system with project quotas, unmounted and removed
/// when dropped (after the daemon on it: declare it first).
struct QuotaMount {
    dir: PathBuf,
    mount: PathBuf,
    mounted: bool,
}

impl QuotaMount {
    /// ext4 with `-O quota,project`, else XFS, mounted `prjquota`; `Err`
    /// with what the kernel or the tools said when neither works.
    fn make() -> Result<QuotaMount, String> {
        let dir = make_test_dir().into_path();
        let mut quota = QuotaMount {
            mount: dir.join("mnt"),
            dir,
            mounted: false,
        };
        std::fs::create_dir(&quota.mount).unwrap();
        let image = quota.dir.join("image");
        let mut refusals = Vec::new();
        for (kind, mkfs) in [
            ("ext4", &["mkfs.ext4", "-q", "-O", "quota,project"][..]),
            ("xfs", &["mkfs.xfs", "-q", "-f"][..]),
        ] {
            let file = std::fs::File::create(&image).unwrap();
            file.set_len(320 << 20).unwrap();
            drop(file);
            let made = run(Command::new(mkfs[0]).args(&mkfs[1..]).arg(&image));
            let mounted = made.and_then(|()| {
                run(Command::new("mount")
                    .args(["-o", "loop,prjquota"])
                    .arg(&image)
                    .arg(&quota.mount))
            });
            match mounted {
                Ok(()) => {
                    quota.mounted = true;
                    std::fs::set_permissions(
                        &quota.mount,
                        std::os::unix::fs::PermissionsExt::from_mode(0o755),
                    )
                    .unwrap();
                    eprintln!("project quotas on a loop-mounted {kind}");
                    return Ok(quota);
                }
                Err(problem) => refusals.push(format!("{kind}: {problem}")),
            }
        }
        Err(refusals.join("; "))
    }
}

impl Drop for QuotaMount {
    fn drop(&mut self) {
        if self.mounted {
            // The loop device goes with the mount (mount -o loop sets autoclear).
            let unmounted = wait_until(Duration::from_secs(20), || {
                run(Command::new("umount").arg(&self.mount)).is_ok()
            });
            if !unmounted {
                let _ = run(Command::new("umount").arg("-l").arg(&self.mount));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn is_mounted(path: &Path) -> bool {
    let path = path.display().to_string();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|line| line.split(' ').nth(1) == Some(path.as_str()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_quotas_refuse_a_write_past_the_limit_inside_the_runner() {
    let quota = match QuotaMount::make() {
        Ok(quota) => quota,
        Err(refused) => {
            eprintln!(
                "skipping: no file system with project quotas could be mounted here ({refused})"
            );
            return;
        }
    };
    assert!(is_mounted(&quota.mount));
    {
        let daemon = TestDaemon::start(limited(Some(quota.mount.join("state"))));
        let feature = disk_feature(&daemon).await;
        eprintln!("disk-limit: {feature:?}");
        assert!(
            feature.in_force && feature.detail.contains("project quota"),
            "{feature:?}\n{}",
            daemon.log_text()
        );
        let pid = start(&daemon, "quota").await;
        let report = fill(&daemon, "quota", 2 * LIMIT);
        assert!(
            report.starts_with(&format!("runner-fixture: fill: errno {}", libc::EDQUOT)),
            "{report}"
        );
        let client = daemon.client().await;
        assert_eq!(
            client.probe(Scope::Session, "quota").await.unwrap(),
            ProbeState::Running,
            "the runner goes on"
        );
        assert!(!sandboxd_tests::procs::pid_is_gone(pid));
        client
            .deprovision(Scope::Session, "quota", false)
            .await
            .unwrap();
    }
    drop(quota);
}
