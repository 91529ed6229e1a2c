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
    let report = serde_json::json!({
        "attempts": attempts(pid, &victim_workspace, &log, workspace),
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
fn sigterm_pending_within(timeout: Duration) -> bool {
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
