//! The configuration as an operator writes it: defaults, precedence, each
//! table's keys and bounds, and the example file showing every key.

use super::defaults::{DEFAULT_RUNNER_LOG_MAX_SIZE, DEFAULT_RUNNER_PATH};
use super::*;

fn resolve(file: &str, env: &[(&str, &str)], flags: Flags) -> anyhow::Result<Config> {
    let file: FileConfig = toml::from_str(file)?;
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let flags = Flags {
        socket: flags.socket.or(Some("/tmp/s.sock".into())),
        state_dir: flags.state_dir.or(Some("/tmp/state".into())),
        ..flags
    };
    Config::resolve(file, None, lookup, &flags)
}

#[test]
fn the_pool_has_defaults_per_scope_and_its_sizes_are_checked() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.pool, PoolConfig::default());
    assert_eq!(
        (
            config.pool.session,
            config.pool.workflow,
            config.pool.connect
        ),
        (4, 2, 0)
    );
    let off = resolve("[pool]\nsession = 0", &[], Flags::default()).unwrap();
    assert_eq!((off.pool.session, off.pool.workflow), (0, 2));
    for (file, words) in [
        (
            "[pool]\nsession = 257",
            "[pool] session = 257 is more than the 256",
        ),
        ("[pool]\nworkflow = -1", "workflow"),
        ("[pool]\nsessions = 4", "unknown field"),
    ] {
        let error = format!("{:#}", resolve(file, &[], Flags::default()).unwrap_err());
        assert!(error.contains(words), "{file}: {error}");
    }
}

#[test]
fn isolation_is_full_by_default_and_view_paths_are_checked() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.isolation, IsolationMode::Full);
    assert_eq!(config.view.tmp_size(config.limits.memory), 2 << 30);
    let opt_out = resolve("isolation = \"uid-cgroup\"", &[], Flags::default()).unwrap();
    assert_eq!(opt_out.isolation, IsolationMode::UidCgroup);
    let sized = resolve("[view]\ntmp_size = \"64m\"", &[], Flags::default()).unwrap();
    assert_eq!(sized.view.tmp_size(0), 64 << 20);
    for (file, words) in [
        ("[view]\nhidden = [\"relative/dir\"]", "must be absolute"),
        ("[view]\nread_only = [\"/\"]", "'/' is not allowed"),
        ("[view]\nread_write = [\"/usr/../etc\"]", "'..'"),
        (
            "[view]\nhidden = [\"/nonexistent/sandboxd-view\"]",
            "/nonexistent/sandboxd-view",
        ),
        ("[view]\ntmp_size = \"4k\"", "below the minimum"),
        ("[view]\nshown = [\"/usr\"]", "unknown field"),
        ("isolation = \"none\"", "unknown variant"),
    ] {
        let error = format!("{:#}", resolve(file, &[], Flags::default()).unwrap_err());
        assert!(error.contains(words), "{file}: {error}");
    }
}

#[test]
fn defaults() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.driver, "local-process");
    assert_eq!(config.stop_grace, Duration::from_secs(10));
    assert_eq!(config.runner_command, "stigmer-runner");
    assert_eq!(config.access, AccessConfig::default());
}

#[test]
fn runner_path_defaults_to_systemds_and_must_be_absolute_directories() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.runner_path, DEFAULT_RUNNER_PATH);
    let config = resolve(
        "runner_path = \"/opt/tools/bin:/usr/bin\"",
        &[],
        Flags::default(),
    );
    assert_eq!(config.unwrap().runner_path, "/opt/tools/bin:/usr/bin");
    for bad in ["bin:/usr/bin", "/usr/bin::/bin", ""] {
        let error = resolve(&format!("runner_path = {bad:?}"), &[], Flags::default())
            .err()
            .unwrap_or_else(|| panic!("runner_path {bad:?} was accepted"));
        assert!(format!("{error:#}").contains("runner_path"), "{error:#}");
    }
}

#[test]
fn flags_beat_env_beat_file() {
    let file =
        "driver = \"docker\"\nrunner_command = \"/file/runner\"\nbackend_endpoint = \"file:1\"";
    let env = [
        ("SANDBOX_PROVISIONER_TYPE", "kubernetes"),
        ("STIGMER_SANDBOX_RUNNER_COMMAND", "/env/runner"),
    ];
    let config = resolve(file, &env, Flags::default()).unwrap();
    assert_eq!(config.driver, "kubernetes");
    assert_eq!(config.runner_command, "/env/runner");
    assert_eq!(config.backend_endpoint, "file:1");
    let flags = Flags {
        driver: Some("local-process".into()),
        ..Flags::default()
    };
    assert_eq!(resolve(file, &env, flags).unwrap().driver, "local-process");
}

#[test]
fn unknown_keys_are_errors() {
    let error = toml::from_str::<FileConfig>("drvier = \"docker\"").unwrap_err();
    assert!(error.to_string().contains("drvier"), "{error}");
    let error = toml::from_str::<FileConfig>("[access]\nmutate_uid = [1]").unwrap_err();
    assert!(error.to_string().contains("mutate_uid"), "{error}");
}

#[test]
fn egress_defaults_to_relaxed_and_none_must_be_written() {
    use sandboxd_protocol::egress::Posture;
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.egress, EgressSetting::Enforced(Posture::Relaxed));
    let strict = resolve("egress = \"strict\"", &[], Flags::default()).unwrap();
    assert_eq!(strict.egress, EgressSetting::Enforced(Posture::Strict));
    let none = resolve("egress = \"none\"", &[], Flags::default()).unwrap();
    assert_eq!(none.egress, EgressSetting::Unrestricted);
    let error = resolve("egress = \"off\"", &[], Flags::default()).unwrap_err();
    assert!(
        error.to_string().contains("known: relaxed, strict, none"),
        "{error}"
    );
}

#[test]
fn durations() {
    assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
    assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
    assert!(parse_duration("ten").is_err());
    assert!(parse_duration("5d").is_err());
}

#[test]
fn docker_table_defaults_and_keys() {
    let config = resolve(
        "",
        &[("DOCKER_HOST", "tcp://10.0.0.1:2375")],
        Flags::default(),
    )
    .unwrap();
    assert_eq!(
        config.docker.host.as_deref(),
        Some("tcp://10.0.0.1:2375"),
        "DOCKER_HOST is the default"
    );
    assert_eq!(config.docker.user, "65534:65534");
    assert_eq!(config.docker.network, "bridge");
    assert_eq!(config.docker.memory, 2 << 30);
    assert_eq!(config.docker.cpus, 2.0);
    assert_eq!(config.docker.pids_limit, 512);
    assert_eq!(config.docker.connect_ttl, Some(Duration::from_secs(3600)));
    assert_eq!(
        config.docker.connect_creation_grace,
        Duration::from_secs(120)
    );
    assert_eq!(config.docker.command, None);
    let defaults = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(defaults.docker.host.as_deref(), Some(DEFAULT_DOCKER_HOST));

    let file = "[docker]\nhost = \"unix:///run/d.sock\"\ncommand = [\"/runner\", \"--x\"]\n\
                memory = \"512m\"\ncpus = 0.5\npids_limit = 64\nconnect_ttl = \"30s\"\n\
                connect_creation_grace = \"5s\"\nuser = \"1000:1000\"\nnetwork = \"none\"";
    let config = resolve(
        file,
        &[("DOCKER_HOST", "tcp://ignored:1")],
        Flags::default(),
    )
    .unwrap();
    assert_eq!(
        config.docker.host.as_deref(),
        Some("unix:///run/d.sock"),
        "the file's host wins"
    );
    assert_eq!(
        config.docker.command,
        Some(vec!["/runner".to_string(), "--x".to_string()])
    );
    assert_eq!(config.docker.memory, 512 << 20);
    assert_eq!((config.docker.cpus, config.docker.pids_limit), (0.5, 64));
    assert_eq!(config.docker.connect_ttl, Some(Duration::from_secs(30)));
    assert_eq!(config.docker.connect_creation_grace, Duration::from_secs(5));
    assert_eq!(
        (config.docker.user.as_str(), config.docker.network.as_str()),
        ("1000:1000", "none")
    );
    assert_eq!(
        resolve("[docker]\nmemory = 104857600", &[], Flags::default())
            .unwrap()
            .docker
            .memory,
        100 << 20
    );

    let error = toml::from_str::<FileConfig>("[docker]\nmemroy = \"1g\"").unwrap_err();
    assert!(error.to_string().contains("memroy"), "{error}");
    let error = toml::from_str::<FileConfig>("[docker]\nmemory = \"2x\"").unwrap_err();
    assert!(error.to_string().contains("2x"), "{error}");
    let error = resolve("[docker]\nmemory = \"1k\"", &[], Flags::default()).unwrap_err();
    assert!(error.to_string().contains("minimum"), "{error}");
    let error = resolve("[docker]\ncommand = []", &[], Flags::default()).unwrap_err();
    assert!(error.to_string().contains("command"), "{error}");
}

#[test]
fn runtime_keys_default_to_the_engines_and_the_clusters_own() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.docker.runtime, None);
    assert_eq!(config.kubernetes.runtime_class, None);
    let file = "[docker]\nruntime = \"runsc\"\n[kubernetes]\nruntime_class = \"gvisor\"";
    let config = resolve(file, &[], Flags::default()).unwrap();
    assert_eq!(config.docker.runtime.as_deref(), Some("runsc"));
    assert_eq!(config.kubernetes.runtime_class.as_deref(), Some("gvisor"));

    let error = resolve("[docker]\nruntime = \"\"", &[], Flags::default()).unwrap_err();
    assert!(error.to_string().contains("[docker] runtime"), "{error}");
    for bad in ["", "gVisor", "-gvisor", "g_visor", &"a".repeat(254)] {
        let file = format!("[kubernetes]\nruntime_class = \"{bad}\"");
        let error = resolve(&file, &[], Flags::default()).unwrap_err();
        assert!(
            error.to_string().contains("[kubernetes] runtime_class"),
            "{bad}: {error}"
        );
    }
    let file = "[kubernetes]\nruntime_class = \"gvisor.runsc-1\"";
    assert!(resolve(file, &[], Flags::default()).is_ok());
}

#[test]
fn runner_log_max_size_defaults_parses_and_has_a_floor() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.runner_log_max_size, 16 << 20);
    let config = resolve("runner_log_max_size = \"4k\"", &[], Flags::default()).unwrap();
    assert_eq!(config.runner_log_max_size, 4096);
    let config = resolve("runner_log_max_size = 2048", &[], Flags::default()).unwrap();
    assert_eq!(config.runner_log_max_size, 2048);
    let error = resolve("runner_log_max_size = 100", &[], Flags::default()).unwrap_err();
    assert!(
        error.to_string().contains("runner_log_max_size 100"),
        "{error}"
    );
}

/// The keys serde knows for a table, read from its unknown-field error
/// ("unknown field `x`, expected one of `a`, `b`, …"), so this test
/// follows every key added later without being edited.
fn known_keys(table: &str) -> Vec<String> {
    let probe = if table.is_empty() {
        "zz_not_a_key = 1".to_string()
    } else {
        format!("[{table}]\nzz_not_a_key = 1")
    };
    let error = toml::from_str::<FileConfig>(&probe)
        .unwrap_err()
        .to_string();
    // serde says "expected one of `a`, `b`, `c`", or "expected `a` or `b`".
    let expected = error
        .split("expected one of ")
        .nth(1)
        .or_else(|| error.split("expected ").nth(1))
        .unwrap_or_else(|| panic!("no key list in: {error}"));
    let list = expected.lines().next().unwrap();
    list.split(", ")
        .flat_map(|keys| keys.split(" or "))
        .map(|key| key.trim_matches('`').to_string())
        .collect()
}

#[test]
fn private_networking_needs_the_full_isolation() {
    let config = resolve("[network]\nmode = \"private\"", &[], Flags::default()).unwrap();
    assert_eq!(config.network.mode, NetworkMode::Private);
    let error = resolve(
        "isolation = \"uid-cgroup\"\n[network]\nmode = \"private\"",
        &[],
        Flags::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("[network] mode") && error.contains("uid-cgroup"),
        "{error}"
    );
}

#[test]
fn the_example_config_parses_and_shows_every_key() {
    let text = include_str!("../../../systemd/sandboxd.toml");
    let file: FileConfig = toml::from_str(text).expect("the example parses");
    let config = Config::resolve(file, None, |_| None, &Flags::default()).unwrap();
    // Each sandbox its own uid; run_as (one user for all) is the opt-out.
    assert_eq!(config.run_as, None);
    assert_eq!(
        config.runner_uid_range.as_deref(),
        Some("2000000000-2000065535")
    );
    assert_eq!(config.socket_group.as_deref(), Some("stigmer"));
    assert_eq!(config.runner_log_max_size, DEFAULT_RUNNER_LOG_MAX_SIZE);

    let shown = |table: &str, key: &str| {
        let mut current = String::new();
        text.lines().any(|line| {
            if let Some(name) = line.strip_prefix('[') {
                current = name.trim_end_matches(']').to_string();
            }
            let line = line.trim_start_matches("# ");
            current == table && line.starts_with(&format!("{key} = "))
        })
    };
    let top = known_keys("");
    assert!(top.contains(&"driver".to_string()), "{top:?}");
    for key in &top {
        if key == "access"
            || key == "docker"
            || key == "limits"
            || key == "connections"
            || key == "kubernetes"
            || key == "view"
            || key == "network"
            || key == "pool"
            || key == "commands"
            || key == "runner"
        {
            assert!(text.contains(&format!("\n[{key}]\n")), "no [{key}] table");
            continue;
        }
        if key == "lifecycle" {
            for scope in ["session", "workflow", "connect"] {
                assert!(
                    text.contains(&format!("\n[lifecycle.{scope}]\n")),
                    "no [lifecycle.{scope}] table"
                );
            }
            continue;
        }
        assert!(shown("", key), "the example config does not show `{key}`");
    }
    for table in [
        "access",
        "docker",
        "limits",
        "connections",
        "kubernetes",
        "view",
        "network",
        "pool",
        "commands",
        "lifecycle.session",
        "lifecycle.workflow",
        "lifecycle.connect",
    ] {
        let keys = known_keys(table);
        let least = match table {
            "limits" | "pool" | "lifecycle.session" | "lifecycle.workflow" => 3,
            "commands" => 2,
            "network" => 1,
            _ => 4,
        };
        assert!(keys.len() >= least, "[{table}]: {keys:?}");
        for key in keys {
            assert!(
                shown(table, &key),
                "the example config does not show [{table}] `{key}`"
            );
        }
    }
}

#[test]
fn limits_default_like_docker_and_zero_means_unlimited_only_when_written() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(
        (config.limits.memory, config.limits.pids, config.limits.cpu),
        (2 << 30, 512, 2.0)
    );
    assert_eq!(config.limits.disk, 10 << 30);
    assert_eq!(config.uid_claims_dir, PathBuf::from("/run/stigmer/uids"));
    assert_eq!(config.containment, ContainmentMode::Auto);
    assert_eq!(config.cgroup_root, None);
    let config = resolve("[limits]\nmemory = \"64m\"", &[], Flags::default()).unwrap();
    assert_eq!(
        (config.limits.memory, config.limits.pids, config.limits.cpu),
        (64 << 20, 512, 2.0),
        "an absent key keeps its default"
    );
    let file = "containment = \"process-group\"\ncgroup_root = \"/sys/fs/cgroup/x\"\n\
                [limits]\nmemory = 0\npids = 0\ncpu = 0.0\ndisk = 0";
    let config = resolve(file, &[], Flags::default()).unwrap();
    assert_eq!(
        (config.limits.memory, config.limits.pids, config.limits.cpu),
        (0, 0, 0.0)
    );
    assert_eq!(config.limits.disk, 0);
    assert_eq!(config.containment, ContainmentMode::ProcessGroup);
    assert_eq!(config.cgroup_root, Some(PathBuf::from("/sys/fs/cgroup/x")));
    for (bad, named) in [
        ("[limits]\nmemory = \"1k\"", "memory"),
        ("[limits]\ncpu = 0.001", "cpu"),
        ("[limits]\ncpu = -1.0", "cpu"),
        ("[limits]\ndisk = \"512k\"", "disk"),
        ("[limits]\ndisk_inodes = 5", "disk_inodes"),
        ("[limits]\nstate_reserve = \"100%\"", "state_reserve"),
        ("uid_claims_dir = \"run/uids\"", "uid_claims_dir"),
        ("cgroup_root = \"relative\"", "cgroup_root"),
    ] {
        let error = resolve(bad, &[], Flags::default()).unwrap_err();
        assert!(error.to_string().contains(named), "{bad}: {error}");
    }
    let error = toml::from_str::<FileConfig>("containment = \"jail\"").unwrap_err();
    assert!(error.to_string().contains("jail"), "{error}");
    let error = toml::from_str::<FileConfig>("[limits]\nmemroy = 1").unwrap_err();
    assert!(error.to_string().contains("memroy"), "{error}");
}

#[test]
fn ptys_default_to_64_and_a_bad_count_is_named() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.limits.ptys, 64);
    let config = resolve("[limits]\nptys = 0", &[], Flags::default()).unwrap();
    assert_eq!(config.limits.ptys, 0, "0: no limit of its own");
    for bad in [
        "[limits]\nptys = 2000000",
        "[limits]\nptys = -1",
        "[limits]\nptys = \"many\"",
    ] {
        let error = format!("{:#}", resolve(bad, &[], Flags::default()).unwrap_err());
        assert!(error.contains("ptys"), "{bad}: {error}");
    }
}

#[test]
fn kubernetes_table_defaults_env_and_keys() {
    let config = resolve("", &[], Flags::default()).unwrap();
    assert_eq!(config.kubernetes.namespace, "stigmer-sandboxes");
    assert_eq!(config.kubernetes.request_timeout, Duration::from_secs(5));
    assert_eq!(config.kubernetes.image_pull_policy, "IfNotPresent");
    let file = "[kubernetes]\nnamespace = \"file-ns\"\nrequest_timeout = \"2s\"\n\
                image_pull_secrets = [\"regcred\"]\ncontext = \"kind\"";
    let config = resolve(file, &[], Flags::default()).unwrap();
    assert_eq!(config.kubernetes.namespace, "file-ns");
    assert_eq!(config.kubernetes.request_timeout, Duration::from_secs(2));
    assert_eq!(config.kubernetes.image_pull_secrets, vec!["regcred"]);
    assert_eq!(config.kubernetes.context.as_deref(), Some("kind"));
    let config = resolve(
        file,
        &[("STIGMER_SANDBOX_K8S_NAMESPACE", "env-ns")],
        Flags::default(),
    )
    .unwrap();
    assert_eq!(config.kubernetes.namespace, "env-ns", "the variable wins");
    let error = toml::from_str::<FileConfig>("[kubernetes]\nnamespase = \"x\"").unwrap_err();
    assert!(error.to_string().contains("namespase"), "{error}");
    let error = resolve(
        "[kubernetes]\nimage_pull_policy = \"Sometimes\"",
        &[],
        Flags::default(),
    )
    .unwrap_err();
    assert!(error.to_string().contains("Sometimes"), "{error}");
}

#[test]
fn memory_sizes() {
    assert_eq!(parse_memory("2g").unwrap(), 2 << 30);
    assert_eq!(parse_memory("2GiB").unwrap(), 2 << 30);
    assert_eq!(parse_memory("512mb").unwrap(), 512 << 20);
    assert_eq!(parse_memory("1024").unwrap(), 1024);
    assert!(parse_memory("g").is_err());
    assert!(parse_memory("1q").is_err());
    assert!(parse_memory("99999999999t").is_err());
}

#[test]
fn workspace_ttl_defaults_to_a_week_and_takes_days_durations_and_off() {
    let week = Duration::from_secs(7 * 86_400);
    assert_eq!(
        resolve("", &[], Flags::default()).unwrap().workspace_ttl,
        Some(week)
    );
    let ttl = |text: &str| {
        resolve(
            &format!("workspace_ttl = \"{text}\""),
            &[],
            Flags::default(),
        )
        .map(|config| config.workspace_ttl)
    };
    assert_eq!(ttl("7d").unwrap(), Some(week));
    assert_eq!(ttl("90m").unwrap(), Some(Duration::from_secs(5400)));
    assert_eq!(ttl("2s").unwrap(), Some(Duration::from_secs(2)));
    assert_eq!(ttl("off").unwrap(), None);
    assert_eq!(ttl("0").unwrap(), None);
    let error = format!("{:#}", ttl("soon").unwrap_err());
    assert!(error.contains("workspace_ttl 'soon'"), "{error}");
    assert!(ttl("500ms").is_err(), "shorter than a second");
}

#[test]
fn gvisor_is_the_process_tiers_and_takes_the_hosts_network() {
    let config = resolve("isolation = \"gvisor\"", &[], Flags::default()).unwrap();
    assert_eq!(config.isolation, IsolationMode::Gvisor);
    assert_eq!(config.isolation.as_str(), "gvisor");
    for (file, words) in [
        (
            "driver = \"docker\"\nisolation = \"gvisor\"",
            "isolation = \"gvisor\" is the local-process tier's; driver is 'docker'",
        ),
        (
            "driver = \"kubernetes\"\nisolation = \"gvisor\"",
            "runtime_class",
        ),
        (
            "isolation = \"gvisor\"\n[network]\nmode = \"private\"",
            "isolation is \"gvisor\"",
        ),
        ("isolation = \"gVisor\"", "unknown variant"),
    ] {
        let error = format!("{:#}", resolve(file, &[], Flags::default()).unwrap_err());
        assert!(error.contains(words), "{file}: {error}");
    }
}
