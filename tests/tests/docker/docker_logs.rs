//! Container output on the docker tier, read from the engine: whole, by
//! tail and by cursor across a restart and a recreation (a gap said when
//! output went with a removed container), in bounded chunks in order; a
//! follower that ends with the run it follows, saying how (an exit code,
//! a deprovision); and a runner over its memory limit, OOM-killed, as a
//! follower, `describe` and the daemon's log say. Skipped loudly without
//! an engine, as the other docker tests are.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use sandboxd_client::{LogCursor, LogStart, ProbeState, SandboxdClient, Scope, MAX_LOG_CHUNK};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::docker_image::{docker_ok, docker_options, inspect, unique_id, volume_dir};
use sandboxd_tests::logs::{fixture_line_numbers, read_all_logs};
use sandboxd_tests::{eventually, sandbox_env, wait_until, TestDaemon};

use crate::docker_support::{
    container_id, engine_and_fresh_ids, wait_for_probe, wait_for_runner_files, workspace_volume,
};

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// What one reader gets by asking from `start` until the daemon says it is
/// at the end, `max_bytes` at a time: the text, whether any chunk reported
/// a gap, and the cursor to go on from.
async fn read_to_end(
    client: &SandboxdClient,
    scope: Scope,
    id: &str,
    mut start: LogStart,
    max_bytes: u32,
) -> (String, bool, LogCursor) {
    let (mut data, mut gap) = (Vec::new(), false);
    loop {
        let chunk = client.logs(scope, id, start, max_bytes).await.unwrap();
        assert!(chunk.data.len() <= max_bytes as usize, "{chunk:?}");
        data.extend_from_slice(&chunk.data);
        gap |= chunk.gap;
        start = LogStart::After(chunk.next);
        if chunk.at_end {
            return (String::from_utf8(data).unwrap(), gap, chunk.next);
        }
    }
}

/// Waits until the engine's log of the sandbox has `lines` lines. The
/// engine reads a runner's pipes in its own time: a runner done writing
/// is not yet a log done growing.
async fn wait_for_logged(client: &SandboxdClient, scope: Scope, id: &str, lines: usize) {
    let logged = eventually(Duration::from_secs(20), || async {
        let (text, _, _) = read_to_end(client, scope, id, LogStart::Beginning, MAX_LOG_CHUNK).await;
        text.lines().count() >= lines
    })
    .await;
    assert!(
        logged,
        "the engine never logged {lines} lines of {scope} '{id}'"
    );
}

/// What one run of `runner-fixture --print-lines 20` writes: its start line
/// on stderr and the twenty on stdout, each stream in order. The engine
/// reads the two pipes separately, so where the stderr line lands among
/// the others is the engine's to say (the process tier's one file keeps
/// the order written).
fn assert_one_run(text: &str) {
    let (started, printed): (Vec<&str>, Vec<&str>) = text
        .lines()
        .partition(|line| line.starts_with("runner-fixture: pid "));
    assert!(
        started.len() == 1 && started[0].contains("starting"),
        "stderr is in the log too: {text}"
    );
    let expected: Vec<String> = (1..=20)
        .map(|n| format!("runner-fixture line {n}"))
        .collect();
    assert_eq!(printed, expected, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_output_is_read_from_the_engine_with_tail_and_a_cursor_across_restarts() {
    let test = "container_output_is_read_from_the_engine_with_tail_and_a_cursor_across_restarts";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["logs"]) else {
        return;
    };
    // Never ensured, so nothing on the engine to clean up.
    let never = unique_id("logs-never");
    let daemon = TestDaemon::start(docker_options("command = [\"--print-lines\", \"20\"]"));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-logs");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    let name = base_name(Scope::Session, &id);
    let first = container_id(&name);
    let workspace = volume_dir(&workspace_volume(Scope::Session, &id));
    // The fixture writes its pid file after printing its lines.
    wait_for_runner_files(&workspace);
    wait_for_logged(&client, Scope::Session, &id, 21).await;

    let all = daemon.sandboxctl(&["logs", "session", &id]);
    assert_eq!(all.status.code(), Some(0), "{}", stderr(&all));
    let text = stdout(&all);
    assert_one_run(&text);
    let tail = daemon.sandboxctl(&["logs", "session", &id, "--tail", "3"]);
    assert_eq!(tail.status.code(), Some(0), "{}", stderr(&tail));
    let last_three: Vec<&str> = text.lines().skip(18).collect();
    assert_eq!(stdout(&tail), format!("{}\n", last_three.join("\n")));

    // Chunks far smaller than a line: each within the bound, none lost or repeated.
    let (small, gap, end) = read_to_end(&client, Scope::Session, &id, LogStart::Beginning, 7).await;
    assert_eq!((small.as_str(), gap), (text.as_str(), false));

    // Killed and started again (the same container, so the same log): a
    // follower from the end ends with the run it follows, saying how, and
    // never reads into the next one; a cursor reads on.
    let mut follower =
        daemon.spawn_sandboxctl(&["logs", "session", &id, "--tail", "1", "--follow"]);
    let (lines, followed) = std::sync::mpsc::channel();
    let output = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let next_line = || followed.recv_timeout(Duration::from_secs(20));
    // Its first line shows it is following before the restart.
    assert_eq!(next_line().ok().as_deref(), text.lines().last());
    std::fs::remove_file(workspace.join("pid")).unwrap();
    docker_ok(&["kill", &name]);
    wait_for_probe(&client, Scope::Session, &id, ProbeState::Stopped).await;
    let report = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert_eq!((report.created, report.generation), (true, 2), "{report:?}");
    assert_eq!(container_id(&name), first, "started again, not recreated");
    assert!(
        sandboxd_tests::wait_until(Duration::from_secs(30), || follower
            .try_wait()
            .unwrap()
            .is_some()),
        "--follow did not end with the run it followed"
    );
    let crossed: Vec<String> = std::iter::from_fn(|| next_line().ok()).collect();
    assert!(crossed.is_empty(), "crossed into the next run: {crossed:?}");
    let errors = stderr(&follower.wait_with_output().unwrap());
    assert!(
        errors.contains(&format!("session {id}: generation 1: the runner"))
            && errors.contains("its output ends here"),
        "{errors}"
    );
    assert!(!errors.contains("lost"), "{errors}");
    wait_for_runner_files(&workspace);
    let (second, gap, end) =
        read_to_end(&client, Scope::Session, &id, LogStart::After(end), 4096).await;
    assert_one_run(&second);
    assert!(!gap, "a restart loses nothing");
    let all = stdout(&daemon.sandboxctl(&["logs", "session", &id]));
    assert_eq!(all, format!("{text}{second}"), "both runs, in order");

    // Removed and recreated: a new log. The cursor into the old one goes on
    // from the new one's start, and says output may have been lost.
    std::fs::remove_file(workspace.join("pid")).unwrap();
    docker_ok(&["rm", "-f", &name]);
    let report = client.ensure_session_sandbox(&id, &env).await.unwrap();
    assert!(report.created, "{report:?}");
    assert_ne!(container_id(&name), first, "a new container");
    wait_for_runner_files(&workspace);
    wait_for_logged(&client, Scope::Session, &id, 21).await;
    let (third, gap, _) =
        read_to_end(&client, Scope::Session, &id, LogStart::After(end), 4096).await;
    assert_one_run(&third);
    assert!(gap, "the old container's unread output went with it");

    // A sandbox that never ran has no output, as in the process tier.
    let absent = daemon.sandboxctl(&["logs", "workflow", &never]);
    assert_eq!(absent.status.code(), Some(1));
    assert!(
        stderr(&absent).contains(&format!("workflow '{never}' has no output to show")),
        "{}",
        stderr(&absent)
    );
}

/// Follows `id` with `sandboxctl logs --follow` until it ends by itself
/// (once `then` has run): its stdout and stderr.
async fn follow_until_it_ends(
    daemon: &TestDaemon,
    id: &str,
    wait_for: &str,
    then: impl std::future::Future<Output = ()>,
) -> (String, String) {
    let mut follower = daemon.spawn_sandboxctl(&["logs", "session", id, "--follow"]);
    let (lines, followed) = std::sync::mpsc::channel();
    let output = follower.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|line: &String| line.contains(wait_for)) {
        match followed.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => seen.push(line),
            Err(_) => {
                let _ = follower.kill();
                panic!("the follower never printed {wait_for:?}: {seen:?}");
            }
        }
    }
    then.await;
    let ended = sandboxd_tests::wait_until(Duration::from_secs(30), || {
        follower.try_wait().unwrap().is_some()
    });
    if !ended {
        let _ = follower.kill();
    }
    seen.extend(std::iter::from_fn(|| {
        followed.recv_timeout(Duration::from_secs(5)).ok()
    }));
    let errors = stderr(&follower.wait_with_output().unwrap());
    assert!(
        ended,
        "--follow did not end with its generation: {seen:?}\n{errors}"
    );
    let mut text = seen.join("\n");
    text.push('\n');
    (text, errors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_follow_ends_after_the_last_line_at_a_deprovision_with_or_without_the_workspace() {
    let test = "a_docker_follow_ends_after_the_last_line_at_a_deprovision";
    let Some(([kept, gone], _cleanup)) = engine_and_fresh_ids(test, ["follow-kept", "follow-gone"])
    else {
        return;
    };
    let daemon = TestDaemon::start(docker_options("command = [\"--print-lines\", \"3\"]"));
    let client = daemon.client().await;
    for (id, keep_workspace) in [(&kept, true), (&gone, false)] {
        let env = sandbox_env(&format!("session:{id}"), "tok-follow");
        client.ensure_session_sandbox(id, &env).await.unwrap();
        let deprovision = async {
            let mut args = vec!["deprovision", "session", id.as_str()];
            if keep_workspace {
                args.push("--keep-workspace");
            }
            let output = daemon.sandboxctl(&args);
            assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        };
        let (text, errors) =
            follow_until_it_ends(&daemon, id, "runner-fixture line 3", deprovision).await;
        // The runner's last words, written at SIGTERM, came before the end.
        assert!(
            text.ends_with("runner-fixture: got SIGTERM, exiting\n"),
            "keep_workspace={keep_workspace}: {text}"
        );
        // The follower's read may land between the container's stop and
        // its removal: then the run reads as over with the daemon's own
        // stop as its exit, which names the deprovision too.
        let named = [
            "the runner was stopped (sandbox deprovisioned)",
            "the runner exited (stopped: deprovisioned)",
        ]
        .iter()
        .any(|how| {
            errors.contains(&format!(
                "session {id}: generation 1: {how}; its output ends here"
            ))
        });
        assert!(named, "keep_workspace={keep_workspace}: {errors}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_follow_ends_when_its_runner_exits_saying_how() {
    let test = "a_docker_follow_ends_when_its_runner_exits_saying_how";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["follow-exit"]) else {
        return;
    };
    let daemon = TestDaemon::start(docker_options(
        "command = [\"--print-lines\", \"3\", \"--exit-code\", \"3\"]",
    ));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-exit");
    client.ensure_session_sandbox(&id, &env).await.unwrap();
    let (text, errors) = follow_until_it_ends(&daemon, &id, "runner-fixture: pid", async {}).await;
    assert!(text.contains("runner-fixture: pid"), "{text}");
    assert!(
        errors.contains(&format!(
            "session {id}: generation 1: the runner exited (code 3); its output ends here"
        )),
        "{errors}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_container_log_comes_in_bounded_chunks_in_order() {
    let test = "a_long_container_log_comes_in_bounded_chunks_in_order";
    let Some(([id], _cleanup)) = engine_and_fresh_ids(test, ["logs-long"]) else {
        return;
    };
    let lines = 30_000;
    let daemon = TestDaemon::start(docker_options(&format!(
        "command = [\"--print-lines\", \"{lines}\"]"
    )));
    let client = daemon.client().await;
    client
        .ensure_workflow_sandbox(&id, &sandbox_env(&format!("wfexec:{id}"), ""))
        .await
        .unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Workflow, &id)));
    wait_for_logged(&client, Scope::Workflow, &id, lines as usize + 1).await;

    // Each chunk after the first starts from a cursor far behind the
    // newest entries, so it is read past the engine's recent ones.
    let (data, chunks) = read_all_logs(&client, Scope::Workflow, &id).await;
    assert!(chunks >= 3, "{chunks} chunks");
    let text = String::from_utf8(data).unwrap();
    assert_eq!(
        fixture_line_numbers(&text),
        (1..=lines).collect::<Vec<u32>>()
    );
    assert_eq!(
        stdout(&daemon.sandboxctl(&["logs", "workflow", &id])),
        text,
        "sandboxctl reads the same"
    );
}

/// The runner allocates only once the test says so, after ensure returned:
/// this engine (Docker 20.10, containerd 1.6's runc shim, cgroup v1)
/// starts watching a container's cgroup for OOM kills only after its
/// process has started, so a runner killed within its first milliseconds
/// is reported as a plain exit 137 with `OOMKilled` false
/// (containerd#8180, #8893; the shim watches from creation since
/// containerd#12405). Allocating at once, about one run in thirty here
/// loses the flag, more under load. Real runners take seconds to grow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_over_its_memory_limit_is_oom_killed_and_describe_says_so() {
    let test = "a_runner_over_its_memory_limit_is_oom_killed_and_describe_says_so";
    let Some(([over, under], _cleanup)) = engine_and_fresh_ids(test, ["oom", "oom-under"]) else {
        return;
    };
    // 32 MiB and no swap (the driver sets memory_swap to the limit).
    let limited = |args: &str| docker_options(&format!("memory = \"32m\"\ncommand = [{args}]"));

    // Under the limit the runner holds its memory and lives (its pid file
    // comes once it does): the limit alone kills nothing.
    let daemon = TestDaemon::start(limited(r#""--allocate-mib", "8""#));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{under}"), "");
    client.ensure_session_sandbox(&under, &env).await.unwrap();
    wait_for_runner_files(&volume_dir(&workspace_volume(Scope::Session, &under)));
    let container = inspect("container", &base_name(Scope::Session, &under)).unwrap();
    assert_eq!(container["HostConfig"]["Memory"], 32 << 20);
    assert_eq!(container["HostConfig"]["MemorySwap"], 32 << 20);
    assert_eq!(
        client.probe(Scope::Session, &under).await.unwrap(),
        ProbeState::Running
    );
    drop(client);
    drop(daemon);

    // Over it: the kernel's OOM killer ends the runner, and the engine
    // reports it as such.
    let daemon = TestDaemon::start(limited(
        r#""--allocate-mib", "128", "--allocate-when", "allocate-now""#,
    ));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{over}"), "");
    client.ensure_session_sandbox(&over, &env).await.unwrap();
    let workspace = volume_dir(&workspace_volume(Scope::Session, &over));
    wait_for_runner_files(&workspace);
    // A follower ends with the OOM kill, naming it.
    let allocate = async { std::fs::write(workspace.join("allocate-now"), "").unwrap() };
    let (_, errors) = follow_until_it_ends(&daemon, &over, "runner-fixture: pid", allocate).await;
    assert!(
        errors.contains(&format!(
            "session {over}: generation 1: the runner exited ("
        )) && errors.contains("OOM-killed")
            && errors.contains("its output ends here"),
        "{errors}"
    );
    wait_for_probe(&client, Scope::Session, &over, ProbeState::Stopped).await;
    let name = base_name(Scope::Session, &over);
    let state = inspect("container", &name).unwrap()["State"].clone();
    assert_eq!(state["OOMKilled"], true, "{state}");
    let info = client.describe(Scope::Session, &over).await.unwrap();
    let exit = info.last_exit.expect("the exit is known");
    assert!(exit.oom_killed, "{exit:?}");
    assert_eq!((exit.code, exit.signal), (Some(137), Some(9)), "{exit:?}");
    assert!(exit.to_string().contains("OOM-killed"), "{exit}");
    let logged = wait_until(Duration::from_secs(10), || {
        daemon.log_text().contains("runner ran out of memory")
    });
    assert!(
        logged,
        "the engine's oom event reached the daemon:\n{}",
        daemon.log_text()
    );
    // Its output is still there to read.
    let (output, _, _) = read_to_end(
        &client,
        Scope::Session,
        &over,
        LogStart::Tail { lines: 5 },
        4096,
    )
    .await;
    assert!(output.contains("allocate_mib: 128"), "{output}");
}
