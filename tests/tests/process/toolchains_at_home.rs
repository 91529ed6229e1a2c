//! Real toolchains at home in a process-tier sandbox (`isolation =
//! "full"`, the default): the sandbox's uid has a passwd and group entry
//! in its view (home `/workspace`, system users still there), and its
//! workspace is at `/workspace`, short enough for Unix sockets under it.
//! The same cold and in a view prepared ahead (`[pool]`); the host's
//! `/etc/passwd` is not changed.

use std::time::Duration;

use sandboxd_client::{CommandRef, ExitReason, OutputStream, Scope};
use sandboxd_tests::commands::shell;
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(60);

/// What `script` prints in session `id`'s sandbox; it must exit 0.
async fn run(daemon: &TestDaemon, id: &str, script: &str) -> String {
    run_within(daemon, id, script, WAIT).await
}

/// [`run`], waiting up to `wait` for the end.
async fn run_within(daemon: &TestDaemon, id: &str, script: &str, wait: Duration) -> String {
    let client = daemon.client().await;
    let started = client
        .exec(Scope::Session, id, &shell(script))
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    let command = CommandRef::Id(started.command_id);
    let read = |stream| sandboxd_tests::commands::read_all(&client, id, &command, stream, wait);
    let (stdout, proof) = read(OutputStream::Stdout).await;
    let (stderr, _) = read(OutputStream::Stderr).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    );
    assert_eq!(
        proof.reason,
        ExitReason::Exited { code: 0 },
        "{script}\nstdout: {stdout}\nstderr: {stderr}"
    );
    stdout
}

/// Every check of a toolchain at home, in session `id`'s sandbox.
async fn a_toolchain_is_at_home(daemon: &TestDaemon, id: &str) {
    let host_passwd = std::fs::read(PASSWD).unwrap();
    let uid = run(daemon, id, "id -u").await.trim().to_string();
    assert_ne!(uid, "0");
    assert_eq!(run(daemon, id, "id -un").await.trim(), "sandbox");
    assert_eq!(run(daemon, id, "whoami").await.trim(), "sandbox");
    let entry = run(daemon, id, "getent passwd $(id -u)").await;
    assert!(
        entry
            .trim()
            .ends_with(&format!(":{uid}:{uid}:sandbox:/workspace:/bin/sh"))
            || entry.contains(":/workspace:/bin/sh"),
        "{entry}"
    );
    assert!(!run(daemon, id, "id -gn").await.trim().is_empty());
    assert!(run(daemon, id, "getent passwd root")
        .await
        .starts_with("root:x:0:0:"));
    assert_eq!(
        run(daemon, id, "echo $HOME $WORKSPACE_ROOT_DIR; pwd").await,
        "/workspace /workspace\n/workspace\n"
    );
    // `[runner] env` (the tests' daemons set this one) reaches commands.
    assert_eq!(
        run(daemon, id, "echo $SANDBOXD_TEST_DIR").await,
        format!("{}/\n", daemon.dir().display())
    );
    let python =
        "import getpass,pwd,os; print(getpass.getuser(), pwd.getpwuid(os.getuid()).pw_dir)";
    assert_eq!(
        run(daemon, id, &format!("python3 -c '{python}'")).await,
        "sandbox /workspace\n"
    );
    // A socket path of 91 bytes: over the limit under the host's path.
    let socket = "import socket; s=socket.socket(socket.AF_UNIX); s.bind('/workspace/' + 'x'*80); print('bound')";
    assert_eq!(
        run(daemon, id, &format!("python3 -c \"{socket}\"")).await,
        "bound\n"
    );
    // ssh-keygen looks its user up (without an entry: exit 255, "No user
    // exists for uid").
    if std::path::Path::new("/usr/bin/ssh-keygen").exists() {
        let keygen = "ssh-keygen -q -t ed25519 -N '' -f /workspace/id_test && echo made";
        assert_eq!(run(daemon, id, keygen).await, "made\n");
    }
    // The name from the entry (without one git stops at "unable to look
    // up current user"); the address only where the host's name has a
    // domain, which this one may lack, so it is given here.
    let git = "git -C /workspace init -q repo && cd repo \
               && EMAIL=dev@example.invalid git commit -q --allow-empty -m x \
               && git log -1 --format=%an";
    assert_eq!(run(daemon, id, git).await.trim(), "sandbox");
    if std::path::Path::new("/usr/bin/node").exists() {
        assert_eq!(
            run(
                daemon,
                id,
                "node -e 'console.log(require(\"os\").userInfo().username)'"
            )
            .await,
            "sandbox\n"
        );
    }
    // The host's file is as it was, and the view's copy cannot be written.
    assert_eq!(std::fs::read(PASSWD).unwrap(), host_passwd);
    assert_eq!(
        run(
            daemon,
            id,
            "echo 'root::0:0::/:/bin/sh' >> /etc/passwd 2>/dev/null && echo wrote || echo refused"
        )
        .await,
        "refused\n"
    );
}

const PASSWD: &str = "/etc/passwd";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_sandbox_has_a_user_and_its_workspace_at_workspace() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[pool]\nsession = 0\nworkflow = 0\nconnect = 0\n".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "home").await;
    let status = daemon.client().await.status().await.unwrap();
    let at_home = status
        .isolation
        .iter()
        .find(|feature| feature.name == "at-home")
        .expect("status lists at-home");
    assert!(
        at_home.in_force && at_home.detail.contains("/workspace"),
        "{at_home:?}"
    );
    a_toolchain_is_at_home(&daemon, "home").await;
    // The host path is still what the daemon reports and where files are.
    let workspace = daemon.workspace(Scope::Session, "home");
    assert!(workspace.join("repo/.git").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_in_a_prepared_view_has_them_too() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "[pool]\nsession = 1\nworkflow = 0\nconnect = 0\n".to_string(),
        ..Options::default()
    });
    // The pool's view is ready, then taken.
    let deadline = std::time::Instant::now() + WAIT;
    while !pool_detail(&daemon).await.starts_with("session: 1 of") {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sandboxd_tests::start_session(&daemon, "warm").await;
    let pool = pool_detail(&daemon).await;
    assert!(pool.contains("1 taken, 0 started cold"), "{pool}");
    a_toolchain_is_at_home(&daemon, "warm").await;
}

async fn pool_detail(daemon: &TestDaemon) -> String {
    let status = daemon.client().await.status().await.unwrap();
    status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "prepared-views")
        .expect("status lists the prepared views")
        .detail
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_view_the_host_path_stays_and_status_says_so() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"\n".to_string(),
        ..Options::default()
    });
    sandboxd_tests::start_session(&daemon, "bare").await;
    let workspace = daemon.workspace(Scope::Session, "bare");
    assert_eq!(
        run(&daemon, "bare", "echo $HOME $WORKSPACE_ROOT_DIR; pwd").await,
        format!("{0} {0}\n{0}\n", workspace.display())
    );
    // No view, no entry of its own: what every sandbox met before.
    assert_eq!(
        run(&daemon, "bare", "whoami 2>/dev/null || echo unnamed").await,
        "unnamed\n"
    );
    let status = daemon.client().await.status().await.unwrap();
    let at_home = status
        .isolation
        .into_iter()
        .find(|feature| feature.name == "at-home")
        .unwrap();
    assert!(!at_home.in_force, "{at_home:?}");
}

/// CPython's own tests of the calls a toolchain leans on (users and
/// groups, sockets of every family the sandbox may open), from Debian's
/// `libpython3.11-testsuite`, run inside as the sandbox's user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpythons_posix_and_socket_tests_pass_inside() {
    let suite = std::path::Path::new("/usr/lib/python3.11/test/test_posix.py");
    if !suite.exists() || !std::path::Path::new("/usr/bin/python3.11").exists() {
        eprintln!(
            "SKIPPED: CPython's test suite is not installed here (apt-get install libpython3.11-testsuite)"
        );
        return;
    }
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "cpython").await;
    let script =
        "cd /workspace && /usr/bin/python3.11 -m test test_posix test_socket 2>&1 | tail -5";
    let out = run_within(&daemon, "cpython", script, Duration::from_secs(900)).await;
    assert!(out.contains("Tests result: SUCCESS"), "{out}");
}
