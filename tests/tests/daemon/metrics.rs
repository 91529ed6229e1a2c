//! The opt-in Prometheus endpoint: off by default,
//! served on `metrics_listen` when set, scraped here over a real TCP
//! connection on loopback (a plain HTTP/1.1 GET) and parsed as the text
//! exposition format; a bad address is refused at start with the key
//! named.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use sandboxd_client::Scope;
use sandboxd_tests::daemon::{Options, TestDaemon};
use sandboxd_tests::runner::wait_for_runner;
use sandboxd_tests::sandbox_env;

/// One sample: its metric name, its labels, its value.
type Samples = Vec<(String, BTreeMap<String, String>, f64)>;

/// `GET /metrics` from `address` (host:port): the status line and the body.
fn scrape(address: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end: {response}"));
    let status = head.lines().next().unwrap_or_default().to_string();
    // hyper answers a known length; a chunked body would need decoding.
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    (status, body.to_string())
}

/// Parses the exposition text: `# HELP`, `# TYPE`, `# UNIT` and `# EOF`
/// lines, and samples `name{label="value",…} value`, label values with
/// `\\`, `\"` and `\n` escapes. Panics on a line that is neither.
fn parse(text: &str) -> Samples {
    let mut samples = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        if line.starts_with('#') {
            let word = line.split_whitespace().nth(1).unwrap_or_default();
            assert!(
                ["HELP", "TYPE", "UNIT", "EOF"].contains(&word),
                "unknown comment line: {line}"
            );
            continue;
        }
        let (name_and_labels, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value: {line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match name_and_labels.split_once('{') {
            None => (name_and_labels.to_string(), BTreeMap::new()),
            Some((name, rest)) => {
                let rest = rest
                    .strip_suffix('}')
                    .unwrap_or_else(|| panic!("unclosed labels: {line}"));
                (name.to_string(), parse_labels(rest, line))
            }
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        samples.push((name, labels, value));
    }
    samples
}

fn parse_labels(text: &str, line: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        assert_eq!(chars.next(), Some('"'), "label without a quote: {line}");
        let mut value = String::new();
        loop {
            match chars.next() {
                Some('\\') => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => panic!("dangling escape: {line}"),
                },
                Some('"') => break,
                Some(other) => value.push(other),
                None => panic!("unterminated label value: {line}"),
            }
        }
        labels.insert(name.trim().to_string(), value);
        if chars.peek() == Some(&',') {
            chars.next();
        }
    }
    labels
}

/// The value of the sample `name` whose labels include every one of `with`.
fn value(samples: &Samples, name: &str, with: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(sample, labels, _)| {
            sample == name
                && with
                    .iter()
                    .all(|(key, value)| labels.get(*key).map(String::as_str) == Some(*value))
        })
        .map(|(_, _, value)| *value)
}

async fn metrics_address(daemon: &TestDaemon) -> String {
    let status = daemon.client().await.status().await.unwrap();
    let url = status
        .metrics
        .expect("status says where metrics are served");
    url.strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("not a metrics URL: {url}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ensure_moves_the_ensure_counter_and_the_latency_histogram() {
    let daemon = TestDaemon::start(Options {
        extra_toml: "metrics_listen = \"127.0.0.1:0\"".to_string(),
        ..Options::default()
    });
    let address = metrics_address(&daemon).await;
    let (status, body) = scrape(&address);
    assert!(status.starts_with("HTTP/1.1 200"), "{status}\n{body}");
    let before = parse(&body);
    assert_eq!(
        value(&before, "sandboxd_ensures_total", &[("method", "ensure")]),
        None,
        "no ensure yet:\n{body}"
    );

    let client = daemon.client().await;
    let report = client
        .ensure_session_sandbox("m1", &sandbox_env("session:m1", "tok"))
        .await
        .unwrap();
    wait_for_runner(&daemon.workspace(Scope::Session, "m1"), report.pid.unwrap());
    client
        .ensure_session_sandbox("m1", &sandbox_env("session:m1", "tok"))
        .await
        .unwrap();
    client.probe(Scope::Session, "m1").await.unwrap();

    let (_, body) = scrape(&address);
    let after = parse(&body);
    let ensures = |outcome| {
        value(
            &after,
            "sandboxd_ensures_total",
            &[("method", "ensure"), ("outcome", outcome)],
        )
    };
    assert_eq!(ensures("created"), Some(1.0), "{body}");
    assert_eq!(ensures("running"), Some(1.0), "{body}");
    assert_eq!(
        value(
            &after,
            "sandboxd_call_duration_seconds_count",
            &[("method", "ensure")]
        ),
        Some(2.0),
        "{body}"
    );
    assert_eq!(
        value(
            &after,
            "sandboxd_call_duration_seconds_bucket",
            &[("method", "ensure"), ("le", "+Inf")]
        ),
        Some(2.0),
        "{body}"
    );
    assert!(
        value(
            &after,
            "sandboxd_call_duration_seconds_sum",
            &[("method", "ensure")]
        )
        .is_some_and(|sum| sum > 0.0),
        "{body}"
    );
    assert_eq!(
        value(
            &after,
            "sandboxd_call_duration_seconds_count",
            &[("method", "probe")]
        ),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        value(
            &after,
            "sandboxd_sandboxes",
            &[
                ("tier", "local-process"),
                ("scope", "session"),
                ("state", "running")
            ]
        ),
        Some(1.0),
        "{body}"
    );

    // A deprovision stops the runner: its exit is counted by reason.
    client
        .deprovision(Scope::Session, "m1", false)
        .await
        .unwrap();
    let mut counted = None;
    let seen = sandboxd_tests::wait_until(Duration::from_secs(20), || {
        let (_, body) = scrape(&address);
        let samples = parse(&body);
        counted = value(
            &samples,
            "sandboxd_exits_total",
            &[("reason", "deprovisioned")],
        );
        counted == Some(1.0)
            && value(
                &samples,
                "sandboxd_deprovisions_total",
                &[("method", "deprovision"), ("outcome", "removed")],
            ) == Some(1.0)
    });
    assert!(seen, "exits counted: {counted:?}\n{}", daemon.log_text());

    // Anything but /metrics is not found.
    let mut stream = TcpStream::connect(&address).unwrap();
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 404"), "{response}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_off_by_default_and_status_says_so() {
    let daemon = TestDaemon::start(Options::default());
    let status = daemon.client().await.status().await.unwrap();
    assert_eq!(status.metrics, None);
    let output = daemon.sandboxctl(&["status"]);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.lines()
            .any(|line| line.starts_with("metrics:") && line.contains("not served")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_metrics_listen_is_refused_at_start_naming_the_key() {
    for bad in ["localhost:9464", "127.0.0.1", "127.0.0.1:99999"] {
        let mut daemon = TestDaemon::prepare(Options {
            extra_toml: format!("metrics_listen = \"{bad}\""),
            ..Options::default()
        });
        daemon.launch();
        let status = daemon
            .wait_exit(Duration::from_secs(20))
            .expect("the daemon must refuse to start");
        assert!(!status.success(), "{status}");
        let log = daemon.log_text();
        assert!(
            log.contains(&format!(
                "metrics_listen '{bad}' is not an IP address and port"
            )),
            "{log}"
        );
    }
}
