//! `--only-files`: files in and out of a process-tier sandbox, against
//! `tar -c | tar -x` through a pipe on the same disk, in the same run.
//!
//! One tree (a few large files and many small ones, 1 GiB; 16 MiB with
//! `--quick`) is copied four ways through the client library: `put_tar`
//! (packed here with the tar crate, as `sandboxctl cp` does, unpacked by
//! the daemon), `get_tar` (packed by the daemon, unpacked here), and its
//! large files one by one with `put_file` and `get_file`. Each is held to
//! ≥ 0.7× the baseline's throughput. The baseline runs before and after
//! the daemon's copies and counts at its faster run. The daemon's peak
//! resident memory during the copies is sampled from /proc (its `VmHWM`
//! cannot be reset, so it includes start-up; the sampled maximum does
//! not). The CPU time each side spent on each way (the daemon's from
//! /proc, this process's, which packs and unpacks, from `getrusage`) is
//! told per GiB: wall time on a loaded machine says little, CPU time more.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use sandboxd_client::{SandboxdClient, Scope};

use crate::report::{Goal, Row};
use crate::rows::{connect, sandbox_env};
use crate::setup::{Binaries, Daemon};

const SESSION: &str = "files-bench";
/// The small files: their count and size.
const SMALL: (usize, usize) = (256, 16 * 1024);

pub struct FilesFigures {
    pub bytes: u64,
    /// The large files' bytes: what put_file and get_file move.
    pub large_bytes: u64,
    /// Seconds of each way, and of the baseline's faster run.
    pub put_tar: f64,
    pub get_tar: f64,
    pub put_file: f64,
    pub get_file: f64,
    pub baseline: f64,
    /// CPU seconds of each way, in the order above: the daemon's, this
    /// process's.
    pub cpu: [Cpu; 4],
    pub peak_rss: u64,
    pub hwm: u64,
}

/// Makes the tree, starts a daemon, copies, compares.
pub async fn measure(dir: &Path, binaries: &Binaries, bytes: u64) -> anyhow::Result<FilesFigures> {
    let source = dir.join("files-source");
    let large = make_tree(&source, bytes)?;
    let baseline_first = baseline(dir, &source)?;
    let mut daemon = Daemon::start_with(dir, "files-", binaries, "driver = \"local-process\"\n")?;
    let result = copies(dir, &daemon, &source, &large, bytes).await;
    let stopped = daemon.stop();
    let mut figures = result?;
    stopped?;
    figures.baseline = figures
        .baseline
        .min(baseline_first)
        .min(baseline(dir, &source)?);
    std::fs::remove_dir_all(&source)?;
    Ok(figures)
}

async fn copies(
    dir: &Path,
    daemon: &Daemon,
    source: &Path,
    large: &[PathBuf],
    bytes: u64,
) -> anyhow::Result<FilesFigures> {
    let client = connect(&daemon.socket).await?;
    client
        .ensure_session_sandbox(SESSION, &sandbox_env(SESSION))
        .await?;
    let sampler = RssSampler::start(daemon.pid);
    let mut cpu = [Cpu::default(); 4];
    let started = Instant::now();
    let before = Cpu::now(daemon.pid);
    put_tree(&client, source).await?;
    cpu[0] = Cpu::now(daemon.pid).since(before);
    let put_tar = started.elapsed().as_secs_f64();
    let back = dir.join("files-back");
    let started = Instant::now();
    let before = Cpu::now(daemon.pid);
    get_tree(&client, &back).await?;
    cpu[1] = Cpu::now(daemon.pid).since(before);
    let get_tar = started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&back)?;
    client
        .remove_file(Scope::Session, SESSION, "files-source", true)
        .await?;
    let started = Instant::now();
    let before = Cpu::now(daemon.pid);
    for file in large {
        put_one(&client, file).await?;
    }
    cpu[2] = Cpu::now(daemon.pid).since(before);
    let put_file = started.elapsed().as_secs_f64();
    std::fs::create_dir(&back)?;
    let started = Instant::now();
    let before = Cpu::now(daemon.pid);
    for file in large {
        get_one(&client, file, &back).await?;
    }
    cpu[3] = Cpu::now(daemon.pid).since(before);
    let get_file = started.elapsed().as_secs_f64();
    std::fs::remove_dir_all(&back)?;
    let peak_rss = sampler.stop();
    let hwm = crate::machine::proc_kib(&format!("/proc/{}/status", daemon.pid), "VmHWM:")
        .unwrap_or(0)
        * 1024;
    let large_bytes = large
        .iter()
        .map(|file| file.metadata().map(|meta| meta.len()))
        .sum::<std::io::Result<u64>>()?;
    Ok(FilesFigures {
        bytes,
        large_bytes,
        put_tar,
        get_tar,
        put_file,
        get_file,
        baseline: f64::INFINITY,
        cpu,
        peak_rss,
        hwm,
    })
}

/// Large files of up to 64 MiB making up `bytes` less the small files,
/// and [`SMALL`] small ones in a subdirectory; answers the large ones.
fn make_tree(source: &Path, bytes: u64) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(source.join("small"))?;
    let small_total = (SMALL.0 * SMALL.1) as u64;
    let mut left = bytes.saturating_sub(small_total);
    let mut large = Vec::new();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut block = vec![0u8; 1 << 20];
    while left > 0 {
        let size = left.min(64 << 20);
        let path = source.join(format!("large-{}.bin", large.len()));
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path)?);
        let mut written = 0;
        while written < size {
            for word in block.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                word.copy_from_slice(&state.to_le_bytes());
            }
            let take = (size - written).min(block.len() as u64) as usize;
            file.write_all(&block[..take])?;
            written += take as u64;
        }
        file.flush()?;
        large.push(path);
        left -= size;
    }
    for index in 0..SMALL.0 {
        std::fs::write(source.join(format!("small/{index}.txt")), &block[..SMALL.1])?;
    }
    Ok(large)
}

/// Seconds of `tar -C source -cf - . | tar -C target -xf -`.
fn baseline(dir: &Path, source: &Path) -> anyhow::Result<f64> {
    let target = dir.join("files-baseline");
    std::fs::create_dir_all(&target)?;
    let started = Instant::now();
    let mut pack = Command::new("tar")
        .arg("-C")
        .arg(source)
        .args(["-cf", "-", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("run tar")?;
    let unpack = Command::new("tar")
        .arg("-C")
        .arg(&target)
        .args(["-xf", "-"])
        .stdin(pack.stdout.take().context("tar's stdout")?)
        .status()?;
    let packed = pack.wait()?;
    let seconds = started.elapsed().as_secs_f64();
    if !packed.success() || !unpack.success() {
        bail!("tar -c | tar -x failed: {packed}, {unpack}");
    }
    std::fs::remove_dir_all(&target)?;
    Ok(seconds)
}

/// The tree packed here, unpacked by the daemon into the workspace.
async fn put_tree(client: &SandboxdClient, source: &Path) -> anyhow::Result<()> {
    let (reader, writer) = std::io::pipe()?;
    let from = source.to_path_buf();
    let packer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut builder = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, writer));
        builder.follow_symlinks(false);
        builder.append_dir_all("files-source", &from)?;
        builder.into_inner()?.flush()
    });
    let sent = client
        .put_tar_from(Scope::Session, SESSION, "", reader)
        .await;
    packer.join().expect("the packer")?;
    sent?;
    Ok(())
}

/// The tree packed by the daemon, unpacked here.
async fn get_tree(client: &SandboxdClient, target: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(target)?;
    let (reader, fetching) = client.get_tar_reader(Scope::Session, SESSION, "files-source");
    let into = target.to_path_buf();
    let unpacker = std::thread::spawn(move || tar::Archive::new(reader).unpack(into));
    let fetched = fetching.await;
    unpacker.join().expect("the unpacker")?;
    fetched?;
    Ok(())
}

/// One large file in by `put_file`, 1 MiB a call, a few calls in flight.
async fn put_one(client: &SandboxdClient, file: &Path) -> anyhow::Result<()> {
    let name = file.file_name().context("a name")?.to_string_lossy();
    let reader = std::fs::File::open(file)?;
    client
        .put_file_from(Scope::Session, SESSION, &name, 0o644, reader)
        .await?;
    Ok(())
}

/// One large file out by `get_file`, as [`put_one`].
async fn get_one(client: &SandboxdClient, file: &Path, into: &Path) -> anyhow::Result<()> {
    let name = file.file_name().context("a name")?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(into.join(name))?);
    client
        .get_file_into(Scope::Session, SESSION, &name.to_string_lossy(), &mut out)
        .await?;
    Ok(())
}

/// CPU seconds (user and system) of the daemon and of this process.
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    pub daemon: f64,
    pub client: f64,
}

impl Cpu {
    /// Both so far; the daemon's counts its ended threads too.
    fn now(pid: u32) -> Cpu {
        Cpu {
            daemon: crate::machine::cpu_us(pid).map_or(0.0, |us| us / 1e6),
            client: crate::machine::own_cpu_us() / 1e6,
        }
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            daemon: self.daemon - before.daemon,
            client: self.client - before.client,
        }
    }
}

/// Samples a process's resident memory every 20 ms; keeps the largest.
struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (stopping, peaking) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                if let Some(kib) = crate::machine::rss_kib(pid) {
                    peaking.fetch_max(kib * 1024, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RssSampler { stop, peak, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak.load(Ordering::Relaxed)
    }
}

pub fn rows(figures: &FilesFigures) -> Vec<Row> {
    let mib = |bytes: u64| bytes as f64 / f64::from(1 << 20);
    let baseline = mib(figures.bytes) / figures.baseline;
    let row = |what: &str, bytes: u64, seconds: f64| Row {
        row: "files",
        what: what.into(),
        unit: "MiB/s",
        value: mib(bytes) / seconds,
        baseline_what: "tar -c | tar -x, same disk".into(),
        baseline: Some(baseline),
        goal: Goal::RatioAtLeast(0.7),
    };
    vec![
        row(
            "put_tar in (client library)",
            figures.bytes,
            figures.put_tar,
        ),
        row(
            "get_tar out (client library)",
            figures.bytes,
            figures.get_tar,
        ),
        row(
            "put_file in, large files",
            figures.large_bytes,
            figures.put_file,
        ),
        row(
            "get_file out, large files",
            figures.large_bytes,
            figures.get_file,
        ),
        Row {
            row: "files",
            what: "daemon peak RSS during the copies (sampled)".into(),
            unit: "MiB",
            value: figures.peak_rss as f64 / f64::from(1 << 20),
            baseline_what: format!(
                "VmHWM since start {:.1} MiB",
                figures.hwm as f64 / f64::from(1 << 20)
            ),
            baseline: None,
            goal: Goal::Info,
        },
    ]
}

pub fn info(figures: &FilesFigures) -> String {
    let gib = |bytes: u64| bytes as f64 / f64::from(1 << 30);
    let per_gib = |cpu: Cpu, bytes: u64| {
        format!(
            "{:.2}/{:.2}",
            cpu.daemon / gib(bytes),
            cpu.client / gib(bytes)
        )
    };
    let [put_tar, get_tar, put_file, get_file] = figures.cpu;
    format!(
        "{}; CPU seconds per GiB, daemon/client: put_tar {}, get_tar {}, put_file {}, get_file {}",
        seconds_info(figures),
        per_gib(put_tar, figures.bytes),
        per_gib(get_tar, figures.bytes),
        per_gib(put_file, figures.large_bytes),
        per_gib(get_file, figures.large_bytes),
    )
}

fn seconds_info(figures: &FilesFigures) -> String {
    format!(
        "{:.0} MiB tree ({} large files of ≤ 64 MiB, {} small of {} KiB); seconds: put_tar {:.2}, get_tar {:.2}, put_file {:.2}, get_file {:.2}, tar|tar {:.2}",
        figures.bytes as f64 / f64::from(1 << 20),
        figures
            .bytes
            .saturating_sub((SMALL.0 * SMALL.1) as u64)
            .div_ceil(64 << 20),
        SMALL.0,
        SMALL.1 / 1024,
        figures.put_tar,
        figures.get_tar,
        figures.put_file,
        figures.get_file,
        figures.baseline
    )
}

/// `--only-files`: this row alone, printed as the other `--only-…` runs
/// are; `daemon` (`--daemon`) measures another `sandboxd`.
pub async fn run_only(quick: bool, keep: bool, daemon: Option<&Path>) -> anyhow::Result<()> {
    let mut binaries = Binaries::locate(quick)?;
    if let Some(daemon) = daemon {
        binaries.sandboxd = daemon.to_path_buf();
    }
    let dir = crate::setup::BenchDir::create(keep)?;
    let bytes = if quick { 16 << 20 } else { 1 << 30 };
    let figures = measure(dir.path(), &binaries, bytes).await?;
    let rows = rows(&figures);
    print!("{}", crate::report::table(&rows));
    println!("\ninfo: {}", info(&figures));
    let line = serde_json::json!({
        "bench": "sandboxd",
        "mode": if quick { "quick" } else { "full" },
        "date": crate::machine::utc_now(),
        "only": "files",
        "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    println!("{line}");
    Ok(())
}
