//! The benchmark's world: a temporary directory, the binaries, the runner
//! user, and one real release `sandboxd` serving on a temporary socket.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A fresh 0755 directory under /tmp (or `$TMPDIR` when others can reach
/// it): runners running as `nobody` must be able to search every parent of
/// the state directory. Removed on drop unless asked to keep it.
pub struct BenchDir {
    path: PathBuf,
    keep: bool,
}

impl BenchDir {
    pub fn create(keep: bool) -> anyhow::Result<BenchDir> {
        let temp = std::env::temp_dir();
        let root = if others_can_search(&temp) {
            temp
        } else {
            PathBuf::from("/tmp")
        };
        let path = root.join(format!("sbxb-{}", std::process::id()));
        if path.exists() {
            fs::remove_dir_all(&path).with_context(|| format!("remove {}", path.display()))?;
        }
        fs::create_dir(&path).with_context(|| format!("create {}", path.display()))?;
        set_mode(&path, 0o755)?;
        Ok(BenchDir { path, keep })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        if self.keep {
            eprintln!("bench: keeping {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn others_can_search(path: &Path) -> bool {
    path.ancestors()
        .all(|dir| fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o001 != 0))
}

pub fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// The release binaries the benchmark runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub sandboxd: PathBuf,
    /// What the daemon execs as each sandbox's init, holder and parked
    /// runner, next to it (without it the daemon uses its own binary, and
    /// the figures are not those of what ships).
    pub init: PathBuf,
    /// The tiny runner, as built (copied into the bench directory before use).
    pub runner: PathBuf,
}

impl Binaries {
    /// The same with another `sandboxd` (a `--compare` build): it uses a
    /// `sandboxd-init` next to it if it has one of its own build; this
    /// field only names the one that may be there.
    pub fn with_other_daemon(&self, sandboxd: &Path) -> Binaries {
        Binaries {
            sandboxd: sandboxd.to_path_buf(),
            init: sandboxd.with_file_name("sandboxd-init"),
            runner: self.runner.clone(),
        }
    }

    /// `target/release/sandboxd` (with `sandboxd-init`) and
    /// `target/release/bench-runner`, found
    /// from this executable's own location (`target/<profile>/bench`).
    /// With `quick_fallback`, when the release binaries are not built, the
    /// ones next to this executable (a debug build, say) are used instead,
    /// with a warning: CI's `--quick` run checks that the bench runs, not
    /// its figures, and need not build everything twice.
    pub fn locate(quick_fallback: bool) -> anyhow::Result<Binaries> {
        let exe = std::env::current_exe().context("cannot find the bench executable")?;
        let profile_dir = exe
            .parent()
            .context("the bench executable has no directory")?;
        let target_dir = profile_dir
            .parent()
            .context("the bench executable is not under target/<profile>")?;
        let in_dir = |dir: &Path| Binaries {
            sandboxd: dir.join("sandboxd"),
            init: dir.join("sandboxd-init"),
            runner: dir.join("bench-runner"),
        };
        let built = |binaries: &Binaries| {
            binaries.sandboxd.is_file() && binaries.init.is_file() && binaries.runner.is_file()
        };
        let release = in_dir(&target_dir.join("release"));
        if built(&release) {
            return Ok(release);
        }
        let own = in_dir(profile_dir);
        if quick_fallback && built(&own) {
            eprintln!(
                "bench: warning: no release build; using {} (its figures mean nothing — \
                 this run only checks that the bench works)",
                own.sandboxd.display()
            );
            return Ok(own);
        }
        let missing = [&release.sandboxd, &release.init, &release.runner]
            .into_iter()
            .find(|path| !path.is_file())
            .unwrap_or(&release.sandboxd);
        bail!(
            "{} not found: the benchmark runs the release binaries — run \
             `cargo build --release --workspace --bins` first, then \
             `cargo run --release -p sandboxd-tests --bin bench`",
            missing.display()
        )
    }
}

/// Who runners run as: `Some((uid, gid))` of `nobody` and its group when
/// the benchmark (and so the daemon) runs as root, `None` otherwise.
pub fn runner_identity() -> anyhow::Result<Option<(u32, u32, String)>> {
    use nix::unistd::{Group, User};
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let user = User::from_name("nobody")?.context("no user 'nobody'")?;
    for name in ["nogroup", "nobody"] {
        if let Some(group) = Group::from_name(name)? {
            return Ok(Some((
                user.uid.as_raw(),
                group.gid.as_raw(),
                format!("nobody:{name}"),
            )));
        }
    }
    bail!("neither group 'nogroup' nor 'nobody' exists")
}

/// Raises this process's soft open-file limit to the hard one: a thousand
/// children and several connections must fit.
pub fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
        }
    }
}

/// A real `sandboxd` in the bench directory. Dropping it SIGKILLs the
/// daemon; its group reaper then kills every runner it still had.
pub struct Daemon {
    child: Option<Child>,
    pub pid: u32,
    pub socket: PathBuf,
    pub log: PathBuf,
    /// Its `uid_claims_dir`: the uids it kept at its stop are those still
    /// claimed there.
    claims: PathBuf,
}

impl Daemon {
    /// The local-process daemon: copies the runner where `nobody` can run
    /// it, writes the config and starts the daemon, waiting until its
    /// socket accepts connections.
    pub fn start(dir: &Path, binaries: &Binaries) -> anyhow::Result<Daemon> {
        Self::start_with(dir, "", binaries, "driver = \"local-process\"\n")
    }

    /// A daemon whose files are named `<prefix>…` in `dir`, with `driver_toml`
    /// (the driver and its settings) at the top of its config.
    pub fn start_with(
        dir: &Path,
        prefix: &str,
        binaries: &Binaries,
        driver_toml: &str,
    ) -> anyhow::Result<Daemon> {
        Self::start_with_tables(dir, prefix, binaries, driver_toml, "")
    }

    /// As [`Daemon::start_with`], with `tables_toml` (whole TOML tables,
    /// `[limits]` say) at the end of its config.
    pub fn start_with_tables(
        dir: &Path,
        prefix: &str,
        binaries: &Binaries,
        driver_toml: &str,
        tables_toml: &str,
    ) -> anyhow::Result<Daemon> {
        let runner = install_runner(dir, binaries)?;
        let socket = dir.join(format!("{prefix}run")).join("sandboxd.sock");
        let state_dir = dir.join(format!("{prefix}state"));
        let log = dir.join(format!("{prefix}daemon.log"));
        let config = dir.join(format!("{prefix}sandboxd.toml"));
        // The bench's own: nothing of it is left in /run.
        let claims = dir.join(format!("{prefix}uid-claims"));
        let text = format!(
            "{driver_toml}\
             socket = {}\n\
             state_dir = {}\n\
             runner_command = {}\n\
             uid_claims_dir = {}\n\
             stop_grace = \"10s\"\n\
             log_level = \"info\"\n\
             {tables_toml}",
            toml_string(&socket),
            toml_string(&state_dir),
            toml_string(&runner),
            toml_string(&claims),
        );
        fs::write(&config, text).with_context(|| format!("write {}", config.display()))?;
        let log_file = fs::File::create(&log)?;
        let mut command = Command::new(&binaries.sandboxd);
        command
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        for name in [
            "RUST_LOG",
            "SANDBOX_PROVISIONER_TYPE",
            "STIGMER_SANDBOX_RUNNER_COMMAND",
            "STIGMER_SANDBOX_RUNNER_IMAGE",
            "STIGMER_SANDBOX_BACKEND_ENDPOINT",
            "STIGMER_SANDBOX_TEMPORAL_ADDRESS",
        ] {
            command.env_remove(name);
        }
        let child = command
            .spawn()
            .with_context(|| format!("start {}", binaries.sandboxd.display()))?;
        let mut daemon = Daemon {
            pid: child.id(),
            child: Some(child),
            socket,
            log,
            claims,
        };
        daemon.wait_ready()?;
        Ok(daemon)
    }

    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "sandboxd exited with {status} before serving; its log:\n{}",
                    self.log_text()
                );
            }
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "sandboxd did not answer on {} within 20 s; its log:\n{}",
                    self.socket.display(),
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// The daemon's resident set size now, in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        crate::machine::rss_kib(self.pid)
    }

    /// The group reaper's resident set size (the daemon's one child that is
    /// not a runner), in KiB.
    pub fn reaper_rss_kib(&self) -> Option<u64> {
        // A child belongs to the thread that spawned it: look under every thread.
        let mut children = String::new();
        for task in fs::read_dir(format!("/proc/{}/task", self.pid))
            .ok()?
            .flatten()
        {
            children
                .push_str(&fs::read_to_string(task.path().join("children")).unwrap_or_default());
            children.push(' ');
        }
        children
            .split_whitespace()
            .filter_map(|pid| pid.parse::<u32>().ok())
            .find(|pid| {
                fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline.windows(14).any(|w| w == b"__group-reaper"))
            })
            .and_then(crate::machine::rss_kib)
    }

    /// SIGTERM, and wait (up to a minute) for an orderly stop.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("sandboxd stopped with {status}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("sandboxd did not stop within 60 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    /// Kills it if it still runs, then frees what the kernel keeps of the
    /// uids it kept (its state is deleted with the bench's directory).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        crate::kept_uids::free_keyrings_of_kept(&self.claims);
    }
}

/// `<dir>/bin/bench-runner`, 0755 in a 0755 directory.
fn install_runner(dir: &Path, binaries: &Binaries) -> anyhow::Result<PathBuf> {
    let bin = dir.join("bin");
    if !bin.exists() {
        fs::create_dir(&bin)?;
        set_mode(&bin, 0o755)?;
    }
    let runner = bin.join("bench-runner");
    if !runner.exists() {
        fs::copy(&binaries.runner, &runner).with_context(|| {
            format!("copy {} to {}", binaries.runner.display(), runner.display())
        })?;
        set_mode(&runner, 0o755)?;
    }
    Ok(runner)
}

/// The path of the runner the baselines use: the same copy the daemon runs.
pub fn runner_copy(dir: &Path, binaries: &Binaries) -> anyhow::Result<PathBuf> {
    install_runner(dir, binaries)
}

fn toml_string(path: &Path) -> String {
    serde_json::to_string(&path.display().to_string()).expect("a string serializes")
}
