//! Commands in a docker-tier sandbox (`exec`) against the real engine on
//! this machine: each runs as an exec of the sandbox's container, as its
//! user and in its namespaces, its output kept and read back, and each
//! ends with exactly one proof saying how.
//!
//! The runner image has no shell, so these tests run their daemon with an
//! image made from it and a few of this host's programs (`sh`, `cat`,
//! `stty`, …, with the libraries `ldd` names), committed locally: nothing
//! is pulled. Gated like every docker test: without an engine a loud
//! SKIPPED line, or a failure under `SANDBOXD_REQUIRE_DOCKER=1`. Every
//! test uses ids of its own and removes what it made, by label, even when
//! it fails.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use sandboxd_client::{
    ClientError, CommandLimits, CommandProof, CommandRef, ExecRequest, ExitReason, OutputStream,
    ProbeState, PtySize, SandboxError, SandboxdClient, Scope,
};
use sandboxd_protocol::naming::base_name;
use sandboxd_tests::commands::{request, shell};
use sandboxd_tests::derived_image::derived_image;
use sandboxd_tests::docker_image::{
    docker_options_on, engine_ready, inspect, unique_id, volume_dir, Cleanup,
};
use sandboxd_tests::{sandbox_env, wait_until, TestDaemon};

/// The runner image with a few of this host's programs added.
const TOOLS_IMAGE: &str = "sandboxd-test-runner-tools:latest";
/// What the commands here run.
const TOOLS: [&str; 8] = ["sh", "cat", "stty", "tty", "sleep", "id", "readlink", "env"];
const WAIT: Duration = Duration::from_secs(30);

/// The tools image, made (once per run, and only when the runner image
/// changed) by copying the programs into a container of the runner image
/// and committing it.
fn tools_image() -> &'static str {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(problem) = BUILT.get_or_init(build_tools_image) {
        panic!("cannot make {TOOLS_IMAGE}: {problem}");
    }
    TOOLS_IMAGE
}

fn build_tools_image() -> Result<(), String> {
    derived_image(TOOLS_IMAGE, &TOOLS, |root| {
        std::fs::create_dir_all(root.join("bin")).map_err(|error| error.to_string())?;
        std::os::unix::fs::symlink("/usr/bin/sh", root.join("bin/sh")).map_err(|e| e.to_string())
    })
}

/// One daemon on the tools image and one running session sandbox. Fields
/// drop in order: the daemon first, then what the engine holds for the id.
struct Sandbox {
    daemon: TestDaemon,
    client: SandboxdClient,
    id: String,
    /// The container's name.
    name: String,
    _cleanup: Cleanup,
}

/// `None` (after a loud SKIPPED line) when no engine answers.
async fn sandbox(test: &str) -> Option<Sandbox> {
    sandbox_with(test, "").await
}

/// The same, with these lines in the `[docker]` table.
async fn sandbox_with(test: &str, docker_toml: &str) -> Option<Sandbox> {
    if !engine_ready(test) {
        return None;
    }
    let image = tools_image();
    let id = unique_id(test);
    let cleanup = Cleanup::new(&[&id]);
    let daemon = TestDaemon::start(docker_options_on(image, docker_toml));
    let client = daemon.client().await;
    let env = sandbox_env(&format!("session:{id}"), "tok-commands");
    client
        .ensure(Scope::Session, &id, &env)
        .await
        .unwrap_or_else(|error| panic!("ensure {id}: {error}\n{}", daemon.log_text()));
    Some(Sandbox {
        daemon,
        client,
        name: base_name(Scope::Session, &id),
        id,
        _cleanup: cleanup,
    })
}

impl Sandbox {
    async fn exec(&self, request: &ExecRequest) -> CommandRef {
        let started = self
            .client
            .exec(Scope::Session, &self.id, request)
            .await
            .unwrap_or_else(|error| panic!("exec: {error}\n{}", self.daemon.log_text()));
        CommandRef::Id(started.command_id)
    }

    fn refused(&self, result: Result<sandboxd_client::ExecStarted, ClientError>) -> SandboxError {
        match result {
            Err(ClientError::Sandbox(error)) => error,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Everything `stream` holds, read to its end, and the proof.
    async fn read_all(&self, command: &CommandRef, stream: OutputStream) -> (String, CommandProof) {
        let mut data = Vec::new();
        let mut offset = 0;
        loop {
            let chunk = self
                .client
                .command_output(
                    Scope::Session,
                    &self.id,
                    command,
                    stream,
                    offset,
                    1 << 20,
                    WAIT,
                )
                .await
                .expect("command_output");
            data.extend_from_slice(&chunk.data);
            offset = chunk.next;
            if let Some(proof) = chunk.proof {
                return (String::from_utf8_lossy(&data).into_owned(), proof);
            }
        }
    }

    /// Reads stdout from `offset` until it holds `wanted`; the offset after.
    async fn read_until(&self, command: &CommandRef, offset: u64, wanted: &str) -> u64 {
        sandboxd_tests::commands::read_text_until(
            &self.client,
            &self.id,
            command,
            offset,
            wanted,
            WAIT,
        )
        .await
        .1
    }

    async fn proof_of(&self, command: &CommandRef) -> CommandProof {
        let info = self
            .client
            .command_wait(Scope::Session, &self.id, command, WAIT)
            .await
            .expect("command_wait");
        info.proof.expect("the command ended within the wait")
    }

    /// The container as `docker inspect` shows it.
    fn container(&self) -> serde_json::Value {
        inspect("container", &self.name).expect("the sandbox's container")
    }

    /// How many execs the engine has made in the container.
    fn exec_count(&self) -> usize {
        self.container()["ExecIDs"].as_array().map_or(0, Vec::len)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_runs_in_the_container_as_its_user_with_its_code_and_streams_apart() {
    let Some(sandbox) = sandbox("dkr-cmd-run").await else {
        return;
    };
    let mut command = shell(
        "echo out; echo err >&2; echo uid=$(id -u) gid=$(id -g) pwd=$(pwd); \
         echo hostname=$(cat /etc/hostname); echo pidns=$(readlink /proc/self/ns/pid); \
         echo ---; env; exit 3",
    );
    command.env = vec![("OWN".into(), "mine".into())];
    let command = sandbox.exec(&command).await;
    let (stdout, proof) = sandbox.read_all(&command, OutputStream::Stdout).await;
    let (stderr, _) = sandbox.read_all(&command, OutputStream::Stderr).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 3 }, "{stdout}");
    assert_eq!((proof.exit_code, proof.signal), (Some(3), None));
    assert_eq!(stderr, "err\n");
    assert_eq!(proof.stderr.written, 4);
    assert!(stdout.starts_with("out\n"), "{stdout}");
    // The container's own, as the engine shows it from outside.
    let container = sandbox.container();
    let user = container["Config"]["User"].as_str().expect("a user");
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    assert!(
        stdout.contains(&format!("uid={uid} gid={gid} pwd=/workspace\n")),
        "{user}: {stdout}"
    );
    let hostname = container["Config"]["Hostname"]
        .as_str()
        .expect("a hostname");
    assert!(
        stdout.contains(&format!("hostname={hostname}\n")),
        "{stdout}"
    );
    let init = container["State"]["Pid"].as_u64().expect("a running init");
    let pidns = std::fs::read_link(format!("/proc/{init}/ns/pid")).unwrap();
    assert!(
        stdout.contains(&format!("pidns={}\n", pidns.display())),
        "{stdout}"
    );
    // The contract without the runner's token, and the command's own.
    assert!(
        stdout.contains("\nWORKSPACE_ROOT_DIR=/workspace\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\nOWN=mine\n"), "{stdout}");
    assert!(!stdout.contains("STIGMER_TOKEN"), "{stdout}");
    assert!(!stdout.contains("tok-commands"), "{stdout}");
    let list = sandbox
        .client
        .commands(Scope::Session, &sandbox.id)
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].proof.as_ref(), Some(&proof));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_by_name_with_nothing_started() {
    let Some(sandbox) = sandbox("dkr-cmd-bad").await else {
        return;
    };
    std::fs::create_dir(sandbox_workspace(&sandbox).join("sub")).unwrap();
    std::os::unix::fs::symlink("/etc", sandbox_workspace(&sandbox).join("out")).unwrap();
    let mut inside = shell("pwd");
    inside.workdir = Some("sub".into());
    let inside = sandbox.exec(&inside).await;
    let (stdout, _) = sandbox.read_all(&inside, OutputStream::Stdout).await;
    assert_eq!(stdout, "/workspace/sub\n");
    let execs = sandbox.exec_count();

    let exec = |request: ExecRequest| {
        let client = sandbox.client.clone();
        let id = sandbox.id.clone();
        async move { client.exec(Scope::Session, &id, &request).await }
    };
    let mut linked = shell("pwd");
    linked.workdir = Some("out".into());
    let error = sandbox.refused(exec(linked).await);
    assert!(matches!(error, SandboxError::InvalidArgument(_)), "{error}");
    assert!(
        error.to_string().contains("leads out of the workspace"),
        "{error}"
    );
    let mut missing = shell("pwd");
    missing.workdir = Some("nowhere".into());
    let error = sandbox.refused(exec(missing).await);
    assert!(error.to_string().contains("does not exist"), "{error}");
    let mut stale = shell("true");
    stale.expect.generation = Some(99);
    let error = sandbox.refused(exec(stale).await);
    assert!(matches!(error, SandboxError::Conflict(_)), "{error}");
    let mut limited = shell("true");
    limited.limits = CommandLimits {
        memory_bytes: Some(64 << 20),
        cpu_millis: None,
    };
    let error = sandbox.refused(exec(limited).await);
    assert!(
        matches!(error, SandboxError::FailedPrecondition(_)),
        "{error}"
    );
    assert!(error.to_string().contains("cgroup"), "{error}");
    assert_eq!(
        sandbox.exec_count(),
        execs,
        "a refused command made an exec"
    );

    let error = sandbox.refused(exec(request(&["no-such-program-here"])).await);
    assert!(matches!(error, SandboxError::InvalidArgument(_)), "{error}");
    assert!(error.to_string().contains("argv[0]"), "{error}");
    let absent = sandbox
        .client
        .exec(Scope::Session, "dkr-cmd-absent", &shell("true"))
        .await;
    let error = sandbox.refused(absent);
    assert!(
        matches!(error, SandboxError::FailedPrecondition(_)),
        "{error}"
    );
    assert!(error.to_string().contains("does not exist"), "{error}");

    sandbox
        .client
        .pause(Scope::Session, &sandbox.id)
        .await
        .expect("pause");
    let error = sandbox.refused(exec(shell("true")).await);
    assert!(
        matches!(error, SandboxError::FailedPrecondition(_)),
        "{error}"
    );
    assert!(error.to_string().contains("paused"), "{error}");
    sandbox
        .client
        .resume(Scope::Session, &sandbox.id)
        .await
        .expect("resume");
    let after = sandbox.exec(&shell("echo resumed")).await;
    let (stdout, _) = sandbox.read_all(&after, OutputStream::Stdout).await;
    assert_eq!(stdout, "resumed\n");
}

fn sandbox_workspace(sandbox: &Sandbox) -> std::path::PathBuf {
    volume_dir(&format!("{}-workspace", sandbox.name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_is_fed_and_closed_and_a_terminal_is_sized() {
    let Some(sandbox) = sandbox("dkr-cmd-tty").await else {
        return;
    };
    let mut cat = request(&["cat"]);
    cat.stdin = true;
    let cat = sandbox.exec(&cat).await;
    let input = |command: CommandRef, data: &'static [u8], close: bool| {
        let client = sandbox.client.clone();
        let id = sandbox.id.clone();
        async move {
            client
                .command_input(Scope::Session, &id, &command, data, close)
                .await
                .expect("command_input")
        }
    };
    input(cat.clone(), b"fed\n", false).await;
    input(cat.clone(), b"more\n", true).await;
    let (stdout, proof) = sandbox.read_all(&cat, OutputStream::Stdout).await;
    assert_eq!(stdout, "fed\nmore\n");
    assert_eq!(proof.reason, ExitReason::Exited { code: 0 });

    let mut terminal = request(&["sh"]);
    terminal.pty = Some(PtySize {
        rows: 30,
        cols: 100,
    });
    let terminal = sandbox.exec(&terminal).await;
    input(terminal.clone(), b"tty; stty size\n", false).await;
    let offset = sandbox.read_until(&terminal, 0, "30 100").await;
    sandbox
        .client
        .command_resize(Scope::Session, &sandbox.id, &terminal, 40, 120)
        .await
        .expect("command_resize");
    input(terminal.clone(), b"stty size; exit 5\n", false).await;
    sandbox.read_until(&terminal, offset, "40 120").await;
    let (stdout, proof) = sandbox.read_all(&terminal, OutputStream::Stdout).await;
    assert!(stdout.contains("/dev/pts/"), "{stdout}");
    assert_eq!(proof.reason, ExitReason::Exited { code: 5 }, "{stdout}");
    assert_eq!(proof.stderr.written, 0, "a terminal is one stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_a_kill_and_a_deprovision_each_settle_with_their_own_proof() {
    let Some(sandbox) = sandbox("dkr-cmd-end").await else {
        return;
    };
    let mut timed = request(&["sleep", "600"]);
    timed.timeout_ms = Some(300);
    let timed = sandbox.exec(&timed).await;
    let proof = sandbox.proof_of(&timed).await;
    assert_eq!(proof.reason, ExitReason::TimedOut { limit_ms: 300 });
    assert_eq!(proof.shell_code(), 124);

    // A shell with a child in its group: the kill reaches both.
    let mut tagged = shell("sleep 600 & echo child=$!; wait");
    tagged.tag = Some("sleeper".into());
    let started = sandbox
        .client
        .exec(Scope::Session, &sandbox.id, &tagged)
        .await
        .expect("exec");
    let sleeper = CommandRef::Tag("sleeper".into());
    sandbox.read_until(&sleeper, 0, "child=").await;
    let (line, _) = read_line_after(&sandbox, &sleeper, "child=").await;
    sandbox
        .client
        .command_signal(Scope::Session, &sandbox.id, &sleeper, libc::SIGKILL)
        .await
        .unwrap();
    let proof = sandbox.proof_of(&sleeper).await;
    assert_eq!(
        proof.reason,
        ExitReason::Signaled { signal: 9 },
        "{proof:?}"
    );
    assert_eq!(proof.shell_code(), 137);
    assert!(
        wait_until(WAIT, || !Path::new(&format!("/proc/{}", started.pid))
            .exists()),
        "the shell (host pid {}) outlived its kill",
        started.pid
    );
    let check = shell(&format!(
        "kill -0 {line} 2>/dev/null && echo alive || echo gone"
    ));
    let check = sandbox.exec(&check).await;
    let (stdout, _) = sandbox.read_all(&check, OutputStream::Stdout).await;
    assert_eq!(
        stdout, "gone\n",
        "the shell's child {line} outlived the kill"
    );

    let long = sandbox.exec(&request(&["sleep", "600"])).await;
    let waiter = {
        let (client, id) = (sandbox.client.clone(), sandbox.id.clone());
        tokio::spawn(async move {
            let info = client.command_wait(Scope::Session, &id, &long, WAIT).await;
            info.expect("command_wait").proof
        })
    };
    sandbox
        .client
        .deprovision(Scope::Session, &sandbox.id, false)
        .await
        .unwrap();
    let proof = waiter.await.unwrap().expect("a proof within the wait");
    assert_eq!(proof.reason, ExitReason::SandboxEnded, "{proof:?}");
    let error = sandbox.refused(
        sandbox
            .client
            .exec(Scope::Session, &sandbox.id, &shell("true"))
            .await,
    );
    assert!(
        matches!(error, SandboxError::FailedPrecondition(_)),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_oom_killer_picks_reads_out_of_memory_and_its_sandbox_runs_on() {
    let Some(sandbox) = sandbox_with("dkr-cmd-oom", "memory = \"64m\"").await else {
        return;
    };
    // The runner fixture, in the image as the entrypoint, as the hog.
    let hog = request(&["/runner-fixture", "--allocate-mib", "256"]);
    let hog = sandbox.exec(&hog).await;
    let proof = sandbox.proof_of(&hog).await;
    let limit = sandbox.container()["HostConfig"]["Memory"].as_u64();
    assert_eq!(
        proof.reason,
        ExitReason::OutOfMemory { limit_bytes: limit },
        "{proof:?}"
    );
    assert_eq!(proof.shell_code(), 137);
    let info = sandbox
        .client
        .describe(Scope::Session, &sandbox.id)
        .await
        .unwrap();
    assert_eq!(info.state, ProbeState::Running, "{info:?}");
    assert_eq!(info.last_exit, None, "the runner lives on: {info:?}");
}

/// The rest of the stdout line that begins with `prefix`.
async fn read_line_after(sandbox: &Sandbox, command: &CommandRef, prefix: &str) -> (String, u64) {
    let chunk = sandbox
        .client
        .command_output(
            Scope::Session,
            &sandbox.id,
            command,
            OutputStream::Stdout,
            0,
            1 << 20,
            Duration::ZERO,
        )
        .await
        .expect("command_output");
    let text = String::from_utf8_lossy(&chunk.data).into_owned();
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no line {prefix}… in {text:?}"));
    (line.to_string(), chunk.next)
}

/// A command outlives a restart of the daemon that started it: the next
/// daemon lists it by id and tag, signals it, enforces its timeout from
/// its start, and gives its proof (its output before the restart is not
/// kept: the engine gives an exec's streams to one client, once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_outlive_a_restart_of_the_daemon_and_their_proofs_arrive() {
    let Some(mut sandbox) = sandbox("dkr-cmd-restart").await else {
        return;
    };
    let mut gated = shell("echo waiting; while [ ! -e /workspace/go ]; do sleep 0.1; done; exit 7");
    gated.tag = Some("gated".into());
    let gated = sandbox.exec(&gated).await;
    sandbox.read_until(&gated, 0, "waiting").await;
    let mut timed = request(&["sleep", "600"]);
    timed.timeout_ms = Some(6_000);
    let timed = sandbox.exec(&timed).await;
    let killed = sandbox.exec(&request(&["sleep", "600"])).await;

    let status = sandbox.daemon.stop();
    assert!(status.success(), "{}", sandbox.daemon.log_text());
    sandbox.daemon.launch();
    sandbox.daemon.wait_ready();
    sandbox.client = sandbox.daemon.client().await;

    let listed = sandbox
        .client
        .commands(Scope::Session, &sandbox.id)
        .await
        .expect("commands");
    for command in [&gated, &timed, &killed] {
        let CommandRef::Id(id) = command else {
            unreachable!()
        };
        let found = listed.iter().find(|info| &info.command_id == id);
        let found =
            found.unwrap_or_else(|| panic!("{id} not listed after the restart: {listed:?}"));
        assert!(found.proof.is_none(), "{found:?}");
    }
    let by_tag = CommandRef::Tag("gated".into());
    let still = sandbox
        .client
        .command_wait(
            Scope::Session,
            &sandbox.id,
            &by_tag,
            Duration::from_millis(100),
        )
        .await
        .expect("command_wait by tag after the restart");
    assert!(still.proof.is_none(), "{still:?}");

    sandbox
        .client
        .command_signal(Scope::Session, &sandbox.id, &killed, libc::SIGKILL)
        .await
        .expect("command_signal after the restart");
    let proof = sandbox.proof_of(&killed).await;
    assert_eq!(
        proof.reason,
        ExitReason::Signaled { signal: 9 },
        "{proof:?}"
    );

    std::fs::write(sandbox_workspace(&sandbox).join("go"), b"").expect("write go");
    let proof = sandbox.proof_of(&by_tag).await;
    assert_eq!(proof.reason, ExitReason::Exited { code: 7 }, "{proof:?}");

    let proof = sandbox.proof_of(&timed).await;
    assert_eq!(
        proof.reason,
        ExitReason::TimedOut { limit_ms: 6_000 },
        "{proof:?}"
    );
    assert!(
        proof.ended_at_unix_ms >= proof.started_at_unix_ms + 6_000,
        "{proof:?}"
    );
    let records = sandbox.daemon.state_dir().join("docker/commands");
    assert!(
        wait_until(WAIT, || std::fs::read_dir(&records)
            .is_ok_and(|mut dir| dir.next().is_none())),
        "records left in {}",
        records.display()
    );
}
