//! A sandbox's OCI bundle for `runsc run`: its `config.json`, in a
//! directory of its own under the daemon's state directory (removed when
//! the sandbox ends, and all of them at the daemon's next start).
//!
//! The root is the view `isolation = "full"` builds, translated into OCI
//! mounts: the host's `/` read-only, a private tmpfs on `/tmp`, `/var/tmp`
//! and `/dev/shm` (gVisor's own, its pages the sentry's, so charged to the
//! sandbox's memory cgroup), an empty read-only tmpfs over each hidden
//! directory and `/dev/null` over each hidden file, then the binds back
//! (the runner program, `[view] read_only` and `read_write`, the workspace
//! writable at `/workspace`). The process is the runner's own start: its
//! program, arguments, environment, working directory and uid, with no
//! capability and `no_new_privs`.
//!
//! Written with `serde_json`: a spec of a dozen fields reads plainer as the
//! JSON it is than through the `oci-spec` crate's builders, and adds no
//! dependency.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::super::isolation::mounts::MountPlan;
use super::super::launch::runner_plan::RunnerLaunch;

/// The OCI version the spec claims (what Debian's runsc reports).
const OCI_VERSION: &str = "1.0.2";

/// `value` as a JSON string of an OCI spec, which must be UTF-8; `what`
/// names it in the error.
pub fn text(what: &str, value: &std::ffi::OsStr) -> Result<String, String> {
    value
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{what} is not UTF-8 (an OCI spec is JSON): {value:?}"))
}

/// An OCI process's `args` (`program`, then `args`) and `env` (`NAME=value`):
/// JSON strings, so each must be UTF-8.
pub fn process_args_env(
    program: &std::path::Path,
    args: &[String],
    env: &[(std::ffi::OsString, std::ffi::OsString)],
) -> Result<(Vec<String>, Vec<String>), String> {
    let mut all_args = vec![text("the program's path", program.as_os_str())?];
    all_args.extend(args.iter().cloned());
    let env = env
        .iter()
        .map(|(name, value)| {
            Ok(format!(
                "{}={}",
                text("a variable's name", name)?,
                text("a variable's value", value)?
            ))
        })
        .collect::<Result<Vec<String>, String>>()?;
    Ok((all_args, env))
}

/// The spec of one sandbox: `hostname` its base name, `plan` its view,
/// `launch` its runner.
pub fn spec(hostname: &str, plan: &MountPlan, launch: &RunnerLaunch) -> Result<Value, String> {
    let (uid, gid) = launch.privileges.user.unwrap_or((0, 0));
    let (args, env) = process_args_env(&launch.program, &launch.args, &launch.env)?;
    let no_capabilities: [&str; 0] = [];
    Ok(json!({
        "ociVersion": OCI_VERSION,
        "hostname": hostname,
        "root": {"path": "/", "readonly": true},
        "process": {
            "user": {"uid": uid, "gid": gid},
            "args": args,
            "env": env,
            "cwd": text("the working directory", launch.cwd.as_os_str())?,
            "noNewPrivileges": true,
            "capabilities": {
                "bounding": no_capabilities,
                "effective": no_capabilities,
                "inheritable": no_capabilities,
                "permitted": no_capabilities,
                "ambient": no_capabilities,
            },
        },
        "mounts": mounts(plan)?,
        // No network namespace: runsc runs with --network=host (see
        // `runsc`), and no cgroupsPath: the sentry and gofer stay in the
        // cgroups the daemon cloned them into.
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
        },
    }))
}

/// The view's mounts, in the order `full` applies them.
fn mounts(plan: &MountPlan) -> Result<Vec<Value>, String> {
    let path = |path: &Path| {
        path.to_str()
            .map(str::to_string)
            .ok_or_else(|| format!("a view path is not UTF-8: {}", path.display()))
    };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs"}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
               "options": ["nosuid", "noexec", "nodev", "ro"]}),
    ];
    let size = format!("size={}", plan.tmp_size);
    for tmp in ["/tmp", "/var/tmp", "/dev/shm"] {
        mounts.push(
            json!({"destination": tmp, "type": "tmpfs", "source": "tmpfs",
                           "options": ["nosuid", "nodev", "mode=1777", size]}),
        );
    }
    for hidden in &plan.hidden {
        match std::fs::symlink_metadata(hidden) {
            Ok(meta) if meta.is_dir() => mounts.push(json!({
                "destination": path(hidden)?, "type": "tmpfs", "source": "tmpfs",
                "options": ["ro", "nosuid", "nodev", "noexec", "size=4k"]})),
            Ok(_) => mounts.push(json!({
                "destination": path(hidden)?, "type": "bind", "source": "/dev/null",
                "options": ["bind", "ro"]})),
            // Nothing there to hide.
            Err(_) => {}
        }
    }
    for bind in &plan.binds {
        let access = if bind.writable { "rw" } else { "ro" };
        mounts.push(json!({
            "destination": path(&bind.target)?, "type": "bind", "source": path(&bind.path)?,
            "options": ["rbind", access, "nosuid", "nodev"]}));
    }
    Ok(mounts)
}

/// Writes `spec` as `<dir>/config.json` (`dir` made 0700), root's only:
/// it holds the runner's environment, token included.
pub fn write(dir: &Path, spec: &Value) -> io::Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let file = dir.join("config.json");
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&file)?;
    out.write_all(spec.to_string().as_bytes())?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::local_process::isolation::mounts::{Bind, TmpfsLayout};
    use crate::drivers::local_process::launch::clone_exec::Privileges;

    fn launch() -> RunnerLaunch {
        RunnerLaunch {
            program: "/usr/bin/runner".into(),
            args: vec!["--serve".into()],
            env: vec![("HOME".into(), "/workspace".into())],
            cwd: "/workspace".into(),
            workspace: "/state/sandboxes/sbx-ses-aaaaaaaaaaaa".into(),
            privileges: Privileges {
                user: Some((2000000001, 2000000001)),
                bounding_set_up_to: None,
            },
        }
    }

    #[test]
    fn the_spec_is_the_view_and_the_runners_start() {
        let plan = MountPlan {
            tmp_size: 1 << 20,
            tmpfs: TmpfsLayout::Shared,
            hidden: vec!["/root".into(), "/nonexistent-gvisor-test".into()],
            devpts: None,
            binds: vec![Bind {
                path: "/state/sandboxes/sbx-ses-aaaaaaaaaaaa".into(),
                target: "/workspace".into(),
                writable: true,
            }],
        };
        let spec = spec("sbx-ses-aaaaaaaaaaaa", &plan, &launch()).unwrap();
        assert_eq!(spec["root"]["readonly"], true);
        assert_eq!(spec["process"]["user"]["uid"], 2000000001u32);
        assert_eq!(
            spec["process"]["args"],
            json!(["/usr/bin/runner", "--serve"])
        );
        assert_eq!(spec["process"]["env"], json!(["HOME=/workspace"]));
        assert_eq!(spec["process"]["noNewPrivileges"], true);
        let mounts = spec["mounts"].as_array().unwrap();
        let at = |dest: &str| mounts.iter().find(|m| m["destination"] == dest).cloned();
        assert!(at("/tmp").unwrap()["options"]
            .to_string()
            .contains("size=1048576"));
        assert!(at("/root").unwrap()["options"]
            .to_string()
            .contains("\"ro\""));
        assert!(at("/nonexistent-gvisor-test").is_none());
        let workspace = at("/workspace").unwrap();
        assert_eq!(workspace["source"], "/state/sandboxes/sbx-ses-aaaaaaaaaaaa");
        assert!(workspace["options"].to_string().contains("\"rw\""));
        assert!(spec["linux"].get("cgroupsPath").is_none());
    }
}
