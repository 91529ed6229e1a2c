//! Running as a systemd service, without systemd as PID 1: socket
//! activation, sd_notify readiness/status/stopping, the watchdog, the
//! capability bounding set of sandboxd.service, journald output, and the
//! install script.

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sandboxd_client::{SandboxdClient, Scope};
use sandboxd_tests::activation::{
    bind_listener, children_of, socket_inode, socket_inodes, ActivatedDaemon, NotifySocket,
};
use sandboxd_tests::{
    binaries, make_test_dir, run_with_timeout, runner_env, sandbox_env, wait_for_runner,
    wait_until, Options, TestDaemon,
};

/// How long a daemon gets to say READY=1.
const START: Duration = Duration::from_secs(20);

/// The variables systemd sets for a service, none of which a runner may see.
const SYSTEMD_VARIABLES: [&str; 6] = [
    "NOTIFY_SOCKET",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];

fn path_str(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// Waits for READY=1, panicking with the daemon's log when it does not come.
fn wait_ready(notify: &mut NotifySocket, daemon: &ActivatedDaemon) -> String {
    notify.wait_for("READY=1", START).unwrap_or_else(|| {
        panic!(
            "no READY=1 within {START:?} (got {:?}); log:\n{}",
            notify.received(),
            daemon.log_text()
        )
    })
}

/// Launches a daemon on `listener` as systemd would start it with one
/// socket and a notify socket, plus the `extra` variables a test sets.
fn launch_notifying(
    daemon: &TestDaemon,
    listener: &UnixListener,
    notify: &NotifySocket,
    extra: &[(&str, &str)],
) -> ActivatedDaemon {
    let mut env = vec![
        ("LISTEN_FDS", "1"),
        ("NOTIFY_SOCKET", path_str(notify.path())),
    ];
    env.extend_from_slice(extra);
    ActivatedDaemon::launch_on(daemon, listener, &env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_activation_serves_the_passed_socket_and_leaves_it_to_systemd() {
    let daemon = TestDaemon::prepare(Options::default());
    let listener = bind_listener(&daemon);
    let passed = socket_inode(std::process::id(), listener.as_raw_fd()).expect("a socket");
    let mut notify = NotifySocket::bind(daemon.dir());
    let notify_path = notify.path().to_path_buf();
    let env = [
        ("LISTEN_FDS", "1"),
        ("LISTEN_FDNAMES", "sandboxd.sock"),
        ("NOTIFY_SOCKET", path_str(&notify_path)),
    ];
    let mut first = ActivatedDaemon::launch_on(&daemon, &listener, &env);
    let ready = wait_ready(&mut notify, &first);
    assert!(ready.contains("STATUS=serving on "), "{ready}");

    // Told READY, a caller is answered at once.
    let client = tokio::time::timeout(
        Duration::from_secs(2),
        SandboxdClient::connect(daemon.socket()),
    )
    .await
    .expect("answered right after READY=1")
    .expect("connect");
    let status = client.status().await.unwrap();
    assert_eq!(status.socket_path, path_str(daemon.socket()));
    assert!(
        first
            .log_text()
            .contains("serving the socket systemd passed"),
        "{}",
        first.log_text()
    );
    assert_eq!(
        socket_inode(first.pid(), 3),
        Some(passed),
        "fd 3 is served as passed"
    );

    // A runner sees none of systemd's variables and does not hold the socket;
    // nor does the group reaper.
    let report = client
        .ensure_session_sandbox("act-1", &sandbox_env("session:act-1", "tok"))
        .await
        .unwrap();
    let runner = report.pid.unwrap();
    let workspace = daemon.workspace(Scope::Session, "act-1");
    wait_for_runner(&workspace, runner);
    let runner_env = runner_env(&workspace);
    for name in SYSTEMD_VARIABLES {
        assert!(!runner_env.contains_key(name), "the runner got {name}");
    }
    assert!(
        !socket_inodes(runner).contains(&passed),
        "the runner holds the socket"
    );
    // The pool's refill after that start is over first: a child cloned
    // for it holds a copy of the daemon's descriptors until its exec.
    let refilled = sandboxd_tests::eventually(Duration::from_secs(60), || async {
        let status = client.status().await.unwrap();
        status.pools.iter().all(|pool| pool.ready == pool.size)
    })
    .await;
    assert!(refilled, "the pool never refilled");
    let children = children_of(first.pid());
    assert!(
        children.len() >= 2,
        "the runner and the group reaper: {children:?}"
    );
    // A child the daemon is cloning at this moment (a prepared view's
    // holder, made right after a start) holds every descriptor until its
    // exec closes the close-on-exec ones, as any fork-and-exec does: what
    // must not happen is a child that keeps the socket.
    for child in children {
        assert!(
            wait_until(Duration::from_secs(30), || !socket_inodes(child)
                .contains(&passed)),
            "child {child} of the daemon holds the socket"
        );
    }

    // SIGTERM: STOPPING=1, exit 0, and the socket is left as it was.
    first.terminate();
    let stopping = notify.wait_for("STOPPING=1", Duration::from_secs(10));
    assert!(stopping.is_some(), "no STOPPING=1: {:?}", notify.received());
    let exit = first.wait_exit(Duration::from_secs(20)).expect("exits");
    assert!(exit.success(), "{exit}; log:\n{}", first.log_text());
    assert!(daemon.socket().exists(), "the passed socket was unlinked");
    drop(client);

    // While no daemon runs, a caller waits in the backlog; the next daemon
    // on the same socket answers it.
    let queued = tokio::spawn({
        let socket = daemon.socket().to_path_buf();
        async move {
            let client = SandboxdClient::builder()
                .socket(socket)
                .deadline(Duration::from_secs(30))
                .connect()
                .await?;
            client.status().await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!queued.is_finished(), "nobody should have answered yet");
    let mut second = ActivatedDaemon::launch_on(&daemon, &listener, &env);
    wait_ready(&mut notify, &second);
    let status = queued.await.unwrap().expect("the queued caller is served");
    assert_eq!(
        status.counts.running, 0,
        "the first daemon stopped its runner"
    );
    second.terminate();
    assert!(second
        .wait_exit(Duration::from_secs(20))
        .expect("exits")
        .success());
    assert!(daemon.socket().exists());
    UnixStream::connect(daemon.socket()).expect("the socket still listens (the test's copy)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_waits_for_the_driver() {
    let daemon = TestDaemon::prepare(Options::default());
    // Hold the state directory's lock, as an earlier instance's reaper
    // would: the driver waits for it before it is ready.
    fs::create_dir_all(daemon.state_dir()).unwrap();
    let lock_file = fs::File::create(daemon.state_dir().join("sandboxd.lock")).unwrap();
    let lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .unwrap();
    let listener = bind_listener(&daemon);
    let mut notify = NotifySocket::bind(daemon.dir());
    let activated = launch_notifying(&daemon, &listener, &notify, &[]);
    let early = notify.collect_for(Duration::from_millis(1500));
    assert!(
        early.iter().all(|message| !message.contains("READY=1")),
        "READY=1 before the driver was ready: {early:?}"
    );
    drop(lock);
    wait_ready(&mut notify, &activated);
    let log = activated.log_text();
    let driver_ready = log
        .find("local-process driver ready")
        .expect("driver ready logged");
    let serving = log.find("sandboxd is serving").expect("serving logged");
    assert!(driver_ready < serving, "{log}");
}

/// Socket-activates a daemon with `WATCHDOG_USEC` and `WATCHDOG_PID` as
/// given, waits for READY=1 and returns what it notifies over the next
/// `window`: the watchdog tests judge the pings (and status) in it.
fn notified_after_ready(watchdog_usec: &str, watchdog_pid: &str, window: Duration) -> Vec<String> {
    let daemon = TestDaemon::prepare(Options::default());
    let listener = bind_listener(&daemon);
    let mut notify = NotifySocket::bind(daemon.dir());
    let activated = launch_notifying(
        &daemon,
        &listener,
        &notify,
        &[
            ("WATCHDOG_USEC", watchdog_usec),
            ("WATCHDOG_PID", watchdog_pid),
        ],
    );
    wait_ready(&mut notify, &activated);
    notify.collect_for(window)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_is_pinged_at_half_its_timeout_and_status_counts_sandboxes() {
    let messages = notified_after_ready("400000", "$$", Duration::from_secs(2));
    let pings = messages
        .iter()
        .filter(|message| *message == "WATCHDOG=1")
        .count();
    // Every 200 ms for 2 s: about 10.
    assert!((6..=14).contains(&pings), "{pings} pings: {messages:?}");
    assert!(
        messages
            .iter()
            .any(|message| message
                == "STATUS=driver local-process; 0 sandboxes (0 running, 0 stopped)"),
        "{messages:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_meant_for_another_process_is_not_pinged() {
    let messages = notified_after_ready("200000", "1", Duration::from_secs(1));
    assert!(
        !messages
            .iter()
            .any(|message| message.contains("WATCHDOG=1")),
        "{messages:?}"
    );
}

/// Starts a daemon with this fd 3 and environment, expecting it to refuse.
fn refused(passed: std::os::fd::RawFd, env: &[(&str, &str)]) -> String {
    let daemon = TestDaemon::prepare(Options::default());
    let mut activated = ActivatedDaemon::launch(&daemon, passed, env);
    let exit = activated
        .wait_exit(Duration::from_secs(20))
        .expect("the daemon exits");
    assert_eq!(exit.code(), Some(1), "{}", activated.log_text());
    assert!(!daemon.socket().exists(), "nothing was bound");
    activated.log_text()
}

#[test]
fn a_handoff_that_cannot_be_served_is_refused_by_name() {
    let dir = make_test_dir();
    let listener = UnixListener::bind(dir.join("s.sock")).unwrap();
    let log = refused(listener.as_raw_fd(), &[("LISTEN_FDS", "2")]);
    assert!(
        log.contains("systemd passed 2 sockets (LISTEN_FDS=2)"),
        "{log}"
    );

    let file = fs::File::create(dir.join("not-a-socket")).unwrap();
    let log = refused(file.as_raw_fd(), &[("LISTEN_FDS", "1")]);
    assert!(
        log.contains("fd 3 passed by systemd is not a socket"),
        "{log}"
    );

    let datagram = UnixDatagram::bind(dir.join("d.sock")).unwrap();
    let log = refused(datagram.as_raw_fd(), &[("LISTEN_FDS", "1")]);
    assert!(log.contains("not a stream socket"), "{log}");

    let log = refused(
        listener.as_raw_fd(),
        &[("LISTEN_FDS", "1"), ("WATCHDOG_USEC", "soon")],
    );
    assert!(log.contains("WATCHDOG_USEC=\"soon\""), "{log}");
    fs::remove_dir_all(dir).unwrap();
}

/// The capabilities sandboxd.service keeps, as setpriv(1) names them.
const UNIT_CAPABILITIES: [&str; 11] = [
    "setuid",
    "setgid",
    "setpcap",
    "kill",
    "chown",
    "dac_override",
    "net_admin",
    "net_bind_service",
    "sys_admin",
    "sys_chroot",
    "sys_ptrace",
];

/// `CapabilityBoundingSet=` of the shipped unit, lower-cased without `CAP_`.
fn unit_capabilities() -> Vec<String> {
    let unit = fs::read_to_string(repo().join("systemd/sandboxd.service")).unwrap();
    let line = unit
        .lines()
        .find(|line| line.starts_with("CapabilityBoundingSet="))
        .expect("the unit bounds its capabilities");
    let mut caps: Vec<String> = line["CapabilityBoundingSet=".len()..]
        .split_whitespace()
        .map(|cap| cap.trim_start_matches("CAP_").to_lowercase())
        .collect();
    caps.sort();
    caps
}

/// A runner's whole life — ensure (setgid/setuid, an empty bounding set,
/// chown of the workspace), deprovision (signals to another uid, removal
/// of its files) — under a
/// daemon whose capabilities are bounded to `caps`. The error, if any part
/// failed.
async fn lifecycle_with_capabilities(caps: &[&str]) -> Result<(), String> {
    let daemon = TestDaemon::prepare(Options::default());
    let listener = bind_listener(&daemon);
    let mut notify = NotifySocket::bind(daemon.dir());
    let bounding = format!(
        "--bounding-set=-all{}",
        caps.iter()
            .map(|cap| format!(",+{cap}"))
            .collect::<String>()
    );
    let activated = ActivatedDaemon::launch_wrapped(
        &daemon,
        listener.as_raw_fd(),
        &[
            ("LISTEN_FDS", "1"),
            ("NOTIFY_SOCKET", path_str(notify.path())),
        ],
        &["setpriv", &bounding, "--inh-caps=-all", "--"],
    );
    wait_ready(&mut notify, &activated);
    let client = SandboxdClient::connect(daemon.socket()).await.unwrap();
    // The default isolation, whole: without CAP_SYS_ADMIN the daemon falls
    // back to uid-cgroup (and says so) rather than failing.
    let status = client
        .status()
        .await
        .map_err(|error| format!("status: {error}"))?;
    // And its own network namespace (the default): without CAP_NET_ADMIN
    // or CAP_NET_BIND_SERVICE the daemon shares the host's, and says so.
    for wanted in ["mount-namespace", "network-namespace"] {
        if let Some(missing) = status
            .isolation
            .iter()
            .find(|feature| feature.name == wanted && !feature.in_force)
        {
            return Err(format!("status: no {wanted}: {}", missing.detail));
        }
    }
    // A view prepared ahead is ready before the ensure, so the sandbox
    // joins it (which needs CAP_SYS_CHROOT and CAP_SYS_PTRACE).
    wait_for_a_prepared_session_view(&client).await?;
    let report = client
        .ensure_session_sandbox("caps", &sandbox_env("session:caps", "tok"))
        .await
        .map_err(|error| format!("ensure: {error}"))?;
    let workspace = daemon.workspace(Scope::Session, "caps");
    let pid = report.pid.unwrap();
    wait_for_runner(&workspace, pid);
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    if !status.contains("\nCapBnd:\t0000000000000000\n") {
        return Err(format!("ensure: the runner kept a bounding set:\n{status}"));
    }
    let status = client
        .status()
        .await
        .map_err(|error| format!("status: {error}"))?;
    match status
        .isolation
        .iter()
        .find(|feature| feature.name == "prepared-views")
    {
        Some(pool) if pool.in_force && pool.detail.contains("1 taken") => {}
        other => return Err(format!("ensure: no prepared view was taken: {other:?}")),
    }
    let owner = fs::metadata(&workspace).unwrap().uid();
    assert!(
        sandboxd_tests::RUNNER_UIDS.contains(&owner),
        "workspace owner {owner}"
    );
    let report = client
        .deprovision_session_sandbox("caps")
        .await
        .map_err(|error| format!("deprovision: {error}"))?;
    if report.forced {
        return Err("deprovision: the runner had to be killed".into());
    }
    // The reply comes at the kill; the workspace goes right behind it.
    if !sandboxd_tests::wait_until(Duration::from_secs(30), || !workspace.exists()) {
        return Err("deprovision: the workspace is still there".into());
    }
    Ok(())
}

/// Waits until the daemon's pool holds a session view (made on its own
/// thread after start), or says what the pool reports instead.
async fn wait_for_a_prepared_session_view(client: &SandboxdClient) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let status = client
            .status()
            .await
            .map_err(|error| format!("status: {error}"))?;
        let pool = status
            .isolation
            .iter()
            .find(|feature| feature.name == "prepared-views")
            .cloned();
        match &pool {
            Some(pool) if pool.in_force && !pool.detail.starts_with("session: 0 of") => {
                return Ok(())
            }
            // A pool that could not start never will: no need to wait.
            Some(pool) if !pool.in_force && pool.detail.ends_with("every sandbox starts cold") => {
                return Err(format!("the pool did not start: {}", pool.detail))
            }
            _ if std::time::Instant::now() > deadline => {
                return Err(format!("no session view was prepared: {pool:?}"))
            }
            _ => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_units_capability_set_is_enough_and_each_capability_is_needed() {
    assert!(
        Path::new("/usr/bin/setpriv").exists() || Path::new("/bin/setpriv").exists(),
        "this test needs setpriv(1) from util-linux"
    );
    let mut expected: Vec<String> = UNIT_CAPABILITIES
        .iter()
        .map(|cap| cap.to_string())
        .collect();
    expected.sort();
    assert_eq!(
        unit_capabilities(),
        expected,
        "the unit and this test disagree"
    );

    lifecycle_with_capabilities(&UNIT_CAPABILITIES)
        .await
        .expect("a runner's whole life works with the unit's capabilities");
    // CAP_KILL is left out here: without it a stop waits out the full
    // SIGKILL timeout (30 s) before failing.
    for missing in [
        "setuid",
        "setgid",
        "setpcap",
        "chown",
        "dac_override",
        "net_admin",
        "net_bind_service",
        "sys_admin",
        "sys_chroot",
        "sys_ptrace",
    ] {
        let fewer: Vec<&str> = UNIT_CAPABILITIES
            .iter()
            .copied()
            .filter(|cap| *cap != missing)
            .collect();
        let result = lifecycle_with_capabilities(&fewer).await;
        assert!(
            result.is_err(),
            "CAP_{} is in the unit but nothing needed it",
            missing.to_uppercase()
        );
    }
}

/// The repository's root (this package is `tests/`).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn install(destdir: &Path, prefix: Option<&str>, args: &[&str]) -> String {
    let bin_dir = binaries::sandboxd().parent().unwrap().to_path_buf();
    let mut command = Command::new(repo().join("systemd/install.sh"));
    command
        .args(args)
        .arg("--bin-dir")
        .arg(&bin_dir)
        .env("DESTDIR", destdir)
        .env_remove("SYSCONFDIR");
    match prefix {
        Some(prefix) => command.env("PREFIX", prefix),
        None => command.env_remove("PREFIX"),
    };
    let output = run_with_timeout(command, Duration::from_secs(60));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "install.sh {args:?} failed:\n{text}"
    );
    text
}

/// Every file (not directory) under `root`, with its mode, sorted.
fn files_and_modes(root: &Path) -> Vec<(String, u32)> {
    fn walk(root: &Path, dir: &Path, found: &mut Vec<(String, u32)>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let metadata = fs::symlink_metadata(&path).unwrap();
            if metadata.is_dir() {
                walk(root, &path, found);
            } else {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                found.push((
                    format!("/{relative}"),
                    metadata.permissions().mode() & 0o7777,
                ));
            }
        }
    }
    let mut found = Vec::new();
    if root.exists() {
        walk(root, root, &mut found);
    }
    found.sort();
    found
}

#[test]
fn install_into_a_destdir_puts_every_file_with_its_mode() {
    let dir = make_test_dir();
    let destdir = dir.join("root");
    let output = install(&destdir, None, &[]);
    assert!(output.contains("DESTDIR set"), "{output}");
    let mut expected: Vec<(String, u32)> = [
        ("/etc/stigmer/sandboxd.toml", 0o640),
        ("/usr/local/bin/sandboxctl", 0o755),
        ("/usr/local/bin/sandboxd", 0o755),
        ("/usr/local/bin/sandboxd-init", 0o755),
        ("/usr/local/lib/systemd/system/sandboxd.service", 0o644),
        ("/usr/local/lib/systemd/system/sandboxd.socket", 0o644),
        ("/usr/local/lib/sysusers.d/sandboxd.conf", 0o644),
        ("/usr/local/lib/tmpfiles.d/sandboxd.conf", 0o644),
        // Man pages and completions: generated by the binaries from their clap definitions.
        (
            "/usr/local/share/bash-completion/completions/sandboxctl",
            0o644,
        ),
        (
            "/usr/local/share/bash-completion/completions/sandboxd",
            0o644,
        ),
        ("/usr/local/share/doc/sandboxd/README.md", 0o644),
        ("/usr/local/share/doc/sandboxd/sandboxd.toml.example", 0o644),
        (
            "/usr/local/share/fish/vendor_completions.d/sandboxctl.fish",
            0o644,
        ),
        (
            "/usr/local/share/fish/vendor_completions.d/sandboxd.fish",
            0o644,
        ),
        ("/usr/local/share/man/man8/sandboxd.8", 0o644),
        ("/usr/local/share/zsh/site-functions/_sandboxctl", 0o644),
        ("/usr/local/share/zsh/site-functions/_sandboxd", 0o644),
    ]
    .iter()
    .map(|(path, mode)| (path.to_string(), *mode))
    .chain(
        sandboxctl_man_pages()
            .into_iter()
            .map(|page| (format!("/usr/local/share/man/man1/{page}"), 0o644)),
    )
    .chain(
        doc_pages()
            .into_iter()
            .map(|page| (format!("/usr/local/share/doc/sandboxd/{page}"), 0o644)),
    )
    .collect();
    expected.sort();
    assert_eq!(files_and_modes(&destdir), expected);

    let installed = |path: &str| destdir.join(path.trim_start_matches('/'));
    assert_eq!(
        fs::read(installed("/usr/local/bin/sandboxd")).unwrap(),
        fs::read(binaries::sandboxd()).unwrap()
    );
    assert_eq!(
        fs::read(installed("/usr/local/bin/sandboxd-init")).unwrap(),
        fs::read(binaries::sandboxd_init()).unwrap()
    );
    assert_eq!(
        fs::read(installed("/usr/local/bin/sandboxctl")).unwrap(),
        fs::read(binaries::sandboxctl()).unwrap()
    );
    let service =
        fs::read_to_string(installed("/usr/local/lib/systemd/system/sandboxd.service")).unwrap();
    assert!(
        service
            .contains("\nExecStart=/usr/local/bin/sandboxd --config /etc/stigmer/sandboxd.toml\n"),
        "{service}"
    );
    assert_eq!(
        fs::read_to_string(installed("/etc/stigmer/sandboxd.toml")).unwrap(),
        fs::read_to_string(repo().join("systemd/sandboxd.toml")).unwrap()
    );
    let version = Command::new(installed("/usr/local/bin/sandboxd"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("sandboxd "));
    let page = fs::read_to_string(installed("/usr/local/share/man/man1/sandboxctl.1")).unwrap();
    assert!(page.contains(".TH sandboxctl 1"), "{page}");
    let page =
        fs::read_to_string(installed("/usr/local/share/man/man1/sandboxctl-ensure.1")).unwrap();
    assert!(page.contains(".TH sandboxctl-ensure 1"), "{page}");
    let bash = fs::read_to_string(installed(
        "/usr/local/share/bash-completion/completions/sandboxd",
    ))
    .unwrap();
    assert!(bash.contains("--state-dir"), "{bash}");

    // Again, over an edited config: the files are replaced, the config kept.
    fs::write(
        installed("/etc/stigmer/sandboxd.toml"),
        "driver = \"docker\"\n",
    )
    .unwrap();
    let output = install(&destdir, None, &[]);
    assert!(output.contains("keeping the existing"), "{output}");
    assert_eq!(files_and_modes(&destdir), expected);
    assert_eq!(
        fs::read_to_string(installed("/etc/stigmer/sandboxd.toml")).unwrap(),
        "driver = \"docker\"\n"
    );

    // Uninstalling removes everything but the config.
    install(&destdir, None, &["--uninstall"]);
    assert_eq!(
        files_and_modes(&destdir),
        [("/etc/stigmer/sandboxd.toml".to_string(), 0o640)]
    );

    // Another prefix moves the binaries, the units, and ExecStart= with them.
    let packaged = dir.join("packaged");
    install(&packaged, Some("/usr"), &[]);
    let service =
        fs::read_to_string(packaged.join("usr/lib/systemd/system/sandboxd.service")).unwrap();
    assert!(
        service.contains("\nExecStart=/usr/bin/sandboxd --config"),
        "{service}"
    );
    assert!(packaged.join("usr/bin/sandboxctl").exists());
    fs::remove_dir_all(dir).unwrap();
}

/// journald's native socket, which `tracing-journald` writes to.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_journald_the_log_goes_to_the_journal_with_fields() {
    if Path::new(JOURNAL_SOCKET).exists() {
        // A real journal: the daemon would write there, not to this test.
        eprintln!("skipped: {JOURNAL_SOCKET} exists (a real journald runs here)");
        return;
    }
    // Stand in for journald: its socket, and JOURNAL_STREAM naming the
    // daemon's stderr (the log file), as systemd sets it.
    let created: Vec<PathBuf> = ["/run/systemd", "/run/systemd/journal"]
        .iter()
        .map(PathBuf::from)
        .filter(|dir| !dir.exists())
        .collect();
    for dir in &created {
        fs::create_dir(dir).unwrap();
    }
    struct Cleanup(Vec<PathBuf>);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = fs::remove_file(JOURNAL_SOCKET);
            for dir in self.0.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
        }
    }
    let _cleanup = Cleanup(created);
    let journal = UnixDatagram::bind(JOURNAL_SOCKET).unwrap();
    journal
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();

    let daemon = TestDaemon::prepare(Options::default());
    let log = daemon.dir().join("activated.log");
    fs::File::create(&log).unwrap();
    let metadata = fs::metadata(&log).unwrap();
    let stream = format!("{}:{}", metadata.dev(), metadata.ino());
    let listener = bind_listener(&daemon);
    let mut notify = NotifySocket::bind(daemon.dir());
    let activated = ActivatedDaemon::launch_on(
        &daemon,
        &listener,
        &[
            ("LISTEN_FDS", "1"),
            ("NOTIFY_SOCKET", path_str(notify.path())),
            ("JOURNAL_STREAM", &stream),
        ],
    );
    wait_ready(&mut notify, &activated);
    let mut entries = Vec::new();
    let found = wait_until(Duration::from_secs(10), || {
        let mut buffer = vec![0u8; 64 * 1024];
        if let Ok(n) = journal.recv(&mut buffer) {
            entries.push(journal_fields(&buffer[..n]));
        }
        entries
            .iter()
            .any(|entry| entry.get("MESSAGE").map(String::as_str) == Some("sandboxd is serving"))
    });
    assert!(
        found,
        "no journal entry for 'sandboxd is serving': {entries:?}"
    );
    let serving = entries
        .iter()
        .find(|entry| entry.get("MESSAGE").map(String::as_str) == Some("sandboxd is serving"))
        .unwrap();
    let field = |name: &str| serving.get(name).map(String::as_str);
    assert_eq!(field("SYSLOG_IDENTIFIER"), Some("sandboxd"), "{serving:?}");
    assert_eq!(field("DRIVER"), Some("local-process"), "{serving:?}");
    assert_eq!(
        field("SOCKET"),
        Some(path_str(daemon.socket())),
        "{serving:?}"
    );
    assert_eq!(
        field("PRIORITY"),
        Some("6"),
        "info is syslog's informational: {serving:?}"
    );
    assert!(
        !activated.log_text().contains("sandboxd is serving"),
        "the line went to stderr as well"
    );
}

/// The fields of one entry in journald's native protocol: `NAME=value\n`,
/// or `NAME\n` + a little-endian u64 length + the value + `\n`.
fn journal_fields(datagram: &[u8]) -> std::collections::BTreeMap<String, String> {
    let mut fields = std::collections::BTreeMap::new();
    let mut rest = datagram;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&byte| byte == b'\n') else {
            break;
        };
        let line = &rest[..end];
        if let Some(eq) = line.iter().position(|&byte| byte == b'=') {
            let name = String::from_utf8_lossy(&line[..eq]).into_owned();
            fields.insert(name, String::from_utf8_lossy(&line[eq + 1..]).into_owned());
            rest = &rest[end + 1..];
        } else {
            let name = String::from_utf8_lossy(line).into_owned();
            let after = &rest[end + 1..];
            let length = u64::from_le_bytes(after[..8].try_into().unwrap()) as usize;
            let value = &after[8..8 + length];
            fields.insert(name, String::from_utf8_lossy(value).into_owned());
            rest = &after[8 + length + 1..];
        }
    }
    fields
}

/// The file names of every page `sandboxctl man-page --list` names.
/// The manual's pages past the README (`docs/*.md`, `docs/tiers/*.md`),
/// relative to the checkout: the installer puts each beside the README.
fn doc_pages() -> Vec<String> {
    ["docs", "docs/tiers"]
        .iter()
        .flat_map(|dir| {
            fs::read_dir(repo().join(dir))
                .unwrap()
                .flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
                .map(|path| {
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    format!("{dir}/{name}")
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

fn sandboxctl_man_pages() -> Vec<String> {
    let output = Command::new(binaries::sandboxctl())
        .args(["man-page", "--list"])
        .output()
        .unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}
