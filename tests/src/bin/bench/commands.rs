//! The commands rows (`--only-commands`): what `exec` costs against doing
//! the same by hand, in the same run on the same sandbox.
//!
//! - (x1) `exec` of `/bin/true` to its proof, through the client library,
//!   against a raw start into the same namespaces: a thread of the bench
//!   that joined the runner's mount, PID and IPC namespaces (`setns`)
//!   forks, execs `/bin/true` and waits for it.
//! - (x2) a command writing N bytes (`yes | head -c N`) through the output
//!   store, read by a follower as it comes, against the same pipeline on
//!   the host read through a raw pipe; and the daemon's CPU per MiB.
//! - (x3) many background commands (`sleep`) held at once: the daemon's
//!   memory per command.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{CommandRef, ExecRequest, OutputStream, SandboxdClient, Scope};

use crate::report::{Goal, Row};
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};
use crate::stats::Samples;

/// How much of each row to run.
pub struct Asked {
    pub execs: usize,
    pub stream_bytes: u64,
    pub background: usize,
}

pub struct CommandFigures {
    pub exec: Samples,
    pub raw: Samples,
    pub stream_bytes: u64,
    pub stream: Duration,
    pub raw_stream: Duration,
    pub daemon_cpu_us: f64,
    pub background: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
}

const ID: &str = "bench-commands";

pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    asked: &Asked,
) -> anyhow::Result<CommandFigures> {
    // Room for the background commands under the pids limit.
    let tables = format!(
        "[limits]\npids = {}\n[commands]\noutput_bytes = \"64m\"\n",
        asked.background + 512
    );
    let mut daemon = Daemon::start_with_tables(
        dir,
        "commands-",
        binaries,
        "driver = \"local-process\"\n",
        &tables,
    )?;
    let result = measure_on(&daemon, asked).await;
    daemon.stop()?;
    result
}

async fn measure_on(daemon: &Daemon, asked: &Asked) -> anyhow::Result<CommandFigures> {
    let client = connect(&daemon.socket).await?;
    let report = client.ensure_session_sandbox(ID, &sandbox_env(ID)).await?;
    let runner = report.pid.context("the sandbox reported no runner pid")?;
    // First, before any other command has left memory for the allocator
    // to hand back.
    let rss_before_kib = daemon.rss_kib().unwrap_or(0);
    hold_background(&client, asked.background).await?;
    let rss_after_kib = daemon.rss_kib().unwrap_or(0);
    let (exec, raw) = interleaved_execs(&client, runner, asked.execs).await?;
    let cpu_before = crate::machine::cpu_us(daemon.pid).unwrap_or(f64::NAN);
    let stream = stream_through_store(&client, asked.stream_bytes).await?;
    let daemon_cpu_us = crate::machine::cpu_us(daemon.pid).unwrap_or(f64::NAN) - cpu_before;
    let raw_stream = stream_through_pipe(asked.stream_bytes)?;
    client.deprovision(Scope::Session, ID, false).await?;
    Ok(CommandFigures {
        exec,
        raw,
        stream_bytes: asked.stream_bytes,
        stream,
        raw_stream,
        daemon_cpu_us,
        background: asked.background,
        rss_before_kib,
        rss_after_kib,
    })
}

/// `count` execs to their proofs and `count` raw starts, in turn.
async fn interleaved_execs(
    client: &SandboxdClient,
    runner: u32,
    count: usize,
) -> anyhow::Result<(Samples, Samples)> {
    let raw = RawStarter::join(runner)?;
    let (mut exec, mut raws) = (Samples::with_capacity(count), Samples::with_capacity(count));
    let request = ExecRequest {
        argv: vec!["/bin/true".into()],
        ..ExecRequest::default()
    };
    for round in 0..count + 5 {
        let took = exec_to_proof(client, ID, &request).await?;
        let raw_took = raw.run_true()?;
        // The first rounds warm both paths up.
        if round >= 5 {
            exec.push(took);
            raws.push(raw_took);
        }
    }
    Ok((exec, raws))
}

/// One `exec` in session sandbox `id` and `command_wait` until its proof:
/// how long the two took.
pub async fn exec_to_proof(
    client: &SandboxdClient,
    id: &str,
    request: &ExecRequest,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let command = client.exec(Scope::Session, id, request).await?;
    let info = client
        .command_wait(
            Scope::Session,
            id,
            &CommandRef::Id(command.command_id),
            Duration::from_secs(30),
        )
        .await?;
    let took = started.elapsed();
    if info.proof.is_none() {
        bail!("{:?} did not end within 30 s", request.argv);
    }
    Ok(took)
}

/// A thread of the bench inside the runner's namespaces, starting
/// `/bin/true` there on request.
struct RawStarter {
    requests: std::sync::mpsc::Sender<std::sync::mpsc::Sender<anyhow::Result<Duration>>>,
}

impl RawStarter {
    fn join(runner: u32) -> anyhow::Result<RawStarter> {
        let (requests, asked) =
            std::sync::mpsc::channel::<std::sync::mpsc::Sender<anyhow::Result<Duration>>>();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let joined = join_namespaces(runner);
            let failed = joined.is_err();
            let _ = ready_tx.send(joined);
            if failed {
                return;
            }
            for reply in asked {
                let started = Instant::now();
                let status = Command::new("/bin/true").status();
                let _ = reply.send(match status {
                    Ok(status) if status.success() => Ok(started.elapsed()),
                    Ok(status) => Err(anyhow::anyhow!("/bin/true: {status}")),
                    Err(error) => Err(error.into()),
                });
            }
        });
        ready.recv().context("the raw starter's thread died")??;
        Ok(RawStarter { requests })
    }

    fn run_true(&self) -> anyhow::Result<Duration> {
        let (reply, answer) = std::sync::mpsc::channel();
        self.requests
            .send(reply)
            .context("the raw starter is gone")?;
        answer.recv().context("the raw starter is gone")?
    }
}

/// This thread into `pid`'s mount, IPC and PID (for its children)
/// namespaces, as the daemon's spawner thread joins a sandbox's.
fn join_namespaces(pid: u32) -> anyhow::Result<()> {
    // SAFETY: unshare with a plain flag; it affects this thread only.
    if unsafe { libc::unshare(libc::CLONE_FS) } < 0 {
        bail!("unshare(CLONE_FS): {}", std::io::Error::last_os_error());
    }
    for name in ["ipc", "pid", "mnt"] {
        let path = format!("/proc/{pid}/ns/{name}");
        let file = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
        // SAFETY: setns with a namespace descriptor we hold open.
        if unsafe { libc::setns(file.as_raw_fd(), 0) } < 0 {
            bail!("setns {path}: {}", std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `yes | head -c bytes` as a command, followed to its end.
async fn stream_through_store(client: &SandboxdClient, bytes: u64) -> anyhow::Result<Duration> {
    let request = ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("yes | head -c {bytes}"),
        ],
        ..ExecRequest::default()
    };
    let started = Instant::now();
    let command = client.exec(Scope::Session, ID, &request).await?;
    let which = CommandRef::Id(command.command_id);
    let (mut offset, mut dropped) = (0u64, 0u64);
    loop {
        let chunk = client
            .command_output(
                Scope::Session,
                ID,
                &which,
                OutputStream::Stdout,
                offset,
                1 << 20,
                Duration::from_secs(30),
            )
            .await?;
        dropped += chunk.dropped;
        offset = chunk.next;
        if let Some(proof) = chunk.proof {
            if proof.stdout.written != bytes {
                bail!(
                    "the command wrote {} bytes, not {bytes}",
                    proof.stdout.written
                );
            }
            break;
        }
    }
    if dropped > 0 {
        eprintln!("bench: the follower fell behind: {dropped} bytes dropped from the store");
    }
    Ok(started.elapsed())
}

/// The same pipeline on the host, read through a raw pipe.
fn stream_through_pipe(bytes: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut child = Command::new("/bin/sh")
        .args(["-c", &format!("yes | head -c {bytes}")])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().context("no stdout")?;
    let mut buffer = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let read = stdout.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        total += read as u64;
    }
    child.wait()?;
    if total != bytes {
        bail!("the raw pipe carried {total} bytes, not {bytes}");
    }
    Ok(started.elapsed())
}

/// `count` background commands, started and left running, each once it
/// has printed a line (so its output task has read once, as a live
/// command's does).
async fn hold_background(client: &SandboxdClient, count: usize) -> anyhow::Result<()> {
    let request = ExecRequest {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "echo up; exec sleep 3600".into(),
        ],
        ..ExecRequest::default()
    };
    for _ in 0..count {
        let command = client.exec(Scope::Session, ID, &request).await?;
        client
            .command_output(
                Scope::Session,
                ID,
                &CommandRef::Id(command.command_id),
                OutputStream::Stdout,
                0,
                16,
                Duration::from_secs(30),
            )
            .await?;
    }
    Ok(())
}

pub fn rows(figures: &CommandFigures) -> Vec<Row> {
    let mib = figures.stream_bytes as f64 / (1024.0 * 1024.0);
    let per_second = |took: Duration| mib / took.as_secs_f64().max(1e-9);
    let per_command_kib = (figures.rss_after_kib.saturating_sub(figures.rss_before_kib)) as f64
        / figures.background.max(1) as f64;
    vec![
        Row {
            row: "x1",
            what: "exec /bin/true to its proof p50".into(),
            unit: "ms",
            value: figures.exec.p50() / 1e3,
            baseline_what: "setns'd fork+exec+wait p50".into(),
            baseline: Some(figures.raw.p50() / 1e3),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "x1",
            what: "exec /bin/true to its proof p99".into(),
            unit: "ms",
            value: figures.exec.p99() / 1e3,
            baseline_what: "setns'd fork+exec+wait p99".into(),
            baseline: Some(figures.raw.p99() / 1e3),
            goal: Goal::RatioAtMost(2.0),
        },
        Row {
            row: "x2",
            what: format!("{mib:.0} MiB through the output store, followed"),
            unit: "MiB/s",
            value: per_second(figures.stream),
            baseline_what: "the same through a raw pipe".into(),
            baseline: Some(per_second(figures.raw_stream)),
            goal: Goal::RatioAtLeast(0.5),
        },
        Row {
            row: "x2",
            what: "the daemon's CPU per MiB streamed".into(),
            unit: "µs",
            value: figures.daemon_cpu_us / mib.max(1e-9),
            baseline_what: String::new(),
            baseline: None,
            goal: Goal::Info,
        },
        Row {
            row: "x3",
            what: format!(
                "daemon memory per background command ({} held)",
                figures.background
            ),
            unit: "KiB",
            value: per_command_kib,
            baseline_what: String::new(),
            baseline: None,
            goal: Goal::Info,
        },
    ]
}
