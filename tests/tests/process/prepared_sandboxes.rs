//! Sandboxes prepared ahead of demand (`[pool]`): the host parts
//! a new sandbox takes — its cgroups with their limits written, a uid
//! claimed host-wide, a workspace owned by it — under both isolation
//! settings. A taken one's uid, cgroups and limits are the sandbox's; two
//! sandboxes never share one; a burst larger than the pool starts the rest
//! cold; nothing prepared survives a stop, and what a SIGKILLed daemon
//! left prepared is gone before the next one serves; a pool of 0 is off.
//! (The views prepared under `isolation = "full"`: prepared_views.rs.)

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandboxd_protocol::{naming, PoolStatus, Scope};
use sandboxd_tests::{procs, sandbox_env, Options, TestDaemon, RUNNER_UIDS};

const TIMEOUT: Duration = Duration::from_secs(60);

fn daemon(isolation: &str, session: usize, workflow: usize) -> TestDaemon {
    TestDaemon::start(Options {
        extra_toml: format!(
            "isolation = \"{isolation}\"\n[limits]\nmemory = \"80m\"\npids = 45\n\
             [pool]\nsession = {session}\nworkflow = {workflow}\nconnect = 0\n"
        ),
        ..Options::default()
    })
}

async fn pool_of(daemon: &TestDaemon, scope: Scope) -> PoolStatus {
    let status = daemon.client().await.status().await.unwrap();
    status
        .pools
        .into_iter()
        .find(|pool| pool.scope == scope)
        .unwrap_or_else(|| panic!("status lists no {scope} pool"))
}

/// Waits until `scope`'s pool holds `ready` prepared sandboxes.
async fn wait_for_ready(daemon: &TestDaemon, scope: Scope, ready: u32) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let pool = pool_of(daemon, scope).await;
        if pool.ready == ready {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the {scope} pool never held {ready}: {pool:?}\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `pid`'s cgroup path in the hierarchy that `line_matches` picks out of
/// `/proc/<pid>/cgroup` (`0::` for v2, a controller's name for v1).
fn cgroup_line(pid: u32, controller: Option<&str>) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = match controller {
            None => id == "0" && names.is_empty(),
            Some(controller) => names.split(',').any(|name| name == controller),
        };
        wanted.then(|| path.to_string())
    })
}

/// Where a cgroup file system of `fs_type` (with `option`, for v1) is mounted.
fn mount_of(fs_type: &str, option: Option<&str>) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split(' ');
        let (kind, _, options) = (after.next()?, after.next()?, after.next().unwrap_or(""));
        let wanted =
            kind == fs_type && option.is_none_or(|option| options.split(',').any(|o| o == option));
        wanted
            .then(|| before.split(' ').nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// `pid`'s cgroup directory for `controller`: v2's when v2 holds it.
fn controller_dir(pid: u32, controller: &str) -> PathBuf {
    let v2_mount = mount_of("cgroup2", None).expect("a cgroup v2 mount");
    let v2 = v2_mount.join(
        cgroup_line(pid, None)
            .expect("a v2 cgroup")
            .trim_start_matches('/'),
    );
    let v2_has = std::fs::read_to_string(v2.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .any(|name| name == controller);
    if v2_has {
        return v2;
    }
    let path = cgroup_line(pid, Some(controller))
        .unwrap_or_else(|| panic!("no {controller} cgroup, v1 or v2"));
    mount_of("cgroup", Some(controller))
        .unwrap_or_else(|| panic!("no v1 {controller} mount"))
        .join(path.trim_start_matches('/'))
}

/// Every cgroup directory a runner `pid` is in (v2, and each v1 hierarchy
/// it has a cgroup of its own in).
fn cgroup_dirs(pid: u32) -> Vec<PathBuf> {
    let mut dirs = vec![mount_of("cgroup2", None)
        .unwrap()
        .join(cgroup_line(pid, None).unwrap().trim_start_matches('/'))];
    for controller in ["memory", "pids", "cpu", "freezer"] {
        if let (Some(path), Some(mount)) = (
            cgroup_line(pid, Some(controller)),
            mount_of("cgroup", Some(controller)),
        ) {
            if path.contains("/sandboxes/") {
                dirs.push(mount.join(path.trim_start_matches('/')));
            }
        }
    }
    dirs
}

fn is_prepared_name(name: &str) -> bool {
    name.strip_prefix("prepared-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The `prepared-<n>` entries of `dir`.
fn prepared_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| is_prepared_name(name))
        .collect()
}

/// The uid claims that a prepared sandbox (not yet taken) holds.
fn prepared_claims(daemon: &TestDaemon) -> Vec<(u32, String)> {
    claims(daemon)
        .into_iter()
        .filter(|(_, sandbox)| is_prepared_name(sandbox))
        .collect()
}

/// The `sandboxes/` directories, one per hierarchy, holding the cgroups
/// of the runner `pid`.
fn sandboxes_dirs_of(pid: u32) -> Vec<PathBuf> {
    cgroup_dirs(pid)
        .iter()
        .map(|dir| dir.parent().unwrap().to_path_buf())
        .collect()
}

/// The sandbox each uid claim of this daemon names (`uid → sandbox`).
fn claims(daemon: &TestDaemon) -> Vec<(u32, String)> {
    let dir = daemon.dir().join("uid-claims");
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let uid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let text = std::fs::read_to_string(entry.path()).ok()?;
            let sandbox = text
                .lines()
                .find_map(|line| line.strip_prefix("sandbox "))?
                .to_string();
            Some((uid, sandbox))
        })
        .collect()
}

/// The sandbox a cgroup directory is labelled with, as `systemd-cgls`
/// shows it (`user.sandboxd.sandbox`).
fn cgroup_label(dir: &Path) -> Option<String> {
    let mut value = vec![0; 4096];
    let length = rustix::fs::getxattr(dir, "user.sandboxd.sandbox", &mut value).ok()?;
    value.truncate(length);
    String::from_utf8(value).ok()
}

/// Waits until every one of `dirs` names `sandbox`.
fn wait_for_labels(dirs: &[PathBuf], sandbox: &str) {
    let labels = || dirs.iter().map(|dir| cgroup_label(dir)).collect::<Vec<_>>();
    assert!(
        procs::wait_until(TIMEOUT, || labels()
            .iter()
            .all(|label| label.as_deref() == Some(sandbox))),
        "{dirs:?} are labelled {:?}, not {sandbox}",
        labels()
    );
}

/// What `systemd-cgls` prints of the cgroups under `dir`; `None` (said)
/// where it is not installed.
fn systemd_cgls(dir: &Path) -> Option<String> {
    match std::process::Command::new("systemd-cgls")
        .args(["--xattr=yes", "--no-pager"])
        .arg(dir)
        .output()
    {
        Ok(output) => Some(String::from_utf8_lossy(&output.stdout).into_owned()),
        Err(error) => {
            eprintln!("systemd-cgls not run ({error}): its part of the check skipped");
            None
        }
    }
}

fn staging(daemon: &TestDaemon) -> PathBuf {
    daemon.state_dir().join("sandboxes").join(".prepared")
}

async fn a_taken_sandbox_has_the_prepared_uid_cgroups_and_limits(isolation: &str) {
    let daemon = daemon(isolation, 2, 0);
    wait_for_ready(&daemon, Scope::Session, 2).await;
    let ready_names = prepared_in(&staging(&daemon));
    assert_eq!(ready_names.len(), 2, "{ready_names:?}");
    let pid = sandboxd_tests::start_session(&daemon, "warm").await;
    let pool = pool_of(&daemon, Scope::Session).await;
    assert_eq!((pool.size, pool.hits, pool.misses), (2, 1, 0), "{pool:?}");

    // Its cgroups are a prepared one's, in every hierarchy, with the limits.
    let dirs = cgroup_dirs(pid);
    let name = dirs[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(is_prepared_name(&name), "not a prepared cgroup: {dirs:?}");
    assert!(
        ready_names.contains(&name),
        "{name} was not one of the ready {ready_names:?}"
    );
    for dir in &dirs {
        assert_eq!(dir.file_name().unwrap(), name.as_str(), "{dirs:?}");
    }
    let memory = controller_dir(pid, "memory");
    let memory_limit = ["memory.max", "memory.limit_in_bytes"]
        .iter()
        .find_map(|file| std::fs::read_to_string(memory.join(file)).ok())
        .expect("a memory limit file");
    assert_eq!(memory_limit.trim(), (80u64 << 20).to_string());
    let pids = std::fs::read_to_string(controller_dir(pid, "pids").join("pids.max")).unwrap();
    assert_eq!(pids.trim(), "45");

    // Its uid is the prepared one, recorded and claimed as the sandbox's.
    let uid = procs::uid_of(pid).unwrap();
    assert!(RUNNER_UIDS.contains(&uid), "uid {uid}");
    assert_eq!(daemon.ledger_uid(Scope::Session, "warm"), Some(uid));
    // The claim is renamed once the ensure has answered.
    let base = naming::base_name(Scope::Session, "warm");
    assert!(
        procs::wait_until(TIMEOUT, || claims(&daemon).contains(&(uid, base.clone()))),
        "{:?}",
        claims(&daemon)
    );
    // Its cgroups keep the prepared name but say whose they are, as an
    // admin reading systemd-cgls sees.
    wait_for_labels(&dirs, "session/warm");
    if let Some(shown) = systemd_cgls(dirs[0].parent().unwrap()) {
        let under_its_name = format!("{name} ");
        let line = shown
            .lines()
            .position(|line| line.contains(&under_its_name));
        let next = line.and_then(|line| shown.lines().nth(line + 1));
        assert!(
            next.is_some_and(|next| next.contains("user.sandboxd.sandbox: session/warm")),
            "{shown}"
        );
    }
    let workspace = daemon.workspace(Scope::Session, "warm");
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&workspace).unwrap());
    assert_eq!(owner, uid, "the workspace is not the sandbox's uid's");
    assert!(!staging(&daemon).join(&name).exists());

    // Its end removes the adopted cgroups; the next run of the same
    // sandbox keeps its uid and workspace.
    let client = daemon.client().await;
    client
        .deprovision(Scope::Session, "warm", true)
        .await
        .unwrap();
    assert!(
        procs::wait_until(TIMEOUT, || dirs.iter().all(|dir| !dir.exists())),
        "the adopted cgroups outlived the sandbox: {dirs:?}"
    );
    let again = sandboxd_tests::start_session(&daemon, "warm").await;
    assert_eq!(procs::uid_of(again), Some(uid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_sandbox_has_the_prepared_uid_cgroups_and_limits_under_uid_cgroup() {
    a_taken_sandbox_has_the_prepared_uid_cgroups_and_limits("uid-cgroup").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_sandbox_has_the_prepared_uid_cgroups_and_limits_under_full() {
    a_taken_sandbox_has_the_prepared_uid_cgroups_and_limits("full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_larger_than_the_pool_shares_no_uid_or_cgroup_and_starts_the_rest_cold() {
    let daemon = daemon("uid-cgroup", 3, 0);
    wait_for_ready(&daemon, Scope::Session, 3).await;
    let client = daemon.client().await;
    let ensures = (0..10).map(|n| {
        let client = client.clone();
        async move {
            let id = format!("burst-{n}");
            client
                .ensure(Scope::Session, &id, &sandbox_env(&format!("q:{id}"), "tok"))
                .await
                .map(|report| (id, report.pid.unwrap()))
        }
    });
    let mut uids = HashSet::new();
    let mut cgroups = HashSet::new();
    for started in futures::future::join_all(ensures).await {
        let (id, pid) = started.expect("every ensure of the burst starts a runner");
        sandboxd_tests::wait_for_runner(&daemon.workspace(Scope::Session, &id), pid);
        let uid = procs::uid_of(pid).unwrap();
        assert!(uids.insert(uid), "uid {uid} twice");
        assert!(
            cgroups.insert(cgroup_line(pid, None).unwrap()),
            "a cgroup twice"
        );
        // Prepared or cold, each cgroup names its own sandbox.
        wait_for_labels(&cgroup_dirs(pid), &format!("session/{id}"));
    }
    let pool = pool_of(&daemon, Scope::Session).await;
    assert!(pool.hits >= 3, "{pool:?}");
    assert_eq!(pool.hits + pool.misses, 10, "{pool:?}");
    // Every claim names one sandbox, and no two sandboxes one uid.
    let claimed = claims(&daemon);
    for uid in &uids {
        let by: Vec<_> = claimed.iter().filter(|(claim, _)| claim == uid).collect();
        assert_eq!(by.len(), 1, "{by:?}");
        assert!(by[0].1.starts_with("sbx-ses-"), "{by:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_leaves_nothing_prepared() {
    let mut daemon = daemon("uid-cgroup", 3, 1);
    wait_for_ready(&daemon, Scope::Session, 3).await;
    wait_for_ready(&daemon, Scope::Workflow, 1).await;
    let pid = sandboxd_tests::start_session(&daemon, "taken").await;
    let parents = sandboxes_dirs_of(pid);
    wait_for_ready(&daemon, Scope::Session, 3).await;
    for parent in &parents {
        // The taken one and the four ready.
        assert_eq!(prepared_in(parent).len(), 5, "{}", parent.display());
    }
    assert_eq!(prepared_in(&staging(&daemon)).len(), 4);
    assert_eq!(prepared_claims(&daemon).len(), 4);

    assert!(daemon.stop().success(), "{}", daemon.log_text());
    for parent in &parents {
        assert_eq!(
            prepared_in(parent),
            Vec::<String>::new(),
            "{}",
            parent.display()
        );
    }
    assert_eq!(prepared_in(&staging(&daemon)), Vec::<String>::new());
    assert_eq!(prepared_claims(&daemon), Vec::new());
    // The sandbox's own claim stays with its kept workspace.
    let base = naming::base_name(Scope::Session, "taken");
    assert!(claims(&daemon).iter().any(|(_, sandbox)| *sandbox == base));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_killed_daemon_left_prepared_is_gone_before_the_next_one_serves() {
    let mut daemon = daemon("uid-cgroup", 3, 0);
    wait_for_ready(&daemon, Scope::Session, 3).await;
    let pid = sandboxd_tests::start_session(&daemon, "a").await;
    let parents = sandboxes_dirs_of(pid);
    wait_for_ready(&daemon, Scope::Session, 3).await;
    daemon.kill();
    // Left: the prepared workspaces and the claims on their uids.
    assert_eq!(prepared_in(&staging(&daemon)).len(), 3);
    assert_eq!(prepared_claims(&daemon).len(), 3);

    // The next daemon of the same state dir keeps none prepared.
    let config = std::fs::read_to_string(daemon.config_path()).unwrap();
    std::fs::write(
        daemon.config_path(),
        config.replace("session = 3", "session = 0"),
    )
    .unwrap();
    daemon.launch();
    daemon.wait_ready();
    assert_eq!(prepared_in(&staging(&daemon)), Vec::<String>::new());
    assert_eq!(prepared_claims(&daemon), Vec::new());
    for parent in &parents {
        assert_eq!(
            prepared_in(parent),
            Vec::<String>::new(),
            "{}",
            parent.display()
        );
    }
    // The sandbox that took one is started again as its own uid.
    let again = sandboxd_tests::start_session(&daemon, "a").await;
    assert_eq!(procs::uid_of(again), daemon.ledger_uid(Scope::Session, "a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_zero_is_off() {
    let daemon = daemon("uid-cgroup", 0, 0);
    let pid = sandboxd_tests::start_session(&daemon, "cold").await;
    let status = daemon.client().await.status().await.unwrap();
    assert_eq!(status.pools.len(), 3, "{:?}", status.pools);
    for pool in &status.pools {
        assert_eq!((pool.size, pool.ready, pool.hits), (0, 0, 0), "{pool:?}");
    }
    let feature = status
        .isolation
        .iter()
        .find(|feature| feature.name == "prepared-sandboxes")
        .expect("status lists the pool");
    assert_eq!(
        feature.detail, "session: off; workflow: off; connect: off",
        "{feature:?}"
    );
    let base = naming::base_name(Scope::Session, "cold");
    for dir in cgroup_dirs(pid) {
        assert_eq!(dir.file_name().unwrap(), base.as_str());
        assert_eq!(prepared_in(dir.parent().unwrap()), Vec::<String>::new());
    }
    assert_eq!(prepared_in(&staging(&daemon)), Vec::<String>::new());
}
