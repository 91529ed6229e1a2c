//! `--serve-attacks`: the runner fixture as an attacker on another sandbox.
//!
//! The fixture waits until `$WORKSPACE_ROOT_DIR/attack` exists (written by
//! the test, as root), holding `pid <pid>`, `workspace <path>` and
//! `log <path>` lines that name the victim runner. It then tries, as the
//! runner it is, every way of reaching the victim, and writes the outcome
//! of each attempt to `attack-report.json`: `{"attempts": [{"name": …,
//! "errno": …}], "securebits": …}`, errno 0 meaning the attempt succeeded.
//! Two control attempts on itself (its own environ, its own workspace)
//! show that the same calls do work where they are allowed.
//!
//! With `--kernel-probes` the runner also holds kernel objects of its own
//! from its start ([`hold_kernel_objects`]: a key in its session keyring,
//! a listening abstract Unix socket, written to `kernel-start.json` with
//! the descriptors and open-file limit it started with), and a request with
//! `abstract <name>` lines (the other sandbox's socket), `key <id>` (the
//! other sandbox's key) and `daemon-key <id>` (a key in the daemon's
//! session keyring) adds the kernel attempts ([`kernel_attempts`]): new
//! namespaces, mounts, `clone3`, those keys and that socket, and controls
//! that show the runner still works (fork, a thread, a shell, python3, its
//! own key and its own socket from a child process).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Waits for the trigger (or SIGTERM, blocked by the caller: then `false`)
/// and runs the attacks.
pub fn serve(workspace: &Path) -> bool {
    let trigger = workspace.join("attack");
    loop {
        if trigger.exists() {
            break;
        }
        if sigterm_pending_within(Duration::from_millis(10)) {
            return false;
        }
    }
    let request = std::fs::read_to_string(&trigger).unwrap_or_default();
    let fields: HashMap<&str, &str> = request
        .lines()
        .filter_map(|line| line.split_once(' '))
        .collect();
    let (Some(pid), Some(victim_workspace), Some(log)) = (
        fields.get("pid").and_then(|pid| pid.parse::<i32>().ok()),
        fields.get("workspace").map(PathBuf::from),
        fields.get("log").map(PathBuf::from),
    ) else {
        eprintln!("runner-fixture: bad attack request {request:?}");
        return true;
    };
    let mut all = attempts(pid, &victim_workspace, &log, workspace);
    if let Some(other_socket) = fields.get("abstract") {
        let number = |name: &str| fields.get(name).and_then(|id| id.parse::<i32>().ok());
        all.extend(kernel_attempts(
            other_socket,
            number("key").unwrap_or(-1),
            number("daemon-key").unwrap_or(-1),
        ));
    }
    let report = serde_json::json!({
        "attempts": all,
        // SAFETY: PR_GET_SECUREBITS reads this thread's securebits.
        "securebits": unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) },
    });
    let text = serde_json::to_vec_pretty(&report).expect("json serializes");
    if let Err(error) = super::write_atomically(workspace, "attack-report.json", &text) {
        eprintln!("runner-fixture: cannot write attack-report.json: {error}");
    }
    true
}

/// Every attempt with its errno (0: it worked).
fn attempts(pid: i32, victim: &Path, log: &Path, own: &Path) -> Vec<serde_json::Value> {
    let me = std::process::id();
    let outcomes: Vec<(&str, i32)> = vec![
        (
            "read the victim's environ",
            errno_of(read_all(&format!("/proc/{pid}/environ"))),
        ),
        (
            "list the victim's workspace",
            errno_of(std::fs::read_dir(victim)),
        ),
        (
            "read a file in the victim's workspace",
            errno_of(read_all(&victim.join("env.json").display().to_string())),
        ),
        (
            "create a file in the victim's workspace",
            errno_of(std::fs::File::create(victim.join("planted"))),
        ),
        (
            "SIGSTOP the victim",
            errno_of(kill(Pid::from_raw(pid), Signal::SIGSTOP)),
        ),
        (
            "SIGKILL the victim",
            errno_of(kill(Pid::from_raw(pid), Signal::SIGKILL)),
        ),
        ("PTRACE_ATTACH the victim", ptrace(libc::PTRACE_ATTACH, pid)),
        ("PTRACE_SEIZE the victim", ptrace(libc::PTRACE_SEIZE, pid)),
        (
            "append to the victim's output file",
            errno_of(std::fs::OpenOptions::new().append(true).open(log)),
        ),
        (
            "read the victim's output file",
            errno_of(read_all(&log.display().to_string())),
        ),
        (
            "open the victim's stdout through /proc",
            errno_of(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(format!("/proc/{pid}/fd/1")),
            ),
        ),
        // SAFETY: setuid(0) only asks; it changes nothing when refused.
        ("become root", errno_of_return(unsafe { libc::setuid(0) })),
        (
            // SAFETY: asks to clear the securebits; refused when locked.
            "clear its own securebits",
            errno_of_return(unsafe { libc::prctl(libc::PR_SET_SECUREBITS, 0, 0, 0, 0) }),
        ),
        (
            "control: read its own environ",
            errno_of(read_all(&format!("/proc/{me}/environ"))),
        ),
        (
            "control: create a file in its own workspace",
            errno_of(
                std::fs::File::create(own.join("planted-here"))
                    .and_then(|mut file| file.write_all(b"mine")),
            ),
        ),
    ];
    outcomes
        .into_iter()
        .map(|(name, errno)| serde_json::json!({"name": name, "errno": errno}))
        .collect()
}

fn read_all(path: &str) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// 0 for success, else the errno the kernel returned.
fn errno_of<T, E: Into<std::io::Error>>(result: Result<T, E>) -> i32 {
    match result {
        Ok(_) => 0,
        Err(error) => error.into().raw_os_error().unwrap_or(-1),
    }
}

fn errno_of_return(code: libc::c_int) -> i32 {
    if code == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

fn ptrace(request: libc::c_uint, pid: i32) -> i32 {
    // SAFETY: ATTACH and SEIZE take only a pid (no pointers); a success
    // would make the victim our tracee, which the test reports as a failure.
    let code = unsafe { libc::ptrace(request, pid, 0, 0) };
    errno_of_return(code as libc::c_int)
}

/// True when a SIGTERM (blocked) arrives within `timeout`.
pub fn sigterm_pending_within(timeout: Duration) -> bool {
    // SAFETY: a zeroed sigset_t filled by sigemptyset/sigaddset, and a
    // timespec; sigtimedwait takes the blocked signal off the queue.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let wait = libc::timespec {
            tv_sec: 0,
            tv_nsec: timeout.as_nanos() as libc::c_long,
        };
        libc::sigtimedwait(&set, std::ptr::null_mut(), &wait) == libc::SIGTERM
    }
}

/// The description of the key the test puts in the daemon's session keyring.
pub const DAEMON_KEY_DESCRIPTION: &str = "sandboxd-test-daemon-key";

/// What this runner holds from its start (`--kernel-probes`).
struct Held {
    key: i32,
    abstract_name: String,
    /// Kept open (listening) for as long as the runner lives.
    _listener: std::os::unix::net::UnixListener,
}

static HELD: std::sync::OnceLock<Held> = std::sync::OnceLock::new();

/// `--kernel-probes`, at start: `start_fds` (what `/proc/self/fd` listed
/// first thing, as `[fd, target]`) and the open-file limit go into
/// `kernel-start.json` with the key this runner adds to its session
/// keyring and the abstract socket it listens on.
pub fn hold_kernel_objects(workspace: &Path, start_fds: Vec<(i32, String)>) -> Result<(), String> {
    use std::os::linux::net::SocketAddrExt;
    // Named after the workspace, not the pid: under a PID namespace of its
    // own every runner is pid 2. The base name alone is not enough: two
    // test daemons running side by side both have a session `a`, and the
    // abstract namespace is the host's (the second bind failed with
    // EADDRINUSE and its runner exited 4: CI), so a digest of the whole
    // path tells them apart. In a view every workspace is `/workspace`:
    // there the test's directory (the harness's `[runner] env`) and the
    // task queue tell them apart instead.
    let unique = match (
        std::env::var_os("SANDBOXD_TEST_DIR"),
        std::env::var_os("STIGMER_TASK_QUEUE"),
    ) {
        (Some(dir), Some(queue)) => Path::new(&dir).join(queue),
        _ => workspace.to_path_buf(),
    };
    let me = workspace.file_name().map_or_else(
        || std::process::id().to_string(),
        |name| format!("{}-{:016x}", name.to_string_lossy(), path_digest(&unique)),
    );
    let description = format!("sandboxd-test-runner-key-{me}");
    let key = add_session_key(&description, b"runner-secret")?;
    let abstract_name = format!("sandboxd-test-runner-{me}");
    let address = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
        .map_err(|error| error.to_string())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&address)
        .map_err(|error| format!("listen on @{abstract_name}: {error}"))?;
    let session_keyring = keyctl(
        libc::KEYCTL_GET_KEYRING_ID,
        libc::KEY_SPEC_SESSION_KEYRING as i64,
        0,
        0,
    );
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let report = serde_json::json!({
        "fds": start_fds,
        "nofile": [limit.rlim_cur, limit.rlim_max],
        "session_keyring": session_keyring,
        "key": key,
        "abstract": abstract_name,
    });
    HELD.set(Held {
        key,
        abstract_name,
        _listener: listener,
    })
    .map_err(|_| "kernel objects held twice".to_string())?;
    let text = serde_json::to_vec_pretty(&report).expect("json serializes");
    super::write_atomically(workspace, "kernel-start.json", &text)
        .map_err(|error| error.to_string())
}

/// A digest of `path` (FNV-1a: stable, and enough to tell test
/// directories apart).
fn path_digest(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// The kernel attempts, each with its errno (0: it worked).
fn kernel_attempts(other_socket: &str, other_key: i32, daemon_key: i32) -> Vec<serde_json::Value> {
    let held = HELD.get();
    let own_key = held.map_or(-1, |held| held.key);
    let own_socket = held
        .map(|held| held.abstract_name.clone())
        .unwrap_or_default();
    let outcomes: Vec<(&str, i32)> = vec![
        (
            "unshare(CLONE_NEWUSER)",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe { libc::unshare(libc::CLONE_NEWUSER) }),
        ),
        (
            "unshare(CLONE_NEWNS)",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe { libc::unshare(libc::CLONE_NEWNS) }),
        ),
        (
            "clone(CLONE_NEWUSER)",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe {
                let pid = libc::syscall(
                    libc::SYS_clone,
                    libc::CLONE_NEWUSER | libc::SIGCHLD,
                    0,
                    0,
                    0,
                    0,
                );
                if pid == 0 {
                    libc::_exit(0);
                }
                pid as libc::c_int
            }),
        ),
        // Unfiltered: EINVAL (it is already in that namespace).
        (
            "setns into its own user namespace",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe {
                let fd = libc::open(c"/proc/self/ns/user".as_ptr(), libc::O_RDONLY);
                libc::setns(fd, libc::CLONE_NEWUSER)
            }),
        ),
        // Unfiltered: ENOENT (the target is looked up first).
        (
            "mount a tmpfs",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe {
                libc::mount(
                    c"none".as_ptr(),
                    c"/nonexistent/sandboxd-test".as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                )
            }),
        ),
        // Unfiltered: EINVAL (no clone_args).
        (
            "clone3",
            // SAFETY: raw system calls with constant arguments, in the forked probe child.
            in_child(|| unsafe {
                libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) as libc::c_int
            }),
        ),
        (
            "read the daemon's session key",
            keyctl_errno(libc::KEYCTL_READ, daemon_key),
        ),
        (
            "find the daemon's key from its session keyring",
            search_session(DAEMON_KEY_DESCRIPTION),
        ),
        (
            "read the other sandbox's key",
            keyctl_errno(libc::KEYCTL_READ, other_key),
        ),
        (
            "connect to the other sandbox's abstract socket",
            connect_abstract(other_socket),
        ),
        (
            "control: read its own key",
            keyctl_errno(libc::KEYCTL_READ, own_key),
        ),
        (
            "control: connect to its own abstract socket from a child",
            in_child_connect(&own_socket),
        ),
        ("control: fork", in_child(|| 0)),
        (
            "control: a thread",
            errno_of(
                std::thread::spawn(|| ())
                    .join()
                    .map_err(|_| std::io::Error::other("panicked")),
            ),
        ),
        (
            "control: sh -c",
            exit_errno(
                std::process::Command::new("sh")
                    .args(["-c", "exit 0"])
                    .status(),
            ),
        ),
        (
            "control: python3 -c",
            exit_errno(
                std::process::Command::new("python3")
                    .args(["-c", "import os; os.fork() or os._exit(0)"])
                    .status(),
            ),
        ),
    ];
    outcomes
        .into_iter()
        .map(|(name, errno)| serde_json::json!({"name": name, "errno": errno}))
        .collect()
}

/// Runs `probe` in a forked child (raw system calls only), which exits
/// with its errno (0 when the call returned 0 or more).
fn in_child(probe: impl FnOnce() -> libc::c_int) -> i32 {
    // SAFETY: the child only makes raw system calls and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = if probe() < 0 {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(255)
        } else {
            0
        };
        // SAFETY: ends the forked child.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return -1;
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// 0 when the command ran and exited 0; its spawn errno; -1 for a failure.
fn exit_errno(status: std::io::Result<std::process::ExitStatus>) -> i32 {
    match status {
        Ok(status) if status.success() => 0,
        Ok(_) => -1,
        Err(error) => error.raw_os_error().unwrap_or(-1),
    }
}

fn keyctl(operation: u32, a: i64, b: i64, c: i64) -> i64 {
    // SAFETY: keyctl with plain numbers, or a buffer the caller sized.
    unsafe { libc::syscall(libc::SYS_keyctl, operation, a, b, c) }
}

fn add_session_key(description: &str, payload: &[u8]) -> Result<i32, String> {
    let description = std::ffi::CString::new(description).expect("no NUL");
    // SAFETY: C strings and a payload buffer of the length given.
    let id = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            description.as_ptr(),
            payload.as_ptr(),
            payload.len(),
            libc::KEY_SPEC_SESSION_KEYRING,
        )
    };
    if id < 0 {
        return Err(format!("add_key: {}", std::io::Error::last_os_error()));
    }
    Ok(id as i32)
}

/// The errno of `keyctl(operation, key, buffer, 64)` (0: allowed).
fn keyctl_errno(operation: u32, key: i32) -> i32 {
    let mut buffer = [0u8; 64];
    let done = keyctl(
        operation,
        key as i64,
        buffer.as_mut_ptr() as i64,
        buffer.len() as i64,
    );
    if done < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// The errno of a search of its session keyring for a user key.
fn search_session(description: &str) -> i32 {
    let description = std::ffi::CString::new(description).expect("no NUL");
    // SAFETY: C strings; no destination keyring.
    let done = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            libc::KEYCTL_SEARCH,
            libc::KEY_SPEC_SESSION_KEYRING,
            c"user".as_ptr(),
            description.as_ptr(),
            0,
        )
    };
    if done < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

fn connect_abstract(name: &str) -> i32 {
    use std::os::linux::net::SocketAddrExt;
    let address = match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
        Ok(address) => address,
        Err(error) => return error.raw_os_error().unwrap_or(-1),
    };
    errno_of(std::os::unix::net::UnixStream::connect_addr(&address))
}

/// Connects from a forked child: another process of the same sandbox.
fn in_child_connect(name: &str) -> i32 {
    let name = name.to_string();
    // The child may allocate: this process has no other thread now.
    in_child(move || {
        let errno = connect_abstract(&name);
        if errno == 0 {
            0
        } else {
            // SAFETY: sets errno for in_child to report.
            unsafe { *libc::__errno_location() = errno };
            -1
        }
    })
}

/// `--serve-probes`: once `pid` is written, runs each `probe.sh` the test
/// writes into the workspace (as this runner, in its sandbox, with
/// `FIXTURE` naming this binary as the sandbox sees it), its output in
/// `probe.out` and its exit code in `probe.done` (written last), until
/// SIGTERM (then `false`).
pub fn serve_probes(workspace: &Path) -> bool {
    let script = workspace.join("probe.sh");
    let fixture = std::env::current_exe().unwrap_or_default();
    loop {
        if sigterm_pending_within(Duration::from_millis(10)) {
            return false;
        }
        if !script.exists() {
            continue;
        }
        let output = std::fs::File::create(workspace.join("probe.out"));
        let status = output.and_then(|output| {
            let errors = output.try_clone()?;
            std::process::Command::new("/bin/sh")
                .arg(&script)
                .env("FIXTURE", &fixture)
                .stdout(output)
                .stderr(errors)
                .status()
        });
        let code = match status {
            Ok(status) => status.code().unwrap_or(-1),
            Err(error) => {
                eprintln!("runner-fixture: cannot run probe.sh: {error}");
                -1
            }
        };
        let _ = std::fs::remove_file(&script);
        let _ = super::write_atomically(workspace, "probe.done", format!("{code}\n").as_bytes());
    }
}

/// `runner-fixture --ipc <op> [arg]`, for probes: System V IPC as a
/// program would use it. Prints the id made, or the errno of the attempt
/// (`errno N`), and exits 0 when the call worked.
/// - `shm-create <bytes>`: a segment, every page written (so it is memory
///   in use, not only reserved), left in place after exit;
/// - `shm-attach <id>`: attaches someone's segment;
/// - `msg-create`: a message queue with one message in it;
/// - `msg-receive <id>`: takes a message from someone's queue.
pub fn ipc(op: &str, arg: Option<&str>) -> std::process::ExitCode {
    let number = |text: Option<&str>| text.and_then(|text| text.parse::<i64>().ok()).unwrap_or(0);
    // SAFETY: each call gets plain integers, or buffers of the sizes given.
    let result: i64 = unsafe {
        match op {
            "shm-create" => {
                let size = number(arg) as usize;
                let id = libc::shmget(libc::IPC_PRIVATE, size, libc::IPC_CREAT | 0o666);
                if id >= 0 {
                    let at = libc::shmat(id, std::ptr::null(), 0);
                    if at as isize != -1 {
                        std::ptr::write_bytes(at.cast::<u8>(), 0x5a, size);
                        libc::shmdt(at);
                    }
                }
                id.into()
            }
            "shm-attach" => {
                let at = libc::shmat(number(arg) as i32, std::ptr::null(), libc::SHM_RDONLY);
                if at as isize == -1 {
                    -1
                } else {
                    0
                }
            }
            "msg-create" => {
                let id = libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o666);
                if id >= 0 {
                    let message: [libc::c_long; 2] = [1, 0x6d6f_6f72_6373];
                    libc::msgsnd(id, message.as_ptr().cast(), 8, libc::IPC_NOWAIT);
                }
                id.into()
            }
            "msg-receive" => {
                let mut message: [libc::c_long; 2] = [0, 0];
                let got = libc::msgrcv(
                    number(arg) as i32,
                    message.as_mut_ptr().cast(),
                    8,
                    0,
                    libc::IPC_NOWAIT,
                );
                if got < 0 {
                    -1
                } else {
                    0
                }
            }
            other => {
                eprintln!("runner-fixture: unknown --ipc operation '{other}'");
                return std::process::ExitCode::from(2);
            }
        }
    };
    if result < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(-1);
        println!("errno {errno}");
        return std::process::ExitCode::from(1);
    }
    println!("{result}");
    std::process::ExitCode::SUCCESS
}
