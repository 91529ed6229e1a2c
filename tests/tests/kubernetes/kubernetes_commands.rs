//! Commands in a kubernetes-tier sandbox, through pods/exec, with the real
//! `sandboxd --driver kubernetes`: against the in-process STAND-IN API
//! server, whose pods/exec is a STAND-IN FOR THE KUBELET (the argv runs as
//! a local process of this test, never in a container: what is tested is
//! the daemon's side of the streaming protocol — channels, stdin and its
//! close, the final status, a pod deleted under a command), or against a
//! real cluster when `SANDBOXD_TEST_KUBECONFIG` names one (the runner
//! image must then have `sh`, `cat` and `sleep`).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use sandboxd_client::{
    ClientError, CommandLimits, CommandProof, CommandRef, ExitReason, Expectation, OutputStream,
    SandboxError, SandboxdClient, Scope,
};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::commands::{request, shell};
use sandboxd_tests::k8s::TestCluster;
use sandboxd_tests::{sandbox_env, TestDaemon};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

pub(crate) struct Setup {
    pub(crate) cluster: TestCluster,
    pub(crate) daemon: TestDaemon,
    pub(crate) client: SandboxdClient,
}

pub(crate) async fn setup(test: &str) -> Setup {
    let cluster = TestCluster::start(test).await;
    let daemon = TestDaemon::start(cluster.daemon_options(""));
    let client = daemon.client().await;
    cluster.wait_for_watches(&daemon).await;
    Setup {
        cluster,
        daemon,
        client,
    }
}

/// Ensures session `id` and waits for its runner to run: on the stand-in,
/// its pod is inserted as a kubelet would report it (on a node), and its
/// commands run with a directory of this test as its workspace; on a real
/// cluster, the kubelet's. `false` on a real cluster where no kubelet runs
/// pods (a control plane alone): then what the daemon says of the
/// sandbox's Pending pod is checked, and a SKIPPED line names the test and
/// the missing kubelet. (The file calls' tests use it too.)
pub(crate) async fn running_sandbox(setup: &Setup, id: &str) -> bool {
    setup
        .client
        .ensure_session_sandbox(id, &sandbox_env(&format!("session:{id}"), "tok-commands"))
        .await
        .expect("ensure");
    if let Some(standin) = setup.cluster.standin_quietly() {
        let workspace = setup.cluster.dir().join(format!("workspace-{id}"));
        std::fs::create_dir_all(&workspace).expect("the stand-in's workspace");
        standin.run_execs_in(&workspace);
        let labels = json!({
            "stigmer.ai/managed-by": "stigmer-server",
            "stigmer.ai/scope": "session",
            "stigmer.ai/sandbox-id": id,
        });
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{}-pod", base_name(Scope::Session, id)), "labels": labels},
            "spec": {
                "nodeName": "standin-node",
                "containers": [{"name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE}],
            },
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "runner", "image": sandboxd_tests::k8s::TEST_IMAGE, "imageID": "",
                "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": "2026-01-01T00:01:00Z"}},
            }]},
        });
        standin.insert_pod(&setup.cluster.namespace, pod, b"");
        return true;
    }
    if let Some(why) = setup.cluster.no_kubelet().await {
        crate::kubernetes_no_kubelet::pending_is_refused(setup, id).await;
        let test = std::thread::current()
            .name()
            .unwrap_or("this test")
            .to_string();
        sandboxd_tests::k8s::skipped(&format!(
            "{test}: its commands and file calls need a kubelet to run the sandbox's pod, \
             and {why}; checked instead: the daemon refuses them at once naming the Pending pod"
        ));
        return false;
    }
    let pods: Api<Pod> = setup.cluster.api();
    let params = ListParams::default().labels(&format!("stigmer.ai/sandbox-id={id}"));
    let running = sandboxd_tests::eventually(Duration::from_secs(180), || {
        let pods = pods.clone();
        let params = params.clone();
        async move {
            let list = pods
                .list(&params)
                .await
                .map(|list| list.items)
                .unwrap_or_default();
            list.iter().any(|pod| {
                pod.status
                    .as_ref()
                    .and_then(|status| status.container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|status| status.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
        }
    })
    .await;
    assert!(running, "the runner of {id} never ran on the real cluster");
    true
}

/// Everything `stream` holds, read to its end, and the proof.
async fn read_all(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    stream: OutputStream,
) -> (Vec<u8>, CommandProof) {
    sandboxd_tests::commands::read_all(client, id, command, stream, WAIT).await
}

async fn proof_of(client: &SandboxdClient, id: &str, command: &CommandRef) -> CommandProof {
    sandboxd_tests::commands::proof_of(client, id, command, WAIT).await
}

fn refused(result: Result<sandboxd_client::ExecStarted, ClientError>) -> SandboxError {
    match result {
        Err(ClientError::Sandbox(error)) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_ends_with_its_code_its_streams_apart_and_its_env() {
    let setup = setup("cmd-exit").await;
    if !running_sandbox(&setup, "k-exit").await {
        return;
    }
    let mkdir = setup
        .client
        .exec(Scope::Session, "k-exit", &request(&["mkdir", "-p", "sub"]))
        .await
        .expect("mkdir");
    let made = proof_of(&setup.client, "k-exit", &CommandRef::Id(mkdir.command_id)).await;
    assert_eq!(made.reason, ExitReason::Exited { code: 0 });
    let mut exec = shell(
        "echo out; echo err >&2; echo \"$GREETING\" \"${STIGMER_TOKEN:-no token}\"; pwd; exit 3",
    );
    exec.env = vec![("GREETING".into(), "hello $(world)".into())];
    exec.workdir = Some("sub".into());
    let started = setup
        .client
        .exec(Scope::Session, "k-exit", &exec)
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", setup.daemon.log_text()));
    assert!(started.pid > 0, "the pid in the pod: {started:?}");
    let info = setup
        .client
        .describe(Scope::Session, "k-exit")
        .await
        .unwrap();
    assert_eq!(
        (started.uid.as_str(), started.generation),
        (info.uid.as_str(), info.generation)
    );
    let command = CommandRef::Id(started.command_id);
    let (stdout, proof) = read_all(&setup.client, "k-exit", &command, OutputStream::Stdout).await;
    let (stderr, _) = read_all(&setup.client, "k-exit", &command, OutputStream::Stderr).await;
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(proof.reason, ExitReason::Exited { code: 3 }, "{stdout}");
    assert_eq!(proof.exit_code, Some(3));
    assert_eq!(stderr, b"err\n");
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("out"),
        "nothing of the wrapper's line: {stdout}"
    );
    assert_eq!(lines.next(), Some("hello $(world) no token"), "{stdout}");
    assert!(
        lines.next().is_some_and(|pwd| pwd.ends_with("/sub")),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_goes_through_cat_and_its_close_ends_it() {
    let setup = setup("cmd-stdin").await;
    if !running_sandbox(&setup, "k-stdin").await {
        return;
    }
    let mut exec = request(&["cat"]);
    exec.stdin = true;
    let started = setup
        .client
        .exec(Scope::Session, "k-stdin", &exec)
        .await
        .unwrap();
    let command = CommandRef::Id(started.command_id);
    for (data, close) in [(&b"hello "[..], false), (&b"world\n"[..], true)] {
        setup
            .client
            .command_input(Scope::Session, "k-stdin", &command, data, close)
            .await
            .expect("command_input");
    }
    let (stdout, proof) = read_all(&setup.client, "k-stdin", &command, OutputStream::Stdout).await;
    assert_eq!(stdout, b"hello world\n");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_and_a_signal_are_delivered_by_kill_in_the_pod() {
    let setup = setup("cmd-timeout").await;
    if !running_sandbox(&setup, "k-time").await {
        return;
    }
    let mut timed = request(&["sleep", "600"]);
    timed.timeout_ms = Some(500);
    let started = setup
        .client
        .exec(Scope::Session, "k-time", &timed)
        .await
        .unwrap();
    let proof = proof_of(&setup.client, "k-time", &CommandRef::Id(started.command_id)).await;
    assert_eq!(
        proof.reason,
        ExitReason::TimedOut { limit_ms: 500 },
        "{proof:?}"
    );
    let started = setup
        .client
        .exec(Scope::Session, "k-time", &request(&["sleep", "600"]))
        .await
        .unwrap();
    let command = CommandRef::Id(started.command_id);
    setup
        .client
        .command_signal(Scope::Session, "k-time", &command, libc::SIGTERM)
        .await
        .expect("command_signal");
    let proof = proof_of(&setup.client, "k-time", &command).await;
    assert_eq!(
        proof.reason,
        ExitReason::Signaled {
            signal: libc::SIGTERM
        },
        "{proof:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_starts_are_refused_by_name_and_start_nothing() {
    let setup = setup("cmd-refused").await;
    let absent = refused(
        setup
            .client
            .exec(Scope::Session, "k-none", &request(&["true"]))
            .await,
    );
    assert!(
        matches!(&absent, SandboxError::FailedPrecondition(m) if m.contains("does not exist")),
        "{absent:?}"
    );
    // What needs no running pod is checked on every cluster; what the
    // wrapper in the pod checks, only where a kubelet runs it.
    let runs = running_sandbox(&setup, "k-bad").await;
    let info = setup
        .client
        .describe(Scope::Session, "k-bad")
        .await
        .unwrap();
    let mut stale = request(&["true"]);
    stale.expect = Expectation {
        uid: Some(info.uid.clone()),
        generation: Some(info.generation + 1),
    };
    let conflict = refused(setup.client.exec(Scope::Session, "k-bad", &stale).await);
    assert!(
        matches!(conflict, SandboxError::Conflict(_)),
        "{conflict:?}"
    );
    if runs {
        let mut workdir = request(&["true"]);
        workdir.workdir = Some("no-such-dir".into());
        let bad_dir = refused(setup.client.exec(Scope::Session, "k-bad", &workdir).await);
        assert!(
            matches!(&bad_dir, SandboxError::InvalidArgument(m) if m.contains("workdir 'no-such-dir'")),
            "{bad_dir:?}"
        );
        let program = refused(
            setup
                .client
                .exec(Scope::Session, "k-bad", &request(&["no-such-program-here"]))
                .await,
        );
        assert!(
            matches!(&program, SandboxError::InvalidArgument(m) if m.contains("argv[0] 'no-such-program-here'")),
            "{program:?}"
        );
    }
    let mut limited = request(&["true"]);
    limited.limits = CommandLimits {
        memory_bytes: Some(64 << 20),
        cpu_millis: None,
    };
    let limits = refused(setup.client.exec(Scope::Session, "k-bad", &limited).await);
    assert!(
        matches!(&limits, SandboxError::FailedPrecondition(m) if m.contains("limits of its own")),
        "{limits:?}"
    );
    assert!(setup
        .client
        .commands(Scope::Session, "k-bad")
        .await
        .unwrap()
        .is_empty());
    // Stopped: scaled to 0, as `kubectl scale` does.
    let deployments: Api<Deployment> = setup.cluster.api();
    let params = PatchParams {
        field_manager: Some("kubectl".to_string()),
        ..PatchParams::default()
    };
    deployments
        .patch_scale(
            &base_name(Scope::Session, "k-bad"),
            &params,
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("kubectl scale");
    let stopped = refused(
        setup
            .client
            .exec(Scope::Session, "k-bad", &request(&["true"]))
            .await,
    );
    assert!(
        matches!(&stopped, SandboxError::FailedPrecondition(m) if m.contains("stopped")),
        "{stopped:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deprovision_ends_a_command_as_sandbox_ended() {
    let setup = setup("cmd-deprovision").await;
    if !running_sandbox(&setup, "k-gone").await {
        return;
    }
    let started = setup
        .client
        .exec(Scope::Session, "k-gone", &request(&["sleep", "600"]))
        .await
        .unwrap();
    let command = CommandRef::Id(started.command_id);
    let waiter = {
        let client = setup.client.clone();
        let command = command.clone();
        tokio::spawn(async move { proof_of(&client, "k-gone", &command).await })
    };
    setup
        .client
        .deprovision(Scope::Session, "k-gone", false)
        .await
        .expect("deprovision");
    let proof = waiter.await.unwrap();
    assert_eq!(proof.reason, ExitReason::SandboxEnded, "{proof:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_is_one_stream_and_is_resized_through_channel_4() {
    let setup = setup("cmd-tty").await;
    if !running_sandbox(&setup, "k-tty").await {
        return;
    }
    let mut exec = shell("while read -r line; do stty size; done; echo bye");
    exec.pty = Some(sandboxd_client::PtySize { rows: 24, cols: 80 });
    let started = setup
        .client
        .exec(Scope::Session, "k-tty", &exec)
        .await
        .unwrap();
    let command = CommandRef::Id(started.command_id);
    setup
        .client
        .command_resize(Scope::Session, "k-tty", &command, 30, 100)
        .await
        .expect("command_resize");
    // The size is asked for again until it is the new one: the resize and
    // the input travel apart, so either may arrive first.
    let (mut seen, mut offset) = (Vec::new(), 0);
    let deadline = tokio::time::Instant::now() + WAIT;
    while !String::from_utf8_lossy(&seen).contains("30 100") {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never resized; the terminal's last output: {:?}",
            String::from_utf8_lossy(&seen[seen.len().saturating_sub(200)..])
        );
        setup
            .client
            .command_input(Scope::Session, "k-tty", &command, b"size?\n", false)
            .await
            .expect("command_input");
        let chunk = setup
            .client
            .command_output(
                Scope::Session,
                "k-tty",
                &command,
                OutputStream::Stdout,
                offset,
                1 << 20,
                Duration::from_secs(5),
            )
            .await
            .expect("command_output");
        seen.extend_from_slice(&chunk.data);
        offset = chunk.next;
    }
    // End of input, as a terminal says it (^D), ends the loop.
    setup
        .client
        .command_input(Scope::Session, "k-tty", &command, b"\x04", false)
        .await
        .expect("command_input");
    let (rest, proof) = read_all(&setup.client, "k-tty", &command, OutputStream::Stdout).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 }, "{rest:?}");
    let all = [&seen[..], &rest[..]].concat();
    assert!(
        String::from_utf8_lossy(&all).contains("bye\r\n"),
        "a terminal's output: {:?}",
        String::from_utf8_lossy(&all)
    );
    let (stderr, _) = read_all(&setup.client, "k-tty", &command, OutputStream::Stderr).await;
    assert!(stderr.is_empty(), "one stream with a terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_stop_leaves_a_command_in_its_pod_with_a_daemon_stopped_proof() {
    let mut setup = setup("cmd-stop").await;
    if !running_sandbox(&setup, "k-stop").await {
        return;
    }
    let started = setup
        .client
        .exec(Scope::Session, "k-stop", &request(&["sleep", "600"]))
        .await
        .unwrap();
    assert!(setup.daemon.stop().success());
    let log = setup.daemon.log_text();
    let ended = format!("command ended command={}", started.command_id);
    let line = log
        .lines()
        .find(|line| line.contains(&ended))
        .unwrap_or_else(|| panic!("no end logged for the command:\n{log}"));
    assert!(line.contains("reason=daemon-stopped"), "{line}");
    // The stand-in kills what it still runs when it stops (this test's end).
}
