//! The daemon's side of each row, measured through the real client library
//! (`sandboxd_client::SandboxdClient`) over the daemon's socket.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{ClientError, ProbeState, SandboxEnv, SandboxdClient, Scope, Token};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use crate::stats::Samples;

/// The environment every ensure carries: a queue, a token of a realistic
/// length, and a caller class.
pub fn sandbox_env(id: &str) -> SandboxEnv {
    SandboxEnv {
        task_queue: format!("session:{id}"),
        stigmer_token: Token::new("stg_bench_0123456789abcdef0123456789abcdef"),
        caller_class: "user".to_string(),
    }
}

pub async fn connect(socket: &Path) -> anyhow::Result<SandboxdClient> {
    SandboxdClient::connect(socket).await.map_err(|error| {
        let hint = match error {
            sandboxd_client::ClientError::ProtocolMismatch { .. } => {
                " — the sandboxd binary is stale: rebuild it with \
                 `cargo build --release --workspace --bins`"
            }
            _ => "",
        };
        anyhow::anyhow!("connect to {}: {error}{hint}", socket.display())
    })
}

/// The sizes, in bytes with the 4-byte length header, of the frames a real
/// probe of `id` sends and receives: one probe through a recording proxy
/// between the client library and the daemon.
pub async fn probe_frame_sizes(
    socket: &Path,
    dir: &Path,
    id: &str,
) -> anyhow::Result<(usize, usize)> {
    let proxy = dir.join("frames.sock");
    let _ = std::fs::remove_file(&proxy);
    let listener = UnixListener::bind(&proxy)?;
    let upstream = socket.to_path_buf();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let responses = Arc::new(Mutex::new(Vec::new()));
    let (to_daemon, to_client) = (requests.clone(), responses.clone());
    let relay = tokio::spawn(async move {
        let (client_side, _) = listener.accept().await?;
        let daemon_side = UnixStream::connect(&upstream).await?;
        let (client_read, client_write) = client_side.into_split();
        let (daemon_read, daemon_write) = daemon_side.into_split();
        let (a, b) = tokio::join!(
            pump(client_read, daemon_write, to_daemon),
            pump(daemon_read, client_write, to_client)
        );
        a.and(b)
    });
    {
        let client = connect(&proxy).await?;
        let state = client.probe(Scope::Session, id).await?;
        if state != ProbeState::Running {
            bail!("probe of the running sandbox said {state}");
        }
    }
    tokio::time::timeout(Duration::from_secs(10), relay)
        .await
        .context("the frame-recording proxy did not finish")???;
    let _ = std::fs::remove_file(&proxy);
    // Frame 0 is the client's protocol-version handshake; frame 1 the probe.
    let request = requests.lock().unwrap().get(1).copied();
    let response = responses.lock().unwrap().get(1).copied();
    match (request, response) {
        (Some(request), Some(response)) => Ok((request, response)),
        _ => bail!("the proxy did not see a probe's request and response"),
    }
}

/// Copies length-delimited frames from `from` to `to`, noting each size.
async fn pump(
    mut from: tokio::net::unix::OwnedReadHalf,
    mut to: tokio::net::unix::OwnedWriteHalf,
    sizes: Arc<Mutex<Vec<usize>>>,
) -> std::io::Result<()> {
    loop {
        let mut header = [0u8; 4];
        match from.read_exact(&mut header).await {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(error) => return Err(error),
        }
        let len = u32::from_be_bytes(header) as usize;
        let mut body = vec![0u8; len];
        from.read_exact(&mut body).await?;
        sizes.lock().unwrap().push(4 + len);
        to.write_all(&header).await?;
        to.write_all(&body).await?;
    }
}

/// Sequential probes of one running sandbox on one warm connection.
pub async fn probe_serial(
    client: &SandboxdClient,
    id: &str,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        let state = client.probe(Scope::Session, id).await?;
        let elapsed = start.elapsed();
        if state != ProbeState::Running {
            bail!("probe of a running sandbox said {state}");
        }
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

/// [`probe_serial`] from a client on a current-thread runtime of its own
/// thread: no hand-offs between the caller's task, the client's dispatch
/// task and the I/O driver across threads.
pub fn probe_serial_current_thread(
    socket: PathBuf,
    id: String,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Samples> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async move {
                let client = connect(&socket).await?;
                probe_serial(&client, &id, count, warmup).await
            })
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the current-thread prober panicked"))?
}

/// The same probe, and the protocol-version call (no daemon work at all),
/// through a bare tarpc stub on a connection of its own: what tarpc and
/// tokio cost on both ends, without the client library's wrapper.
pub async fn bare_stub_serial(
    socket: &Path,
    id: &str,
    count: usize,
    warmup: usize,
) -> anyhow::Result<(Samples, Samples)> {
    let stub = sandboxd_tests::tarpc_client(socket).await;
    let mut version = Samples::with_capacity(count);
    let mut probe = Samples::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        stub.protocol_version(sandboxd_tests::context(Duration::from_secs(10)))
            .await?;
        let elapsed = start.elapsed();
        if i >= warmup {
            version.push(elapsed);
        }
        let start = Instant::now();
        let state = stub
            .probe(
                sandboxd_tests::context(Duration::from_secs(10)),
                Scope::Session,
                id.to_string(),
            )
            .await?
            .map_err(|error| anyhow::anyhow!("bare probe failed: {error}"))?;
        let elapsed = start.elapsed();
        if state != ProbeState::Running {
            bail!("probe of a running sandbox said {state}");
        }
        if i >= warmup {
            probe.push(elapsed);
        }
    }
    Ok((version, probe))
}

/// Sequential ensures of one running sandbox: the fast path.
pub async fn ensure_fast_serial(
    client: &SandboxdClient,
    id: &str,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Samples> {
    let env = sandbox_env(id);
    let mut samples = Samples::with_capacity(count);
    for i in 0..warmup + count {
        let start = Instant::now();
        let report = client.ensure_session_sandbox(id, &env).await?;
        let elapsed = start.elapsed();
        if report.created {
            bail!("ensure of a running sandbox started a new runner");
        }
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    Ok(samples)
}

/// `count` new sandboxes `<prefix>-<i>`, ensured one at a time.
pub async fn ensure_new_serial(
    client: &SandboxdClient,
    prefix: &str,
    count: usize,
) -> anyhow::Result<Samples> {
    time_each_in_turn(
        prefix,
        count,
        |id| {
            let env = sandbox_env(&id);
            async move { client.ensure_session_sandbox(&id, &env).await }
        },
        |id, report| {
            if !report.created {
                bail!("ensure of new sandbox {id} took the fast path");
            }
            Ok(())
        },
    )
    .await
}

/// Deprovisions `<prefix>-<i>` one at a time.
pub async fn deprovision_serial(
    client: &SandboxdClient,
    prefix: &str,
    count: usize,
) -> anyhow::Result<Samples> {
    time_each_in_turn(
        prefix,
        count,
        |id| async move { client.deprovision_session_sandbox(&id).await },
        |id, report| {
            if !report.was_present || report.forced {
                bail!("deprovision of {id} reported {report:?}");
            }
            Ok(())
        },
    )
    .await
}

/// Makes one call for each of `<prefix>-0` .. `<prefix>-<count - 1>`, one
/// at a time, and returns each call's latency. Only the awaited call is
/// timed: `call` builds its request before the clock starts, and `check`
/// (which fails the row on a wrong answer) runs after it stops.
async fn time_each_in_turn<Call, Reply>(
    prefix: &str,
    count: usize,
    mut call: impl FnMut(String) -> Call,
    check: impl Fn(&str, Reply) -> anyhow::Result<()>,
) -> anyhow::Result<Samples>
where
    Call: Future<Output = Result<Reply, ClientError>>,
{
    let mut samples = Samples::with_capacity(count);
    for i in 0..count {
        let id = format!("{prefix}-{i}");
        let pending = call(id.clone());
        let start = Instant::now();
        let reply = pending.await?;
        samples.push(start.elapsed());
        check(&id, reply)?;
    }
    Ok(samples)
}

/// `count` ensures of new sandboxes `<prefix>-<i>` (or deprovisions of
/// them), from `tasks` concurrent tasks spread evenly over `clients`.
/// Returns the wall time and each call's latency.
pub async fn burst(
    clients: &[SandboxdClient],
    prefix: &str,
    count: usize,
    tasks: usize,
    deprovision: bool,
) -> anyhow::Result<(Duration, Samples)> {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let client = clients[task % clients.len()].clone();
            let (next, prefix) = (next.clone(), prefix.to_string());
            tokio::spawn(async move {
                let mut samples = Samples::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        return anyhow::Ok(samples);
                    }
                    let id = format!("{prefix}-{i}");
                    let begun = Instant::now();
                    if deprovision {
                        let report = client.deprovision_session_sandbox(&id).await?;
                        if !report.was_present {
                            bail!("deprovision of {id}: it was not there");
                        }
                    } else {
                        let report = client
                            .ensure_session_sandbox(&id, &sandbox_env(&id))
                            .await?;
                        if !report.created {
                            bail!("ensure of new sandbox {id} took the fast path");
                        }
                    }
                    samples.push(begun.elapsed());
                }
            })
        })
        .collect();
    let mut samples = Samples::with_capacity(count);
    for handle in handles {
        samples.extend(handle.await??);
    }
    Ok((start.elapsed(), samples))
}

/// Paced probes (one per [`PROBE_INTERVAL`]) through `client` until `stop`
/// is set, as a task of this runtime: with the burst's own client, what a
/// caller sharing one connection for spawns and reads sees.
pub async fn probe_paced(
    client: SandboxdClient,
    id: String,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Samples> {
    let mut samples = Samples::default();
    let mut next = tokio::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        next += PROBE_INTERVAL;
        tokio::time::sleep_until(next).await;
        let start = Instant::now();
        let state = client.probe(Scope::Session, &id).await?;
        samples.push(start.elapsed());
        if state != ProbeState::Running {
            bail!("probe of a running sandbox said {state}");
        }
    }
    Ok(samples)
}

/// How often the prober of row (g) probes.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(1);

/// Paced probes (one per [`PROBE_INTERVAL`]) on a connection of its own, from a thread and runtime of its own
/// (so the client side of the burst cannot delay it), recorded only while
/// `measuring` is set.
pub struct Prober {
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<anyhow::Result<Samples>>,
}

impl Prober {
    /// Connects and warms up; returns once the prober is probing.
    pub fn start(socket: PathBuf, id: String) -> anyhow::Result<Prober> {
        let measuring = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (measuring, stop) = (measuring.clone(), stop.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                runtime.block_on(async move {
                    let client = connect(&socket).await?;
                    probe_serial(&client, &id, 0, 100).await?;
                    let _ = ready_tx.send(());
                    let mut samples = Samples::default();
                    let mut next = tokio::time::Instant::now();
                    while !stop.load(Ordering::Acquire) {
                        // Paced, as a reader polling state would be, so the
                        // prober does not itself load the daemon.
                        next += PROBE_INTERVAL;
                        tokio::time::sleep_until(next).await;
                        let start = Instant::now();
                        let state = client.probe(Scope::Session, &id).await?;
                        let elapsed = start.elapsed();
                        if state != ProbeState::Running {
                            bail!("probe of a running sandbox said {state}");
                        }
                        if measuring.load(Ordering::Acquire) {
                            samples.push(elapsed);
                        }
                    }
                    Ok(samples)
                })
            })
        };
        if ready_rx.recv_timeout(Duration::from_secs(20)).is_err() {
            stop.store(true, Ordering::Release);
            return match thread.join() {
                Ok(Err(error)) => Err(error.context("the prober failed to start")),
                _ => bail!("the prober did not start"),
            };
        }
        Ok(Prober {
            measuring,
            stop,
            thread,
        })
    }

    pub fn begin(&self) {
        self.measuring.store(true, Ordering::Release);
    }

    /// Stops probing; the samples taken while measuring.
    pub fn finish(self) -> anyhow::Result<Samples> {
        self.measuring.store(false, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the prober panicked"))?
    }
}
