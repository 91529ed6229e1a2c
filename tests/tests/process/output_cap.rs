//! A runner's output never takes more than `runner_log_max_size` on disk,
//! however much and however fast it writes, and a full file system still
//! lets the output rotate (and so shrink) instead of wedging.
//!
//! No timing is asserted: the tests sample the files in a loop while the
//! runner writes, with a generous bound on how long the writing may take.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::{sandbox_env, wait_until, Options, TestDaemon};

const MIB: u64 = 1024 * 1024;
/// How long a runner may take to write its output: far more than it needs.
const WRITE_TIMEOUT: Duration = Duration::from_secs(600);

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.len())
}

/// `<log>.1`, the rotated file.
fn rotated(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

fn writer(bytes: u64, cap: u64) -> Options {
    Options {
        extra_toml: format!("runner_log_max_size = {cap}\n"),
        ..Options::with_runner_args(&["--write-bytes", &bytes.to_string()])
    }
}

/// The kept output's last lines, through `sandboxctl logs --tail`.
fn tail(daemon: &TestDaemon, id: &str, lines: u32) -> String {
    let output = daemon.sandboxctl(&["logs", "session", id, "--tail", &lines.to_string()]);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What the sampling saw while the runner wrote.
#[derive(Debug, Default)]
struct Samples {
    count: u32,
    /// The most bytes (live plus rotated file) seen on disk at one sample.
    largest: u64,
    /// Times the live file was seen shorter than at the sample before.
    shrank: u32,
}

/// Samples the two files until the runner's closing line is in its output.
fn sample_until_written(daemon: &TestDaemon, id: &str, bytes: u64) -> Samples {
    let log = daemon.runner_log(Scope::Session, id);
    let rotated = rotated(&log);
    let closing = format!("runner-fixture wrote {bytes} bytes");
    let mut samples = Samples::default();
    let mut previous = 0;
    let mut checks = 0u32;
    let done = wait_until(WRITE_TIMEOUT, || {
        // A burst of samples between two looks at the output's end.
        for _ in 0..25 {
            let live = size(&log);
            samples.largest = samples.largest.max(live + size(&rotated));
            samples.shrank += u32::from(live < previous);
            samples.count += 1;
            previous = live;
            std::thread::sleep(Duration::from_millis(1));
        }
        checks += 1;
        checks.is_multiple_of(10) && tail(daemon, id, 1).contains(&closing)
    });
    assert!(
        done,
        "the runner did not finish writing {bytes} bytes within {WRITE_TIMEOUT:?}: {samples:?}\n{}",
        daemon.log_text()
    );
    samples
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_writing_a_gibibyte_stays_within_the_cap_at_every_sample() {
    let (bytes, cap) = (1024 * MIB, 8 * MIB);
    let daemon = TestDaemon::start(writer(bytes, cap));
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("gib", &sandbox_env("session:gib", "tok"))
        .await
        .unwrap();

    let samples = sample_until_written(&daemon, "gib", bytes);
    assert!(samples.count > 100, "{samples:?}");
    assert!(
        samples.largest <= cap + MIB,
        "{} bytes on disk against a cap of {cap}: {samples:?}",
        samples.largest
    );
    assert!(samples.shrank > 0, "never rotated: {samples:?}");

    // The output ends with the runner's last lines, nothing dropped.
    let last = tail(&daemon, "gib", 2);
    let expected = format!(
        "runner-fixture bytes {:020} {}\nrunner-fixture wrote {bytes} bytes\n",
        bytes - 64,
        ".".repeat(21)
    );
    assert_eq!(last, expected);
    let log = daemon.runner_log(Scope::Session, "gib");
    let kept = std::fs::read(rotated(&log)).unwrap_or_default().len() as u64 + size(&log);
    assert!(
        (cap / 2..=cap).contains(&kept),
        "{kept} bytes kept of a cap of {cap}"
    );
    assert!(!tail(&daemon, "gib", 100_000).contains("sandboxd:"));
    client.deprovision_session_sandbox("gib").await.unwrap();
}

/// A tmpfs mounted over a directory for one test, detached when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: u64) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size},mode=0711"))
            .arg("tmpfs")
            .arg(at)
            .status()
            .expect("run mount");
        assert!(status.success(), "cannot mount a tmpfs on {}", at.display());
        Tmpfs(at.to_path_buf())
    }

    fn free_bytes(&self) -> u64 {
        let stat = nix::sys::statvfs::statvfs(&self.0).unwrap();
        stat.blocks_available() * stat.fragment_size()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily: the daemon may still hold files in it.
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_file_system_still_lets_the_output_rotate_and_shrink() {
    let (bytes, cap) = (64 * MIB, 8 * MIB);
    let mut daemon = TestDaemon::prepare(writer(bytes, cap));
    let state = Tmpfs::mount(daemon.state_dir(), 32 * MIB);
    daemon.launch();
    daemon.wait_ready();
    // Everything but 5 MiB taken: less than the cap, so the runner's output
    // fills the file system before it reaches the cap.
    let filler = daemon.state_dir().join("filler");
    let taken = state.free_bytes() - 5 * MIB;
    std::fs::write(&filler, vec![b'x'; taken as usize]).unwrap();

    let client = daemon.client().await;
    client
        .ensure_session_sandbox("full", &sandbox_env("session:full", "tok"))
        .await
        .unwrap();
    let samples = sample_until_written(&daemon, "full", bytes);
    assert!(
        samples.largest <= 5 * MIB + MIB,
        "more on disk than there was room for: {samples:?}"
    );
    assert!(samples.shrank > 0, "the output never shrank: {samples:?}");
    assert!(
        daemon
            .log_text()
            .contains("no room for a runner's output; making room"),
        "the file system was never short of room"
    );
    // The last line reached the file, after a full file system.
    let last = tail(&daemon, "full", 1);
    assert_eq!(last, format!("runner-fixture wrote {bytes} bytes\n"));
    // The daemon still serves.
    assert!(daemon.sandboxctl(&["status"]).status.success());
    client.deprovision_session_sandbox("full").await.unwrap();
    std::fs::remove_file(&filler).unwrap();
    drop(state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_that_cannot_be_written_is_dropped_with_a_marker_and_the_runner_goes_on() {
    // Where the runner (as nobody) says it is done, and is told to go on.
    let scratch = sandboxd_tests::make_test_dir();
    let signals = scratch.join("signals");
    std::fs::create_dir(&signals).unwrap();
    std::fs::set_permissions(&signals, std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = format!(
        "head -c 4194304 /dev/zero | tr '\\0' x; echo; touch {dir}/written; \
         while [ ! -e {dir}/go ]; do sleep 0.05; done; echo last line; exec sleep 3600",
        dir = signals.display()
    );
    let mut daemon = TestDaemon::prepare(Options {
        runner_command: Some("/bin/sh".to_string()),
        runner_args: vec!["-c".to_string(), script],
        // The test's directory is in /tmp, which is private to a sandbox
        // under `isolation = "full"`: shared with it, as an operator would.
        // No reserve: the file system is filled on purpose, and the
        // runner must start on it (the reserve has tests of its own).
        extra_toml: format!(
            "[view]\nread_write = [\"{}\"]\n[limits]\nstate_reserve = 0\n",
            signals.display()
        ),
        ..Options::default()
    });
    let state = Tmpfs::mount(daemon.state_dir(), 16 * MIB);
    daemon.launch();
    daemon.wait_ready();
    // Every byte of the file system taken.
    let filler = daemon.state_dir().join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let block = vec![b'x'; 64 * 1024];
    while std::io::Write::write_all(&mut file, &block).is_ok() {}
    drop(file);
    assert!(state.free_bytes() < 64 * 1024);

    let client = daemon.client().await;
    client
        .ensure_session_sandbox("nowhere", &sandbox_env("session:nowhere", "tok"))
        .await
        .unwrap();
    assert!(
        wait_until(WRITE_TIMEOUT, || signals.join("written").exists()),
        "the runner was blocked by the full file system\n{}",
        daemon.log_text()
    );
    std::fs::remove_file(&filler).unwrap();
    std::fs::write(signals.join("go"), "").unwrap();
    let log = daemon.runner_log(Scope::Session, "nowhere");
    let arrived = wait_until(WRITE_TIMEOUT, || {
        std::fs::read_to_string(&log).is_ok_and(|text| text.ends_with("last line\n"))
    });
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(arrived, "the last line never arrived: {text:?}");
    let marker = text
        .lines()
        .find(|line| line.starts_with("--- sandboxd: "))
        .unwrap_or_else(|| panic!("no marker line in {text:?}"));
    let dropped: u64 = marker
        .strip_prefix("--- sandboxd: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count in {marker:?}"));
    assert!(dropped >= 4 * MIB, "{marker}");
    assert!(marker.contains("bytes of output dropped"), "{marker}");
    assert!(
        !text.contains("xxxx"),
        "output that could not be written was kept: {text:?}"
    );
    client.deprovision_session_sandbox("nowhere").await.unwrap();
    drop(state);
    std::fs::remove_dir_all(signals.parent().unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_that_exits_right_after_writing_loses_nothing() {
    let lines = 20_000;
    let daemon = TestDaemon::start(Options::with_runner_args(&[
        "--print-lines",
        &lines.to_string(),
        "--exit-code",
        "0",
    ]));
    let client = daemon.client().await;
    client
        .ensure_workflow_sandbox("brief", &sandbox_env("wfexec:brief", "tok"))
        .await
        .unwrap();
    // The daemon counts the runner gone only once its pipe is drained.
    let deadline = std::time::Instant::now() + WRITE_TIMEOUT;
    while client
        .describe(Scope::Workflow, "brief")
        .await
        .unwrap()
        .last_exit
        .is_none()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the runner never exited\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = std::fs::read_to_string(daemon.runner_log(Scope::Workflow, "brief")).unwrap();
    assert_eq!(
        sandboxd_tests::logs::fixture_line_numbers(&text),
        (1..=lines).collect::<Vec<u32>>()
    );
}
