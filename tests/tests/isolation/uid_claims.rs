//! Two daemons on one host never hand a sandbox the same uid: each claims
//! its sandboxes' uids in a directory every daemon shares (by default
//! `/run/stigmer/uids`), skips the uids another claims, keeps its claims
//! across a restart, removes them with the workspaces, and refuses — for
//! that sandbox only, naming the other daemon — a uid of its ledger that
//! another daemon claimed meanwhile.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sandboxd_client::Scope;
use sandboxd_tests::procs;
use sandboxd_tests::{sandbox_env, Options, TestDaemon, UidClaims, RUNNER_UIDS};

/// The daemon's default claims directory.
const HOST_CLAIMS: &str = "/run/stigmer/uids";

/// Ensures a session sandbox and waits for its runner; returns its uid.
async fn start(daemon: &TestDaemon, id: &str) -> u32 {
    let pid = sandboxd_tests::start_session(daemon, id).await;
    procs::uid_of(pid).expect("the runner's uid")
}

async fn remove(daemon: &TestDaemon, id: &str) {
    let client = daemon.client().await;
    client
        .deprovision(Scope::Session, id, false)
        .await
        .unwrap_or_else(|error| panic!("deprovision {id}: {error}"));
    // The reply comes at the kill; the workspace, and with it the claim,
    // go in the teardown right behind it.
    let workspace = daemon.workspace(Scope::Session, id);
    assert!(
        sandboxd_tests::wait_until(std::time::Duration::from_secs(30), || !workspace.exists()),
        "{id}'s teardown never finished"
    );
}

/// The state directory a claim file names.
fn claimant(claims: &Path, uid: u32) -> Option<PathBuf> {
    claim_of(claims, uid).map(|(state_dir, _)| state_dir)
}

/// The state directory and the sandbox a claim file names.
fn claim_of(claims: &Path, uid: u32) -> Option<(PathBuf, String)> {
    let text = std::fs::read_to_string(claims.join(uid.to_string())).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::to_string)
    };
    Some((PathBuf::from(field("state_dir ")?), field("sandbox ")?))
}

fn state_dir_of(daemon: &TestDaemon) -> PathBuf {
    daemon.state_dir().canonicalize().unwrap()
}

/// Removes what this test made under `/run` — the claims directory and
/// `/run/stigmer`, each only if it was not there before — and, passed or
/// failed, any claim naming one of the test's state directories.
struct HostClaimsCleanup {
    made: Vec<PathBuf>,
    state_dirs: Vec<PathBuf>,
}

impl HostClaimsCleanup {
    fn new() -> HostClaimsCleanup {
        let made = [HOST_CLAIMS, "/run/stigmer"]
            .into_iter()
            .map(PathBuf::from)
            .filter(|dir| !dir.exists())
            .collect();
        HostClaimsCleanup {
            made,
            state_dirs: Vec::new(),
        }
    }
}

impl Drop for HostClaimsCleanup {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(HOST_CLAIMS)
            .into_iter()
            .flatten()
            .flatten()
        {
            let ours = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<u32>().ok())
                .and_then(|uid| claimant(Path::new(HOST_CLAIMS), uid))
                .is_some_and(|dir| self.state_dirs.contains(&dir));
            if ours {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        for dir in &self.made {
            let _ = std::fs::remove_file(dir.join(".lock"));
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_with_the_default_range_and_claims_dir_share_no_uid() {
    let mut cleanup = HostClaimsCleanup::new();
    let host_default = || Options {
        uid_claims: UidClaims::HostDefault,
        ..Options::default()
    };
    let mut a = TestDaemon::start(host_default());
    let b = TestDaemon::start(Options {
        extra_toml: "instance = \"blue\"".to_string(),
        ..host_default()
    });
    cleanup.state_dirs = vec![state_dir_of(&a), state_dir_of(&b)];
    let claims = Path::new(HOST_CLAIMS);

    let (mut of_a, mut of_b) = (Vec::new(), Vec::new());
    for n in 0..3 {
        of_a.push(start(&a, &format!("a{n}")).await);
        of_b.push(start(&b, &format!("b{n}")).await);
    }
    eprintln!("daemon a: uids {of_a:?}; daemon b: uids {of_b:?}");
    let (set_a, set_b): (HashSet<u32>, HashSet<u32>) = (
        of_a.iter().copied().collect(),
        of_b.iter().copied().collect(),
    );
    assert_eq!((set_a.len(), set_b.len()), (3, 3), "one uid per sandbox");
    assert!(
        set_a.is_disjoint(&set_b),
        "a uid in common: {of_a:?} {of_b:?}"
    );
    assert!(of_a
        .iter()
        .chain(&of_b)
        .all(|uid| RUNNER_UIDS.contains(uid)));
    for uid in &of_a {
        assert_eq!(claimant(claims, *uid), Some(state_dir_of(&a)), "uid {uid}");
    }
    for uid in &of_b {
        assert_eq!(claimant(claims, *uid), Some(state_dir_of(&b)), "uid {uid}");
    }
    let status = a.client().await.status().await.unwrap();
    let feature = status
        .isolation
        .iter()
        .find(|feature| feature.name == "uid-claims")
        .expect("a uid-claims feature in status");
    assert!(
        feature.in_force && feature.detail.contains(HOST_CLAIMS),
        "{feature:?}"
    );

    // A restart of a keeps its claims (its workspaces are kept): b's next
    // sandbox still gets none of a's uids, and a's sandboxes keep theirs.
    a.stop();
    for uid in &of_a {
        assert_eq!(claimant(claims, *uid), Some(state_dir_of(&a)), "uid {uid}");
    }
    let b_while_a_is_stopped = start(&b, "b3").await;
    assert!(!set_a.contains(&b_while_a_is_stopped));
    a.launch();
    a.wait_ready();
    assert_eq!(start(&a, "a0").await, of_a[0], "a restart keeps the uid");
    let b_after_restart = start(&b, "b4").await;
    assert!(!set_a.contains(&b_after_restart));

    // Removing a workspace removes its claim.
    for n in 0..3 {
        remove(&a, &format!("a{n}")).await;
    }
    for n in 0..5 {
        remove(&b, &format!("b{n}")).await;
    }
    // Each claim goes right behind its workspace, in the same teardown.
    // (A uid given back may be claimed again at once, by either daemon's
    // pool for a sandbox prepared ahead: only a claim naming the removed
    // sandbox is one left.)
    let removed: Vec<(u32, &TestDaemon, String)> = of_a
        .iter()
        .enumerate()
        .map(|(n, uid)| (*uid, &a, format!("a{n}")))
        .chain(
            of_b.iter()
                .enumerate()
                .map(|(n, uid)| (*uid, &b, format!("b{n}"))),
        )
        .chain([
            (b_while_a_is_stopped, &b, "b3".to_string()),
            (b_after_restart, &b, "b4".to_string()),
        ])
        .collect();
    let left = || -> Vec<u32> {
        removed
            .iter()
            .filter(|(uid, daemon, id)| {
                claim_of(claims, *uid)
                    == Some((
                        state_dir_of(daemon),
                        sandboxd_protocol::naming::base_name(Scope::Session, id),
                    ))
            })
            .map(|(uid, _, _)| *uid)
            .collect()
    };
    sandboxd_tests::wait_until(std::time::Duration::from_secs(30), || left().is_empty());
    let left = left();
    assert_eq!(
        left,
        Vec::<u32>::new(),
        "claims left after the workspaces went"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clash_is_refused_for_that_sandbox_only_naming_the_other_daemon() {
    // One claims directory for both: a's own, which b shares.
    let mut a = TestDaemon::start(Options::default());
    let claims = a.dir().join("uid-claims");
    // b keeps no sandboxes prepared: its next one is started cold, with
    // the lowest uid free at that moment (a prepared one holds the uid it
    // claimed when it was made).
    let b = TestDaemon::start(Options {
        uid_claims: UidClaims::Shared(claims.clone()),
        extra_toml: "instance = \"blue\"\n[pool]\nsession = 0\nworkflow = 0\n".to_string(),
        ..Options::default()
    });
    let uid = start(&a, "kept").await;
    a.client()
        .await
        .deprovision(Scope::Session, "kept", true)
        .await
        .unwrap();
    // As a reboot would (it empties /run): a's claims are gone while a is
    // stopped, and b, started first, takes the lowest free uid — a's.
    a.stop();
    std::fs::remove_file(claims.join(uid.to_string())).unwrap();
    assert_eq!(start(&b, "taker").await, uid);

    a.launch();
    a.wait_ready();
    let client = a.client().await;
    let error = client
        .ensure(Scope::Session, "kept", &sandbox_env("q:kept", "tok"))
        .await
        .expect_err("a uid another daemon claims must be refused");
    let message = error.to_string();
    eprintln!("the clash: {message}");
    let b_state = state_dir_of(&b).display().to_string();
    assert!(
        message.contains(&format!("uid {uid}"))
            && message.contains("instance 'blue'")
            && message.contains(&b_state)
            && message.contains("which is running"),
        "{message}"
    );
    assert!(
        a.log_text().contains("is another daemon's"),
        "the clash is logged at start"
    );
    // The daemon serves the rest.
    let other = start(&a, "other").await;
    assert_ne!(other, uid);
    // Once b's sandbox is gone, a's gets its uid again. Its claim goes
    // right behind its workspace, once its keyrings are emptied and freed.
    remove(&b, "taker").await;
    let b_state_dir = state_dir_of(&b);
    assert!(
        sandboxd_tests::wait_until(std::time::Duration::from_secs(30), || {
            claimant(&claims, uid).as_ref() != Some(&b_state_dir)
        }),
        "b's claim on uid {uid} outlived its sandbox"
    );
    assert_eq!(start(&a, "kept").await, uid);
    assert_eq!(claimant(&claims, uid), Some(state_dir_of(&a)));
}
