//! `sandboxd(8)`: generated from the clap definitions with `clap_mangen`
//! (so the synopsis and options match what the binary parses), plus the
//! sections clap cannot know: exit status, environment and files.

use clap::Command;

/// The daemon's exit codes.
const EXIT_STATUS: &str = "0 after a clean stop (SIGTERM or SIGINT: every runner stopped, the \
daemon's own egress table removed); 1 when it cannot serve (the socket, the state directory, the \
driver or the async runtime failed; the reason is logged once); 2 when the command line or the \
configuration file is wrong (named on stderr).";

/// The variables the daemon reads (flags beat them; they beat the file).
const ENVIRONMENT: [(&str, &str); 9] = [
    (
        "SANDBOX_PROVISIONER_TYPE",
        "the isolation tier, as --driver",
    ),
    (
        "STIGMER_SANDBOX_RUNNER_COMMAND",
        "the process tier's runner, as --runner-command",
    ),
    (
        "STIGMER_SANDBOX_RUNNER_IMAGE",
        "the container tiers' runner image (runner_image)",
    ),
    (
        "STIGMER_SANDBOX_BACKEND_ENDPOINT",
        "given to runners as STIGMER_BACKEND_ENDPOINT (backend_endpoint)",
    ),
    (
        "STIGMER_SANDBOX_TEMPORAL_ADDRESS",
        "given to runners as TEMPORAL_SERVICE_ADDRESS (temporal_address)",
    ),
    (
        "DOCKER_HOST",
        "the docker tier's engine when [docker] host is unset",
    ),
    ("RUST_LOG", "the log filter; beats log_level"),
    (
        "PATH",
        "where a runner_command without a slash is looked up",
    ),
    (
        "NOTIFY_SOCKET, WATCHDOG_USEC, LISTEN_FDS, JOURNAL_STREAM",
        "set by systemd: readiness, watchdog, socket activation, journald",
    ),
];

/// The files a root daemon uses by default.
const FILES: [(&str, &str); 6] = [
    (
        "/etc/stigmer/sandboxd.toml",
        "the configuration file, when it exists (--config names another)",
    ),
    (
        "/run/stigmer/sandboxd.sock",
        "the socket served (as another user: $XDG_RUNTIME_DIR/stigmer/sandboxd.sock)",
    ),
    (
        "/var/lib/stigmer/sandboxd",
        "workspaces, runner output and the spawn ledger (state_dir)",
    ),
    (
        "/run/stigmer/uids",
        "the host-wide claims on the sandboxes' uids (uid_claims_dir)",
    ),
    (
        "/run/stigmer/holders",
        "holder locks: which daemons live hold which egress table and docker network (see docs/security.md)",
    ),
    (
        "/usr/local/share/doc/sandboxd/README.md",
        "the full documentation, with every configuration key",
    ),
];

/// The opt-in Prometheus endpoint, which no flag configures.
const METRICS: &str = "With metrics_listen = \"127.0.0.1:9464\" in the configuration file (off by \
default) the daemon serves Prometheus metrics on plain HTTP GET /metrics: sandboxd_sandboxes by tier, \
scope and state; sandboxd_ensures_total and sandboxd_deprovisions_total by outcome; \
sandboxd_call_duration_seconds per method; sandboxd_spawn_failures_total; sandboxd_exits_total by \
reason; sandboxd_lifecycle_stops_total (idle, lifetime); sandboxd_pauses_total. A host name, or a bad or taken address, stops \
the daemon at start naming the key; sandboxctl status says where the metrics are served.";

/// The page, in roff.
pub fn render(command: Command) -> std::io::Result<String> {
    let version = env!("CARGO_PKG_VERSION");
    // The --help environment list is the ENVIRONMENT section here.
    let command = command.after_help(None::<&str>);
    let man = clap_mangen::Man::new(command)
        .section("8")
        .source(format!("sandboxd {version}"))
        .manual("System Administration");
    let mut out = Vec::new();
    man.render(&mut out)?;
    let mut roff = String::from_utf8_lossy(&out).into_owned();
    roff.push_str(".SH \"EXIT STATUS\"\n");
    roff.push_str(&text(EXIT_STATUS));
    roff.push_str(".SH \"ENVIRONMENT\"\n");
    roff.push_str(&items(&ENVIRONMENT));
    roff.push_str(".SH \"FILES\"\n");
    roff.push_str(&items(&FILES));
    roff.push_str(".SH \"CALLS\"\n");
    roff.push_str(&calls());
    roff.push_str(".SH \"METRICS\"\n");
    roff.push_str(&text(METRICS));
    roff.push_str(".SH \"SEE ALSO\"\n");
    roff.push_str(&text("sandboxctl(1)"));
    Ok(roff)
}

/// The service's calls, from the daemon's own table of them: who may make
/// each (`[access]`), whether it changes anything, and the tiers that
/// serve it.
fn calls() -> String {
    let rows: Vec<(String, String)> = crate::calls::Call::ALL
        .iter()
        .map(|call| {
            let who = match call.class() {
                crate::calls::CallClass::Open => "anyone",
                crate::calls::CallClass::Read => "the read or mutate lists",
                crate::calls::CallClass::Mutate => "the mutate lists",
            };
            let changes = if call.mutates() {
                "changes state"
            } else {
                "reads"
            };
            let tiers = call.tiers().join(", ");
            (
                call.name().to_string(),
                format!("{who}; {changes}; served by {tiers}"),
            )
        })
        .collect();
    let entries: Vec<(&str, &str)> = rows
        .iter()
        .map(|(name, meaning)| (name.as_str(), meaning.as_str()))
        .collect();
    items(&entries)
}

/// A roff text line: backslashes escaped, dashes made minus signs, a
/// leading request character neutralised.
fn text(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    match escaped.chars().next() {
        Some('.' | '\'') => format!("\\&{escaped}\n"),
        _ => format!("{escaped}\n"),
    }
}

fn items(entries: &[(&str, &str)]) -> String {
    entries
        .iter()
        .map(|(term, meaning)| {
            format!(
                ".TP\n\\fB{}\\fR\n{}",
                term.replace('\\', "\\e").replace('-', "\\-"),
                text(meaning)
            )
        })
        .collect()
}
