//! One uid and gid per sandbox on the process tier, end to end: a runner
//! attacking another sandbox is refused by the kernel, runners hold no
//! privilege, and a sandbox's uid follows it through respawns, kept
//! workspaces and restarts — and is handed out again only once no process
//! has it.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandboxd_client::{ProbeState, Scope};
use sandboxd_tests::procs::{self, wait_until};
use sandboxd_tests::{
    read_runner_pid, sandbox_env, wait_for_runner, Options, TestDaemon, NOBODY, RUNNER_UIDS,
};

const REPORT_TIMEOUT: Duration = Duration::from_secs(20);

/// The securebits a runner gets: NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE
/// and the locks of all three and of KEEP_CAPS (bits 0-3 and 5-7).
const RUNNER_SECUREBITS: i64 = 0b1110_1111;

/// Ensures a session sandbox and waits for its runner; returns its pid.
async fn start(daemon: &TestDaemon, id: &str, token: &str) -> u32 {
    let client = daemon.client().await;
    let report = client
        .ensure(Scope::Session, id, &sandbox_env(&format!("q:{id}"), token))
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}"));
    let pid = report.pid.expect("the process tier reports the pid");
    wait_for_runner(&daemon.workspace(Scope::Session, id), pid);
    pid
}

/// `Uid:`/`Gid:`/`Groups:`/`NoNewPrivs:`/`Cap*:` of `/proc/<pid>/status`.
fn status_line(pid: u32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no {name} in the status of {pid}:\n{status}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_is_refused_every_way_into_another_sandbox() {
    // The uid layer alone: under `isolation = "full"` the victim's pid and
    // paths do not even exist in the attacker's view (ENOENT, ESRCH; see
    // private_view.rs), which would hide what the uids refuse by themselves.
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"".to_string(),
        ..Options::with_runner_args(&["--serve-attacks"])
    });
    let attacker = start(&daemon, "attacker", "tok-attacker").await;
    let victim = start(&daemon, "victim", "tok-victim-secret").await;
    let (attacker_uid, victim_uid) = (
        procs::uid_of(attacker).unwrap(),
        procs::uid_of(victim).unwrap(),
    );
    assert_ne!(attacker_uid, victim_uid, "two sandboxes, one uid");
    assert!(RUNNER_UIDS.contains(&attacker_uid) && RUNNER_UIDS.contains(&victim_uid));
    // The target is the right one: root sees the victim's token there.
    assert_eq!(
        procs::env_of(victim, "STIGMER_TOKEN").as_deref(),
        Some("tok-victim-secret")
    );

    let victim_workspace = daemon.workspace(Scope::Session, "victim");
    let victim_log = daemon.runner_log(Scope::Session, "victim");
    let attacker_workspace = daemon.workspace(Scope::Session, "attacker");
    let request = format!(
        "pid {victim}\nworkspace {}\nlog {}\n",
        victim_workspace.display(),
        victim_log.display()
    );
    sandboxd_tests::request_attack(&attacker_workspace, &request);
    let report_path = attacker_workspace.join("attack-report.json");
    assert!(
        wait_until(REPORT_TIMEOUT, || report_path.exists()),
        "the attacker wrote no report; daemon log:\n{}",
        daemon.log_text()
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    eprintln!("attacker uid {attacker_uid} against victim uid {victim_uid} (pid {victim}):");
    let mut outcomes = std::collections::HashMap::new();
    for attempt in report["attempts"].as_array().expect("attempts") {
        let name = attempt["name"].as_str().unwrap().to_string();
        let errno = attempt["errno"].as_i64().unwrap() as i32;
        eprintln!(
            "  {name}: {}",
            if errno == 0 {
                "succeeded".to_string()
            } else {
                std::io::Error::from_raw_os_error(errno).to_string()
            }
        );
        outcomes.insert(name, errno);
    }
    let expected = [
        ("read the victim's environ", libc::EACCES),
        ("list the victim's workspace", libc::EACCES),
        ("read a file in the victim's workspace", libc::EACCES),
        ("create a file in the victim's workspace", libc::EACCES),
        ("SIGSTOP the victim", libc::EPERM),
        ("SIGKILL the victim", libc::EPERM),
        ("PTRACE_ATTACH the victim", libc::EPERM),
        ("PTRACE_SEIZE the victim", libc::EPERM),
        ("append to the victim's output file", libc::EACCES),
        ("read the victim's output file", libc::EACCES),
        ("open the victim's stdout through /proc", libc::EACCES),
        ("become root", libc::EPERM),
        ("clear its own securebits", libc::EPERM),
        // The same calls work where they are allowed.
        ("control: read its own environ", 0),
        ("control: create a file in its own workspace", 0),
    ];
    for (name, errno) in expected {
        assert_eq!(
            outcomes.get(name).copied(),
            Some(errno),
            "{name}: expected {}",
            std::io::Error::from_raw_os_error(errno)
        );
    }
    assert_eq!(outcomes.len(), expected.len(), "{outcomes:?}");
    assert_eq!(report["securebits"].as_i64(), Some(RUNNER_SECUREBITS));

    // Nothing happened to the victim.
    assert_eq!(procs::state(victim).map(|state| state != 'T'), Some(true));
    assert!(!victim_workspace.join("planted").exists());
    assert_eq!(read_runner_pid(&victim_workspace), Some(victim));
    let client = daemon.client().await;
    assert_eq!(
        client.probe(Scope::Session, "victim").await.unwrap(),
        ProbeState::Running
    );
    // The output file is the daemon's, and only the daemon's directory leads to it.
    let log = std::fs::metadata(&victim_log).unwrap();
    assert_eq!(
        (log.uid(), log.mode() & 0o022),
        (0, 0),
        "only the daemon may write it"
    );
    let logs_dir = std::fs::metadata(victim_log.parent().unwrap()).unwrap();
    assert_eq!(logs_dir.mode() & 0o777, 0o700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_has_its_sandboxs_ids_no_groups_and_no_privileges() {
    let daemon = TestDaemon::start(Options::default());
    let pid = start(&daemon, "plain", "tok").await;
    let uid = procs::uid_of(pid).unwrap();
    assert!(RUNNER_UIDS.contains(&uid) && uid != NOBODY, "uid {uid}");
    assert_eq!(daemon.ledger_uid(Scope::Session, "plain"), Some(uid));
    let ids = format!("{uid}\t{uid}\t{uid}\t{uid}");
    assert_eq!(status_line(pid, "Uid"), ids);
    assert_eq!(status_line(pid, "Gid"), ids);
    assert_eq!(status_line(pid, "Groups"), "");
    assert_eq!(status_line(pid, "NoNewPrivs"), "1");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(status_line(pid, set), "0000000000000000", "{set}");
    }
    let workspace = std::fs::metadata(daemon.workspace(Scope::Session, "plain")).unwrap();
    assert_eq!(
        (workspace.uid(), workspace.gid(), workspace.mode() & 0o7777),
        (uid, uid, 0o700)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_keeps_its_uid_through_respawn_kept_workspace_and_restart() {
    let mut daemon = TestDaemon::start(Options::default());
    let first = start(&daemon, "keeper", "tok").await;
    let uid = procs::uid_of(first).unwrap();
    let workspace = daemon.workspace(Scope::Session, "keeper");
    std::fs::write(workspace.join("work"), "kept").unwrap();

    // A respawn after the runner died.
    procs::signal_pid(first, nix::sys::signal::Signal::SIGKILL);
    let client = daemon.client().await;
    assert!(
        wait_until(Duration::from_secs(10), || procs::pid_is_gone(first)),
        "the runner did not die"
    );
    let mut respawned = None;
    for _ in 0..200 {
        let report = client
            .ensure(Scope::Session, "keeper", &sandbox_env("q:keeper", "tok"))
            .await
            .unwrap();
        if report.pid != Some(first) {
            respawned = report.pid;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = respawned.expect("a respawn");
    wait_for_runner(&workspace, second);
    assert_eq!(procs::uid_of(second), Some(uid), "a respawn keeps the uid");

    // deprovision --keep-workspace, then ensure.
    client
        .deprovision(Scope::Session, "keeper", true)
        .await
        .unwrap();
    assert_eq!(daemon.ledger_uid(Scope::Session, "keeper"), Some(uid));
    let third = start(&daemon, "keeper", "tok").await;
    assert_eq!(
        procs::uid_of(third),
        Some(uid),
        "a kept workspace keeps its uid"
    );

    // A restart (which keeps workspaces), then ensure.
    drop(client);
    daemon.stop();
    daemon.launch();
    daemon.wait_ready();
    let fourth = start(&daemon, "keeper", "tok").await;
    assert_eq!(procs::uid_of(fourth), Some(uid), "a restart keeps the uid");
    assert_eq!(
        std::fs::read_to_string(workspace.join("work")).unwrap(),
        "kept"
    );

    // Removed for good: the uid is released, and a new sandbox gets a
    // fresh one rather than the one just released.
    let client = daemon.client().await;
    client
        .deprovision(Scope::Session, "keeper", false)
        .await
        .unwrap();
    // Released by the teardown that follows the answer.
    assert!(wait_until(Duration::from_secs(15), || daemon
        .ledger_uid(Scope::Session, "keeper")
        .is_none()));
    let other = start(&daemon, "newcomer", "tok").await;
    let other_uid = procs::uid_of(other).unwrap();
    assert_ne!(other_uid, uid, "a just-released uid went out again");
    assert!(RUNNER_UIDS.contains(&other_uid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_uid_is_not_handed_out_while_a_process_has_it() {
    // Two uids: once both are out, a new sandbox must wait for a release.
    let first = 2_100_000_000u32;
    let options = Options {
        extra_toml: format!("runner_uid_range = \"{first}-{}\"", first + 1),
        ..Options::default()
    };
    let daemon = TestDaemon::start(options);
    let a = start(&daemon, "a", "tok").await;
    let b = start(&daemon, "b", "tok").await;
    assert_eq!(procs::uid_of(a), Some(first));
    assert_eq!(procs::uid_of(b), Some(first + 1));
    let client = daemon.client().await;
    let env = sandbox_env("q:c", "tok");
    let error = client.ensure(Scope::Session, "c", &env).await.unwrap_err();
    assert!(
        error.to_string().contains("every uid of runner_uid_range"),
        "{error}"
    );

    // a is removed, but a process of its uid lives on outside its group
    // (as one that escaped with setsid would).
    client
        .deprovision(Scope::Session, "a", false)
        .await
        .unwrap();
    // The reply comes at the kill; the uid is released once the teardown
    // behind it (the workspace to the trash) is done.
    let a_workspace = daemon.workspace(Scope::Session, "a");
    assert!(
        wait_until(Duration::from_secs(30), || !a_workspace.exists()),
        "a's teardown never finished"
    );
    let mut survivor = procs::spawn(
        Command::new("sleep")
            .arg("60")
            .uid(first)
            .gid(first)
            .current_dir("/")
            .stdin(Stdio::null()),
    )
    .unwrap();
    let error = client.ensure(Scope::Session, "c", &env).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("still have processes (e.g. uid {first})")),
        "{text}"
    );
    assert!(
        !daemon.workspace(Scope::Session, "c").exists(),
        "a refused sandbox got a workspace"
    );

    survivor.kill().unwrap();
    survivor.wait().unwrap();
    let c = start(&daemon, "c", "tok").await;
    assert_eq!(procs::uid_of(c), Some(first), "the uid went out once free");
    assert_eq!(procs::uid_of(b), Some(first + 1), "b is untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_holding_a_host_user_or_bad_syntax_refuses_to_start_naming_it() {
    let nobody = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(NOBODY))
        .unwrap()
        .expect("this host has a user at 65534");
    let cases = [
        (
            "65000-65534".to_string(),
            format!(
                "runner_uid_range 65000-65534 contains uid 65534 (user {})",
                nobody.name
            ),
        ),
        (
            "2000-1000".to_string(),
            "runner_uid_range: the first uid 2000 is above the last 1000".to_string(),
        ),
        (
            "lots".to_string(),
            "runner_uid_range: 'lots' is not FIRST-LAST".to_string(),
        ),
    ];
    for (range, message) in cases {
        let mut daemon = TestDaemon::prepare(Options {
            extra_toml: format!("runner_uid_range = \"{range}\""),
            ..Options::default()
        });
        daemon.launch();
        let status = daemon
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("sandboxd must refuse runner_uid_range {range}"));
        assert!(!status.success(), "{range}: exited with {status}");
        let log = daemon.log_text();
        assert!(log.contains(&message), "{range}: no {message:?} in:\n{log}");
        assert!(
            std::os::unix::net::UnixStream::connect(daemon.socket()).is_err(),
            "nothing may be served"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_of_another_uid_is_handed_over_and_a_lost_record_is_recovered() {
    // A workspace an older sandboxd left, when every runner ran as nobody.
    let mut daemon = TestDaemon::prepare(Options::default());
    let workspace = daemon.workspace(Scope::Session, "old");
    std::fs::create_dir_all(workspace.join("deep/er")).unwrap();
    std::fs::write(workspace.join("deep/er/notes"), "from before").unwrap();
    // A link out of the workspace, to a directory of root's.
    let outside = daemon.dir().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("deep/link")).unwrap();
    // All nobody's, the link too: the hand-over takes only what its
    // previous owner owned (see handover_links.rs).
    for path in ["", "deep", "deep/er", "deep/er/notes", "deep/link"] {
        std::os::unix::fs::lchown(workspace.join(path), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    daemon.launch();
    daemon.wait_ready();
    let pid = start(&daemon, "old", "tok").await;
    let uid = procs::uid_of(pid).unwrap();
    assert!(RUNNER_UIDS.contains(&uid));
    for path in ["", "deep", "deep/er", "deep/er/notes", "deep/link"] {
        let metadata = std::fs::symlink_metadata(workspace.join(path)).unwrap();
        assert_eq!((metadata.uid(), metadata.gid()), (uid, uid), "{path:?}");
    }
    assert_eq!(
        std::fs::metadata(&outside).unwrap().uid(),
        0,
        "the hand-over followed a symbolic link"
    );

    // The ledger loses its lines (a crash at the wrong moment): the next
    // start takes the uid from the workspace's owner.
    daemon.stop();
    std::fs::write(daemon.ledger_journal(), "").unwrap();
    daemon.launch();
    daemon.wait_ready();
    assert_eq!(daemon.ledger_uid(Scope::Session, "old"), Some(uid));
    let again = start(&daemon, "old", "tok").await;
    assert_eq!(procs::uid_of(again), Some(uid));
    // And a new sandbox does not get it.
    let other = start(&daemon, "new", "tok").await;
    assert_ne!(procs::uid_of(other), Some(uid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_puts_every_runner_under_one_user_still_without_privileges() {
    // The explicit opt-out: one user for all (weaker: they share a uid).
    let daemon = TestDaemon::start(Options {
        extra_toml: format!("run_as = \"{NOBODY}:{NOBODY}\""),
        ..Options::default()
    });
    let a = start(&daemon, "one", "tok").await;
    let b = start(&daemon, "two", "tok").await;
    for pid in [a, b] {
        let ids = format!("{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}");
        assert_eq!(status_line(pid, "Uid"), ids);
        assert_eq!(status_line(pid, "Gid"), ids);
        assert_eq!(status_line(pid, "Groups"), "");
        assert_eq!(status_line(pid, "NoNewPrivs"), "1");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(status_line(pid, set), "0000000000000000", "{set}");
        }
    }
    assert_eq!(
        daemon.ledger_uid(Scope::Session, "one"),
        None,
        "no uid of a range"
    );
    let owner = std::fs::metadata(daemon.workspace(Scope::Session, "two")).unwrap();
    assert_eq!((owner.uid(), owner.gid()), (NOBODY, NOBODY));

    // Both at once is a contradiction, refused at start.
    let mut both = TestDaemon::prepare(Options {
        extra_toml: format!("run_as = \"{NOBODY}\"\nrunner_uid_range = \"2100000000-2100000009\""),
        ..Options::default()
    });
    both.launch();
    let status = both
        .wait_exit(Duration::from_secs(20))
        .expect("must refuse");
    assert!(!status.success());
    assert!(
        both.log_text()
            .contains("run_as and runner_uid_range are both set"),
        "{}",
        both.log_text()
    );
}
