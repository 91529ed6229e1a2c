//! `[docker] runtime`: the OCI runtime every runner container runs under
//! (`HostConfig.Runtime`), such as gVisor's `runsc`, whose kernel of its own
//! stands between the runner and the host's.
//!
//! The engine knows only the runtimes it was registered with (`runtimes` in
//! its `daemon.json`, listed by `info`); a create naming another fails. So
//! the daemon checks at start, and refuses to start with the runtimes the
//! engine has named, rather than serve a tier whose every ensure fails.
//! `status` says which runtime is in force, and whether the container's
//! seccomp profile is: `runsc` ignores a container's profile unless it was
//! registered with `--oci-seccomp` (gVisor's own kernel takes the system
//! calls then, and the host's sees only gVisor's). With it, runsc releases
//! that drop a profile's `errnoRet` answer every refused call with EPERM,
//! and the profile's `clone3` refusal (ENOSYS, so that glibc falls back to
//! `clone`) then keeps every thread from starting: the daemon warns.

use std::collections::BTreeMap;

use bollard::models::SystemInfo;
use sandboxd_protocol::IsolationFeature;

/// The engine's registered runtimes, as `info` lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtimes {
    /// Name → the program and its arguments (`path`, `runtimeArgs`).
    pub registered: BTreeMap<String, Registered>,
    /// The runtime of a container that names none.
    pub default: Option<String>,
}

/// One registered runtime.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Registered {
    pub path: String,
    pub args: Vec<String>,
}

impl Runtimes {
    pub fn of(info: &SystemInfo) -> Runtimes {
        let registered = info
            .runtimes
            .iter()
            .flatten()
            .map(|(name, runtime)| {
                let registered = Registered {
                    path: runtime.path.clone().unwrap_or_default(),
                    args: runtime.runtime_args.clone().unwrap_or_default(),
                };
                (name.clone(), registered)
            })
            .collect();
        Runtimes {
            registered,
            default: info.default_runtime.clone().filter(|name| !name.is_empty()),
        }
    }

    /// `Ok` when the engine has `wanted`; else why not, naming what it has.
    pub fn check(&self, wanted: &str) -> Result<(), String> {
        if self.registered.contains_key(wanted) {
            return Ok(());
        }
        let names: Vec<&str> = self.registered.keys().map(String::as_str).collect();
        Err(format!(
            "[docker] runtime '{wanted}' is not a runtime of the engine: it has {} \
             (register one in the engine's daemon.json \"runtimes\" and reload it, or leave the key out \
             for the engine's default)",
            if names.is_empty() {
                "none listed".to_string()
            } else {
                names.join(", ")
            }
        ))
    }

    /// The runtime a container of this daemon runs under: `wanted`, else
    /// the engine's default.
    fn in_force<'a>(&'a self, wanted: Option<&'a str>) -> Option<&'a str> {
        wanted.or(self.default.as_deref())
    }

    /// The gVisor runtime in force and whether it applies OCI seccomp
    /// profiles (`--oci-seccomp`); `None` when it is not runsc.
    fn gvisor<'a>(&'a self, wanted: Option<&'a str>) -> Option<(&'a str, &'a Registered, bool)> {
        let name = self.in_force(wanted)?;
        let runtime = self.registered.get(name)?;
        if runtime.path.rsplit('/').next() != Some("runsc") {
            return None;
        }
        let applied = runtime.args.iter().any(|arg| {
            matches!(
                arg.as_str(),
                "--oci-seccomp" | "-oci-seccomp" | "--oci-seccomp=true" | "-oci-seccomp=true"
            )
        });
        Some((name, runtime, applied))
    }

    /// What to warn of at start: runsc applying the profile with EPERM for
    /// every refused call, in the releases that drop `errnoRet`.
    pub fn warning(&self, wanted: Option<&str>) -> Option<String> {
        let (name, _, applied) = self.gvisor(wanted)?;
        applied.then(|| format!(
            "the runtime '{name}' is registered with --oci-seccomp: runsc releases that drop a profile's errnoRet \
             answer the daemon's clone3 refusal with EPERM instead of ENOSYS, and glibc then starts no thread in the runner"
        ))
    }

    /// Why the containers' seccomp profile is not applied by the runtime
    /// in force, if it is not: `runsc` registered without `--oci-seccomp`.
    pub fn seccomp_ignored(&self, wanted: Option<&str>) -> Option<String> {
        let (name, runtime, applied) = self.gvisor(wanted)?;
        (!applied).then(|| {
            format!(
                "the runtime '{name}' ({}) ignores a container's seccomp profile unless registered with --oci-seccomp: \
                 the runner's system calls go to gVisor's kernel, not to the host's, unfiltered by the daemon's profile",
                runtime.path
            )
        })
    }
}

/// The `runtime` feature for `status`: which runtime is in force.
/// `known` is the engine's runtimes once learned.
pub fn feature(known: Option<&Runtimes>, wanted: Option<&str>) -> IsolationFeature {
    let named = |name: &str, runtimes: Option<&Runtimes>| {
        let registered = runtimes.and_then(|runtimes| runtimes.registered.get(name));
        let program = registered.map_or(String::new(), |runtime| {
            let mut program = std::iter::once(runtime.path.as_str())
                .chain(runtime.args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            if runtime.path.rsplit('/').next() == Some("runsc") {
                program.push_str(": gVisor, a kernel of its own between the runner and the host's");
            }
            format!(" ({program})")
        });
        format!("'{name}'{program}")
    };
    let how = match (
        wanted,
        known.and_then(|runtimes| runtimes.default.as_deref()),
    ) {
        (Some(wanted), _) => format!("[docker] runtime {}", named(wanted, known)),
        (None, Some(default)) => format!("the engine's default runtime {}", named(default, known)),
        (None, None) => {
            "the engine's default runtime (not known yet: the engine's info has not answered)"
                .to_string()
        }
    };
    IsolationFeature::in_force(
        "runtime",
        format!("each sandbox is a container of {how}, with its own namespaces"),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use bollard::models::Runtime;

    use super::*;

    fn info(runsc_args: &[&str]) -> SystemInfo {
        let runtime = |path: &str, args: &[&str]| Runtime {
            path: Some(path.to_string()),
            runtime_args: (!args.is_empty()).then(|| args.iter().map(|a| a.to_string()).collect()),
            ..Default::default()
        };
        SystemInfo {
            runtimes: Some(HashMap::from([
                ("runc".to_string(), runtime("runc", &[])),
                ("runsc".to_string(), runtime("/usr/bin/runsc", runsc_args)),
            ])),
            default_runtime: Some("runc".to_string()),
            ..Default::default()
        }
    }

    #[test]
    fn a_runtime_the_engine_lacks_is_refused_naming_those_it_has() {
        let runtimes = Runtimes::of(&info(&[]));
        assert!(runtimes.check("runsc").is_ok());
        let error = runtimes.check("kata").unwrap_err();
        assert!(
            error.contains("'kata'") && error.contains("runc, runsc"),
            "{error}"
        );
        let none = Runtimes::of(&SystemInfo::default())
            .check("runsc")
            .unwrap_err();
        assert!(none.contains("none listed"), "{none}");
    }

    #[test]
    fn runsc_without_oci_seccomp_is_said_to_ignore_the_profile() {
        let bare = Runtimes::of(&info(&["--network=host"]));
        let why = bare.seccomp_ignored(Some("runsc")).expect("ignored");
        assert!(why.contains("--oci-seccomp"), "{why}");
        assert_eq!(bare.seccomp_ignored(None), None, "runc applies it");
        assert_eq!(bare.warning(Some("runsc")), None);
        let applied = Runtimes::of(&info(&["--oci-seccomp"]));
        assert_eq!(applied.seccomp_ignored(Some("runsc")), None);
        let warning = applied.warning(Some("runsc")).expect("a warning");
        assert!(warning.contains("clone3"), "{warning}");
        assert_eq!(applied.warning(Some("runc")), None);
    }

    #[test]
    fn status_names_the_runtime_in_force() {
        let runtimes = Runtimes::of(&info(&["--oci-seccomp"]));
        let chosen = feature(Some(&runtimes), Some("runsc"));
        assert!(chosen.in_force);
        assert!(
            chosen
                .detail
                .contains("[docker] runtime 'runsc' (/usr/bin/runsc --oci-seccomp: gVisor"),
            "{}",
            chosen.detail
        );
        let default = feature(Some(&runtimes), None);
        assert!(
            default
                .detail
                .contains("the engine's default runtime 'runc' (runc)"),
            "{}",
            default.detail
        );
        assert!(feature(None, None).detail.contains("not known yet"));
    }
}
