//! Commands in a running process-tier sandbox (`exec`): they run with the
//! runner's isolation, their output is kept and read back from any
//! offset, and each ends with exactly one proof saying how.

use std::time::Duration;

use sandboxd_client::{
    CommandProof, CommandRef, ExecRequest, ExitReason, OutputStream, SandboxdClient, Scope,
};
use sandboxd_tests::{Options, TestDaemon};

const WAIT: Duration = Duration::from_secs(30);

fn request(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|arg| arg.to_string()).collect(),
        ..ExecRequest::default()
    }
}

fn shell(script: &str) -> ExecRequest {
    request(&["/bin/sh", "-c", script])
}

/// Everything `stream` holds, read to its end, and the proof.
async fn read_all(
    client: &SandboxdClient,
    id: &str,
    command: &CommandRef,
    stream: OutputStream,
) -> (Vec<u8>, CommandProof) {
    let mut data = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = client
            .command_output(Scope::Session, id, command, stream, offset, 1 << 20, WAIT)
            .await
            .expect("command_output");
        data.extend_from_slice(&chunk.data);
        offset = chunk.next;
        if let Some(proof) = chunk.proof {
            return (data, proof);
        }
    }
}

async fn proof_of(client: &SandboxdClient, id: &str, command: &CommandRef) -> CommandProof {
    let info = client
        .command_wait(Scope::Session, id, command, WAIT)
        .await
        .expect("command_wait");
    info.proof.expect("the command ended within the wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_as_the_runner_and_ends_with_its_code_and_output() {
    let daemon = TestDaemon::start(Options::default());
    let runner_pid = sandboxd_tests::start_session(&daemon, "c1").await;
    let client = daemon.client().await;
    let started = client
        .exec(
            Scope::Session,
            "c1",
            &shell(
                "echo out; echo err >&2; \
                 echo uid=$(id -u) pwd=$(pwd); \
                 for ns in mnt pid ipc; do echo $ns=$(readlink /proc/self/ns/$ns); done; \
                 echo cgroup=$(cat /proc/self/cgroup | sort | md5sum); \
                 exit 3",
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("exec: {error}\n{}", daemon.log_text()));
    assert_eq!(started.command_id.len(), 32);
    let command = CommandRef::Id(started.command_id.clone());
    let (stdout, proof) = read_all(&client, "c1", &command, OutputStream::Stdout).await;
    let (stderr, _) = read_all(&client, "c1", &command, OutputStream::Stderr).await;
    let stdout = String::from_utf8(stdout).unwrap();
    assert_eq!(proof.reason, ExitReason::Exited { code: 3 }, "{stdout}");
    assert_eq!(proof.exit_code, Some(3));
    assert_eq!(stderr, b"err\n");
    assert_eq!(proof.stderr.written, 4);
    assert!(stdout.starts_with("out\n"), "{stdout}");
    // The runner's own, read from the host.
    let runner_uid = std::fs::read_to_string(format!("/proc/{runner_pid}/status"))
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().next().map(str::to_string))
        .unwrap();
    assert!(stdout.contains(&format!("uid={runner_uid} ")), "{stdout}");
    let workspace = daemon.workspace(Scope::Session, "c1");
    assert!(
        stdout.contains(&format!("pwd={}", workspace.display())),
        "{stdout}"
    );
    for ns in ["mnt", "pid", "ipc"] {
        let runner_ns = std::fs::read_link(format!("/proc/{runner_pid}/ns/{ns}")).unwrap();
        assert!(
            stdout.contains(&format!("{ns}={}", runner_ns.display())),
            "{ns}: {stdout}"
        );
    }
    let list = client.commands(Scope::Session, "c1").await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].proof.as_ref(), Some(&proof));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_a_kill_and_a_deprovision_each_settle_with_their_own_proof() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "c2").await;
    let client = daemon.client().await;
    let mut timed = shell("sleep 600");
    timed.timeout_ms = Some(300);
    let timed = client.exec(Scope::Session, "c2", &timed).await.unwrap();
    let proof = proof_of(&client, "c2", &CommandRef::Id(timed.command_id)).await;
    assert_eq!(proof.reason, ExitReason::TimedOut { limit_ms: 300 });
    assert_eq!(proof.shell_code(), 124);

    let mut tagged = shell("sleep 600");
    tagged.tag = Some("sleeper".into());
    client.exec(Scope::Session, "c2", &tagged).await.unwrap();
    let again = client.exec(Scope::Session, "c2", &tagged).await;
    assert!(
        format!("{:?}", again).contains("tag 'sleeper' is in use"),
        "{again:?}"
    );
    let sleeper = CommandRef::Tag("sleeper".into());
    client
        .command_signal(Scope::Session, "c2", &sleeper, libc::SIGKILL)
        .await
        .unwrap();
    let proof = proof_of(&client, "c2", &sleeper).await;
    assert_eq!(proof.reason, ExitReason::Signaled { signal: 9 });
    assert_eq!(proof.shell_code(), 137);

    let long = client
        .exec(Scope::Session, "c2", &shell("sleep 600"))
        .await
        .unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { proof_of(&client, "c2", &CommandRef::Id(long.command_id)).await })
    };
    client
        .deprovision(Scope::Session, "c2", false)
        .await
        .unwrap();
    let proof = waiter.await.unwrap();
    assert_eq!(proof.reason, ExitReason::SandboxEnded, "{proof:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_fed_and_closed_and_bad_requests_name_their_field() {
    let daemon = TestDaemon::start(Options::default());
    sandboxd_tests::start_session(&daemon, "c3").await;
    let client = daemon.client().await;
    let mut cat = request(&["cat"]);
    cat.stdin = true;
    let cat = client.exec(Scope::Session, "c3", &cat).await.unwrap();
    let command = CommandRef::Id(cat.command_id);
    client
        .command_input(Scope::Session, "c3", &command, b"fed\n", false)
        .await
        .unwrap();
    client
        .command_input(Scope::Session, "c3", &command, b"more\n", true)
        .await
        .unwrap();
    let (stdout, proof) = read_all(&client, "c3", &command, OutputStream::Stdout).await;
    assert_eq!(stdout, b"fed\nmore\n");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });

    let refused = |result: Result<sandboxd_client::ExecStarted, sandboxd_client::ClientError>| {
        format!("{}", result.expect_err("refused"))
    };
    let mut outside = shell("true");
    outside.workdir = Some("../..".into());
    assert!(refused(client.exec(Scope::Session, "c3", &outside).await).contains("workdir"));
    std::os::unix::fs::symlink("/etc", daemon.workspace(Scope::Session, "c3").join("out")).unwrap();
    outside.workdir = Some("out".into());
    let message = refused(client.exec(Scope::Session, "c3", &outside).await);
    assert!(message.contains("leads out of the workspace"), "{message}");
    let message = refused(client.exec(Scope::Session, "absent", &shell("true")).await);
    assert!(message.contains("does not exist"), "{message}");
    let message = refused(
        client
            .exec(Scope::Session, "c3", &request(&["no-such-program-here"]))
            .await,
    );
    assert!(message.contains("argv[0]"), "{message}");
    let mut stale = shell("true");
    stale.expect.generation = Some(99);
    let message = refused(client.exec(Scope::Session, "c3", &stale).await);
    assert!(message.contains("conflict"), "{message}");
}
