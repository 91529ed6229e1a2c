//! The docker tier's test harness: the engine (or a loud skip), the runner
//! image, the `docker` CLI for looking from outside, clean-up by label, and
//! a stand-in socket that can make the engine vanish and come back.
//!
//! The tests look at containers with the CLI on purpose: the driver under
//! test speaks the Engine API through bollard, and a check through another
//! path cannot share its mistakes.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use sandboxd_protocol::naming::LABEL_SANDBOX_ID;
use serde_json::Value;

use crate::binaries;
use crate::daemon::{run_with_timeout, Options};

/// The image `.ci/build-test-image.sh` builds from the runner fixture.
pub const TEST_IMAGE: &str = "sandboxd-test-runner:latest";
/// Set to `1` (as `.ci/run` does) to fail, not skip, when no engine answers.
pub const REQUIRE_DOCKER_ENV: &str = "SANDBOXD_REQUIRE_DOCKER";

const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// True when the tests can run: an engine answers and the runner image is
/// built. Without an engine it prints a loud SKIPPED line and returns
/// false, unless [`REQUIRE_DOCKER_ENV`] is `1`, when it panics.
pub fn engine_ready(test: &str) -> bool {
    static ENGINE: OnceLock<Result<String, String>> = OnceLock::new();
    static IMAGE: OnceLock<Result<(), String>> = OnceLock::new();
    match ENGINE.get_or_init(probe_engine) {
        Ok(_) => {}
        Err(reason) if std::env::var(REQUIRE_DOCKER_ENV).as_deref() == Ok("1") => {
            panic!("{REQUIRE_DOCKER_ENV}=1 but no Docker engine answers: {reason}")
        }
        Err(reason) => {
            // Straight to the file descriptor: libtest hides what `eprintln!`
            // prints in a passing test, and a skip must not pass unseen.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED {test}: no Docker engine answers ({reason}).\n\
                 *** Start one, or set {REQUIRE_DOCKER_ENV}=1 to make this a failure.\n"
            );
            return false;
        }
    }
    if let Err(problem) = IMAGE.get_or_init(build_image) {
        panic!("the Docker engine answers but the test image cannot be built: {problem}");
    }
    true
}

fn probe_engine() -> Result<String, String> {
    let mut command = Command::new("docker");
    command.args(["version", "--format", "{{.Server.Version}}"]);
    match command.output() {
        Ok(output) if output.status.success() => {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
        }
        Ok(output) => Err(String::from_utf8_lossy(&output.stderr).trim().to_string()),
        Err(error) => Err(format!("cannot run the docker CLI: {error}")),
    }
}

/// Runs the CI script, which keeps an image built from this very fixture.
fn build_image() -> Result<(), String> {
    build_image_tagged(TEST_IMAGE)
}

/// The same image under another tag, for a test that needs this build's
/// fixture whatever another checkout on the same engine last built.
pub fn build_image_tagged(tag: &str) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/build-test-image.sh");
    let mut command = Command::new("bash");
    command.arg(&script).arg(binaries::runner_fixture());
    command.env("SANDBOXD_TEST_IMAGE", tag);
    let output = run_with_timeout(command, Duration::from_secs(120));
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Daemon options for the docker tier: `--driver docker`, the test image,
/// and these lines inside the `[docker]` table.
pub fn docker_options(docker_toml: &str) -> Options {
    docker_options_on(TEST_IMAGE, docker_toml)
}

/// [`docker_options`] with another runner image (one made from the test
/// image, say).
pub fn docker_options_on(image: &str, docker_toml: &str) -> Options {
    Options {
        args: vec!["--driver".to_string(), "docker".to_string()],
        extra_toml: format!("runner_image = \"{image}\"\n[docker]\n{docker_toml}\n"),
        ..Options::default()
    }
}

/// A sandbox id no other test (or earlier run) uses.
pub fn unique_id(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("dkr-{name}-{}-{nanos:x}", std::process::id())
}

/// Runs `docker ARGS` with a 60 s limit.
pub fn docker(args: &[&str]) -> Output {
    let mut command = Command::new("docker");
    command.args(args);
    run_with_timeout(command, CLI_TIMEOUT)
}

/// Runs `docker ARGS`, panicking on failure; returns stdout, trimmed.
pub fn docker_ok(args: &[&str]) -> String {
    let output = docker(args);
    assert!(
        output.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// `docker inspect` of one container or volume as JSON; `None` when there is none.
pub fn inspect(kind: &str, name: &str) -> Option<Value> {
    let output = docker(&[kind, "inspect", name]);
    if !output.status.success() {
        return None;
    }
    let mut list: Vec<Value> = serde_json::from_slice(&output.stdout).expect("inspect is JSON");
    list.pop()
}

/// The ids of every container (in any state) labelled with this sandbox id.
pub fn containers_of(id: &str) -> Vec<String> {
    let filter = format!("label={LABEL_SANDBOX_ID}={id}");
    let listed = docker_ok(&["ps", "-aq", "--no-trunc", "--filter", &filter]);
    listed.lines().map(str::to_string).collect()
}

/// The names of every volume labelled with this sandbox id.
pub fn volumes_of(id: &str) -> Vec<String> {
    let filter = format!("label={LABEL_SANDBOX_ID}={id}");
    let listed = docker_ok(&["volume", "ls", "-q", "--filter", &filter]);
    listed.lines().map(str::to_string).collect()
}

/// The container's state word (`running`, `exited`, `paused`, …).
pub fn container_status(container: &str) -> Option<String> {
    let value = inspect("container", container)?;
    value["State"]["Status"].as_str().map(str::to_string)
}

/// Where a volume's data lives on this host (the tests run beside the engine, as root).
pub fn volume_dir(volume: &str) -> PathBuf {
    let value = inspect("volume", volume).unwrap_or_else(|| panic!("no volume {volume}"));
    PathBuf::from(
        value["Mountpoint"]
            .as_str()
            .expect("a volume has a mountpoint"),
    )
}

/// The actions (`create`, `start`, `die`, …) the engine reported for one
/// container between `since` and now.
pub fn container_events(container: &str, since: SystemTime) -> Vec<String> {
    let seconds = |time: SystemTime| {
        let since = time
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        format!("{}.{:09}", since.as_secs(), since.subsec_nanos())
    };
    let (since, until) = (seconds(since), seconds(SystemTime::now()));
    let filter = format!("container={container}");
    let output = docker_ok(&[
        "events",
        "--since",
        &since,
        "--until",
        &until,
        "--filter",
        "type=container",
        "--filter",
        &filter,
        "--format",
        "{{.Action}}",
    ]);
    output.lines().map(str::to_string).collect()
}

/// Removes, when dropped, every container and volume labelled with one of
/// these sandbox ids: a failing test leaves nothing on the engine.
pub struct Cleanup {
    ids: Vec<String>,
}

impl Cleanup {
    pub fn new(ids: &[&str]) -> Cleanup {
        Cleanup {
            ids: ids.iter().map(|id| id.to_string()).collect(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // The daemons' networks the containers joined: a daemon that stopped
        // while they ran kept its network for them.
        let mut networks = Vec::new();
        for id in &self.ids {
            for container in containers_of(id) {
                let joined = docker(&[
                    "inspect",
                    &container,
                    "--format",
                    "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}",
                ]);
                networks.extend(
                    String::from_utf8_lossy(&joined.stdout)
                        .split_whitespace()
                        .filter(|name| name.ends_with("sandboxd-egress"))
                        .map(str::to_string),
                );
                let _ = docker(&["rm", "-f", "-v", &container]);
            }
            for volume in volumes_of(id) {
                let _ = docker(&["volume", "rm", "-f", &volume]);
            }
        }
        networks.sort();
        networks.dedup();
        for network in networks {
            crate::docker_leftovers::Leftovers::of_network(&network).remove_when_unheld();
        }
    }
}

/// The engine's own socket, from `DOCKER_HOST` (unix only) or the default.
fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if host.starts_with("unix://") => PathBuf::from(&host["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

/// A Unix socket that passes every connection through to the real engine,
/// for as long as it lives: the engine "comes back" when it starts and
/// "goes away" when it is dropped (the socket file removed, open
/// connections cut).
pub struct EngineProxy {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl EngineProxy {
    pub fn start(path: &Path) -> EngineProxy {
        let _ = std::fs::remove_file(path);
        let listener = tokio::net::UnixListener::bind(path)
            .unwrap_or_else(|error| panic!("bind {}: {error}", path.display()));
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                connections.spawn(async move {
                    if let Ok(mut engine) = tokio::net::UnixStream::connect(engine_socket()).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut engine).await;
                    }
                });
            }
        });
        EngineProxy {
            path: path.to_path_buf(),
            task,
        }
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        // Aborting the task drops the listener and the JoinSet, which
        // aborts every passed-through connection.
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}
