//! `sandboxctl egress check`: the address table, judged offline; it
//! exits like `diff`: 0 when every address is allowed, 1 when any is
//! refused.
//!
//! The same library call the control plane and the daemon use, so what
//! this prints is what they decide. No daemon is asked: a posture is a
//! fact about the table, not about a running sandbox.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Subcommand;
use sandboxd_client::egress::{blocked_reason, Posture};
use serde::Serialize;

use crate::failure::Failure;
use crate::render::{emit, shown, table, MISSING};

// `egress`'s subcommands. (No doc comment: clap would take it for
// `egress`'s about, which `cli::Command` gives.)
#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Say whether a posture lets a sandbox dial each address, and why not.
    /// Exits 0 when every address is allowed and 1 when any is refused
    /// (like `diff`), so scripts can test it.
    Check {
        /// The posture to judge by: relaxed refuses only link-local (cloud
        /// metadata); strict also loopback, private and unspecified.
        #[arg(long, value_name = "POSTURE", default_value = "relaxed", value_parser = posture())]
        posture: Posture,
        /// IP addresses (IPv4, IPv6, `[::1]`, `fe80::1%eth0`). Host names
        /// are not resolved: they are refused as unrecognized.
        #[arg(value_name = "ADDRESS", required = true)]
        addresses: Vec<String>,
    },
}

impl EgressCommand {
    /// The verdicts to print (text or JSON), and whether any address was
    /// refused. No daemon is asked.
    pub fn answer(&self, json: bool) -> Result<(String, bool), Failure> {
        let EgressCommand::Check { posture, addresses } = self;
        let check = EgressCheck::judge(*posture, addresses);
        let text = emit(json, &check, render)?;
        Ok((text, check.any_refused()))
    }
}

/// `relaxed` or `strict`, listed in `--help` and in the error.
fn posture() -> impl TypedValueParser<Value = Posture> {
    PossibleValuesParser::new(Posture::ALL.map(Posture::as_str))
        .try_map(|word: String| word.parse::<Posture>())
}

/// The answer: the posture and one verdict per address, in argument order.
#[derive(Debug, Serialize)]
struct EgressCheck {
    posture: Posture,
    verdicts: Vec<Verdict>,
}

/// One address's verdict.
#[derive(Debug, Serialize)]
struct Verdict {
    address: String,
    allowed: bool,
    /// Why it is refused, in the seed's words; `None` when allowed.
    reason: Option<&'static str>,
}

impl EgressCheck {
    /// Judges every address under `posture`.
    fn judge(posture: Posture, addresses: &[String]) -> EgressCheck {
        let verdicts = addresses
            .iter()
            .map(|address| {
                let reason = blocked_reason(posture, address);
                Verdict {
                    address: address.clone(),
                    allowed: reason.is_none(),
                    reason,
                }
            })
            .collect();
        EgressCheck { posture, verdicts }
    }

    /// True when at least one address is refused (the command exits 1).
    fn any_refused(&self) -> bool {
        self.verdicts.iter().any(|verdict| !verdict.allowed)
    }
}

/// One row per address: `ADDRESS  VERDICT  REASON`, under the posture's name.
fn render(check: &EgressCheck) -> String {
    let header = ["ADDRESS", "VERDICT", "REASON"].map(str::to_string);
    let rows = check.verdicts.iter().map(|verdict| {
        [
            shown(&verdict.address),
            if verdict.allowed {
                "allowed"
            } else {
                "refused"
            }
            .to_string(),
            verdict.reason.unwrap_or(MISSING).to_string(),
        ]
    });
    let mut out = format!("posture: {}\n", check.posture);
    out.push_str(&table(std::iter::once(header).chain(rows).collect()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_keep_the_argument_order_and_the_seed_words() {
        let addresses = ["104.16.0.1", "127.0.0.1", "nonsense"].map(String::from);
        let check = EgressCheck::judge(Posture::Strict, &addresses);
        let reasons: Vec<_> = check.verdicts.iter().map(|v| v.reason).collect();
        assert_eq!(reasons, [None, Some("loopback"), Some("unrecognized")]);
        assert!(check.any_refused());
        let relaxed = EgressCheck::judge(Posture::Relaxed, &addresses[..2]);
        assert!(!relaxed.any_refused());
    }

    #[test]
    fn egress_check_is_a_table_of_verdicts() {
        let addresses = ["10.0.0.1", "169.254.169.254", "\u{1b}[2J"].map(String::from);
        let check = EgressCheck::judge(Posture::Relaxed, &addresses);
        let text = render(&check);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "posture: relaxed");
        assert_eq!(lines[1], "ADDRESS          VERDICT  REASON");
        assert_eq!(lines[2], "10.0.0.1         allowed  -");
        assert_eq!(
            lines[3],
            "169.254.169.254  refused  link-local (cloud metadata)"
        );
        assert!(lines[4].ends_with("refused  unrecognized"), "{text}");
        assert!(!text.contains('\u{1b}'));
    }

    #[test]
    fn egress_check_takes_a_posture_and_addresses() {
        use crate::cli::{parse, Command};
        use clap::error::ErrorKind;
        let cli = parse(&["egress", "check", "--posture", "strict", "::1", "10.0.0.1"]).unwrap();
        let Some(Command::Egress(EgressCommand::Check { posture, addresses })) = cli.command else {
            panic!("not egress check")
        };
        assert_eq!(posture, Posture::Strict);
        assert_eq!(addresses, ["::1", "10.0.0.1"]);

        let cli = parse(&["egress", "check", "169.254.169.254"]).unwrap();
        assert!(matches!(
            cli.command,
            Some(Command::Egress(EgressCommand::Check {
                posture: Posture::Relaxed,
                ..
            }))
        ));

        let error = parse(&["egress", "check"]).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::MissingRequiredArgument);
        let error = parse(&["egress", "check", "--posture", "none", "::1"]).unwrap_err();
        assert_eq!(error.exit_code(), 2);
        assert!(error.to_string().contains("relaxed, strict"), "{error}");
    }
}
