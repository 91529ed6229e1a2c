//! Looking at processes through `/proc`, and waiting for conditions.

use std::path::Path;
use std::time::{Duration, Instant};

/// Polls `condition` every 20 ms until it holds or `timeout` passes; true when it held.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (field 3 onwards).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain ") ".
    let after_name = &text[text.rfind(')')? + 1..];
    Some(after_name.split_whitespace().map(str::to_string).collect())
}

/// The soft open-file limit of `pid`, from `/proc/<pid>/limits`.
pub fn soft_open_file_limit(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .ok()?
        .lines()
        .find(|line| line.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// The process state letter (field 3 of `/proc/<pid>/stat`), if the process exists.
pub fn state(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// True when the process no longer runs: no `/proc/<pid>`, or a zombie
/// (orphans reparented to a PID 1 that does not reap stay as zombies).
pub fn pid_is_gone(pid: u32) -> bool {
    matches!(state(pid), None | Some('Z') | Some('X'))
}

/// Field 22 of `/proc/<pid>/stat`: the start time in clock ticks since boot.
pub fn start_time(pid: u32) -> Option<u64> {
    // Field 3 is index 0 of stat_fields, so field 22 is index 19.
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Fields 14 and 15 of `/proc/<pid>/stat` added: the CPU time the process
/// (all its threads) used so far, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let fields = stat_fields(pid)?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Field 4 of `/proc/<pid>/stat`: the parent's pid.
pub fn parent_pid(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The group leader sandboxd signals, reaps and records in its ledger for
/// the runner `pid`: under `isolation = "full"` started cold, its sandbox's
/// init (its parent, PID 1 of the runner's namespace); else (a runner that
/// joined a prepared view, whose parent is the daemon, or no namespaces)
/// the runner itself.
pub fn sandbox_leader(pid: u32) -> u32 {
    match parent_pid(pid) {
        Some(parent) if is_namespaced(pid) && is_namespaced(parent) => parent,
        _ => pid,
    }
}

/// Whether `pid` is in a PID namespace below the host's.
fn is_namespaced(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|line| line.starts_with("NSpid:"))?
                .to_string();
            Some(line.split_whitespace().count() > 2)
        })
        .unwrap_or(false)
}

/// Field 5 of `/proc/<pid>/stat`: the process group id.
pub fn process_group(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(2)?.parse().ok()
}

/// The real uid of a live process (first field of `Uid:` in `/proc/<pid>/status`).
pub fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Every live (non-zombie) process whose environment has a variable whose
/// value starts with `prefix` — how the tests find every runner and
/// grandchild they caused, whoever their parent is now.
pub fn processes_with_env_prefix(prefix: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let own = std::process::id();
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own && !pid_is_gone(pid))
        .filter(|&pid| {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                return false;
            };
            environ.split(|&byte| byte == 0).any(|entry| {
                let Some(eq) = entry.iter().position(|&byte| byte == b'=') else {
                    return false;
                };
                entry[eq + 1..].starts_with(prefix.as_bytes())
            })
        })
        .collect()
}

/// Whether `pid` runs in a container the docker engine made (its cgroup
/// is the engine's: `/docker/<id>` or `docker-<id>.scope`): a docker-tier
/// runner outlives its daemon on purpose, whatever its environment says.
pub fn in_a_docker_container(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|text| {
        text.lines()
            .any(|line| line.contains("/docker/") || line.contains("/docker-"))
    })
}

/// Sends `signal` to one process, ignoring errors (it may be gone).
pub fn signal_pid(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

/// Sends `signal` to a whole process group, ignoring errors.
pub fn signal_group(pgid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid as i32), signal);
}

/// Reads a file holding one decimal pid (trailing whitespace allowed).
pub fn read_pid_file(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The pid a live process has in its own, innermost PID namespace (the
/// last field of `NSpid:` in `/proc/<pid>/status`): what it sees as its
/// own pid. The host pid itself when it has no namespace of its own.
pub fn innermost_pid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// The host pid of the live process of the sandbox with `workspace` that
/// sees itself as `inner` (a pid the runner fixture wrote, which under
/// `isolation = "full"` is a pid of the sandbox's own namespace): found
/// among the processes whose `WORKSPACE_ROOT_DIR` is `workspace` (see
/// [`in_workspace`]). `inner` itself when none is (the process is gone:
/// the number as written).
pub fn host_pid_in_sandbox(workspace: &Path, inner: u32) -> u32 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return inner;
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| innermost_pid(pid) == Some(inner))
        .find(|&pid| in_workspace(pid, workspace))
        .unwrap_or(inner)
}

/// Whether `pid`'s `WORKSPACE_ROOT_DIR` is the host's `workspace`: that
/// path itself (no view), or in its view (`/workspace`, the same for
/// every sandbox) the same directory, looked up through
/// `/proc/<pid>/root`, which walks the process's own mount namespace.
pub fn in_workspace(pid: u32, workspace: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(seen) = env_of(pid, "WORKSPACE_ROOT_DIR") else {
        return false;
    };
    if Path::new(&seen) == workspace {
        return true;
    }
    let inside = std::fs::metadata(format!("/proc/{pid}/root{seen}"));
    match (inside, std::fs::metadata(workspace)) {
        (Ok(inside), Ok(host)) => (inside.dev(), inside.ino()) == (host.dev(), host.ino()),
        _ => false,
    }
}

/// One variable of a live process's environment, read from `/proc/<pid>/environ`.
pub fn env_of(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    environ
        .split(|&byte| byte == 0)
        .find(|entry| entry.starts_with(prefix.as_bytes()))
        .map(|entry| String::from_utf8_lossy(&entry[prefix.len()..]).into_owned())
}

/// [`env_of`] once the process has finished its exec. A spawner that
/// clones with `CLONE_VFORK` (as `posix_spawn` and sandboxd do) resumes
/// when the child's exec has replaced its memory, a moment before the
/// kernel records where the new environment is: until then
/// `/proc/<pid>/environ` reads empty. Waits (up to 5 s) for it to be
/// non-empty, then reads the variable.
pub fn env_after_exec(pid: u32, name: &str) -> Option<String> {
    wait_until(Duration::from_secs(5), || {
        std::fs::read(format!("/proc/{pid}/environ")).map_or(true, |environ| !environ.is_empty())
    });
    env_of(pid, name)
}

/// Polls an async `condition` every 20 ms until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One line per process for failure messages: pid, group, parent, state
/// and the workspace it belongs to.
pub fn describe(pids: &[u32]) -> String {
    pids.iter()
        .map(|&pid| {
            let ppid = stat_fields(pid)
                .and_then(|fields| fields.get(1).cloned())
                .unwrap_or_default();
            format!(
                "pid {pid} pgid {:?} ppid {ppid} state {:?} workspace {:?}",
                process_group(pid),
                state(pid),
                env_of(pid, "WORKSPACE_ROOT_DIR")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `command.spawn()`, retried while the executable is "busy".
///
/// The harness copies binaries into each test's directory. While one test
/// writes its copy, another test's thread may fork: the child holds the
/// write descriptor until it execs, and an exec of the copy in that instant
/// fails with ETXTBSY. The window is microseconds; a few retries close it.
pub fn spawn(command: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(error) if error.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            result => return result,
        }
    }
}

/// Runs `command` to its end: an error names it and what it wrote to
/// stderr when it fails.
pub fn run(command: &mut std::process::Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|error| format!("{command:?}: {error}"))?;
    if output.status.success() {
        return Ok(());
    }
    Err(format!(
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    ))
}
