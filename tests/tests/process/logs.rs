//! Per-sandbox logs of the process tier: `sandboxctl logs` reads a runner's
//! output through the daemon in bounded chunks, `--tail` and `--follow`
//! work across rotations, and rotation keeps the files bounded.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandboxd_client::{Scope, MAX_LOG_CHUNK};
use sandboxd_tests::logs::{fixture_line_numbers, read_all_logs};
use sandboxd_tests::{
    sandbox_env, wait_for_runner, wait_until, Options, TestDaemon, RUNNER_TIMEOUT,
};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// `<log>.1`, the rotated file.
fn rotated(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxctl_logs_prints_the_output_and_its_last_lines() {
    let daemon = TestDaemon::start(Options::with_runner_args(&["--print-lines", "50"]));
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("logs-1", &sandbox_env("session:logs-1", "tok"))
        .await
        .unwrap();
    let pid = report.pid.unwrap();
    // The fixture writes its pid file after printing its lines.
    wait_for_runner(&daemon.workspace(Scope::Session, "logs-1"), pid);
    // The pid it prints is its own, as it sees it (in its PID namespace).
    let pid = sandboxd_tests::procs::innermost_pid(pid).unwrap();

    let tail = daemon.sandboxctl(&["logs", "session", "logs-1", "--tail", "3"]);
    assert_eq!(tail.status.code(), Some(0), "{}", stderr(&tail));
    assert_eq!(
        stdout(&tail),
        "runner-fixture line 48\nrunner-fixture line 49\nrunner-fixture line 50\n"
    );

    let all = daemon.sandboxctl(&["logs", "session", "logs-1"]);
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    let text = stdout(&all);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 51, "{text}");
    assert!(
        lines[0].starts_with(&format!("runner-fixture: pid {pid} starting")),
        "stderr is in the log too: {text}"
    );
    assert_eq!(lines[50], "runner-fixture line 50");

    let absent = daemon.sandboxctl(&["logs", "workflow", "never-ran"]);
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains("workflow 'never-ran' has no output to show"),
        "{}",
        stderr(&absent)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_log_comes_in_bounded_chunks_in_order() {
    let lines = 30_000;
    let daemon = TestDaemon::start(Options::with_runner_args(&[
        "--print-lines",
        &lines.to_string(),
    ]));
    let client = daemon.client().await;
    let report = client
        .ensure_workflow_sandbox("big", &sandbox_env("wfexec:big", "tok"))
        .await
        .unwrap();
    wait_for_runner(
        &daemon.workspace(Scope::Workflow, "big"),
        report.pid.unwrap(),
    );
    assert!(size(&daemon.runner_log(Scope::Workflow, "big")) > 2 * u64::from(MAX_LOG_CHUNK));

    // Through the library: every chunk within the bound, several of them.
    let (data, chunks) = read_all_logs(&client, Scope::Workflow, "big").await;
    assert!(chunks >= 3, "{chunks} chunks");
    let text = String::from_utf8(data).unwrap();
    assert_eq!(
        fixture_line_numbers(&text),
        (1..=lines).collect::<Vec<u32>>()
    );

    // Through sandboxctl: the same, and a tail within one chunk.
    let all = daemon.sandboxctl(&["logs", "workflow", "big"]);
    assert_eq!(stdout(&all), text);
    let tail = daemon.sandboxctl(&["logs", "workflow", "big", "--tail", "2"]);
    assert_eq!(
        stdout(&tail),
        format!(
            "runner-fixture line {}\nrunner-fixture line {lines}\n",
            lines - 1
        )
    );
}

/// A runner that writes `line N` about a hundred times a second, forever.
fn chatty_runner(cap: u64) -> Options {
    Options {
        runner_command: Some("/bin/sh".to_string()),
        runner_args: vec![
            "-c".to_string(),
            "i=0; while :; do i=$((i+1)); echo \"line $i\"; sleep 0.01; done".to_string(),
        ],
        stop_grace: "1s".to_string(),
        extra_toml: format!("runner_log_max_size = {cap}\n"),
        ..Options::default()
    }
}

/// The numbers of the `line N` lines in `text`.
fn line_numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|line| line.strip_prefix("line ")?.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_keeps_the_files_bounded_and_tail_reaches_into_the_rotated_one() {
    let cap = 2048;
    let daemon = TestDaemon::start(chatty_runner(cap));
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("chatty", &sandbox_env("session:chatty", "tok"))
        .await
        .unwrap();
    let log = daemon.runner_log(Scope::Session, "chatty");
    let rotated = rotated(&log);
    assert!(
        wait_until(RUNNER_TIMEOUT, || size(&log) > 0),
        "the runner wrote nothing"
    );

    // About 1 KB a second against a 2 KiB cap: the daemon writes the file
    // itself, so neither file ever passes half the cap.
    let until = Instant::now() + Duration::from_secs(6);
    let (mut largest, mut largest_rotated) = (0, 0);
    while Instant::now() < until {
        largest = largest.max(size(&log));
        largest_rotated = largest_rotated.max(size(&rotated));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(rotated.exists(), "never rotated (largest {largest} bytes)");
    assert!(
        largest <= cap / 2,
        "the log grew to {largest} bytes, cap {cap}"
    );
    assert!(
        largest_rotated <= cap / 2,
        "the rotated log is {largest_rotated} bytes, cap {cap}"
    );

    // The last lines, in order, whether or not the current file holds them
    // all.
    let tail = daemon.sandboxctl(&["logs", "session", "chatty", "--tail", "40"]);
    assert_eq!(tail.status.code(), Some(0), "{}", stderr(&tail));
    let numbers = line_numbers(&stdout(&tail));
    assert!(numbers.len() >= 38, "{}", stdout(&tail));
    let skipped: u64 = numbers
        .windows(2)
        .map(|pair| pair[1].saturating_sub(pair[0] + 1))
        .sum();
    assert!(
        numbers.windows(2).all(|pair| pair[1] > pair[0]) && skipped <= 1,
        "{numbers:?}"
    );

    // Deprovisioning removes both files.
    client.deprovision_session_sandbox("chatty").await.unwrap();
    assert!(wait_until(Duration::from_secs(15), || !log.exists()
        && !rotated.exists()));
    let gone = daemon.sandboxctl(&["logs", "session", "chatty"]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        stderr(&gone).contains("has no output to show"),
        "{}",
        stderr(&gone)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_carries_on_across_rotations_in_order() {
    let cap = 2048;
    let daemon = TestDaemon::start(chatty_runner(cap));
    let client = daemon.client().await;
    client
        .ensure_workflow_sandbox("follow", &sandbox_env("wfexec:follow", "tok"))
        .await
        .unwrap();
    let log = daemon.runner_log(Scope::Workflow, "follow");
    assert!(wait_until(RUNNER_TIMEOUT, || size(&log) > 0));

    let mut follower =
        daemon.spawn_sandboxctl(&["logs", "workflow", "follow", "--tail", "5", "--follow"]);
    // Followed until it has shown several files' worth (a file holds about
    // 200 lines), however slowly a loaded machine runs the runner.
    let followed = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let followed = followed.clone();
        let mut output = std::io::BufReader::new(follower.stdout.take().unwrap());
        std::thread::spawn(move || {
            let mut line = String::new();
            while matches!(std::io::BufRead::read_line(&mut output, &mut line), Ok(n) if n > 0) {
                followed.lock().unwrap().push_str(&line);
                line.clear();
            }
        })
    };
    let enough = wait_until(Duration::from_secs(180), || {
        followed.lock().unwrap().lines().count() >= 700 || follower.try_wait().unwrap().is_some()
    });
    assert!(
        follower.try_wait().unwrap().is_none(),
        "--follow ended by itself"
    );
    assert!(enough, "the follower never showed 700 lines");
    follower.kill().unwrap();
    reader.join().unwrap();
    let text = followed.lock().unwrap().clone();
    let mut errors = String::new();
    follower
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    follower.wait().unwrap();
    assert!(
        rotated(&log).exists(),
        "no rotation happened while following"
    );

    let numbers = line_numbers(&text);
    assert!(numbers.len() > 100, "{} lines: {text}", numbers.len());
    assert!(
        numbers.windows(2).all(|pair| pair[1] > pair[0]),
        "out of order or repeated: {numbers:?}"
    );
    // A follower more than one rotation behind (on a loaded machine) may
    // miss a few; a cursor mishandled across a rotation would lose or
    // repeat whole files.
    let missing = (numbers.last().unwrap() - numbers[0] + 1) as usize - numbers.len();
    assert!(
        missing <= 3,
        "{missing} lines missing: {numbers:?}\n{errors}"
    );
    assert!(!errors.contains("rotated away"), "{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_logs_takes_the_mutate_lists_not_the_read_ones() {
    let daemon = TestDaemon::start(Options {
        // nobody may reach the socket, and is on the read list.
        extra_toml: "socket_group = \"nogroup\"\n".to_string(),
        access_toml: Some("read_uids = [65534]".to_string()),
        ..Options::with_runner_args(&["--print-lines", "3"])
    });
    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("secret", &sandbox_env("session:secret", "tok"))
        .await
        .unwrap();
    wait_for_runner(
        &daemon.workspace(Scope::Session, "secret"),
        report.pid.unwrap(),
    );
    let list = daemon.sandboxctl_as_nobody(&["list"]);
    assert_eq!(list.status.code(), Some(0), "{}", stderr(&list));
    let logs = daemon.sandboxctl_as_nobody(&["logs", "session", "secret"]);
    assert_eq!(logs.status.code(), Some(1));
    assert!(
        stderr(&logs).contains("may not call logs"),
        "{}",
        stderr(&logs)
    );
    assert!(stdout(&logs).is_empty());
}

/// A removed sandbox's output file is recycled for the next new sandbox (a
/// rename instead of an inode allocation), emptied first: nothing of the
/// old sandbox's output shows in the new one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recycled_output_file_carries_nothing_of_the_sandbox_before() {
    use std::os::unix::fs::MetadataExt;
    // The runners are told apart by the pid each prints, which under
    // `isolation = "full"` is 2 for both (the first child of each sandbox's
    // init): the host's pids are needed here.
    let daemon = TestDaemon::start(Options {
        extra_toml: "isolation = \"uid-cgroup\"".to_string(),
        ..Options::with_runner_args(&["--print-lines", "20"])
    });
    let client = daemon.client().await;
    let env = sandbox_env("session:recycled", "");
    let first = client.ensure_session_sandbox("old", &env).await.unwrap();
    let first = first.pid.unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "old"), first);
    let old_log = daemon.runner_log(Scope::Session, "old");
    let old_inode = std::fs::metadata(&old_log).unwrap().ino();
    // Running is not yet printed: wait for its first lines.
    assert!(wait_until(Duration::from_secs(30), || size(&old_log) > 0));

    client.deprovision_session_sandbox("old").await.unwrap();
    assert!(wait_until(Duration::from_secs(15), || !old_log.exists()));
    // Kept for reuse, and emptied (in the daemon's next batch of clean-up).
    let spares = daemon.state_dir().join("logs/.spare");
    let emptied = || match sandboxd_tests::dir_entries(&spares).as_slice() {
        [spare] => size(&spares.join(spare)) == 0,
        _ => false,
    };
    assert!(
        wait_until(Duration::from_secs(10), emptied),
        "the output file was not kept for reuse: {:?}",
        sandboxd_tests::dir_entries(&spares)
    );
    // It becomes available the moment after it is emptied.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let second = client.ensure_session_sandbox("new", &env).await.unwrap();
    let second = second.pid.unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "new"), second);
    let new_log = daemon.runner_log(Scope::Session, "new");
    assert_eq!(
        std::fs::metadata(&new_log).unwrap().ino(),
        old_inode,
        "the new sandbox got a newly allocated file, not the recycled one"
    );
    let text = stdout(&daemon.sandboxctl(&["logs", "session", "new"]));
    assert!(
        text.starts_with(&format!("runner-fixture: pid {second} starting")),
        "{text}"
    );
    assert!(
        !text.contains(&format!("pid {first} ")),
        "old output leaked:\n{text}"
    );
    assert_eq!(text.lines().count(), 21, "{text}");
    client.deprovision_session_sandbox("new").await.unwrap();
}
