//! [`TestDaemon`]: one real `sandboxd` per test, in a directory of its own.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use sandboxd_client::SandboxdClient;
use sandboxd_protocol::{naming, Scope};

use crate::binaries;
use crate::procs::{self, wait_until};

/// How long a daemon gets to start answering, or to exit.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The uid/gid of `nobody:nogroup`.
pub const NOBODY: u32 = 65534;

/// The default `runner_uid_range` (inclusive): under a root daemon each
/// process-tier sandbox gets a uid of its own (= its gid) from it.
pub const RUNNER_UIDS: std::ops::RangeInclusive<u32> = 2_000_000_000..=2_000_065_535;

/// How to configure one daemon.
#[derive(Debug, Clone)]
pub struct Options {
    /// `runner_args` in the config file: flags for the runner fixture.
    pub runner_args: Vec<String>,
    /// `stop_grace` in the config file.
    pub stop_grace: String,
    /// `runner_command`; `None` means this test's copy of the runner fixture.
    pub runner_command: Option<String>,
    /// Runs this test's copy of the daemon's example runner
    /// (`sandboxd-example-runner`) instead of the fixture, when
    /// `runner_command` is `None`.
    pub example_runner: bool,
    /// More top-level TOML lines (`key = value`).
    pub extra_toml: String,
    /// More `[runner] env` variables, beside the one every test daemon
    /// sets (the file's `runner` table is the test library's).
    pub runner_env: Vec<(String, String)>,
    /// The body of an `[access]` table, when the test wants one.
    pub access_toml: Option<String>,
    /// Variables added to the daemon's environment.
    pub env: Vec<(String, String)>,
    /// More command-line arguments for `sandboxd`.
    pub args: Vec<String>,
    /// Serve on this socket instead of the test directory's own.
    pub socket: Option<PathBuf>,
    /// `log_level` in the config file (`RUST_LOG` is removed from the daemon's environment).
    pub log_level: String,
    /// A cgroup v2 directory to start the daemon in (as systemd starts a
    /// unit in its own cgroup), joined before the daemon's exec.
    pub cgroup: Option<PathBuf>,
    /// Run the daemon itself as this uid (gid nogroup) instead of root: its
    /// state directory and socket directory are made for it first.
    pub daemon_uid: Option<u32>,
    /// `egress` in the config file; `None` leaves it out (the daemon's
    /// default, `relaxed`, which every end-to-end test then runs under).
    pub egress: Option<String>,
    /// Where the daemon claims its sandboxes' uids host-wide.
    pub uid_claims: UidClaims,
    /// `state_dir` instead of `<test dir>/state` (a file system the test
    /// mounted, say).
    pub state_dir: Option<PathBuf>,
    /// Run this `sandboxd` (a link to the built one in a directory of the
    /// test's, say) instead of the built one.
    pub daemon_binary: Option<PathBuf>,
}

/// `uid_claims_dir` of a test daemon.
#[derive(Debug, Clone, Default)]
pub enum UidClaims {
    /// `<test dir>/uid-claims`: tests in parallel do not see each other's
    /// claims (each daemon's uids are its own, as before claims), and
    /// nothing is left in `/run`.
    #[default]
    OwnDir,
    /// A directory several test daemons share, as the daemons of one host do.
    Shared(PathBuf),
    /// No key: the daemon's default, `/run/stigmer/uids`.
    HostDefault,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            runner_args: Vec::new(),
            stop_grace: "2s".to_string(),
            runner_command: None,
            example_runner: false,
            extra_toml: String::new(),
            runner_env: Vec::new(),
            access_toml: None,
            env: Vec::new(),
            args: Vec::new(),
            socket: None,
            log_level: "debug".to_string(),
            cgroup: None,
            daemon_uid: None,
            egress: None,
            uid_claims: UidClaims::OwnDir,
            state_dir: None,
            daemon_binary: None,
        }
    }
}

impl Options {
    /// Default options with these runner fixture flags.
    pub fn with_runner_args(args: &[&str]) -> Self {
        Options {
            runner_args: args.iter().map(|arg| arg.to_string()).collect(),
            ..Options::default()
        }
    }

    /// Runners that allocate 256 MiB once their workspace has `go` in it,
    /// under a 64 MiB memory limit: the OOM killer's case.
    pub fn past_the_memory_limit() -> Self {
        Options {
            extra_toml: "[limits]\nmemory = \"64m\"".to_string(),
            ..Options::with_runner_args(&["--allocate-mib", "256", "--allocate-when", "go"])
        }
    }
}

/// A real `sandboxd` process with its own directory, socket, state dir and log.
///
/// Dropping it SIGKILLs the daemon and, as a last resort, every process
/// whose environment points into the test directory (runners and their
/// grandchildren), so a failing test leaks nothing. The directory is kept
/// (and its path printed) when the test panicked.
pub struct TestDaemon {
    dir: PathBuf,
    socket: PathBuf,
    state_dir: PathBuf,
    config: PathBuf,
    log: PathBuf,
    fixture: PathBuf,
    options: Options,
    child: Option<Child>,
    /// The log's length when the running daemon was launched.
    log_at_launch: u64,
}

impl TestDaemon {
    /// Prepares the directory and starts the daemon, waiting until it answers.
    pub fn start(options: Options) -> TestDaemon {
        let mut daemon = TestDaemon::prepare(options);
        daemon.launch();
        daemon.wait_ready();
        daemon
    }

    /// Prepares the directory and the config file without starting anything.
    pub fn prepare(options: Options) -> TestDaemon {
        assert!(
            nix::unistd::geteuid().is_root(),
            "the end-to-end tests run as root, like CI: sandboxd switches runners to nobody:nogroup"
        );
        let dir = make_test_dir().into_path();
        let bin = dir.join("bin");
        fs::create_dir(&bin).expect("create bin dir");
        set_mode(&bin, 0o755);
        let fixture = bin.join("runner-fixture");
        copy_executable(&binaries::runner_fixture(), &fixture);
        if options.example_runner {
            copy_executable(
                &binaries::example_runner(),
                &bin.join("sandboxd-example-runner"),
            );
        }
        let socket = options
            .socket
            .clone()
            .unwrap_or_else(|| dir.join("run").join("sandboxd.sock"));
        let state_dir = options
            .state_dir
            .clone()
            .unwrap_or_else(|| dir.join("state"));
        let config = dir.join("sandboxd.toml");
        let log = dir.join("daemon.log");
        let daemon = TestDaemon {
            dir,
            socket,
            state_dir,
            config,
            log,
            fixture,
            options,
            child: None,
            log_at_launch: 0,
        };
        fs::write(&daemon.config, daemon.config_text()).expect("write config");
        daemon
    }

    fn config_text(&self) -> String {
        let options = &self.options;
        let runner_command = options.runner_command.clone().unwrap_or_else(|| {
            if options.example_runner {
                self.dir
                    .join("bin/sandboxd-example-runner")
                    .display()
                    .to_string()
            } else {
                self.fixture.display().to_string()
            }
        });
        let mut text = String::new();
        writeln!(text, "driver = \"local-process\"").unwrap();
        writeln!(
            text,
            "socket = {}",
            toml_string(&self.socket.display().to_string())
        )
        .unwrap();
        writeln!(
            text,
            "state_dir = {}",
            toml_string(&self.state_dir.display().to_string())
        )
        .unwrap();
        writeln!(text, "stop_grace = {}", toml_string(&options.stop_grace)).unwrap();
        writeln!(text, "runner_command = {}", toml_string(&runner_command)).unwrap();
        let args: Vec<String> = options
            .runner_args
            .iter()
            .map(|arg| toml_string(arg))
            .collect();
        writeln!(text, "runner_args = [{}]", args.join(", ")).unwrap();
        writeln!(text, "log_level = {}", toml_string(&options.log_level)).unwrap();
        // Marks every runner and command of this test (see
        // `leftover_processes`): their own paths are the view's
        // `/workspace`, not this directory.
        let more: String = options
            .runner_env
            .iter()
            .map(|(name, value)| format!(", {name} = {}", toml_string(value)))
            .collect();
        writeln!(
            text,
            "runner = {{ env = {{ {TEST_DIR_VARIABLE} = {}{more} }} }}",
            toml_string(&self.env_prefix())
        )
        .unwrap();
        if let Some(egress) = &options.egress {
            writeln!(text, "egress = {}", toml_string(egress)).unwrap();
        }
        match &options.uid_claims {
            UidClaims::OwnDir => writeln!(
                text,
                "uid_claims_dir = {}",
                toml_string(&self.dir.join("uid-claims").display().to_string())
            )
            .unwrap(),
            UidClaims::Shared(dir) => writeln!(
                text,
                "uid_claims_dir = {}",
                toml_string(&dir.display().to_string())
            )
            .unwrap(),
            UidClaims::HostDefault => {}
        }
        text.push_str(&options.extra_toml);
        text.push('\n');
        if let Some(access) = &options.access_toml {
            writeln!(text, "[access]\n{access}").unwrap();
        }
        text
    }

    /// Starts the daemon process (stdout and stderr appended to the log)
    /// without waiting for it to answer.
    pub fn launch(&mut self) {
        assert!(self.child.is_none(), "the daemon is already running");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open daemon log");
        self.log_at_launch = log.metadata().map_or(0, |meta| meta.len());
        let mut command = Command::new(
            self.options
                .daemon_binary
                .clone()
                .unwrap_or_else(binaries::sandboxd),
        );
        command
            .arg("--config")
            .arg(&self.config)
            .args(&self.options.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        for name in [
            "RUST_LOG",
            "SANDBOX_PROVISIONER_TYPE",
            "STIGMER_SANDBOX_BACKEND_ENDPOINT",
            "STIGMER_SANDBOX_TEMPORAL_ADDRESS",
            "STIGMER_SANDBOX_RUNNER_COMMAND",
            "STIGMER_SANDBOX_RUNNER_IMAGE",
            "STIGMER_SANDBOX_K8S_NAMESPACE",
        ] {
            command.env_remove(name);
        }
        command.envs(self.options.env.iter().map(|(key, value)| (key, value)));
        if let Some(cgroup) = &self.options.cgroup {
            let procs = std::ffi::CString::new(
                cgroup
                    .join("cgroup.procs")
                    .into_os_string()
                    .into_encoded_bytes(),
            )
            .expect("no NUL in a cgroup path");
            // SAFETY: between fork and exec the closure only makes the
            // async-signal-safe open, write and close calls.
            unsafe {
                command.pre_exec(move || {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(fd);
                    Ok(())
                });
            }
        }
        if let Some(uid) = self.options.daemon_uid {
            self.make_dirs_for(uid);
            command.uid(uid).gid(NOBODY).current_dir("/");
        }
        self.child = Some(procs::spawn(&mut command).expect("spawn sandboxd"));
    }

    /// Creates the state directory and the socket's directory owned by
    /// `uid:nogroup`, so a daemon running as `uid` may write them.
    fn make_dirs_for(&self, uid: u32) {
        let socket_dir = self.socket.parent().expect("the socket's directory");
        for dir in [self.state_dir.as_path(), socket_dir] {
            fs::create_dir_all(dir)
                .unwrap_or_else(|error| panic!("create {}: {error}", dir.display()));
            set_mode(dir, 0o755);
            std::os::unix::fs::chown(dir, Some(uid), Some(NOBODY))
                .unwrap_or_else(|error| panic!("chown {}: {error}", dir.display()));
        }
    }

    /// Waits until the socket accepts connections; panics (with the log)
    /// if the daemon exits or does not answer in time.
    pub fn wait_ready(&mut self) {
        let socket = self.socket.clone();
        let mut exited = None;
        let ready = wait_until(START_TIMEOUT, || {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten())
            {
                exited = Some(status);
                return true;
            }
            answers(&socket)
        });
        if let Some(status) = exited {
            panic!(
                "sandboxd exited with {status} before serving; its log:\n{}",
                self.log_text()
            );
        }
        assert!(
            ready,
            "sandboxd did not answer on {} within {START_TIMEOUT:?}; its log:\n{}",
            socket.display(),
            self.log_text()
        );
    }

    /// Waits for the daemon to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut().expect("the daemon was launched");
        let mut status = None;
        wait_until(timeout, || {
            status = child.try_wait().expect("try_wait on sandboxd");
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// The daemon's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// True while the daemon process runs.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM and waits (up to 20 s) for the daemon to exit.
    pub fn stop(&mut self) -> ExitStatus {
        let pid = self.pid().expect("the daemon is running");
        procs::signal_pid(pid, Signal::SIGTERM);
        self.wait_exit(Duration::from_secs(20)).unwrap_or_else(|| {
            panic!(
                "sandboxd did not exit within 20 s of SIGTERM; its log:\n{}",
                self.log_text()
            )
        })
    }

    /// Sends SIGKILL and reaps the daemon.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A client connected to this daemon.
    pub async fn client(&self) -> SandboxdClient {
        SandboxdClient::connect(&self.socket)
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "cannot connect to {}: {error}; log:\n{}",
                    self.socket.display(),
                    self.log_text()
                )
            })
    }

    /// Runs `sandboxctl` as root against this daemon, with a 60 s limit.
    pub fn sandboxctl(&self, args: &[&str]) -> Output {
        self.sandboxctl_with_env(args, &[])
    }

    /// Runs `sandboxctl` as root with extra environment variables.
    pub fn sandboxctl_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(binaries::sandboxctl());
        self.sandboxctl_command(&mut command, args);
        command.envs(env.iter().copied());
        run_with_timeout(command, Duration::from_secs(60))
    }

    /// Starts `sandboxctl` as root against this daemon without waiting for
    /// it, stdout and stderr piped: for commands that run until stopped
    /// (`logs --follow`). The caller kills and reaps it.
    pub fn spawn_sandboxctl(&self, args: &[&str]) -> Child {
        let mut command = Command::new(binaries::sandboxctl());
        self.sandboxctl_command(&mut command, args);
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("run sandboxctl {args:?}: {error}"))
    }

    /// Runs a copy of `sandboxctl` as `nobody:nogroup` against this daemon.
    pub fn sandboxctl_as_nobody(&self, args: &[&str]) -> Output {
        let copy = self.dir.join("bin").join("sandboxctl");
        if !copy.exists() {
            copy_executable(&binaries::sandboxctl(), &copy);
        }
        let mut command = Command::new(&copy);
        command.uid(NOBODY).gid(NOBODY).current_dir("/");
        self.sandboxctl_command(&mut command, args);
        run_with_timeout(command, Duration::from_secs(60))
    }

    fn sandboxctl_command(&self, command: &mut Command, args: &[&str]) {
        command
            .args(args)
            .env(sandboxd_client::SOCKET_ENV, &self.socket)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
    }

    /// Everything the daemon has written to stdout and stderr so far.
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// The last lines of every runner log in the state directory, for a
    /// failed test's report: a runner that exited at once says why only
    /// there (CI once showed just "exited code 4").
    fn runner_logs_tail(&self) -> String {
        const LINES: usize = 20;
        let mut logs: Vec<PathBuf> = fs::read_dir(self.state_dir.join("logs"))
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        logs.sort();
        let mut text = String::new();
        for log in logs.iter().filter(|path| path.is_file()) {
            let content = String::from_utf8_lossy(&fs::read(log).unwrap_or_default()).into_owned();
            let lines: Vec<&str> = content.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LINES)..];
            text.push_str(&format!(
                "runner log {} (last {} lines):\n{}\n",
                log.display(),
                tail.len(),
                tail.join("\n")
            ));
        }
        text
    }

    /// What the daemon now running logged (a restarted daemon's log
    /// without what its predecessors wrote).
    pub fn log_since_launch(&self) -> String {
        let text = fs::read(&self.log).unwrap_or_default();
        let from = usize::try_from(self.log_at_launch)
            .unwrap_or(usize::MAX)
            .min(text.len());
        String::from_utf8_lossy(&text[from..]).into_owned()
    }

    /// The test's own directory (0755).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// A copy of the executable `from` in this test's `bin` directory,
    /// which every uid may run (the originals under `target/` may not be
    /// reachable by a non-root uid).
    pub fn executable_copy(&self, from: &Path) -> PathBuf {
        let name = from.file_name().expect("an executable's file name");
        let copy = self.dir.join("bin").join(name);
        if !copy.exists() {
            copy_executable(from, &copy);
        }
        copy
    }

    /// This test's copy of the runner fixture (executable by nobody).
    pub fn fixture(&self) -> &Path {
        &self.fixture
    }

    /// The workspace directories under `<state_dir>/sandboxes`, sorted (the
    /// daemon's `.trash`, and `.prepared` where prepared workspaces wait,
    /// are not ones).
    pub fn workspaces(&self) -> Vec<String> {
        let mut names = crate::dir_entries(&self.state_dir.join("sandboxes"));
        names.retain(|name| name != ".trash" && name != ".prepared");
        names
    }

    /// The runners' output files under `<state_dir>/logs`, sorted (the
    /// daemon's `.spare` directory of emptied files for reuse is not one).
    pub fn log_files(&self) -> Vec<String> {
        let mut names = crate::dir_entries(&self.state_dir.join("logs"));
        names.retain(|name| name != ".spare");
        names
    }

    /// What `<state_dir>/sandboxes/.trash` holds: files of deprovisioned
    /// sandboxes that are still being deleted.
    pub fn trash_entries(&self) -> Vec<String> {
        crate::dir_entries(&self.state_dir.join("sandboxes").join(".trash"))
    }

    /// `<state_dir>/sandboxes/<base_name>`.
    pub fn workspace(&self, scope: Scope, id: &str) -> PathBuf {
        self.state_dir
            .join("sandboxes")
            .join(naming::base_name(scope, id))
    }

    /// `<state_dir>/logs/<base_name>.log`.
    pub fn runner_log(&self, scope: Scope, id: &str) -> PathBuf {
        self.state_dir
            .join("logs")
            .join(format!("{}.log", naming::base_name(scope, id)))
    }

    /// The uid the ledger records for this sandbox (its `u` line, not
    /// cancelled by an `f` line), if it has one.
    pub fn ledger_uid(&self, scope: Scope, id: &str) -> Option<u32> {
        let base = naming::base_name(scope, id);
        let journal = fs::read_to_string(self.ledger_journal()).unwrap_or_default();
        let mut uid = None;
        for line in journal.lines() {
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["u", number, name] if name == base => uid = number.parse().ok(),
                ["f", number, name] if name == base && number.parse().ok() == uid => uid = None,
                _ => {}
            }
        }
        uid
    }

    /// `<state_dir>/ledger/journal`: one `+`/`-` line per runner start and exit.
    pub fn ledger_journal(&self) -> PathBuf {
        self.state_dir.join("ledger").join("journal")
    }

    /// The ledger's live records, by base name: `(pid, start time)`. Panics
    /// on a journal line the daemon should never have written.
    pub fn ledger_live_records(&self) -> HashMap<String, (u32, u64)> {
        let (live, malformed) = read_ledger(&self.state_dir.join("ledger"));
        assert!(
            malformed.is_empty(),
            "malformed ledger journal lines: {malformed:?}"
        );
        live
    }

    /// This sandbox's live ledger record: `(pid, start time)`.
    pub fn ledger_record(&self, scope: Scope, id: &str) -> Option<(u32, u64)> {
        self.ledger_live_records()
            .remove(&naming::base_name(scope, id))
    }

    /// Live processes whose environment points into this test's directory
    /// (every runner and command gets [`TEST_DIR_VARIABLE`]): every runner
    /// and grandchild this test caused, whoever reaped them.
    pub fn leftover_processes(&self) -> Vec<u32> {
        // `[runner] env` reaches docker-tier runners too: those are the
        // engine's, left running by design, never this daemon's leftovers.
        procs::processes_with_env_prefix(&self.env_prefix())
            .into_iter()
            .filter(|&pid| !procs::in_a_docker_container(pid))
            .collect()
    }

    fn env_prefix(&self) -> String {
        format!("{}/", self.dir.display())
    }

    /// Kills whatever this test left running: the daemon, every group in
    /// the ledger that is still the recorded one, and every process whose
    /// environment points into the test directory.
    fn kill_everything(&mut self) {
        self.kill();
        let (live, _) = read_ledger(&self.state_dir.join("ledger"));
        for (pid, start) in live.into_values() {
            if pid > 1 && procs::start_time(pid) == Some(start) {
                procs::signal_group(pid, Signal::SIGKILL);
            }
        }
        for _ in 0..3 {
            for pid in self.leftover_processes() {
                if let Some(pgid) =
                    procs::process_group(pid).filter(|&pgid| pgid > 1 && pgid == pid)
                {
                    procs::signal_group(pgid, Signal::SIGKILL);
                }
                procs::signal_pid(pid, Signal::SIGKILL);
            }
            if wait_until(Duration::from_secs(2), || {
                self.leftover_processes().is_empty()
            }) {
                break;
            }
        }
    }
}

impl TestDaemon {
    /// Stops a daemon still running as its operator would (SIGTERM), so it
    /// removes what it made (its egress table, its sandboxes' cgroups);
    /// SIGKILL only when it does not exit in time. True when it exited by
    /// itself with success. Docker daemons too: several of one instance
    /// share its network, and only the last to stop removes it.
    fn stop_cleanly(&mut self) -> bool {
        let Some(pid) = self.pid().filter(|_| self.is_running()) else {
            return false;
        };
        procs::signal_pid(pid, Signal::SIGTERM);
        let clean = self
            .wait_exit(Duration::from_secs(60))
            .is_some_and(|status| status.success());
        self.kill();
        clean
    }

    /// A docker daemon's instance network and table: the complaint when a
    /// clean stop left them with no reason logged; either way, they are
    /// removed once no daemon holds them (see [`crate::docker_leftovers`]).
    fn docker_leftovers(&self, clean: bool) -> Option<String> {
        let log = self.log_text();
        if !log.contains("driver=\"docker\"") {
            return None;
        }
        let config = fs::read_to_string(&self.config).unwrap_or_default();
        let leftovers = crate::docker_leftovers::Leftovers::of(&config, &log);
        let complaint = (clean && !std::thread::panicking())
            .then(|| leftovers.complaint_after_clean_stop(&log))
            .flatten()
            .map(|complaint| format!("{complaint}; its log:\n{log}"));
        leftovers.remove_when_unheld();
        complaint
    }

    /// The process tier's egress tables this daemon's log says it loaded
    /// (one per sandboxes cgroup, so the daemon's own) that are still
    /// there, removed. The docker tier's tables (one per bridge, shared by
    /// every daemon of an instance on the engine) are left to the daemons.
    fn remove_left_tables(&self) -> Vec<String> {
        let mut left = Vec::new();
        for line in self.log_text().lines() {
            let Some(table) = line
                .split("nftables table inet ")
                .nth(1)
                .filter(|_| line.contains("every socket under cgroup"))
                .and_then(|rest| rest.split_whitespace().next())
            else {
                continue;
            };
            if left.iter().any(|name| name == table) {
                continue;
            }
            let listed = Command::new("nft")
                .args(["list", "table", "inet", table])
                .output();
            if listed.is_ok_and(|output| output.status.success()) {
                let _ = Command::new("nft")
                    .args(["delete", "table", "inet", table])
                    .status();
                left.push(table.to_string());
            }
        }
        left
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        let clean = self.stop_cleanly();
        self.kill_everything();
        let left = self.remove_left_tables();
        let docker = self.docker_leftovers(clean);
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("test failed — daemon log:\n{}", self.log_text());
            eprintln!("{}", self.runner_logs_tail());
        }
        // A daemon that stopped cleanly removes its table itself (earlier
        // runs left them); one killed leaves it, and the lines above remove it.
        let complaint = (clean && !left.is_empty() && !panicking).then(|| {
            format!(
                "sandboxd stopped cleanly but left its egress table(s) {left:?} (removed now); its log:\n{}",
                self.log_text()
            )
        });
        let complaint = complaint.or(docker);
        remove_test_dir(&self.dir);
        if let Some(complaint) = complaint {
            panic!("{complaint}");
        }
    }
}

/// Replays the ledger in `dir` as the daemon's start-up sweep does: the
/// journal (`+ <pid> <start> <base>`, cancelled by the `-` line with the same
/// pid and start time) and an older daemon's `<base>.pid` files
/// (`<pid> <start>`). Returns the live records by base name, and the
/// journal lines that did not parse.
fn read_ledger(dir: &Path) -> (HashMap<String, (u32, u64)>, Vec<String>) {
    let mut live = HashMap::new();
    let mut malformed = Vec::new();
    let journal = fs::read_to_string(dir.join("journal")).unwrap_or_default();
    for line in journal.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let parsed = match words[..] {
            // The sandboxes' uids (`u <uid> <base>`, `f <uid> <base>`, `h <uid>`).
            ["u" | "f", uid, _] | ["h", uid] if uid.parse::<u32>().is_ok() => continue,
            [sign @ ("+" | "-"), pid, start, base] => pid
                .parse::<u32>()
                .ok()
                .zip(start.parse::<u64>().ok())
                .map(|record| (sign == "+", record, base)),
            _ => None,
        };
        match parsed {
            Some((true, record, base)) => {
                live.insert(base.to_string(), record);
            }
            Some((false, record, base)) => {
                if live.get(base) == Some(&record) {
                    live.remove(base);
                }
            }
            None => malformed.push(line.to_string()),
        }
    }
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Some(base) = path
            .file_stem()
            .filter(|_| path.extension().is_some_and(|extension| extension == "pid"))
        else {
            continue;
        };
        let text = fs::read_to_string(&path).unwrap_or_default();
        let mut words = text.split_whitespace();
        let pid = words.next().and_then(|word| word.parse::<u32>().ok());
        let start = words.next().and_then(|word| word.parse::<u64>().ok());
        if let Some(record) = pid.zip(start) {
            live.insert(base.to_string_lossy().into_owned(), record);
        }
    }
    (live, malformed)
}

/// Runs a command to completion, killing it after `timeout`.
/// The variable (`[runner] env`) that holds the test's directory in every
/// runner and command of its daemon.
pub const TEST_DIR_VARIABLE: &str = "SANDBOXD_TEST_DIR";

pub fn run_with_timeout(mut command: Command, timeout: Duration) -> Output {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = procs::spawn(&mut command)
        .unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(timeout) {
        Ok(output) => output.expect("wait for command"),
        Err(_) => {
            procs::signal_pid(pid, Signal::SIGKILL);
            panic!("{command:?} did not finish within {timeout:?}");
        }
    }
}

fn toml_string(value: &str) -> String {
    // A TOML basic string is a JSON string for everything the tests write.
    serde_json::to_string(value).expect("a string serializes")
}

fn set_mode(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|error| panic!("chmod {mode:o} {}: {error}", path.display()));
}

fn copy_executable(from: &Path, to: &Path) {
    crate::executables::copy_executable(from, to, 0o755);
}

/// True when every directory from `/` down to `path` lets others traverse it.
fn others_can_reach(path: &Path) -> bool {
    path.ancestors()
        .all(|dir| fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o001 != 0))
}

/// Set (to anything but empty) to keep a failed test's directory for a look.
pub const KEEP_DIRS_ENV: &str = "SANDBOXD_TEST_KEEP_DIRS";

/// True when a failed test keeps its directory ([`KEEP_DIRS_ENV`]).
pub fn keep_failed_test_dirs() -> bool {
    std::env::var_os(KEEP_DIRS_ENV).is_some_and(|value| !value.is_empty())
}

/// A test's scratch directory, removed when dropped whether the test passed
/// or failed (a failed one is kept only when [`KEEP_DIRS_ENV`] asks).
#[derive(Debug)]
pub struct ScratchDir(Option<PathBuf>);

impl ScratchDir {
    /// Hands the directory to an owner that removes it itself.
    pub fn into_path(mut self) -> PathBuf {
        self.0.take().expect("a scratch directory")
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.as_deref().expect("a scratch directory")
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        self
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else { return };
        remove_test_dir(&dir);
    }
}

/// Removes a test's directory, or keeps it when the test failed and
/// [`KEEP_DIRS_ENV`] asks, saying so.
pub fn remove_test_dir(dir: &Path) {
    if std::thread::panicking() && keep_failed_test_dirs() {
        eprintln!(
            "test failed: keeping {} ({KEEP_DIRS_ENV} is set)",
            dir.display()
        );
    } else {
        let _ = fs::remove_dir_all(dir);
    }
}

/// A fresh 0755 directory that `nobody` can reach, with a short path (the
/// socket lives inside it and socket paths are limited to 107 bytes),
/// removed when the returned guard is dropped.
pub fn make_test_dir() -> ScratchDir {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let temp = std::env::temp_dir();
    let root = if others_can_reach(&temp) {
        temp
    } else {
        PathBuf::from("/tmp")
    };
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = root.join(format!("sbxt-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => {
                set_mode(&dir, 0o755);
                return ScratchDir(Some(dir));
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = fs::remove_dir_all(&dir);
            }
            Err(error) => panic!(
                "cannot create a test directory under {}: {error}",
                root.display()
            ),
        }
    }
}

/// True once the daemon on `socket` answers a call. A connect alone is not
/// enough: the daemon listens before its driver has started (so the socket
/// is held early), and a connection made then waits in the backlog until
/// the start-up is done — a test reading the state directory at that point
/// would race the start-up's own writes.
fn answers(socket: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = crate::raw::request_frame(
        0,
        10,
        sandboxd_protocol::service::SandboxdRequest::ProtocolVersion {},
    );
    let mut header = [0u8; 4];
    stream.write_all(&request).is_ok() && stream.read_exact(&mut header).is_ok()
}
