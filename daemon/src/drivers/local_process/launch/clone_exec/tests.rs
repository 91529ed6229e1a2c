//! The clone child, spawned for real: what a runner gets and what a
//! failed start says.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use super::super::fd_band;
use super::*;
use sandboxd_init::privileges::last_capability;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;

fn null_stdio() -> [OwnedFd; 3] {
    let open = || {
        let null = File::options().read(true).write(true).open("/dev/null");
        OwnedFd::from(null.unwrap())
    };
    [open(), open(), open()]
}

fn plan(program: &str, args: &[&str], cwd: &str, privileges: Privileges) -> (ExecPlan, File) {
    let (read, write) = nix::unistd::pipe().unwrap();
    let mut stdio = null_stdio();
    stdio[1] = write;
    let env = [("PATH", "/usr/bin:/bin"), ("MARKER", "clone-exec")];
    let plan = ExecPlan::new(
        OsStr::new(program),
        args,
        env,
        OsStr::new(cwd),
        stdio,
        privileges,
    )
    .unwrap();
    (plan, File::from(read))
}

fn as_user(uid: u32, gid: u32) -> Privileges {
    Privileges {
        user: Some((uid, gid)),
        bounding_set_up_to: None,
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `sh -c script` and returns its exit status and what it printed.
async fn run_shell(script: &str, privileges: Privileges) -> (std::process::ExitStatus, String) {
    let (plan, mut output) = plan("/bin/sh", &["-c", script], "/", privileges);
    let runner = plan.spawn().unwrap();
    drop(plan); // our copy of the pipe's write end
    let status = runner.wait().await.unwrap();
    let mut text = String::new();
    output.read_to_string(&mut text).unwrap();
    (status, text)
}

/// The descriptors `ls /proc/self/fd` lists in a child spawned on a
/// thread of its own, with the band claimed or not.
fn fds_seen_by_a_child(with_band: bool) -> Vec<RawFd> {
    std::thread::spawn(move || {
        if with_band {
            fd_band::claim_for_this_thread();
        }
        let (plan, mut output) = plan(
            "/bin/sh",
            &["-c", "ls /proc/self/fd"],
            "/",
            Privileges::default(),
        );
        let runner = plan.spawn().unwrap();
        drop(plan);
        let _ = super::super::child_exits::wait_for(runner.pid);
        let mut text = String::new();
        output.read_to_string(&mut text).unwrap();
        text.split_whitespace()
            .filter_map(|fd| fd.parse().ok())
            .collect()
    })
    .join()
    .unwrap()
}

#[test]
fn a_clone_on_the_band_inherits_nothing_of_the_daemons_table() {
    if let Err(why) = fd_band::reserve() {
        eprintln!("skipped: {why}");
        return;
    }
    // High up, inheritable: a copied table carries it across exec.
    let null = File::open("/dev/null").unwrap();
    // SAFETY: F_DUPFD (no close-on-exec) of a descriptor we hold.
    let leaked = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 900) };
    assert!(leaked >= 900);
    let copied = fds_seen_by_a_child(false);
    assert!(copied.contains(&leaked), "the copied table: {copied:?}");
    let banded = fds_seen_by_a_child(true);
    assert!(
        !banded.contains(&leaked),
        "a clone on the band saw the daemon's descriptor {leaked}: {banded:?}"
    );
    // SAFETY: our own descriptor.
    unsafe { libc::close(leaked) };
}

#[tokio::test]
async fn reports_exit_codes_and_signals() {
    assert_eq!(
        run_shell("exit 3", Privileges::default()).await.0.code(),
        Some(3)
    );
    let (killed, _) = run_shell("kill -TERM $$", Privileges::default()).await;
    assert_eq!(killed.signal(), Some(libc::SIGTERM));
}

#[tokio::test]
async fn the_child_gets_exactly_the_environment_cwd_and_stdout_given() {
    let (status, out) = run_shell("env | sort; pwd", Privileges::default()).await;
    assert!(status.success());
    // sh adds PWD (and perhaps SHLVL and _) itself; nothing of ours leaks.
    let ours: Vec<&str> = out
        .lines()
        .filter(|line| {
            !["PWD=", "SHLVL=", "_="]
                .iter()
                .any(|own| line.starts_with(own))
        })
        .collect();
    assert_eq!(ours, ["MARKER=clone-exec", "PATH=/usr/bin:/bin", "/"]);
}

#[tokio::test]
async fn the_child_leads_its_own_session_with_nothing_blocked_and_sigpipe_default() {
    // SigBlk is the blocked mask and SigIgn the ignored set in
    // /proc/<pid>/status; the session id is field 6 of /proc/<pid>/stat.
    // (exec: the shell itself blocks every signal while it waits.)
    let script = "echo pid=$$; cut -d' ' -f6 /proc/$$/stat; \
                  exec grep -E '^(SigBlk|SigIgn):' /proc/self/status";
    let (status, out) = run_shell(script, Privileges::default()).await;
    assert!(status.success(), "{out}");
    assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    let ignored = out
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:\t"))
        .map(|mask| u64::from_str_radix(mask, 16).unwrap())
        .unwrap();
    assert_eq!(
        ignored & (1 << (libc::SIGPIPE - 1)),
        0,
        "SIGPIPE ignored: {out}"
    );
    let pid = out
        .lines()
        .find_map(|line| line.strip_prefix("pid="))
        .unwrap();
    assert_eq!(out.lines().nth(1), Some(pid), "not its own session: {out}");
}

#[tokio::test]
async fn switches_user_and_sheds_supplementary_groups() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to switch users");
        return;
    }
    let script = "grep -E '^(Uid|Gid|Groups):' /proc/$$/status";
    let (status, out) = run_shell(script, as_user(65534, 65534)).await;
    assert!(status.success(), "{out}");
    assert!(out.contains("Uid:\t65534\t65534\t65534\t65534"), "{out}");
    assert!(out.contains("Gid:\t65534\t65534\t65534\t65534"), "{out}");
    let groups = out.lines().find_map(|line| line.strip_prefix("Groups:"));
    assert_eq!(groups.map(str::trim), Some(""), "{out}");
    // Only the child switched: this process is still root.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    assert!(status.contains("Uid:\t0\t0\t0\t0"), "{status}");
}

/// The capability lines and NoNewPrivs of the runner's own status.
const PRIVILEGE_LINES: &str =
    "exec grep -E '^(Uid|Gid|Groups|NoNewPrivs|CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status";

#[tokio::test]
async fn a_switched_runner_has_no_capability_in_any_set_and_no_new_privileges() {
    if !is_root() {
        eprintln!("skipped: needs root to switch users and drop the bounding set");
        return;
    }
    let privileges = Privileges {
        user: Some((65534, 65534)),
        bounding_set_up_to: Some(last_capability()),
    };
    let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
    assert!(status.success(), "{out}");
    for line in [
        "Uid:\t65534\t65534\t65534\t65534",
        "Gid:\t65534\t65534\t65534\t65534",
        "NoNewPrivs:\t1",
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
    ] {
        assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
    }
    let groups = out.lines().find_map(|line| line.strip_prefix("Groups:"));
    assert_eq!(groups.map(str::trim), Some(""), "{out}");
}

#[tokio::test]
async fn a_root_runner_is_root_without_capabilities() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // allow_root_runners: uid 0, but SECBIT_NOROOT keeps exec from
    // granting it the full sets again.
    let privileges = Privileges {
        user: Some((0, 0)),
        bounding_set_up_to: Some(last_capability()),
    };
    let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
    assert!(status.success(), "{out}");
    assert!(out.contains("Uid:\t0\t0\t0\t0"), "{out}");
    for set in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let line = format!("{set}:\t0000000000000000");
        assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
    }
}

#[tokio::test]
async fn without_the_bounding_set_drop_no_new_privs_and_empty_sets_still_hold() {
    // What a daemon without CAP_SETPCAP gives its runners (as root, a
    // switch to nobody: exec would hand uid 0 its capabilities back).
    let privileges = if is_root() {
        as_user(65534, 65534)
    } else {
        Privileges::default()
    };
    let (status, out) = run_shell(PRIVILEGE_LINES, privileges).await;
    assert!(status.success(), "{out}");
    for line in [
        "NoNewPrivs:\t1",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapAmb:\t0000000000000000",
    ] {
        assert!(out.lines().any(|got| got == line), "no {line:?} in:\n{out}");
    }
}

#[tokio::test]
async fn under_the_kernel_filters_a_shell_runs_clean_and_cannot_unshare() {
    if !is_root() {
        eprintln!("skipped: needs root to switch users");
        return;
    }
    let filters = Arc::new(KernelFilters::for_this_host("/usr/bin:/bin"));
    let script = "unshare -U true 2>/dev/null; echo unshare=$?; \
                  echo nofile=$(ulimit -Sn)/$(ulimit -Hn); \
                  exec ls /proc/self/fd";
    let (plan, mut output) = plan("/bin/sh", &["-c", script], "/", as_user(65534, 65534));
    // A descriptor left open across exec by mistake: the clean start closes it.
    let leaked = File::open("/dev/null").unwrap();
    // SAFETY: clears close-on-exec on a descriptor this test owns.
    unsafe { libc::fcntl(leaked.as_raw_fd(), libc::F_SETFD, 0) };
    let runner = plan.with_filters(filters.clone()).spawn().unwrap();
    let status = runner.wait().await.unwrap();
    let mut text = String::new();
    output.read_to_string(&mut text).unwrap();
    assert!(status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "unshare=1", "{text}");
    let nofile = filters.clean_start_nofile();
    assert_eq!(lines[1], format!("nofile={}/{}", nofile.soft, nofile.hard));
    // ls's own listing of /proc/self/fd is the 3.
    assert_eq!(&lines[2..], ["0", "1", "2", "3"], "{text}");
}

#[test]
fn a_failed_exec_names_the_step_and_leaves_no_child_behind() {
    // On a thread of its own name: the failed child (a clone of this
    // thread) carries that name, which tells it apart from the children
    // of tests running alongside.
    let error = std::thread::Builder::new()
        .name("clone-exec-fail".into())
        .spawn(|| {
            plan("/nonexistent/runner", &[], "/", Privileges::default())
                .0
                .spawn()
                .err()
        })
        .unwrap()
        .join()
        .unwrap()
        .expect("the spawn must fail");
    assert_eq!(error.step, "execve");
    assert_eq!(error.error.raw_os_error(), Some(libc::ENOENT));
    let me = std::process::id().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| stat.contains("(clone-exec-fail)"))
        .filter(|stat| stat.rsplit(')').next().unwrap().split(' ').nth(2) == Some(&me))
        .collect();
    assert!(left.is_empty(), "unreaped children: {left:?}");
}

#[tokio::test]
async fn reports_the_start_time_the_kernel_gives_the_process() {
    let (plan, _output) = plan("/bin/sleep", &["5"], "/", Privileges::default());
    let runner = plan.spawn().unwrap();
    let from_proc = super::super::proc_stat::read(runner.pid)
        .unwrap()
        .start_time;
    assert_eq!(runner.start_time, Some(from_proc));
    // SAFETY: our unreaped child.
    unsafe { libc::kill(runner.pid, libc::SIGKILL) };
    assert_eq!(runner.wait().await.unwrap().signal(), Some(libc::SIGKILL));
}

#[test]
fn without_start_time_the_child_does_not_read_it() {
    let (plan, _output) = plan("/bin/true", &[], "/", Privileges::default());
    let runner = plan.without_start_time().spawn().unwrap();
    assert_eq!(runner.start_time, None);
    let status = super::super::child_exits::wait_for(runner.pid).unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_missing_working_directory_fails_at_chdir() {
    let error = plan(
        "/bin/true",
        &[],
        "/nonexistent/workspace",
        Privileges::default(),
    )
    .0
    .spawn()
    .err();
    let error = error.expect("the spawn must fail");
    assert_eq!(error.step, "chdir");
    assert_eq!(error.error.raw_os_error(), Some(libc::ENOENT));
}

#[test]
fn a_nul_byte_is_refused_before_anything_runs() {
    let error = ExecPlan::new(
        OsStr::new("/bin/true"),
        [] as [&str; 0],
        [("STIGMER_TASK_QUEUE", "a\0b")],
        OsStr::new("/"),
        null_stdio(),
        Privileges::default(),
    )
    .err()
    .unwrap();
    assert!(error.contains("STIGMER_TASK_QUEUE"), "{error}");
}
