//! Where the daemon's own log lines go: the journal, or stderr.
//!
//! Under systemd, stderr is usually a stream into journald already, but a
//! stream carries only text: `scope`, `id`, `pid` and the other fields of a
//! line would be flattened into it. So when `JOURNAL_STREAM` (set by systemd
//! to the `device:inode` of the stream it connected) names our stderr, the
//! daemon writes to the journal's native socket instead, each field as a
//! journal field (`journalctl -u sandboxd SCOPE=session ID=ses_1`). Anywhere
//! else — a terminal, a test harness, a container — it writes plain text to
//! stderr.
//!
//! The level: `RUST_LOG` wins (full `EnvFilter` syntax), then the config's
//! `log_level`, then `info`. tarpc stays at `warn` unless `RUST_LOG` names
//! it: its per-request spans repeat trace ids and deadlines on every line.
//! The HTTP stack under the docker tier (bollard, hyper) stays at `warn`
//! whatever `RUST_LOG` says: at `debug` it logs whole request bodies —
//! container definitions with the runner's `STIGMER_TOKEN` in them.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use tracing_journald::{Priority, PriorityMappings};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Libraries held at `warn` whatever `log_level` says (see above).
const QUIET_LIBRARIES: &str = "tarpc=warn,bollard=warn,hyper=warn,hyper_util=warn,h2=warn";

/// Libraries held at `warn` even when `RUST_LOG` asks for more: they log
/// request bodies, and container definitions carry `STIGMER_TOKEN`. The
/// Kubernetes client is held at `error`: it logs a whole response body at
/// `warn` when it cannot parse one, and the kubernetes tier's Secret
/// responses carry the token.
const SECRET_BEARING_LIBRARIES: [&str; 5] = [
    "bollard=warn",
    "hyper=warn",
    "hyper_util=warn",
    "h2=warn",
    "kube_client=error",
];

/// The journal's `SYSLOG_IDENTIFIER`, whatever the binary was renamed to.
const IDENTIFIER: &str = "sandboxd";

/// Installs the global subscriber. Call once, before the runtime starts.
pub fn init(config_level: Option<&str>) {
    let filter = || {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
            EnvFilter::new(format!(
                "{QUIET_LIBRARIES},{}",
                config_level.unwrap_or("info")
            ))
        });
        // Even `RUST_LOG=debug` must not log a token: the HTTP stack stays quiet.
        SECRET_BEARING_LIBRARIES
            .iter()
            .fold(filter, |filter, directive| {
                filter.add_directive(directive.parse().expect("a valid directive"))
            })
    };
    if stderr_is_the_journal() {
        match tracing_journald::layer() {
            Ok(journal) => {
                let journal = journal
                    .with_syslog_identifier(IDENTIFIER.to_string())
                    // `SCOPE=session`, not `F_SCOPE=session`: the fields are
                    // the ones an operator filters on.
                    .with_field_prefix(None)
                    // The syslog meanings (the crate's default shifts each
                    // level one up), so `journalctl -p info` means info.
                    .with_priority_mappings(PriorityMappings {
                        error: Priority::Error,
                        warn: Priority::Warning,
                        info: Priority::Informational,
                        debug: Priority::Debug,
                        trace: Priority::Debug,
                    });
                tracing_subscriber::registry()
                    .with(filter())
                    .with(journal)
                    .init();
                return;
            }
            Err(error) => eprintln!(
                "sandboxd: cannot open the journal socket ({error}); logging plain text to stderr"
            ),
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// True when `JOURNAL_STREAM` names the file stderr is.
fn stderr_is_the_journal() -> bool {
    let Some(stream) = std::env::var("JOURNAL_STREAM")
        .ok()
        .as_deref()
        .and_then(parse_stream)
    else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_fd()) {
        Ok(stat) => (stat.st_dev, stat.st_ino) == stream,
        Err(_) => false,
    }
}

/// `"<device>:<inode>"`, both decimal, as systemd.exec(5) writes it.
fn parse_stream(value: &str) -> Option<(u64, u64)> {
    let (device, inode) = value.split_once(':')?;
    Some((device.parse().ok()?, inode.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_values() {
        assert_eq!(parse_stream("8:12345"), Some((8, 12345)));
        assert_eq!(parse_stream("8:"), None);
        assert_eq!(parse_stream("8"), None);
        assert_eq!(parse_stream("a:1"), None);
    }
}
