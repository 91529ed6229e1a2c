//! `logs --follow` ends with the generation it follows:
//! after the last bytes the runner wrote, with one line naming how it
//! ended, whether the sandbox was deprovisioned (with or without its
//! workspace) or its runner was killed; it never reads into the next
//! generation. The runner is the daemon's example runner, which prints
//! `got SIGTERM, bye` as its last line.

use std::io::Read;
use std::process::{Child, ChildStderr, ChildStdout};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandboxd_tests::{sandbox_env, wait_until, Options, TestDaemon, RUNNER_TIMEOUT};

/// How long a follow may take to end once its generation has.
const END_TIMEOUT: Duration = Duration::from_secs(30);

fn example_daemon() -> TestDaemon {
    TestDaemon::start(Options {
        example_runner: true,
        ..Options::default()
    })
}

/// A running `logs --follow` whose output is collected as it comes.
struct Follower {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Follower {
    fn start(daemon: &TestDaemon, scope: &str, id: &str) -> Follower {
        let mut child = daemon.spawn_sandboxctl(&["logs", scope, id, "--follow"]);
        let stdout = collect(child.stdout.take().unwrap());
        let stderr = collect(child.stderr.take().unwrap());
        Follower {
            child,
            stdout,
            stderr,
        }
    }

    fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until it has printed `text` (so it has read up to there).
    fn wait_for(&self, text: &str) {
        assert!(
            wait_until(RUNNER_TIMEOUT, || self.stdout().contains(text)),
            "the follower never printed {text:?}: {}\n{}",
            self.stdout(),
            self.stderr()
        );
    }

    /// Waits for it to exit by itself; its exit code, stdout and stderr.
    fn ended(mut self) -> (Option<i32>, String, String) {
        let mut status = None;
        let exited = wait_until(END_TIMEOUT, || {
            status = self.child.try_wait().unwrap();
            status.is_some()
        });
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
            panic!(
                "--follow did not end with its generation: {}\n{}",
                self.stdout(),
                self.stderr()
            );
        }
        // The pipes close with the process: wait for the readers to drain.
        let drained = wait_until(END_TIMEOUT, || {
            Arc::strong_count(&self.stdout) == 1 && Arc::strong_count(&self.stderr) == 1
        });
        assert!(drained, "the follower's pipes stayed open");
        (status.unwrap().code(), self.stdout(), self.stderr())
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait Pipe: Read + Send + 'static {}
impl Pipe for ChildStdout {}
impl Pipe for ChildStderr {}

/// Reads `pipe` on a thread into a shared string (the thread's handle is
/// dropped when the pipe closes, so the strong count tells it is done).
fn collect(mut pipe: impl Pipe) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let shared = text.clone();
    std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        while let Ok(read @ 1..) = pipe.read(&mut buffer) {
            shared
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    });
    text
}

const CONTRACT_LINE: &str = "  STIGMER_TOKEN set (3 bytes)\n";
const HEADER: &str = "sandboxd-example-runner ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_ends_after_the_last_line_when_the_workspace_is_kept() {
    let daemon = example_daemon();
    let client = daemon.client().await;
    client
        .ensure_session_sandbox("keep", &sandbox_env("session:keep", "tok"))
        .await
        .unwrap();
    let follower = Follower::start(&daemon, "session", "keep");
    follower.wait_for(CONTRACT_LINE);
    let deprovision = daemon.sandboxctl(&["deprovision", "session", "keep", "--keep-workspace"]);
    assert_eq!(deprovision.status.code(), Some(0));
    let (code, stdout, stderr) = follower.ended();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.ends_with("got SIGTERM, bye\n"), "{stdout}");
    assert!(
        stderr.contains(
            "session keep: generation 1: the runner exited (code 0); its output ends here"
        ),
        "{stderr}"
    );

    // A follow of the stopped sandbox ends at once, saying how its last
    // runner ended; the next generation is not followed into.
    let again = Follower::start(&daemon, "session", "keep");
    let (code, stdout, stderr) = again.ended();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.ends_with("got SIGTERM, bye\n"), "{stdout}");
    assert!(
        stderr.contains("generation 1: the runner exited (code 0)"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_gets_the_last_line_of_a_sandbox_deprovisioned_with_its_workspace() {
    let daemon = example_daemon();
    let client = daemon.client().await;
    client
        .ensure_workflow_sandbox("gone", &sandbox_env("wfexec:gone", "tok"))
        .await
        .unwrap();
    let follower = Follower::start(&daemon, "workflow", "gone");
    follower.wait_for(CONTRACT_LINE);
    client.deprovision_workflow_sandbox("gone").await.unwrap();
    let (code, stdout, stderr) = follower.ended();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.ends_with("got SIGTERM, bye\n"), "{stdout}");
    assert!(
        stderr.contains(
            "workflow gone: generation 1: the runner exited (code 0); its output ends here"
        ),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_of_a_killed_runner_ends_and_never_reads_the_next_generation() {
    let daemon = example_daemon();
    let client = daemon.client().await;
    let env = sandbox_env("session:killed", "tok");
    let report = client.ensure_session_sandbox("killed", &env).await.unwrap();
    let follower = Follower::start(&daemon, "session", "killed");
    follower.wait_for(CONTRACT_LINE);
    sandboxd_tests::procs::signal_pid(report.pid.unwrap(), nix::sys::signal::Signal::SIGKILL);
    // The repair arm: the next ensure starts generation 2 at once, which
    // writes its own contract into the same output file.
    assert!(wait_until(RUNNER_TIMEOUT, || {
        daemon.log_text().contains("runner exited")
    }));
    let second = client.ensure_session_sandbox("killed", &env).await.unwrap();
    assert_eq!(second.generation, 2);
    let (code, stdout, stderr) = follower.ended();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(
        stdout.matches(HEADER).count(),
        1,
        "crossed into generation 2: {stdout}"
    );
    assert!(
        stderr.contains("generation 1: the runner exited (signal 9); its output ends here"),
        "{stderr}"
    );
    // Generation 2's output is there, for a reader that asks for it all.
    assert!(
        wait_until(RUNNER_TIMEOUT, || {
            let all = daemon.sandboxctl(&["logs", "session", "killed"]);
            String::from_utf8_lossy(&all.stdout).matches(HEADER).count() == 2
        }),
        "generation 2 wrote nothing"
    );
}
