//! The output row: a runner writing N bytes to stdout through
//! the daemon — the most bytes its output takes on disk at any sample, and
//! the daemon's CPU per MiB — against `cat` copying the same writer's bytes
//! into a file, measured in the same run.
//!
//! Both sides use the same writer, `bench-runner --write-bytes N` (1 MiB
//! writes of text lines, then a closing line, then exit). The daemon side
//! runs in a daemon of its own (`output-` files in the bench directory), so
//! the CPU it is charged is this row's: the ensure, the spawn and the
//! copying of N bytes. It ends when the runner has exited and its output
//! is drained (`describe` says absent with a last exit: the daemon clears
//! the runner only after its pump has finished).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sandboxd_client::{ProbeState, Scope};

use crate::report::{Goal, Row};
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};

pub const MIB: u64 = 1024 * 1024;
/// How long the daemon side may take: far more than it needs.
const WRITE_TIMEOUT: Duration = Duration::from_secs(600);

pub struct OutputFigures {
    pub bytes: u64,
    pub cap: u64,
    /// Daemon side: the most bytes (live plus rotated file) at one sample.
    pub peak_on_disk: u64,
    pub daemon_cpu_us: f64,
    pub daemon_elapsed: Duration,
    /// `cat` side: the file it wrote.
    pub cat_on_disk: u64,
    pub cat_cpu_us: f64,
    pub cat_elapsed: Duration,
}

/// Both sides, `cat` first.
pub async fn measure(
    dir: &Path,
    binaries: &Binaries,
    bytes: u64,
    cap: u64,
) -> anyhow::Result<OutputFigures> {
    let runner = crate::setup::runner_copy(dir, binaries)?;
    let (cat_on_disk, cat_cpu_us, cat_elapsed) = {
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || cat_baseline(&dir, &runner, bytes)).await??
    };
    let (peak_on_disk, daemon_cpu_us, daemon_elapsed) =
        through_daemon(dir, binaries, bytes, cap).await?;
    Ok(OutputFigures {
        bytes,
        cap,
        peak_on_disk,
        daemon_cpu_us,
        daemon_elapsed,
        cat_on_disk,
        cat_cpu_us,
        cat_elapsed,
    })
}

/// `bench-runner --write-bytes N | cat > file`: bytes on disk, `cat`'s
/// CPU (from its rusage), and the time until `cat` is done.
fn cat_baseline(dir: &Path, runner: &Path, bytes: u64) -> anyhow::Result<(u64, f64, Duration)> {
    let path = dir.join("cat-output");
    let file = File::create(&path).with_context(|| format!("create {}", path.display()))?;
    let started = Instant::now();
    let mut writer = Command::new(runner)
        .args(["--write-bytes", &bytes.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .context("start the writer")?;
    let pipe = writer.stdout.take().context("the writer's stdout")?;
    let cat = Command::new("cat")
        .stdin(pipe)
        .stdout(file)
        .spawn()
        .context("start cat")?;
    let (status, usage) = wait4(cat.id() as i32)?;
    let elapsed = started.elapsed();
    let writer_status = writer.wait()?;
    if status != 0 || !writer_status.success() {
        bail!("cat (wait status {status}) or the writer ({writer_status}) failed");
    }
    let on_disk = std::fs::metadata(&path)?.len();
    std::fs::remove_file(&path)?;
    let us = |tv: libc::timeval| tv.tv_sec as f64 * 1e6 + tv.tv_usec as f64;
    Ok((on_disk, us(usage.ru_utime) + us(usage.ru_stime), elapsed))
}

/// Reaps `pid` and returns its wait status and resource usage.
fn wait4(pid: i32) -> anyhow::Result<(i32, libc::rusage)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 writes through two pointers to live locals; pid is
        // our own unreaped child.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if reaped == pid {
            return Ok((status, usage));
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error).context("wait4 for cat");
        }
    }
}

/// The daemon side: peak bytes on disk, the daemon's CPU, and the time from
/// the ensure until the output is drained.
async fn through_daemon(
    dir: &Path,
    binaries: &Binaries,
    bytes: u64,
    cap: u64,
) -> anyhow::Result<(u64, f64, Duration)> {
    let driver_toml = format!(
        "driver = \"local-process\"\nrunner_args = [\"--write-bytes\", \"{bytes}\"]\nrunner_log_max_size = {cap}\n"
    );
    let mut daemon = Daemon::start_with(dir, "output-", binaries, &driver_toml)?;
    let client = connect(&daemon.socket).await?;
    let id = "bench-output";
    let base = sandboxd_protocol::naming::base_name(Scope::Session, id);
    let log = dir.join("output-state/logs").join(format!("{base}.log"));
    let rotated = PathBuf::from(format!("{}.1", log.display()));

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, log, rotated) = (stop.clone(), log.clone(), rotated.clone());
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Acquire) {
                peak = peak.max(size(&log) + size(&rotated));
                std::thread::sleep(Duration::from_millis(1));
            }
            peak.max(size(&log) + size(&rotated))
        })
    };
    let cpu_before = crate::machine::cpu_us(daemon.pid).unwrap_or(f64::NAN);
    let started = Instant::now();
    client.ensure_session_sandbox(id, &sandbox_env(id)).await?;
    loop {
        let info = client.describe(Scope::Session, id).await?;
        if info.state == ProbeState::Absent && info.last_exit.is_some() {
            break;
        }
        if started.elapsed() > WRITE_TIMEOUT {
            bail!("the runner did not finish writing {bytes} bytes within {WRITE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    let cpu = crate::machine::cpu_us(daemon.pid).unwrap_or(f64::NAN) - cpu_before;
    stop.store(true, Ordering::Release);
    let peak = sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the sampler panicked"))?;
    let text = std::fs::read(&log).with_context(|| format!("read {}", log.display()))?;
    let closing = format!("bench-runner wrote {bytes} bytes\n");
    if !text.ends_with(closing.as_bytes()) {
        bail!("the runner's output does not end with its closing line");
    }
    client.deprovision_session_sandbox(id).await?;
    drop(client);
    daemon.stop()?;
    Ok((peak, cpu, elapsed))
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |metadata| metadata.len())
}

/// The row's figures, as table rows.
pub fn rows(figures: &OutputFigures) -> Vec<Row> {
    let mib = |bytes: u64| bytes as f64 / MIB as f64;
    let written = mib(figures.bytes);
    let what = |text: &str| format!("runner writing {written:.0} MiB to stdout: {text}");
    vec![
        Row {
            row: "output",
            what: what(&format!(
                "peak bytes on disk (cap {:.0} MiB)",
                mib(figures.cap)
            )),
            unit: "MiB",
            value: mib(figures.peak_on_disk),
            baseline_what: "cat into a file: bytes on disk".into(),
            baseline: Some(mib(figures.cat_on_disk)),
            goal: Goal::AtMost(mib(figures.cap + MIB), "≤ cap + 1 MiB"),
        },
        Row {
            row: "output",
            what: what("daemon CPU per MiB"),
            unit: "µs",
            value: figures.daemon_cpu_us / written,
            baseline_what: "cat CPU per MiB".into(),
            baseline: Some(figures.cat_cpu_us / written),
            goal: Goal::Info,
        },
        Row {
            row: "output",
            what: what("throughput"),
            unit: "MiB/s",
            value: written / figures.daemon_elapsed.as_secs_f64(),
            baseline_what: "through cat".into(),
            baseline: Some(written / figures.cat_elapsed.as_secs_f64()),
            goal: Goal::Info,
        },
    ]
}
