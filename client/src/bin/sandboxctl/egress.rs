//! `sandboxctl egress check`: the address table, judged offline.
//!
//! The same library call the control plane and the daemon use, so what
//! this prints is what they decide. No daemon is asked: a posture is a
//! fact about the table, not about a running sandbox.

use sandboxd_client::egress::{blocked_reason, Posture};
use serde::Serialize;

/// The answer: the posture and one verdict per address, in argument order.
#[derive(Debug, Serialize)]
pub struct EgressCheck {
    pub posture: Posture,
    pub verdicts: Vec<Verdict>,
}

/// One address's verdict.
#[derive(Debug, Serialize)]
pub struct Verdict {
    pub address: String,
    pub allowed: bool,
    /// Why it is refused, in the seed's words; `None` when allowed.
    pub reason: Option<&'static str>,
}

impl EgressCheck {
    /// Judges every address under `posture`.
    pub fn judge(posture: Posture, addresses: &[String]) -> EgressCheck {
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
    pub fn any_refused(&self) -> bool {
        self.verdicts.iter().any(|verdict| !verdict.allowed)
    }
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
}
