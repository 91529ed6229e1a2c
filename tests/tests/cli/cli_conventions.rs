//! The CLI a person expects: `list` sorted by scope then id, in 80 columns
//! with ellipsized ids (`-o wide` for everything), `--no-headers`, `-q`;
//! `version` and `--version` naming both sides; `sandboxd --help` naming the
//! environment it reads; completions generated from the clap definitions.

use std::process::{Command, Output};

use sandboxd_tests::{binaries, Options, TestDaemon};

#[track_caller]
fn ok(output: &Output) -> String {
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_is_sorted_fits_80_columns_and_has_the_usual_flags() {
    let daemon = TestDaemon::start(Options::default());
    let long = format!("session-{}", "x".repeat(120));
    for (scope, id) in [
        ("workflow", "b-flow"),
        ("session", "z-last"),
        ("session", long.as_str()),
        ("session", "a-first"),
    ] {
        ok(&daemon.sandboxctl(&["ensure", scope, id, "--task-queue", "q:1"]));
    }
    ok(&daemon.sandboxctl(&["connect", "create", "m-connect", "--task-queue", "q:1"]));

    let ids = ok(&daemon.sandboxctl(&["list", "-q"]));
    assert_eq!(
        ids.lines().collect::<Vec<_>>(),
        ["a-first", long.as_str(), "z-last", "b-flow", "m-connect"],
        "by scope (session, workflow, connect), then id"
    );

    let table = ok(&daemon.sandboxctl_with_env(&["list"], &[("COLUMNS", "")]));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 6, "{table}");
    assert!(
        lines[0].starts_with("SCOPE") && lines[0].contains(" PID "),
        "{table}"
    );
    for line in &lines {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(table.contains('…') && !table.contains(&long), "{table}");

    let wide = ok(&daemon.sandboxctl(&["list", "-o", "wide"]));
    assert!(wide.contains(&long), "{wide}");
    assert!(wide.lines().next().unwrap().starts_with("NAME"), "{wide}");

    let bare = ok(&daemon.sandboxctl(&["list", "--no-headers"]));
    assert_eq!(bare.lines().count(), 5, "{bare}");
    assert!(
        bare.lines().next().unwrap().starts_with("session"),
        "{bare}"
    );

    let refused = daemon.sandboxctl(&["list", "-o", "yaml"]);
    assert_eq!(refused.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_names_the_client_and_the_daemon_and_their_protocols() {
    let daemon = TestDaemon::start(Options::default());
    let protocol = sandboxd_protocol::PROTOCOL_VERSION;
    let client_line = format!(
        "client: version {}, protocol {protocol}",
        env!("CARGO_PKG_VERSION")
    );
    let daemon_line = format!(
        "daemon: version {}, protocol {protocol}",
        env!("CARGO_PKG_VERSION")
    );
    for args in [&["version"][..], &["--version"]] {
        let text = ok(&daemon.sandboxctl(args));
        assert!(
            text.contains(&client_line) && text.contains(&daemon_line),
            "{args:?}: {text}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&ok(&daemon.sandboxctl(&["--json", "version"]))).unwrap();
    assert_eq!(json["daemon"]["protocol_version"], protocol);
    // No daemon: the client's side still, and the daemon's as unknown.
    let nowhere = daemon.dir().join("nowhere.sock");
    let text = ok(&daemon.sandboxctl(&["--socket", nowhere.to_str().unwrap(), "version"]));
    assert!(
        text.contains(&client_line) && text.contains("daemon: version unknown"),
        "{text}"
    );
}

#[test]
fn sandboxd_help_names_its_environment_and_completions_are_generated() {
    let help = ok(&Command::new(binaries::sandboxd())
        .arg("--help")
        .output()
        .unwrap());
    for variable in [
        "SANDBOX_PROVISIONER_TYPE",
        "STIGMER_SANDBOX_RUNNER_COMMAND",
        "STIGMER_SANDBOX_RUNNER_IMAGE",
        "STIGMER_SANDBOX_BACKEND_ENDPOINT",
        "STIGMER_SANDBOX_TEMPORAL_ADDRESS",
        "DOCKER_HOST",
        "RUST_LOG",
    ] {
        assert!(
            help.contains(variable),
            "sandboxd --help must name {variable}:\n{help}"
        );
    }
    let bash = ok(&Command::new(binaries::sandboxctl())
        .args(["completions", "bash"])
        .output()
        .unwrap());
    assert!(
        bash.contains("deprovision") && bash.contains("--task-queue"),
        "{bash}"
    );
    let page = ok(&Command::new(binaries::sandboxd())
        .arg("--print-man-page")
        .output()
        .unwrap());
    assert!(
        page.contains(&format!(
            ".TH sandboxd 8  \"sandboxd {}\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{page}"
    );
    for heading in [
        ".SH NAME",
        ".SH SYNOPSIS",
        ".SH DESCRIPTION",
        ".SH OPTIONS",
        ".SH \"EXIT STATUS\"",
        ".SH \"ENVIRONMENT\"",
        ".SH \"FILES\"",
    ] {
        assert!(
            page.contains(&format!("\n{heading}\n")),
            "no {heading}:\n{page}"
        );
    }
    // Every page sandboxctl's pages name is one it prints.
    let listed = ok(&Command::new(binaries::sandboxctl())
        .args(["man-page", "--list"])
        .output()
        .unwrap());
    let names: Vec<&str> = listed.lines().collect();
    assert!(names.contains(&"sandboxctl-ensure.1"), "{listed}");
    for name in &names {
        let page = ok(&Command::new(binaries::sandboxctl())
            .args(["man-page", name.trim_end_matches(".1")])
            .output()
            .unwrap());
        for reference in page.replace("\\-", "-").split_whitespace() {
            if let Some(named) = reference.strip_suffix("(1)") {
                assert!(
                    names.contains(&format!("{named}.1").as_str()),
                    "{name} names {reference}, which is not a page"
                );
            }
        }
    }
}
