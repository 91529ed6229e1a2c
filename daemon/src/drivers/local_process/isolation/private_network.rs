//! `[network] mode = "private"`: a network namespace per sandbox, its way
//! out through `pasta` (Debian's `passt` package).
//!
//! Inside, the sandbox has its own loopback, its own ports and its own
//! `/proc/net` and sock_diag: it binds any port without taking it from
//! the host or another sandbox, and sees no socket but its own. `pasta`
//! gives the namespace a tap interface with the host's addresses and
//! routes (`--config-net`) and carries every TCP and UDP flow out through
//! ordinary sockets of the host's.
//!
//! Why the egress posture still holds: `pasta` is started in the sandbox's
//! own cgroup v2 (its `cgroup.procs` written before its exec), so every
//! host socket it makes carries that cgroup, and the daemon's nftables
//! table (which matches the sockets of every process under the sandboxes
//! cgroup, see `crate::egress`) refuses what it refused before. How a
//! refusal looks inside changes: the packaged pasta passes no reset back,
//! so a refused TCP connect times out inside rather than failing with
//! ECONNREFUSED; a forwarded endpoint's connection is accepted inside by
//! pasta, then closed when the host refuses pasta's own; a refused UDP
//! datagram is dropped as before, but `sendto` inside sees no EPERM (the
//! datagram left the namespace before the host refused it).
//!
//! The runner's endpoints (`backend_endpoint`, `temporal_address`) on the
//! host's loopback stay reachable at the same address: their TCP ports are
//! forwarded from the namespace's loopback to the host's (`-T`), and
//! nothing else of the host's loopback is (`--no-map-gw`). Nothing is
//! forwarded into the namespace (`-t none -u none`): no one outside can
//! open a connection to a sandbox.
//!
//! Why pasta rather than a veth pair with NAT per sandbox, or a forwarder
//! of the daemon's own: a veth pair needs `ip_forward`, masquerading and
//! rules keyed on each interface (the table's cgroup rules would not see
//! forwarded packets), and a host loopback endpoint needs
//! `route_localnet` and a DNAT per sandbox — host-wide changes for every
//! daemon on the host. A forwarder of our own would have to be a user-mode
//! TCP/IP stack to carry arbitrary outbound traffic, which is what pasta
//! is. Measured here: one pasta start (namespace configured, ports bound)
//! takes 40-65 ms on the loaded 2-core CI host; a prepared view pays it
//! ahead, off the ensure path.
//!
//! Why `--runas 0:0`: the packaged pasta (0.0~git20230309) cannot join a
//! namespace it did not make once it has dropped to `nobody` ("Couldn't
//! switch to pasta namespaces"); as root it keeps only CAP_SYS_ADMIN and
//! CAP_NET_BIND_SERVICE, and it still isolates itself (seccomp, an empty
//! mount namespace) as it does by default.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use super::super::pidfd;

/// How long one pasta may take to configure its namespace.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// Where pasta is looked for when `PATH` does not have it.
const PASTA_DIRS: [&str; 3] = ["/usr/bin", "/usr/sbin", "/usr/local/bin"];

/// Sandboxes get a network namespace each, with pasta as their way out.
#[derive(Debug)]
pub struct PrivateNetwork {
    pasta: PathBuf,
    /// `-T`: the endpoints' ports forwarded to the host's loopback, or `none`.
    tcp_to_host: String,
}

/// A step of a sandbox's network that failed.
#[derive(Debug)]
pub struct NetworkError {
    pub step: String,
    pub error: io::Error,
}

impl NetworkError {
    fn at(step: impl Into<String>) -> impl FnOnce(io::Error) -> NetworkError {
        let step = step.into();
        move |error| NetworkError { step, error }
    }
}

impl std::fmt::Display for NetworkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.error)
    }
}

impl PrivateNetwork {
    /// Finds pasta (in `path`, then the usual directories) and tries it
    /// for real: a namespace of its own, configured, then ended. `Err`
    /// says why sandboxes cannot get a private network here. Blocking.
    pub fn probe(path: Option<&OsString>, endpoints: &[&str]) -> Result<PrivateNetwork, String> {
        let pasta = find_pasta(path).ok_or_else(|| {
            "no pasta binary (install Debian's passt package) in PATH or /usr/bin, /usr/sbin, /usr/local/bin".to_string()
        })?;
        let mut ports: Vec<u16> = endpoints
            .iter()
            .filter_map(|endpoint| loopback_port(endpoint))
            .collect();
        ports.sort_unstable();
        ports.dedup();
        let tcp_to_host = match ports.is_empty() {
            true => "none".to_string(),
            false => ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(","),
        };
        let network = PrivateNetwork { pasta, tcp_to_host };
        let tried = network
            .start(None)
            .and_then(Starting::ready)
            .map_err(|error| format!("a trial namespace failed: {error}"))?;
        drop(tried);
        Ok(network)
    }

    /// What `status` says of it.
    pub fn describe(&self) -> String {
        let forwarded = match self.tcp_to_host.as_str() {
            "none" => "no endpoint on the host's loopback to forward".to_string(),
            ports => format!("the endpoints' TCP ports {ports} forwarded to the host's loopback, nothing else of it reachable"),
        };
        format!(
            "each sandbox its own network namespace: own loopback, ports and /proc/net; out through {} in the sandbox's cgroup (the egress rules hold it); {forwarded}",
            self.pasta.display()
        )
    }

    /// A new namespace, and pasta starting on it in `cgroup` (a sandbox's
    /// cgroup v2 directory; `None`: the daemon's own). Call
    /// [`Starting::ready`] before anything runs in it.
    pub fn start(&self, cgroup: Option<&OwnedFd>) -> Result<Starting, NetworkError> {
        let netns = new_namespace().map_err(NetworkError::at("unshare(CLONE_NEWNET)"))?;
        let procs = cgroup
            .map(crate::drivers::local_process::cgroup::procs::open_procs_in)
            .transpose()
            .map_err(NetworkError::at("open the sandbox's cgroup.procs"))?;
        let pid_file = memfd(c"pasta-pid").map_err(NetworkError::at("memfd_create"))?;
        let errors = memfd(c"pasta-stderr").map_err(NetworkError::at("memfd_create"))?;
        let mut command = std::process::Command::new(&self.pasta);
        command
            .args([
                "--quiet",
                "--runas",
                "0:0",
                "--netns-only",
                "--no-netns-quit",
            ])
            .args(["--config-net", "--no-map-gw", "-t", "none", "-u", "none"])
            .args(["-U", "none", "-T", &self.tcp_to_host])
            .arg("--netns")
            .arg(format!("/proc/self/fd/{}", netns.as_raw_fd()))
            .arg("-P")
            .arg(format!("/proc/self/fd/{}", pid_file.as_raw_fd()))
            .env_clear()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(File::from(
                errors
                    .try_clone()
                    .map_err(NetworkError::at("dup of a memfd"))?,
            ));
        let inherited = [netns.as_raw_fd(), pid_file.as_raw_fd()];
        let procs_fd = procs.as_ref().map(AsRawFd::as_raw_fd);
        // SAFETY: the closure makes only async-signal-safe calls (write,
        // fcntl) on descriptors that live until the spawn returns.
        unsafe {
            command.pre_exec(move || child_setup(procs_fd, inherited));
        }
        let child = command
            .spawn()
            .map_err(NetworkError::at(format!("start {}", self.pasta.display())))?;
        Ok(Starting {
            child: Some(child),
            netns: Some(netns),
            pid_file,
            errors,
        })
    }
}

/// In pasta's child, before its exec: into the sandbox's cgroup (so its
/// sockets carry it), and the namespace and pid file kept across the exec.
fn child_setup(procs: Option<RawFd>, inherited: [RawFd; 2]) -> io::Result<()> {
    if let Some(procs) = procs {
        // SAFETY: a two-byte write from a static buffer.
        if unsafe { libc::write(procs, b"0\n".as_ptr().cast(), 2) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for fd in inherited {
        // SAFETY: fcntl on a descriptor the parent holds open.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A namespace with pasta on its way up. Dropped before
/// [`Starting::ready`] (a start that failed meanwhile), pasta is ended.
pub struct Starting {
    child: Option<std::process::Child>,
    netns: Option<OwnedFd>,
    pid_file: OwnedFd,
    errors: OwnedFd,
}

impl Starting {
    /// Waits until pasta has configured the namespace (its first process
    /// exits once its daemon runs), and holds that daemon.
    pub fn ready(mut self) -> Result<SandboxNetwork, NetworkError> {
        let pasta = self.wait()?;
        let netns = self.netns.take().expect("taken only here");
        Ok(SandboxNetwork { netns, pasta })
    }

    fn wait(&mut self) -> Result<Pasta, NetworkError> {
        let Some(mut child) = self.child.take() else {
            return Err(NetworkError::at("pasta")(io::Error::from_raw_os_error(
                libc::ECHILD,
            )));
        };
        let started = pidfd::open(child.id() as libc::pid_t)
            .map(|fd| exits_within(&fd, READY_TIMEOUT))
            .unwrap_or(true);
        if !started {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NetworkError::at(
                "pasta did not configure the namespace in time",
            )(io::Error::from_raw_os_error(libc::ETIMEDOUT)));
        }
        let status = child.wait().map_err(NetworkError::at("wait for pasta"))?;
        if !status.success() {
            let said = read_all(&self.errors);
            return Err(NetworkError::at(format!(
                "pasta exited with {status}: {}",
                said.trim()
            ))(io::Error::from_raw_os_error(libc::EIO)));
        }
        let pid = read_all(&self.pid_file)
            .trim()
            .parse::<libc::pid_t>()
            .map_err(|_| {
                NetworkError::at("read pasta's pid")(io::Error::from_raw_os_error(libc::EIO))
            })?;
        let pidfd = pidfd::open(pid).map_err(NetworkError::at("pidfd_open of pasta"))?;
        Ok(Pasta { pidfd })
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if self.child.is_some() {
            // Its daemon, if it got that far, is killed as the Pasta drops.
            let _ = self.wait();
        }
    }
}

/// A sandbox's network namespace, ready, and its pasta.
pub struct SandboxNetwork {
    netns: OwnedFd,
    pasta: Pasta,
}

impl SandboxNetwork {
    /// Moves this thread into the namespace, so what it clones next starts
    /// there; back in the daemon's when the returned value is dropped.
    pub fn enter(&self) -> Result<InsideNetwork, NetworkError> {
        let host = File::open("/proc/thread-self/ns/net")
            .map_err(NetworkError::at("open this thread's network namespace"))?;
        setns_net(self.netns.as_raw_fd()).map_err(NetworkError::at(
            "setns into the sandbox's network namespace",
        ))?;
        Ok(InsideNetwork {
            host: OwnedFd::from(host),
        })
    }

    /// Its pasta, which ends the network when dropped (the namespace
    /// itself lives as long as a process is in it).
    pub fn into_pasta(self) -> Pasta {
        self.pasta
    }
}

/// A thread inside a sandbox's network namespace, until dropped.
pub struct InsideNetwork {
    host: OwnedFd,
}

impl Drop for InsideNetwork {
    fn drop(&mut self) {
        if let Err(error) = setns_net(self.host.as_raw_fd()) {
            tracing::error!(%error, "a thread cannot return from a sandbox's network namespace to the daemon's: aborting rather than starting sandboxes in the wrong one");
            std::process::abort();
        }
    }
}

/// A sandbox's pasta: SIGKILLed when dropped (gone already is fine). It
/// is in the sandbox's cgroup too, so the cgroup kill at the sandbox's
/// end reaches it whatever happens to this.
pub struct Pasta {
    pidfd: OwnedFd,
}

impl Drop for Pasta {
    fn drop(&mut self) {
        crate::drivers::local_process::pidfd::kill(&self.pidfd);
    }
}

/// A new network namespace, made on a short-lived thread of its own (so
/// no daemon thread is ever left in it).
fn new_namespace() -> io::Result<OwnedFd> {
    std::thread::spawn(|| -> io::Result<OwnedFd> {
        // SAFETY: unshare with a plain flag; it affects this thread only.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        File::open("/proc/thread-self/ns/net").map(OwnedFd::from)
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Whether the process of `pidfd` exits within `timeout` (a signal that
/// interrupts the wait does not end it).
fn exits_within(pidfd: &OwnedFd, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if pidfd::wait_readable(pidfd.as_raw_fd(), left) {
            return true;
        }
        if left.is_zero() {
            return false;
        }
    }
}

fn setns_net(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns with a descriptor the caller holds open.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn memfd(name: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create with a C string; the result is a new descriptor.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What a memfd holds (at most 4 KiB of it).
fn read_all(fd: &OwnedFd) -> String {
    let mut file = match fd.try_clone() {
        Ok(fd) => File::from(fd),
        Err(_) => return String::new(),
    };
    let mut text = String::new();
    let _ = file.rewind();
    let _ = file.take(4096).read_to_string(&mut text);
    text
}

fn find_pasta(path: Option<&OsString>) -> Option<PathBuf> {
    let from_path = path
        .map(|path| std::env::split_paths(path).collect::<Vec<_>>())
        .unwrap_or_default();
    from_path
        .into_iter()
        .chain(PASTA_DIRS.iter().map(PathBuf::from))
        .map(|dir| dir.join("pasta"))
        .find(|candidate| super::super::executable::is_executable_file(candidate))
}

/// The port of `endpoint` (`host:port`, `scheme://host:port/…`,
/// `[::1]:port`) when its host is `localhost`, 127.0.0.1 or ::1 (the
/// addresses pasta's forwarded ports listen on inside); `None` otherwise.
pub fn loopback_port(endpoint: &str) -> Option<u16> {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split('/').next()?;
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let (host, port) = authority.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1";
    loopback.then(|| port.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_configured_before_ready_and_its_pasta_ends_on_drop() {
        let network = match PrivateNetwork::probe(None, &["127.0.0.1:7234"]) {
            Ok(network) => network,
            Err(why) => return eprintln!("skipped: {why}"),
        };
        assert_eq!(network.tcp_to_host, "7234");
        let ready = network.start(None).unwrap().ready().unwrap();
        let host = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let (inside, routes) = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let _inside = ready.enter().unwrap();
                    (
                        std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
                        std::fs::read_to_string("/proc/net/route").unwrap(),
                    )
                })
                .join()
                .unwrap()
        });
        assert_ne!(inside, host, "the thread did not enter the namespace");
        assert_eq!(
            std::fs::read_link("/proc/thread-self/ns/net").unwrap(),
            host,
            "this thread left the host's namespace"
        );
        // The default route pasta copied from the host (00000000), when
        // the host has one.
        let host_routes = std::fs::read_to_string("/proc/net/route").unwrap();
        if host_routes
            .lines()
            .any(|line| line.split_whitespace().nth(1) == Some("00000000"))
        {
            assert!(
                routes
                    .lines()
                    .any(|line| line.split_whitespace().nth(1) == Some("00000000")),
                "no default route inside: {routes}"
            );
        }
        let pasta = ready.into_pasta();
        let pidfd = pasta.pidfd.try_clone().unwrap();
        assert!(!pidfd::has_exited(&pidfd));
        drop(pasta);
        assert!(
            exits_within(&pidfd, Duration::from_secs(10)),
            "pasta outlived its drop"
        );
    }

    #[test]
    fn a_pasta_that_fails_is_named_with_what_it_said() {
        let network = PrivateNetwork {
            pasta: PathBuf::from("/bin/sh"),
            tcp_to_host: "none".to_string(),
        };
        // `sh --quiet …` refuses its options and says so on stderr.
        let error = match network.start(None).and_then(Starting::ready) {
            Ok(_) => panic!("a failing pasta was taken for ready"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains("pasta exited with"), "{error}");
        let missing = PrivateNetwork {
            pasta: PathBuf::from("/nonexistent/pasta"),
            tcp_to_host: "none".to_string(),
        };
        let error = match missing.start(None) {
            Ok(_) => panic!("a missing pasta started"),
            Err(error) => error.to_string(),
        };
        assert!(error.contains("/nonexistent/pasta"), "{error}");
    }

    #[test]
    fn only_loopback_endpoints_are_forwarded() {
        for (endpoint, port) in [
            ("127.0.0.1:7234", Some(7234)),
            ("localhost:7233", Some(7233)),
            ("http://127.0.0.1:8080/api", Some(8080)),
            ("[::1]:9000", Some(9000)),
            ("grpc://user@localhost:50051", Some(50051)),
            ("127.0.0.2:80", None),
            ("backend.internal:7234", None),
            ("10.0.0.1:7234", None),
            ("127.0.0.1", None),
            ("", None),
        ] {
            assert_eq!(loopback_port(endpoint), port, "{endpoint}");
        }
    }
}
