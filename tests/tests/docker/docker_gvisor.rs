//! `[docker] runtime = "runsc"` against the real engine on this machine: a
//! sandbox's runner runs under gVisor, whose kernel is not the host's (its
//! `uname -r` differs and its /proc/version is gVisor's), its own listener
//! is reachable in its container, `status` and `describe` name the runtime,
//! and deprovision leaves no container. A runtime the engine lacks stops
//! the daemon at start, naming the runtimes the engine has. The start of a
//! runner under runsc and under the engine's default (runc) are timed and
//! printed.
//!
//! runsc is Debian's package, registered with the engine by
//! `.ci/install-runsc.sh`. Without it the test fails under CI=true and
//! otherwise skips, saying why.

use std::io::Write as _;
use std::time::{Duration, Instant};

use sandboxd_client::{SandboxdClient, Scope};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{
    containers_of, docker, docker_ok, docker_options, engine_ready, inspect, unique_id, volume_dir,
    volumes_of, Cleanup,
};
use sandboxd_tests::{sandbox_env, wait_until, TestDaemon};

/// The port each runner listens on in its container.
const PORT: u16 = 7070;
/// How long a runner gets to write its files after its start.
const RUNNER_WRITES: Duration = Duration::from_secs(60);

/// Says past the harness's capture (a passing test's `eprintln!` is hidden).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// True when the engine (on this host) has a `runsc` runtime whose program
/// is here; else fails under CI=true, or says why it skips.
fn runsc_registered(test: &str) -> bool {
    let runtimes = docker_ok(&["info", "--format", "{{json .Runtimes}}"]);
    let names: serde_json::Value = serde_json::from_str(&runtimes).unwrap_or_default();
    let path = names["runsc"]["path"].as_str().unwrap_or_default();
    let missing = match path {
        "" => "the engine has no runsc runtime".to_string(),
        path if std::path::Path::new(path).is_file() => return true,
        path => format!("the engine's runsc runtime names {path}, which is not there"),
    };
    let why = format!(
        "{missing} (its runtimes: {runtimes}); .ci/install-runsc.sh installs Debian's runsc and \
         registers it"
    );
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test}: CI=true but {why}");
    }
    say(&format!("\n*** SKIPPED {test}: {why}.\n"));
    false
}

/// The daemon, with `runtime` as `[docker] runtime` (none: the engine's).
fn daemon(runtime: Option<&str>) -> TestDaemon {
    let mut toml = format!("command = [\"--serve-net\", \"{PORT}\"]\n");
    if let Some(runtime) = runtime {
        toml.push_str(&format!("runtime = \"{runtime}\"\n"));
    }
    TestDaemon::start(docker_options(&toml))
}

/// Ensures session `id` and waits for its runner's `pid` file: the time
/// the ensure took, and the time until the runner was up.
async fn start_timed(client: &SandboxdClient, id: &str) -> (Duration, Duration) {
    let began = Instant::now();
    let env = sandbox_env(&format!("session:{id}"), "tok-gvisor");
    let report = client.ensure_session_sandbox(id, &env).await.unwrap();
    let ensured = began.elapsed();
    assert!(report.created, "{report:?}");
    let workspace = volume_dir(&format!("{}-workspace", base_name(Scope::Session, id)));
    assert!(
        wait_until(RUNNER_WRITES, || workspace.join("pid").is_file()),
        "the runner of '{id}' wrote no pid file in {} within {RUNNER_WRITES:?}",
        workspace.display()
    );
    (ensured, began.elapsed())
}

/// `/runner-fixture --uname` in the container: (release, version line).
fn kernel_in(container: &str) -> (String, String) {
    let out = docker_ok(&["exec", container, "/runner-fixture", "--uname"]);
    let field = |name: &str| {
        out.lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in: {out}"))
            .to_string()
    };
    (field("release"), field("version"))
}

fn host_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("the host's kernel release")
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runsc_sandbox_runs_on_gvisors_kernel_and_leaves_nothing() {
    let test = "a_runsc_sandbox_runs_on_gvisors_kernel_and_leaves_nothing";
    if !engine_ready(test) || !runsc_registered(test) {
        return;
    }
    let refused = refused_at_start().await;
    let [plain, gvisor] = ["gv-runc", "gv-runsc"].map(unique_id);
    let _cleanup = Cleanup::new(&[&plain, &gvisor]);

    // The engine's default first, for the figures.
    let baseline = daemon(None);
    let client = baseline.client().await;
    let (runc_ensure, runc_up) = start_timed(&client, &plain).await;
    let container = base_name(Scope::Session, &plain);
    let (runc_release, _) = kernel_in(&container);
    assert_eq!(
        runc_release,
        host_release(),
        "runc runs on the host's kernel"
    );
    client.deprovision_session_sandbox(&plain).await.unwrap();
    drop(baseline);

    let daemon = daemon(Some("runsc"));
    let client = daemon.client().await;
    let status = client.status().await.unwrap();
    let feature = |name: &str| {
        status
            .isolation
            .iter()
            .find(|feature| feature.name == name)
            .unwrap_or_else(|| panic!("no {name} feature: {:?}", status.isolation))
            .clone()
    };
    assert!(
        feature("runtime")
            .detail
            .contains("[docker] runtime 'runsc'"),
        "{:?}",
        feature("runtime")
    );
    let (runsc_ensure, runsc_up) = start_timed(&client, &gvisor).await;
    let container = base_name(Scope::Session, &gvisor);
    let made = inspect("container", &container).expect("the container");
    assert_eq!(made["HostConfig"]["Runtime"], "runsc", "{made}");
    let (release, version) = kernel_in(&container);
    assert_ne!(
        release,
        host_release(),
        "the runner sees a kernel not the host's"
    );
    assert_eq!(
        version, "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016",
        "gVisor's /proc/version"
    );
    let info = client.describe(Scope::Session, &gvisor).await.unwrap();
    assert!(
        info.isolation
            .iter()
            .any(|feature| feature.name == "runtime" && feature.detail.contains("'runsc'")),
        "{:?}",
        info.isolation
    );
    reachable_in(&container);

    let report = client.deprovision_session_sandbox(&gvisor).await.unwrap();
    assert!(report.was_present, "{report:?}");
    assert!(
        containers_of(&gvisor).is_empty(),
        "deprovision left a container"
    );
    assert!(volumes_of(&gvisor).is_empty(), "deprovision left a volume");
    say(&format!(
        "docker tier start of one runner: runc ensure {runc_ensure:.2?}, up {runc_up:.2?}; \
         runsc ensure {runsc_ensure:.2?}, up {runsc_up:.2?} (gVisor release {release}, host {}); \
         seccomp under runsc: {}; refused at start: {refused}",
        host_release(),
        feature("seccomp").detail
    ));
}

/// A runtime the engine lacks: the daemon exits at start, naming it and
/// the runtimes the engine has. Returns the message.
async fn refused_at_start() -> String {
    let mut daemon = TestDaemon::prepare(docker_options("runtime = \"sandboxd-no-such-runtime\""));
    daemon.launch();
    let status = daemon
        .wait_exit(Duration::from_secs(30))
        .expect("a daemon whose runtime the engine lacks exits, not serves");
    assert!(!status.success(), "it exited with {status}");
    let log = daemon.log_since_launch();
    let line = log
        .lines()
        .find(|line| line.contains("'sandboxd-no-such-runtime' is not a runtime of the engine"))
        .unwrap_or_else(|| panic!("no start-up error naming the runtime:\n{log}"));
    assert!(
        line.contains("runc") && line.contains("runsc"),
        "the error names the engine's runtimes: {line}"
    );
    line.trim().to_string()
}

/// The runner's own listener answers a probe from inside its container,
/// as the network tests check it.
fn reachable_in(container: &str) {
    let address = docker_ok(&[
        "inspect",
        container,
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    ]);
    assert!(!address.trim().is_empty(), "{container} has no address");
    let target = format!("{}:{PORT}", address.trim());
    let output = docker(&[
        "exec",
        container,
        "/runner-fixture",
        "--probe",
        "tcp",
        &target,
    ]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        said.trim(),
        "errno 0",
        "a TCP probe of {target} in {container}"
    );
}
