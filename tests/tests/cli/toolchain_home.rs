//! docs/toolchains.md's "Running a toolchain in a sandbox" section,
//! followed as written: its TOML block is the daemon's configuration (its
//! `[runner] env` merged into the test daemon's own `runner` table) and every
//! `sandboxctl` line of its sh block is run with bash, one after another,
//! against that daemon. The `#  ` lines after a command are its stdout,
//! compared exactly; a command must exit 0. The doc and the test cannot
//! drift: changing one breaks the other.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use sandboxd_tests::{binaries, run_with_timeout, Options, TestDaemon};

const PAGE: &str = include_str!("../../../docs/toolchains.md");
const SECTION: &str = "# Running a toolchain in a sandbox";

/// The first ```` ```lang ```` block of the section.
fn block(lang: &str) -> &'static str {
    let section = PAGE
        .split_once(SECTION)
        .expect("docs/toolchains.md has the toolchain section")
        .1;
    let section = section.split("\n## ").next().unwrap();
    let opening = format!("```{lang}\n");
    let body = section
        .split_once(opening.as_str())
        .unwrap_or_else(|| panic!("the section has a {lang} block"))
        .1;
    body.split_once("```").expect("the block ends").0
}

/// The configuration: its `[runner] env` apart (the test library writes
/// the `runner` table), the rest as TOML text.
fn configuration() -> (String, Vec<(String, String)>) {
    let mut table: toml::Table = block("toml").parse().expect("the toml block parses");
    let runner = table.remove("runner").expect("the block has [runner]");
    let env = runner["env"]
        .as_table()
        .expect("[runner] env is a table")
        .iter()
        .map(|(name, value)| (name.clone(), value.as_str().unwrap().to_string()))
        .collect();
    (toml::to_string(&table).unwrap(), env)
}

/// Each `sandboxctl` line and the output lines that follow it.
fn steps() -> Vec<(String, Vec<String>)> {
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in block("sh").lines() {
        if line.starts_with("sandboxctl ") {
            steps.push((line.to_string(), Vec::new()));
        } else if let Some(output) = line.strip_prefix("#  ") {
            let step = steps.last_mut().expect("an output line follows a command");
            step.1.push(output.to_string());
        }
    }
    steps
}

fn run(daemon: &TestDaemon, bin: &Path, command: &str) -> Output {
    let mut shell = Command::new("bash");
    shell
        .arg("-c")
        .arg(command)
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .env("SANDBOXD_SOCKET", daemon.socket());
    // A cold cargo build of a new crate takes a while on a busy machine.
    run_with_timeout(shell, Duration::from_secs(300))
}

#[test]
fn the_toolchain_section_works_as_written() {
    let (toml, runner_env) = configuration();
    let read_only: toml::Table = toml.parse().unwrap();
    for path in read_only["view"]["read_only"].as_array().unwrap() {
        let path = path.as_str().unwrap();
        assert!(
            Path::new(path).exists(),
            "docs/toolchains.md's example toolchain {path} is not on this machine"
        );
    }
    let steps = steps();
    assert!(steps.len() >= 5, "too few commands found: {steps:#?}");
    let mut daemon = TestDaemon::start(Options {
        example_runner: true,
        extra_toml: toml,
        runner_env,
        ..Options::default()
    });
    let sandboxctl = binaries::sandboxctl();
    let bin = sandboxctl.parent().unwrap();
    let mut mismatches = Vec::new();
    for (command, expected) in &steps {
        let output = run(&daemon, bin, command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            mismatches.push(format!(
                "`{command}` exited {:?}: {stderr}",
                output.status.code()
            ));
            continue;
        }
        let got: Vec<&str> = stdout.lines().collect();
        if !expected.is_empty() && got != *expected {
            mismatches.push(format!(
                "`{command}`\n  the page: {expected:?}\n  printed: {got:?}\n  stderr: {stderr}"
            ));
        }
    }
    daemon.stop();
    assert!(
        mismatches.is_empty(),
        "docs/toolchains.md's toolchain section does not work as written:\n{}",
        mismatches.join("\n")
    );
}
