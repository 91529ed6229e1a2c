//! The peers that are a command on the host: a raw exec of the program (the
//! floor), bubblewrap, bubblewrap in cgroups of sandboxd's making, an OCI runtime (runc, or crun on a pure cgroup v2
//! host), gVisor's `runsc do`, and the Docker engine's `docker run --rm`.
//! One function per peer makes it ready (a bundle, an image) and says how
//! it is started; [`HostPeer::start`] runs it once and reads the program's
//! clock from its stdout; [`HostPeer::finish`] removes what it made.
//!
//! None of them gets a network namespace, and sandboxd runs beside them
//! with `[network] mode = "host"`: like for like (a namespace with a way
//! out costs each peer differently, Docker's default bridge a veth pair);
//! the prepared rows measure sandboxd's default private network.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};

use crate::cgroups::{self, BenchTree};
use crate::peers_program;

/// Longest one start may take (Docker on a loaded machine takes seconds).
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// The runtime's and Docker's CLI calls made to set up and clean up.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// What a peer leaves behind until [`HostPeer::finish`].
enum Leftover {
    Nothing,
    /// An OCI runtime's state directory (`--root`) and bundle.
    Runtime {
        runtime: PathBuf,
        state: PathBuf,
        bundle: PathBuf,
    },
    /// runsc's state directory.
    Dir(PathBuf),
    /// A Docker image and the label on every container run from it.
    Docker {
        image: String,
        label: String,
    },
}

/// One ready peer: the command that starts the program once.
pub struct HostPeer {
    pub name: String,
    /// How it is started, for the report.
    pub how: String,
    executable: PathBuf,
    /// `{id}` is replaced by each start's own name.
    args: Vec<String>,
    leftover: Leftover,
    /// Where each start gets cgroups of its own, joined before its exec
    /// and removed after its exit (see [`bwrap_in_cgroups`]).
    contained: Option<BenchTree>,
}

/// A peer made ready, or why it is not measured (not installed, say).
pub type Found = Result<HostPeer, String>;

impl HostPeer {
    /// One start, named `id`: the time from just before the command is
    /// spawned to the program's first instruction. The command's own end
    /// (a container's removal, say) is awaited but not in the figure; a
    /// contained peer's cgroups are made before the figure's start and
    /// removed after the exit, as a sandbox's are.
    pub async fn start(&self, id: &str) -> anyhow::Result<Duration> {
        let Some(tree) = &self.contained else {
            return self.run_once(id, &[]).await;
        };
        let dirs = tree
            .make_limited(&format!("peers-{id}"))
            .with_context(|| format!("{}: make the cgroups of {id}", self.name))?;
        let started = match cgroups::open_joins(&dirs) {
            Ok(joins) => self.run_once(id, &joins).await,
            Err(error) => Err(error.into()),
        };
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        cgroups::remove_once_empty(&dirs, deadline)
            .await
            .with_context(|| format!("{}: remove the cgroups of {id}", self.name))?;
        started
    }

    /// Runs the command once, its child joining the cgroups whose files are
    /// open in `joins` before its exec.
    async fn run_once(&self, id: &str, joins: &[std::fs::File]) -> anyhow::Result<Duration> {
        let mut command = tokio::process::Command::new(&self.executable);
        command
            .args(self.args.iter().map(|arg| arg.replace("{id}", id)))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if !joins.is_empty() {
            cgroups::join_before_exec(command.as_std_mut(), joins);
        }
        let started = SystemTime::now();
        let output = tokio::time::timeout(START_TIMEOUT, command.output())
            .await
            .with_context(|| format!("{}: no end within {START_TIMEOUT:?}", self.name))?
            .with_context(|| format!("{}: run {}", self.name, self.executable.display()))?;
        if !output.status.success() {
            bail!(
                "{}: {} exited with {}: {}",
                self.name,
                self.executable.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        peers_program::latency(started, &output.stdout).with_context(|| self.name.clone())
    }

    /// Removes the bundle, state, containers and image this peer made.
    pub async fn finish(self) -> anyhow::Result<()> {
        match self.leftover {
            Leftover::Nothing => Ok(()),
            Leftover::Dir(dir) => remove_dir(&dir),
            Leftover::Runtime {
                runtime,
                state,
                bundle,
            } => {
                // A start cut short leaves its container: delete every one.
                let listed = run(&runtime, &["--root", &text(&state), "list", "-q"]).await;
                for id in listed
                    .unwrap_or_default()
                    .lines()
                    .filter(|id| !id.is_empty())
                {
                    run(
                        &runtime,
                        &["--root", &text(&state), "delete", "--force", id],
                    )
                    .await?;
                }
                remove_dir(&state)?;
                remove_dir(&bundle)
            }
            Leftover::Docker { image, label } => {
                let filter = format!("label={label}");
                let docker = Path::new("docker");
                let left = run(docker, &["ps", "-aq", "--filter", &filter]).await?;
                for id in left.lines().filter(|id| !id.is_empty()) {
                    run(docker, &["rm", "-f", id]).await?;
                }
                run(docker, &["image", "rm", &image]).await.map(drop)
            }
        }
    }
}

/// The program run straight from this process: the floor.
pub fn raw(program: &Path) -> Found {
    Ok(HostPeer {
        name: "raw exec".into(),
        how: "the program spawned by this process, no sandbox".into(),
        executable: program.to_path_buf(),
        args: Vec::new(),
        leftover: Leftover::Nothing,
        contained: None,
    })
}

/// bubblewrap with the view sandboxd builds: the host's tree bound
/// read-only, /dev the host's, a fresh /proc, private tmpfs on /tmp,
/// /var/tmp and /dev/shm, /root and /home hidden, the program bound at its
/// own path; new mount, PID, IPC and UTS namespaces. Not `--unshare-all`:
/// run as root it makes a user namespace too (and a cgroup one), which
/// sandboxd does not.
pub fn bwrap(program: &Path) -> Found {
    let executable = find("bwrap").ok_or("not installed (no `bwrap` on PATH)")?;
    let program = text(program);
    let mut args: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--dev-bind",
        "/dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/var/tmp",
        "--tmpfs",
        "/dev/shm",
    ]
    .map(String::from)
    .to_vec();
    for hidden in ["/root", "/home"]
        .into_iter()
        .filter(|p| Path::new(p).is_dir())
    {
        args.extend(["--tmpfs".to_string(), hidden.to_string()]);
    }
    args.extend(["--ro-bind".into(), program.clone(), program.clone()]);
    args.extend(
        [
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
        ]
        .map(String::from),
    );
    args.push(program);
    Ok(HostPeer {
        name: "bwrap".into(),
        how: "bwrap --ro-bind / / --dev-bind /dev /dev --proc /proc --tmpfs /tmp,/var/tmp,\
              /dev/shm,/root,/home --ro-bind PROG PROG --unshare-pid --unshare-ipc \
              --unshare-uts --die-with-parent PROG (runs as root; host network)"
            .into(),
        executable,
        args,
        leftover: Leftover::Nothing,
        contained: None,
    })
}

/// The kernel's share of what sandboxd does beyond bubblewrap, with no
/// daemon: [`bwrap`]'s start, its process joined before the exec to a
/// cgroup of its own in cgroup v2 and in each v1 hierarchy of a limited
/// controller, made with sandboxd's `[limits]` defaults before the start
/// and removed after the exit, as a sandbox's are. std forks this process
/// to join them (a hook before exec), where plain bubblewrap is spawned
/// with `posix_spawn`, and joins v2 by a `cgroup.procs` write, whose first
/// after a pause waits for an RCU grace period (see
/// [`cgroups::open_joins`]): its serial starts pay that, its burst hardly.
/// No uid of its own, no seccomp filter, no init: what is left between
/// this row's burst and sandboxd's is the daemon's own work.
pub fn bwrap_in_cgroups(program: &Path) -> anyhow::Result<Found> {
    let peer = match bwrap(program) {
        Ok(peer) => peer,
        Err(reason) => return Ok(Err(reason)),
    };
    let Some(tree) = BenchTree::create("sandboxd-bench-peers")? else {
        return Ok(Err("not measured: no writable cgroup v2".into()));
    };
    Ok(Ok(HostPeer {
        name: "bwrap in cgroups".into(),
        how: format!(
            "{}; per start a cgroup of its own in v2 and in each v1 hierarchy of memory, \
             pids and cpu, with sandboxd's [limits] defaults (2 GiB, 512 pids, 2 CPUs), \
             joined before bwrap's exec (std's fork path; v1 through `tasks`, v2 through \
             `cgroup.procs`, whose first write after a pause waits for an RCU grace period) \
             and removed once empty after its exit",
            peer.how
        ),
        contained: Some(tree),
        ..peer
    }))
}

/// The OCI runtime: crun on a pure cgroup v2 host when installed, else
/// runc. A bundle in `dir` (the runtime's own `spec`, with the program as
/// the only file of a read-only rootfs, no terminal, no network namespace)
/// and a state directory of its own; `run --bundle` per start, which
/// creates, starts, waits for and deletes the container.
pub async fn oci_runtime(dir: &Path, program: &Path) -> anyhow::Result<Found> {
    let pure_v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let choice = match (find("crun"), find("runc")) {
        (Some(crun), _) if pure_v2 => ("crun", crun),
        (_, Some(runc)) => ("runc", runc),
        (Some(crun), None) => ("crun", crun),
        (None, None) => {
            return Ok(Err(
                "not installed (neither `runc` nor `crun` on PATH)".into()
            ))
        }
    };
    let (name, runtime) = choice;
    let bundle = dir.join(format!("{name}-bundle"));
    let state = dir.join(format!("{name}-state"));
    std::fs::create_dir_all(bundle.join("rootfs"))?;
    std::fs::copy(program, bundle.join("rootfs/first-clock"))
        .with_context(|| format!("copy the program into {}", bundle.display()))?;
    run(&runtime, &["spec", "--bundle", &text(&bundle)]).await?;
    let config_path = bundle.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&config_path)?)
        .with_context(|| format!("{name} spec wrote no JSON to {}", config_path.display()))?;
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(["/first-clock"]);
    config["root"]["readonly"] = true.into();
    let namespaces = config["linux"]["namespaces"]
        .as_array_mut()
        .with_context(|| format!("{name} spec has no linux.namespaces"))?;
    namespaces.retain(|namespace| namespace["type"] != "network");
    std::fs::write(&config_path, serde_json::to_vec_pretty(&config)?)?;
    let cgroups = if pure_v2 {
        "cgroup v2"
    } else {
        "hybrid cgroups"
    };
    Ok(Ok(HostPeer {
        name: name.into(),
        how: format!(
            "{name} --root STATE run --bundle B ID: `{name} spec` less the network namespace \
             (pid, ipc, uts, mount), read-only rootfs of the program alone; {cgroups}"
        ),
        args: vec![
            "--root".into(),
            text(&state),
            "run".into(),
            "--bundle".into(),
            text(&bundle),
            "sbxb-peers-{id}".into(),
        ],
        executable: runtime.clone(),
        leftover: Leftover::Runtime {
            runtime,
            state,
            bundle,
        },
        contained: None,
    }))
}

/// gVisor: `runsc do`, the host's tree as its root, the host's network.
pub fn runsc(dir: &Path, program: &Path) -> Found {
    let executable = find("runsc").ok_or("not installed (no `runsc` on PATH)")?;
    let state = dir.join("runsc-state");
    Ok(HostPeer {
        name: "runsc do".into(),
        how: "runsc --root STATE --network host do PROG".into(),
        executable,
        args: vec![
            "--root".into(),
            text(&state),
            "--network".into(),
            "host".into(),
            "do".into(),
            text(program),
        ],
        leftover: Leftover::Dir(state),
        contained: None,
    })
}

/// The Docker engine: an image holding only the program, imported from a
/// tar of local files (as `.ci/build-test-image.sh` makes the test image),
/// `docker run --rm --network host` per start.
pub async fn docker(dir: &Path, program: &Path) -> anyhow::Result<Found> {
    if find("docker").is_none() {
        return Ok(Err("not installed (no `docker` on PATH)".into()));
    }
    if let Err(error) = run(Path::new("docker"), &["version"]).await {
        return Ok(Err(format!("not measured: no engine answers ({error:#})")));
    }
    let root = dir.join("docker-root");
    std::fs::create_dir_all(&root)?;
    std::fs::copy(program, root.join("first-clock"))?;
    let tar = dir.join("docker-root.tar");
    let status = std::process::Command::new("tar")
        .args(["--numeric-owner", "-C"])
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .context("run tar")?;
    remove_dir(&root)?;
    if !status.success() {
        bail!("tar of the program's image root failed ({status})");
    }
    let label = format!("sandboxd.bench.peers={}", std::process::id());
    let image = format!("sandboxd-bench-peers:{}", std::process::id());
    let imported = run(
        Path::new("docker"),
        &[
            "import",
            "--change",
            "ENTRYPOINT [\"/first-clock\"]",
            &text(&tar),
            &image,
        ],
    )
    .await;
    std::fs::remove_file(&tar)?;
    imported?;
    Ok(Ok(HostPeer {
        name: "docker run".into(),
        how: "docker run --rm --network host IMAGE (FROM scratch: the program alone)".into(),
        executable: PathBuf::from("docker"),
        args: [
            "run",
            "--rm",
            "--network",
            "host",
            "--label",
            &label,
            "--name",
            "sbxb-peers-{id}",
            &image,
        ]
        .map(String::from)
        .to_vec(),
        leftover: Leftover::Docker { image, label },
        contained: None,
    }))
}

/// `name` on PATH, or in the sbin directories a root shell has there.
pub fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// Runs a setup or clean-up command; its stdout, or why it failed.
async fn run(executable: &Path, args: &[&str]) -> anyhow::Result<String> {
    let what = format!("{} {}", executable.display(), args.join(" "));
    let output = tokio::time::timeout(
        SETUP_TIMEOUT,
        tokio::process::Command::new(executable)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("{what}: no end within {SETUP_TIMEOUT:?}"))?
    .with_context(|| format!("run {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn remove_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error).with_context(|| format!("remove {}", dir.display())),
    }
}

fn text(path: &Path) -> String {
    path.display().to_string()
}
