//! The README's "sandboxctl in five minutes" section, run as written
//! against a real daemon with the example runner.
//!
//! Every line of the section's code block that starts with `sandboxctl`
//! (or an environment assignment and then `sandboxctl`) is run with bash,
//! one after another, with `SANDBOXD_SOCKET` pointing at the test daemon
//! (the block's `export` line names the system socket, which a test must
//! not use). The `#  ` lines right after a command are its output: compared
//! line by line after masking what differs from run to run (pids, sizes,
//! times) and collapsing runs of spaces (column widths follow the values).
//! A command without such lines must exit 0; `egress check` with a refused
//! address exits 1, as the README says.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use regex::Regex;
use sandboxd_tests::{binaries, run_with_timeout, Options, TestDaemon};

const README: &str = include_str!("../../../README.md");

/// One command of the section and the output the README shows for it.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Vec<String>,
}

/// The code block under `## sandboxctl in five minutes`.
fn five_minutes_block() -> &'static str {
    let section = README
        .split_once("## sandboxctl in five minutes")
        .expect("the README has a five-minutes section")
        .1;
    let block = section
        .split_once("```sh\n")
        .expect("the section starts with a sh block")
        .1;
    block.split_once("```").expect("the block ends").0
}

fn steps(block: &str) -> Vec<Step> {
    let command_start = Regex::new(r"^([A-Z_]+=\S+ )*sandboxctl ").unwrap();
    let mut steps: Vec<Step> = Vec::new();
    for line in block.lines() {
        if command_start.is_match(line) {
            steps.push(Step {
                command: line.to_string(),
                expected: Vec::new(),
            });
        } else if let Some(output) = line.strip_prefix("#  ") {
            steps
                .last_mut()
                .expect("an output line follows a command")
                .expected
                .push(output.to_string());
        }
    }
    steps
}

/// What varies from run to run, replaced by a placeholder, and runs of
/// spaces collapsed.
fn masked(text: &str) -> String {
    let rules = [
        (r"\bpid \d+", "pid <pid>"),
        (r"\b\d+(\.\d+)? (B|KiB|MiB|GiB)\b", "<size>"),
        (r"\b(\d+[smhd] ?)+ ago\b", "<time> ago"),
        (r"\bjust now\b", "<time> ago"),
        (r"\bin (\d+[smhd] ?)+\b", "in <time>"),
    ];
    let mut text = text.to_string();
    for (pattern, placeholder) in rules {
        text = Regex::new(pattern)
            .unwrap()
            .replace_all(&text, placeholder)
            .into_owned();
    }
    let spaces = Regex::new(" {2,}").unwrap();
    spaces.replace_all(text.trim_end(), " ").into_owned()
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
        .env("SANDBOXD_SOCKET", daemon.socket())
        .env_remove("COLUMNS");
    run_with_timeout(shell, Duration::from_secs(60))
}

#[test]
fn the_five_minutes_section_prints_what_it_shows() {
    let steps = steps(five_minutes_block());
    assert!(steps.len() >= 10, "too few commands found: {steps:#?}");
    // The example runner, as the README's set-up runs the daemon.
    let mut daemon = TestDaemon::start(Options {
        example_runner: true,
        ..Options::default()
    });
    let sandboxctl = binaries::sandboxctl();
    let bin = sandboxctl.parent().unwrap();
    let mut mismatches = Vec::new();
    for step in &steps {
        let output = run(&daemon, bin, &step.command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let refuses = step.command.contains("egress check")
            && step.expected.iter().any(|line| line.contains("refused"));
        let wanted_code = if refuses { 1 } else { 0 };
        if output.status.code() != Some(wanted_code) {
            mismatches.push(format!(
                "`{}` exited {:?}, not {wanted_code}: {stderr}",
                step.command,
                output.status.code()
            ));
            continue;
        }
        if step.command.contains("status") {
            // The README says what status shows; this daemon must say it
            // runs the example runner.
            assert!(
                stdout.contains("(the example runner, for trying sandboxd: not for production)"),
                "{stdout}"
            );
        }
        if step.expected.is_empty() {
            continue;
        }
        let got: Vec<String> = stdout.lines().map(masked).collect();
        let want: Vec<String> = step.expected.iter().map(|line| masked(line)).collect();
        if got != want {
            mismatches.push(format!(
                "`{}`\n  README:\n    {}\n  printed:\n    {}",
                step.command,
                want.join("\n    "),
                got.join("\n    ")
            ));
        }
    }
    daemon.stop();
    assert!(
        mismatches.is_empty(),
        "the README's five-minutes section does not match:\n{}",
        mismatches.join("\n")
    );
}

#[test]
fn masking_keeps_what_matters() {
    assert_eq!(
        masked("session ses_42: running (created, generation 1, pid 81234)"),
        "session ses_42: running (created, generation 1, pid <pid>)"
    );
    assert_eq!(
        masked("session  ses_42  1.2 MiB  3h 5m ago  stopped  in 6d 20h"),
        "session ses_42 <size> <time> ago stopped in <time>"
    );
    assert_ne!(masked("generation 1"), masked("generation 2"));
}
