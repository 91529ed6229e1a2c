//! The Node package (`clients/node`) against a real daemon: this test
//! starts one with the harness, then runs the package's own tests
//! (`node --test clients/node/test/`) with `SANDBOXD_SOCKET` pointing at
//! it, and fails when they fail. The addon they load is the cdylib the
//! README's build command (`cargo build --workspace --bins --lib`) puts
//! next to the binaries; `binaries::node_addon` refuses a stale one.
//!
//! Two things only this side can do are offered to the Node tests:
//! restarting the daemon (a test writes `restart-request` into
//! `$SANDBOXD_TEST_CONTROL_DIR`; the daemon is stopped and started again
//! on the same socket, then `restart-done` is written) and a listener that
//! answers the version handshake with another protocol version
//! (`$SANDBOXD_TEST_MISMATCH_SOCKET`).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::{wire, PROTOCOL_VERSION};
use sandboxd_tests::{binaries, run_with_timeout, Options, TestDaemon, NOBODY};
use tokio::net::UnixListener;
use tokio_util::codec::Framed;

/// How long the whole Node suite may take on a busy machine.
const SUITE_TIMEOUT: Duration = Duration::from_secs(600);

/// The tokens the Node tests hand the daemon; none may reach its log.
const TOKEN_MARK: &str = "node-secret-";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_package_passes_its_tests_against_a_real_daemon() {
    let addon = binaries::node_addon();
    // Runners ignore SIGTERM when their queue says so, and are given 11 s
    // for it: longer than the client's 10 s deadline, so the Node tests
    // see a deprovision that takes longer than that succeed.
    let mut options = Options::with_runner_args(&["--work-by-queue"]);
    options.stop_grace = "11s".to_string();
    let mut daemon = TestDaemon::start(options);
    let control = daemon.dir().join("control");
    std::fs::create_dir_all(&control).unwrap();
    let mismatch = daemon.dir().join("mismatch.sock");
    let listener = serve_other_protocol(&mismatch);

    let package = binaries::node_package_dir();
    let mut node = tokio::process::Command::new("node");
    node.arg("--test")
        .arg("--test-concurrency=1")
        .arg(package.join("test"))
        .current_dir(&package)
        .env("SANDBOXD_SOCKET", daemon.socket())
        .env("SANDBOXD_NODE_ADDON", &addon)
        .env("SANDBOXD_TEST_STATE_DIR", daemon.state_dir())
        .env("SANDBOXD_TEST_CONTROL_DIR", &control)
        .env("SANDBOXD_TEST_MISMATCH_SOCKET", &mismatch)
        .env("SANDBOXD_TEST_TOKEN_MARK", TOKEN_MARK)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = node.spawn().unwrap_or_else(|error| {
        panic!(
            "cannot run `node` (Node.js 20 or later must be on PATH; .ci/run installs it): {error}"
        )
    });
    let output = tokio::spawn(child.wait_with_output());

    // Serve restart requests until node is done.
    let started = Instant::now();
    let mut restarts = 0;
    while !output.is_finished() {
        assert!(
            started.elapsed() < SUITE_TIMEOUT,
            "the Node tests did not finish within {SUITE_TIMEOUT:?}"
        );
        if take(&control.join("restart-request")) {
            daemon.stop();
            daemon.launch();
            daemon.wait_ready();
            restarts += 1;
            std::fs::write(control.join("restart-done"), restarts.to_string()).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let output = output.await.unwrap().expect("wait for node");
    listener.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "node --test failed ({}):\n{stdout}\n{stderr}\ndaemon log:\n{}",
        output.status,
        daemon.log_text()
    );
    // The suite really ran (a directory with no test files passes too).
    let passed = stdout
        .lines()
        .find_map(|line| line.strip_prefix("# pass "))
        .and_then(|count| count.trim().parse::<u32>().ok())
        .unwrap_or(0);
    assert!(passed >= 10, "only {passed} Node tests passed:\n{stdout}");
    assert!(!stdout.contains("# fail 1"), "{stdout}");
    assert_eq!(restarts, 1, "the restart test asks for one restart");
    assert!(
        !daemon.log_text().contains(TOKEN_MARK),
        "a token reached the daemon's log"
    );
    assert!(
        !stdout.contains(TOKEN_MARK) && !stderr.contains(TOKEN_MARK),
        "a token reached the Node tests' output:\n{stdout}\n{stderr}"
    );
    // Every test cleans up after itself.
    let client = daemon.client().await;
    let left = client.list(None).await.unwrap();
    assert!(left.is_empty(), "sandboxes left behind: {left:?}");
}

/// The permission_denied kind needs a caller the daemon lets read but not
/// mutate, so `test-as-reader/` runs as nobody (on the read list, and in
/// the socket's group), from a copy of the package in the test directory
/// that nobody may read (the worktree and `target/` may not be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_gets_permission_denied_errors_from_the_node_package() {
    let addon = binaries::node_addon();
    let daemon = TestDaemon::start(Options {
        extra_toml: "socket_group = \"nogroup\"\n".to_string(),
        access_toml: Some(format!("read_uids = [{NOBODY}]")),
        ..Options::default()
    });
    let copy = daemon.dir().join("node-package");
    let package = binaries::node_package_dir();
    for part in ["package.json", "index.js", "lib", "test-as-reader"] {
        copy_tree(&package.join(part), &copy.join(part));
    }
    let addon_copy = copy.join("sandboxd.node");
    std::fs::copy(&addon, &addon_copy).unwrap();
    make_readable(&copy);

    let mut node = std::process::Command::new("node");
    node.arg("--test")
        .arg(copy.join("test-as-reader"))
        .current_dir(&copy)
        .env("SANDBOXD_SOCKET", daemon.socket())
        .env("SANDBOXD_NODE_ADDON", &addon_copy)
        .env("SANDBOXD_TEST_TOKEN_MARK", TOKEN_MARK)
        .env("HOME", "/")
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null());
    let output = run_with_timeout(node, SUITE_TIMEOUT);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node --test (as nobody) failed ({}):\n{stdout}\n{}\ndaemon log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        daemon.log_text()
    );
    assert!(stdout.contains("# pass 1"), "{stdout}");
    assert!(!daemon.log_text().contains(TOKEN_MARK));
}

/// Copies a file or a directory tree.
fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|error| panic!("copy {}: {error}", from.display()));
    }
}

/// Lets every uid read `path` (and enter it, when a directory).
fn make_readable(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = if path.is_dir() { 0o755 } else { 0o644 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap().flatten() {
            make_readable(&entry.path());
        }
    }
}

/// True (and the file removed) when `path` exists.
fn take(path: &Path) -> bool {
    std::fs::remove_file(path).is_ok()
}

/// A socket whose every connection answers the version handshake with
/// `PROTOCOL_VERSION + 1` and nothing else.
fn serve_other_protocol(path: &Path) -> tokio::task::JoinHandle<()> {
    let listener =
        UnixListener::bind(path).unwrap_or_else(|error| panic!("bind {}: {error}", path.display()));
    let path: PathBuf = path.to_path_buf();
    tokio::spawn(async move {
        let _keep = path;
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let framed = Framed::new(stream, wire::frame_codec());
                let mut transport = tarpc::serde_transport::new(
                    framed,
                    wire::body_codec::<
                        tarpc::ClientMessage<SandboxdRequest>,
                        tarpc::Response<SandboxdResponse>,
                    >(),
                );
                while let Some(Ok(message)) = transport.next().await {
                    if let tarpc::ClientMessage::Request(request) = message {
                        let response = tarpc::Response {
                            request_id: request.id,
                            message: Ok(SandboxdResponse::ProtocolVersion(PROTOCOL_VERSION + 1)),
                        };
                        if transport.send(response).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    })
}
