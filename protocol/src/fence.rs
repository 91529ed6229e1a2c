//! Fenced calls: what a caller believes the sandbox is, checked before the
//! call changes anything.
//!
//! A control plane runs more than one replica and retries; a replica that
//! saw an older incarnation must not tear down (or reuse) the one another
//! replica just made. So `ensure` and `deprovision` can carry an
//! [`Expectation`] — the incarnation's `uid` and/or its `generation`, as
//! read from an earlier reply — and the daemon refuses with
//! [`SandboxError::Conflict`] when the sandbox's current ones differ
//! (Kubernetes' preconditions on delete, etcd's compare-and-swap).

use serde::{Deserialize, Serialize};

use crate::SandboxError;

/// What the caller expects the sandbox to be. Empty: no check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    /// The incarnation's uid (`SandboxInfo::uid`, `EnsureReport::uid`).
    pub uid: Option<String>,
    /// The runner generation (`SandboxInfo::generation`).
    pub generation: Option<u64>,
}

impl Expectation {
    /// True when nothing is expected: the call is not fenced.
    pub fn is_empty(&self) -> bool {
        self.uid.is_none() && self.generation.is_none()
    }

    /// Compares with the sandbox as it is now: `actual` is its uid and
    /// generation, `None` when it does not exist. `what` names the sandbox
    /// in the message (`session 'ses_1' (sbx-ses-…)`).
    pub fn check(&self, what: &str, actual: Option<(&str, u64)>) -> Result<(), SandboxError> {
        if self.is_empty() {
            return Ok(());
        }
        let Some((uid, generation)) = actual else {
            return Err(SandboxError::Conflict(format!(
                "{what}: expected {}, but it does not exist",
                self.expected()
            )));
        };
        let uid_differs = self.uid.as_deref().is_some_and(|expected| expected != uid);
        let generation_differs = self
            .generation
            .is_some_and(|expected| expected != generation);
        if uid_differs || generation_differs {
            return Err(SandboxError::Conflict(format!(
                "{what}: expected {}, but it is uid {uid} generation {generation}; nothing was changed",
                self.expected()
            )));
        }
        Ok(())
    }

    /// `uid 3f…, generation 2`: what is expected, for messages.
    pub fn expected(&self) -> String {
        let mut parts = Vec::new();
        if let Some(uid) = &self.uid {
            parts.push(format!("uid {uid}"));
        }
        if let Some(generation) = self.generation {
            parts.push(format!("generation {generation}"));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatch_names_expected_and_actual_and_empty_always_passes() {
        let none = Expectation::default();
        assert!(none.check("s", None).is_ok());
        let uid = Expectation {
            uid: Some("aa".into()),
            generation: None,
        };
        assert!(uid.check("s", Some(("aa", 7))).is_ok());
        let message = uid.check("session 'x'", Some(("bb", 1))).unwrap_err();
        assert_eq!(
            message,
            SandboxError::Conflict(
                "session 'x': expected uid aa, but it is uid bb generation 1; nothing was changed"
                    .into()
            )
        );
        let both = Expectation {
            uid: Some("aa".into()),
            generation: Some(2),
        };
        assert!(both.check("s", Some(("aa", 3))).is_err());
        assert!(both.check("s", Some(("aa", 2))).is_ok());
        let absent = both.check("s", None).unwrap_err().to_string();
        assert!(absent.contains("does not exist"), "{absent}");
    }
}
