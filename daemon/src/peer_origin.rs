//! Whether a connecting process runs inside a sandbox, as seen from its pid.
//!
//! A sandbox must never call the daemon, whatever its uid: a daemon run
//! without root runs its runners as its own uid, which the allow-lists let
//! do everything. So before a connection gets a slot, the accept loop asks
//! the driver (which knows its sandboxes) where the peer's process comes
//! from, and the driver answers with the two facts here:
//!
//! - its cgroups (`/proc/<pid>/cgroup`): a process in
//!   `…/sandboxes/<base name>` (or below it) of a running sandbox is inside
//!   that sandbox, and cannot leave it — the strongest sign, and the one
//!   that catches a descendant that called `setsid`;
//! - its session and process group (`/proc/<pid>/stat`): every runner is a
//!   session leader (its pid is its session id and its group id), so a
//!   process whose session or group is a running runner's pid belongs to
//!   that sandbox. This is what is left when no cgroup is available.
//!
//! This names this daemon's own sandboxes; any sandboxd's, and any
//! process of another pid namespace, are refused after it by
//! [`crate::foreign_peer`], which needs no names.
//!
//! The peer's pid is the one `SO_PEERCRED` recorded at connect. Reading
//! `/proc` by it races with the peer exiting (then nothing is found, and
//! the peer, gone, can make no call) and, in theory, with pid reuse.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The name of the directory the per-sandbox cgroups live in, beside the
/// daemon's own leaf.
pub const SANDBOXES_CGROUP_DIR: &str = "sandboxes";

/// Where a connecting process comes from, as far as the driver can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerOrigin {
    /// Inside the sandbox with this base name; `how` says how it was seen.
    Sandbox {
        base_name: String,
        how: &'static str,
    },
    /// Not inside any sandbox the driver runs.
    Outside,
    /// The driver cannot tell (a tier whose sandboxes cannot reach the socket).
    Unknown,
}

/// A process's session id and process group, from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionAndGroup {
    pub session: i32,
    pub group: i32,
}

/// `None` when the process is gone.
pub fn session_and_group(pid: i32) -> Option<SessionAndGroup> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Fields 5 (pgrp) and 6 (session), counted after the command name, which
/// may hold spaces and parentheses.
fn parse_stat(text: &str) -> Option<SessionAndGroup> {
    let mut fields = text[text.rfind(')')? + 1..].split_ascii_whitespace();
    let _state = fields.next()?;
    let _ppid = fields.next()?;
    let group = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some(SessionAndGroup { session, group })
}

/// The cgroup paths of a process, one per hierarchy (v2's `0::/path` and
/// each v1 controller's). Empty when the process is gone.
pub fn cgroup_paths(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|text| parse_cgroup(&text))
        .unwrap_or_default()
}

fn parse_cgroup(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .map(str::to_string)
        .collect()
}

/// The sandbox a cgroup path lies in: the component after a `sandboxes`
/// directory, when `is_sandbox(dir, name)` says it names one of the
/// driver's. `dir` is that `sandboxes` directory's path in the hierarchy
/// (`sandboxd-1a2b/sandboxes`): another daemon's sandboxes have the same
/// kind of names (`prepared-0`) under a directory of its own.
pub fn sandbox_of_cgroup(path: &str, is_sandbox: impl Fn(&Path, &str) -> bool) -> Option<String> {
    let components: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
    (1..components.len())
        .find(|&at| {
            components[at - 1] == SANDBOXES_CGROUP_DIR
                && is_sandbox(
                    &components[..at].iter().collect::<PathBuf>(),
                    components[at],
                )
        })
        .map(|at| components[at].to_string())
}

/// The whole check, for a driver that knows its running sandboxes' base
/// names and their runners' pids (`runner pid → base name`), and can name
/// the sandbox of a runner it is still starting (`starting`, by the
/// runner's pid; see [`workspace_of`]).
pub fn origin_of(
    pid: i32,
    is_sandbox: impl Fn(&Path, &str) -> bool,
    runners: &HashMap<i32, String>,
    starting: impl Fn(i32) -> Option<String>,
) -> PeerOrigin {
    for path in cgroup_paths(pid) {
        if let Some(base_name) = sandbox_of_cgroup(&path, &is_sandbox) {
            return PeerOrigin::Sandbox {
                base_name,
                how: "its cgroup",
            };
        }
    }
    if let Some(ids) = session_and_group(pid) {
        for (leader, how) in [
            (ids.session, "its session"),
            (ids.group, "its process group"),
            (pid, "its pid"),
        ] {
            if let Some(base_name) = runners.get(&leader) {
                return PeerOrigin::Sandbox {
                    base_name: base_name.clone(),
                    how,
                };
            }
        }
        // A runner is a session leader and the daemon's child from its
        // clone on, but is recorded only once its start returns, and it may
        // call before that (seen under load). No other child of the daemon
        // leads a session of its own (a daemon that systemd starts leads
        // its own, whose members are its helpers, never its clients).
        if ids.session != pid_of_this_daemon()
            && parent_of(ids.session) == Some(pid_of_this_daemon())
        {
            return match starting(ids.session) {
                Some(base_name) => PeerOrigin::Sandbox {
                    base_name,
                    how: "its session, led by a runner the daemon is starting in that workspace",
                },
                None => PeerOrigin::Sandbox {
                    base_name: format!("(a runner being started, pid {})", ids.session),
                    how: "its session, led by a child of the daemon",
                },
            };
        }
    }
    PeerOrigin::Outside
}

/// The base name of the workspace `pid` works in, when it is a directory
/// right under `sandboxes_dir`: how a runner that is still being started
/// (not recorded yet) is named in the refusal's log line. The daemon
/// starts every runner in its workspace; a runner may `chdir` away, so
/// this names a sandbox for the log only, and the refusal never depends
/// on it.
pub fn workspace_of(pid: i32, sandboxes_dir: &std::path::Path) -> Option<String> {
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
    let sandboxes_dir = std::fs::canonicalize(sandboxes_dir).ok()?;
    (cwd.parent()? == sandboxes_dir)
        .then(|| cwd.file_name()?.to_str().map(str::to_string))
        .flatten()
}

fn pid_of_this_daemon() -> i32 {
    std::process::id() as i32
}

/// A process's parent, from `/proc/<pid>/stat`; `None` when it is gone.
fn parent_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_a_session_led_by_a_child_of_the_daemon_is_a_sandboxs() {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new("sleep");
        command.arg("30");
        // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().unwrap();
        let origin = origin_of(child.id() as i32, |_, _| false, &HashMap::new(), |_| None);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(origin, PeerOrigin::Sandbox { how, .. } if how.contains("led by a child")),
            "{origin:?}"
        );
        // This process is in no such session.
        assert_eq!(
            origin_of(
                std::process::id() as i32,
                |_, _| false,
                &HashMap::new(),
                |_| None
            ),
            PeerOrigin::Outside
        );
    }

    #[test]
    fn a_runner_being_started_is_named_by_the_workspace_it_works_in() {
        let dir = std::env::temp_dir().join(format!("sbxd-peer-{}", std::process::id()));
        let workspace = dir.join("sandboxes").join("sbx-ses-0123456789ab");
        std::fs::create_dir_all(&workspace).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&workspace)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let named = workspace_of(pid, &dir.join("sandboxes"));
        let elsewhere = workspace_of(pid, &dir);
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(named.as_deref(), Some("sbx-ses-0123456789ab"));
        assert_eq!(elsewhere, None, "only a directory right under sandboxes/");
    }

    #[test]
    fn reads_the_session_and_group_past_a_hostile_command_name() {
        let line = "4242 (a) b (c) S 1 4240 4239 0 -1 4194560 100 0 0 0 1 2";
        assert_eq!(
            parse_stat(line),
            Some(SessionAndGroup {
                session: 4239,
                group: 4240
            })
        );
    }

    #[test]
    fn finds_a_sandbox_in_v1_and_v2_paths_and_only_ours() {
        let ours =
            |dir: &Path, name: &str| dir.ends_with("sandboxes") && name == "sbx-ses-0123456789ab";
        let text = "12:pids:/sandboxd/sandboxes/sbx-ses-0123456789ab\n\
                    0::/system.slice/sandboxd.service/sandboxes/sbx-ses-0123456789ab/inner\n";
        let paths = parse_cgroup(text);
        assert_eq!(paths.len(), 2);
        for path in &paths {
            assert_eq!(
                sandbox_of_cgroup(path, ours).as_deref(),
                Some("sbx-ses-0123456789ab")
            );
        }
        assert_eq!(
            sandbox_of_cgroup("/system.slice/sandboxes/sbx-ses-ffffffffffff", ours),
            None
        );
        assert_eq!(sandbox_of_cgroup("/user.slice/session-1.scope", ours), None);
    }

    #[test]
    fn a_sandbox_of_the_same_name_under_another_daemons_tree_is_not_ours() {
        let own = Path::new("/sys/fs/cgroup/unified/sandboxd-aaaa/sandboxes");
        let ours = |dir: &Path, name: &str| own.ends_with(dir) && name == "prepared-0";
        assert_eq!(
            sandbox_of_cgroup("/sandboxd-aaaa/sandboxes/prepared-0", ours).as_deref(),
            Some("prepared-0")
        );
        assert_eq!(
            sandbox_of_cgroup("/sandboxd-bbbb/sandboxes/prepared-0", ours),
            None
        );
    }

    #[test]
    fn our_own_process_is_outside_unless_its_session_is_a_runner() {
        let me = std::process::id() as i32;
        let none = HashMap::new();
        assert_eq!(
            origin_of(me, |_, _| false, &none, |_| None),
            PeerOrigin::Outside
        );
        let ids = session_and_group(me).unwrap();
        let runners = HashMap::from([(ids.session, "sbx-ses-000000000000".to_string())]);
        assert_eq!(
            origin_of(me, |_, _| false, &runners, |_| None),
            PeerOrigin::Sandbox {
                base_name: "sbx-ses-000000000000".to_string(),
                how: "its session"
            }
        );
    }

    /// A real cgroup v2 directory named as the daemon lays them out, with a
    /// real child process moved into it. Needs root and a writable cgroup
    /// v2 mount (`/sys/fs/cgroup/unified` on a hybrid host, else
    /// `/sys/fs/cgroup`); skipped, saying so, where there is none.
    #[test]
    fn a_process_in_a_sandbox_cgroup_is_seen_inside() {
        let Some(root) = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(std::path::Path::new)
            .find(|root| root.join("cgroup.procs").exists())
        else {
            eprintln!("skipped: no cgroup v2 mount");
            return;
        };
        let base = format!("peer-origin-test-{}", std::process::id());
        let dir = root
            .join(&base)
            .join(SANDBOXES_CGROUP_DIR)
            .join("sbx-ses-abcdefabcdef");
        if std::fs::create_dir_all(&dir).is_err() {
            eprintln!("skipped: cannot create {} (not root?)", dir.display());
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        let origin = origin_of(
            pid,
            |dir, name| {
                dir.ends_with(format!("{base}/sandboxes")) && name == "sbx-ses-abcdefabcdef"
            },
            &HashMap::new(),
            |_| None,
        );
        child.kill().unwrap();
        child.wait().unwrap();
        // The cgroup empties once the child is reaped; then it can go.
        let _ = std::fs::remove_dir(&dir);
        let _ = std::fs::remove_dir(dir.parent().unwrap());
        let _ = std::fs::remove_dir(root.join(&base));
        assert_eq!(
            origin,
            PeerOrigin::Sandbox {
                base_name: "sbx-ses-abcdefabcdef".to_string(),
                how: "its cgroup"
            }
        );
    }
}
