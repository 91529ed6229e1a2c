//! The baselines: what the machine itself can do, measured by this process
//! in the same run, with no daemon in between.
//!
//! - ping-pong: two threads of this process exchange frames of exactly the
//!   sizes a real probe request and response have, over a Unix stream
//!   socket (listener + connect, blocking I/O, one `write` per frame, reads
//!   into a buffer until the frame is complete).
//! - spawn: `mkdir` (0700) of a fresh directory, `chown` of it to the
//!   runner user when running as root, then `std::process::Command` of the
//!   runner by absolute path, with a cleared environment of the same
//!   variables the daemon gives a runner, that directory as cwd, stdio to
//!   /dev/null, its own process group, and — as root — `uid`/`gid` of
//!   `nobody`, which is what the daemon does too (std then takes its
//!   fork+exec path, as the daemon's `pre_exec` does; without a user switch
//!   std uses `posix_spawn`). Timed until `spawn()` returns, i.e. until the
//!   child has exec'd.
//! - stop: `killpg(SIGTERM)` of the runner's group, then `waitpid` for it.
//! - cgroup: what one sandbox's cgroup costs alone, made as the daemon
//!   makes it (see [`cgroup_setup_serial`]); shown next to the spawn.

use std::fs::DirBuilder;
use std::io::{self, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::cgroups::{join_before_exec, open_joins, open_v1_joins, remove_all, BenchTree};
use crate::stats::Samples;

/// One frame of `total` bytes: a 4-byte big-endian length, then the body.
fn frame(total: usize) -> Vec<u8> {
    let body = total.saturating_sub(4);
    let mut frame = (body as u32).to_be_bytes().to_vec();
    frame.resize(total.max(4), 0xa5);
    frame
}

/// Reads one length-delimited frame into `buf`; false on a clean EOF.
fn read_frame(stream: &mut UnixStream, buf: &mut [u8]) -> io::Result<bool> {
    let mut have = 0;
    loop {
        if have >= 4 {
            let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            if have >= 4 + len {
                return Ok(true);
            }
        }
        let read = stream.read(&mut buf[have..])?;
        if read == 0 {
            if have == 0 {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        have += read;
    }
}

/// A connected client end whose peer, a thread of this process, answers
/// every frame with a `response`-byte frame until the client hangs up.
fn ping_pong_pair(
    dir: &Path,
    name: &str,
    response: usize,
) -> anyhow::Result<(UnixStream, std::thread::JoinHandle<io::Result<()>>)> {
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    let server = std::thread::spawn(move || -> io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        let answer = frame(response);
        let mut buf = vec![0u8; 64 * 1024];
        while read_frame(&mut stream, &mut buf)? {
            stream.write_all(&answer)?;
        }
        Ok(())
    });
    let client = UnixStream::connect(&path)?;
    let _ = std::fs::remove_file(&path);
    Ok((client, server))
}

fn round_trip(client: &mut UnixStream, ask: &[u8], buf: &mut [u8]) -> anyhow::Result<Duration> {
    let start = Instant::now();
    client.write_all(ask)?;
    if !read_frame(client, buf)? {
        anyhow::bail!("ping-pong server closed early");
    }
    Ok(start.elapsed())
}

fn join_server(
    client: UnixStream,
    server: std::thread::JoinHandle<io::Result<()>>,
) -> anyhow::Result<()> {
    drop(client);
    server
        .join()
        .map_err(|_| anyhow::anyhow!("ping-pong server panicked"))??;
    Ok(())
}

/// Round trips of a `request`-byte frame answered by a `response`-byte
/// frame between two threads; the first `warmup` are not recorded.
pub fn ping_pong(
    dir: &Path,
    request: usize,
    response: usize,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Samples> {
    let (mut client, server) = ping_pong_pair(dir, "pingpong.sock", response)?;
    let ask = frame(request);
    let mut buf = vec![0u8; 64 * 1024];
    let mut samples = Samples::with_capacity(count);
    for i in 0..warmup + count {
        let elapsed = round_trip(&mut client, &ask, &mut buf)?;
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    join_server(client, server)?;
    Ok(samples)
}

/// Paced round trips (one per `interval`) until `stop` is set: the raw
/// analogue of row (g)'s prober, run while this process spawns a burst.
pub fn ping_pong_paced(
    dir: &Path,
    request: usize,
    response: usize,
    interval: Duration,
    stop: &AtomicBool,
) -> anyhow::Result<Samples> {
    let (mut client, server) = ping_pong_pair(dir, "paced.sock", response)?;
    let ask = frame(request);
    let mut buf = vec![0u8; 64 * 1024];
    let mut samples = Samples::default();
    let mut next = Instant::now();
    while !stop.load(Ordering::Acquire) {
        next += interval;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        samples.push(round_trip(&mut client, &ask, &mut buf)?);
    }
    join_server(client, server)?;
    Ok(samples)
}

/// Probes of `id` sent as pre-encoded tarpc frames from a plain blocking
/// socket (no tokio, no tarpc on this end): the daemon's side of a probe
/// round trip alone.
pub fn probe_from_raw_socket(
    socket: &Path,
    id: &str,
    count: usize,
    warmup: usize,
) -> anyhow::Result<Samples> {
    use sandboxd_protocol::service::SandboxdRequest;
    use sandboxd_protocol::Scope;
    let frames: Vec<Vec<u8>> = (0..warmup + count)
        .map(|i| {
            sandboxd_tests::request_frame(
                i as u64 + 1,
                10,
                SandboxdRequest::Probe {
                    scope: Scope::Session,
                    id: id.to_string(),
                },
            )
        })
        .collect();
    let mut stream = UnixStream::connect(socket)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut samples = Samples::with_capacity(count);
    for (i, frame) in frames.iter().enumerate() {
        let start = Instant::now();
        stream.write_all(frame)?;
        if !read_frame(&mut stream, &mut buf)? {
            anyhow::bail!("the daemon closed the raw connection");
        }
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    Ok(samples)
}

/// What creating an inode costs where the bench's state lives: p50 of a
/// file create (`open(O_CREAT)`) and of a `mkdir`, 50 each, removed after.
/// Each new sandbox costs the daemon one or two of these (its workspace;
/// its output file unless a recycled one is at hand) and the spawn baseline
/// one (its directory).
pub fn inode_costs(dir: &Path) -> anyhow::Result<(Samples, Samples)> {
    let scratch = dir.join("inode-costs");
    std::fs::create_dir_all(&scratch)?;
    let (mut files, mut dirs) = (Samples::default(), Samples::default());
    for i in 0..50 {
        let start = Instant::now();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(scratch.join(format!("f{i}")))?;
        files.push(start.elapsed());
        let start = Instant::now();
        DirBuilder::new()
            .mode(0o700)
            .create(scratch.join(format!("d{i}")))?;
        dirs.push(start.elapsed());
    }
    std::fs::remove_dir_all(&scratch)?;
    Ok((files, dirs))
}

/// The file system type of `path`, by its magic number.
pub fn fs_type(path: &Path) -> String {
    use nix::sys::statfs::{statfs, EXT4_SUPER_MAGIC, TMPFS_MAGIC, XFS_SUPER_MAGIC};
    match statfs(path) {
        Ok(stat) if stat.filesystem_type() == EXT4_SUPER_MAGIC => "ext2/3/4".into(),
        Ok(stat) if stat.filesystem_type() == TMPFS_MAGIC => "tmpfs".into(),
        Ok(stat) if stat.filesystem_type() == XFS_SUPER_MAGIC => "xfs".into(),
        Ok(stat) => format!("magic {:#x}", stat.filesystem_type().0),
        Err(error) => format!("unknown ({error})"),
    }
}

/// Starts runners the way a minimal launcher would (see the module doc).
#[derive(Debug, Clone)]
pub struct RawSpawner {
    pub runner: PathBuf,
    /// `(uid, gid)` to switch to, when running as root.
    pub identity: Option<(u32, u32)>,
    /// Where the per-runner directories go.
    pub root: PathBuf,
    pub path_env: String,
}

impl RawSpawner {
    pub fn new(runner: PathBuf, identity: Option<(u32, u32)>, root: PathBuf) -> io::Result<Self> {
        std::fs::create_dir_all(&root)?;
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o711))?;
        Ok(RawSpawner {
            runner,
            identity,
            root,
            path_env: std::env::var("PATH")
                .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_string()),
        })
    }

    /// mkdir (+ chown) + spawn of runner `name`.
    pub fn spawn(&self, name: &str) -> io::Result<Child> {
        self.command(name)?.spawn()
    }

    /// mkdir (+ chown) of runner `name`'s directory, and the command that
    /// [`spawn`](Self::spawn) runs.
    pub fn command(&self, name: &str) -> io::Result<Command> {
        let workspace = self.root.join(name);
        DirBuilder::new().mode(0o700).create(&workspace)?;
        if let Some((uid, gid)) = self.identity {
            std::os::unix::fs::chown(&workspace, Some(uid), Some(gid))?;
        }
        let mut command = Command::new(&self.runner);
        command
            .env_clear()
            .env("PATH", &self.path_env)
            .env("HOME", &workspace)
            .env("MODE", "local")
            .env("STIGMER_TASK_QUEUE", format!("session:{name}"))
            .env("WORKSPACE_ROOT_DIR", &workspace)
            .current_dir(&workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        if let Some((uid, gid)) = self.identity {
            command.uid(uid).gid(gid);
        }
        Ok(command)
    }

    /// Removes every runner directory.
    pub fn clean(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Runners this process started; any still here on drop are SIGKILLed and reaped.
#[derive(Default)]
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

/// `count` runners started one at a time; each sample is mkdir + spawn.
pub fn spawn_serial(spawner: &RawSpawner, count: usize) -> anyhow::Result<(Samples, Children)> {
    let mut samples = Samples::with_capacity(count);
    let mut children = Children::default();
    for i in 0..count {
        let start = Instant::now();
        let child = spawner.spawn(&format!("serial-{i}"))?;
        samples.push(start.elapsed());
        children.0.push(child);
    }
    Ok((samples, children))
}

/// Stops runners one at a time; each sample is killpg(SIGTERM) + waitpid.
pub fn stop_serial(mut children: Children) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(children.0.len());
    for mut child in children.0.drain(..) {
        let start = Instant::now();
        killpg(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
        let status = child.wait()?;
        samples.push(start.elapsed());
        if !status.success() {
            anyhow::bail!("a raw runner ended with {status} on SIGTERM");
        }
    }
    Ok(samples)
}

/// `count` runners started by `threads` threads at once: the wall time from
/// the common start until the last `spawn()` returned.
pub fn spawn_parallel(
    spawner: &RawSpawner,
    count: usize,
    threads: usize,
) -> anyhow::Result<(Duration, Children)> {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|thread| {
            let (spawner, barrier) = (spawner.clone(), barrier.clone());
            std::thread::spawn(move || -> io::Result<Vec<Child>> {
                let mut children = Vec::new();
                barrier.wait();
                for i in (thread..count).step_by(threads) {
                    children.push(spawner.spawn(&format!("burst-{i}"))?);
                }
                Ok(children)
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    let mut children = Children::default();
    let mut failure = None;
    for worker in workers {
        match worker.join() {
            Ok(Ok(started)) => children.0.extend(started),
            Ok(Err(error)) => failure = Some(anyhow::Error::from(error)),
            Err(_) => failure = Some(anyhow::anyhow!("a spawning thread panicked")),
        }
    }
    let elapsed = start.elapsed();
    match failure {
        Some(error) => Err(error),
        None => Ok((elapsed, children)),
    }
}

/// SIGTERM to every runner, then reap them all (untimed clean-up).
pub fn stop_all(mut children: Children) -> anyhow::Result<()> {
    for child in &children.0 {
        killpg(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
    }
    for mut child in children.0.drain(..) {
        child.wait()?;
    }
    Ok(())
}

/// What one new sandbox's cgroup costs alone, as the daemon makes it: a
/// directory in cgroup v2 and in each v1 hierarchy holding a limited
/// controller (a hybrid host), the `[limits]` defaults written (2g, 512
/// pids, 2.0 CPUs: `memory.max`, `memory.swap.max`, `pids.max`, `cpu.max`
/// in v2, `memory.limit_in_bytes`, `memory.memsw.limit_in_bytes`,
/// `pids.max`, `cpu.cfs_quota_us` in v1), the v2 directory and each v1
/// `tasks` opened (for the clone). Each sample is all of that;
/// the removal after it is not timed. `None` without a writable cgroup v2.
pub fn cgroup_setup_serial(count: usize) -> anyhow::Result<Option<Samples>> {
    let Some(tree) = BenchTree::create("sandboxd-bench")? else {
        return Ok(None);
    };
    let mut samples = Samples::with_capacity(count);
    for i in 0..count {
        let start = Instant::now();
        let dirs = tree.make_limited(&format!("sbx-ses-{i:012}"))?;
        let placement = std::fs::File::open(&dirs[0])?;
        let joins = open_v1_joins(&dirs[1..])?;
        samples.push(start.elapsed());
        drop((placement, joins));
        remove_all(&dirs)?;
    }
    Ok(Some(samples))
}

/// The scale row's stop baseline: `count` runners, each in a cgroup of its
/// own in every hierarchy the daemon uses (v2, and each v1 controller of a
/// hybrid host, with the `[limits]` defaults written), stopped the plainest
/// way — SIGTERM to each runner's group, `waitpid` for each, then `rmdir`
/// of each one's cgroups, all on one thread, one after another. Each runner
/// joins its cgroups before exec, as the daemon's do. Timed from the first
/// signal to the last `rmdir`; the setup is not timed. `None` without a
/// writable cgroup v2.
pub fn stop_contained(spawner: &RawSpawner, count: usize) -> anyhow::Result<Option<Duration>> {
    let Some(tree) = BenchTree::create("sandboxd-bench-stop")? else {
        return Ok(None);
    };
    let mut children = Children::default();
    let mut cgroups = Vec::with_capacity(count);
    for i in 0..count {
        let dirs = tree.make_limited(&format!("r{i}"))?;
        // Joined before exec, as the daemon's runners are, so what the
        // runner's start charges (memory above all) is its cgroup's.
        let joins = open_joins(&dirs)?;
        let mut command = spawner.command(&format!("stop-{i}"))?;
        join_before_exec(&mut command, &joins);
        children.0.push(command.spawn()?);
        cgroups.push(dirs);
    }
    let start = Instant::now();
    for child in &children.0 {
        killpg(Pid::from_raw(child.id() as i32), Signal::SIGTERM)?;
    }
    for mut child in children.0.drain(..) {
        child.wait()?;
    }
    for dirs in &cgroups {
        remove_all(dirs)?;
    }
    let elapsed = start.elapsed();
    spawner.clean();
    Ok(Some(elapsed))
}
