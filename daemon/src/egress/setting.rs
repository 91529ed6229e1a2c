//! The `egress` configuration key: a posture, or `none` written explicitly.

use std::fmt;
use std::str::FromStr;

use sandboxd_protocol::egress::Posture;
use serde::Deserialize;

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum EgressSetting {
    /// The kernel refuses the posture's ranges to every sandbox.
    Enforced(Posture),
    /// `egress = "none"`: sandboxes may dial anything. Never a default.
    Unrestricted,
}

impl Default for EgressSetting {
    /// `relaxed`, the seeds' open-source default.
    fn default() -> Self {
        EgressSetting::Enforced(Posture::Relaxed)
    }
}

impl EgressSetting {
    /// The posture enforced, `None` under `egress = "none"`.
    pub fn posture(self) -> Option<Posture> {
        match self {
            EgressSetting::Enforced(posture) => Some(posture),
            EgressSetting::Unrestricted => None,
        }
    }

    /// The word as configured and as shown: `relaxed`, `strict` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            EgressSetting::Enforced(posture) => posture.as_str(),
            EgressSetting::Unrestricted => "none",
        }
    }
}

impl fmt::Display for EgressSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EgressSetting {
    type Err = String;

    fn from_str(word: &str) -> Result<Self, Self::Err> {
        if word == "none" {
            return Ok(EgressSetting::Unrestricted);
        }
        word.parse::<Posture>()
            .map(EgressSetting::Enforced)
            .map_err(|_| {
                format!(
                    "egress '{}' is not a posture — known: relaxed, strict, none",
                    word.escape_debug()
                )
            })
    }
}

impl TryFrom<String> for EgressSetting {
    type Error = String;

    fn try_from(word: String) -> Result<Self, Self::Error> {
        word.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_words_and_nothing_else() {
        assert_eq!(
            "relaxed".parse(),
            Ok(EgressSetting::Enforced(Posture::Relaxed))
        );
        assert_eq!(
            "strict".parse(),
            Ok(EgressSetting::Enforced(Posture::Strict))
        );
        assert_eq!("none".parse(), Ok(EgressSetting::Unrestricted));
        let error = "off".parse::<EgressSetting>().unwrap_err();
        assert_eq!(
            error,
            "egress 'off' is not a posture — known: relaxed, strict, none"
        );
        assert_eq!(
            EgressSetting::default(),
            EgressSetting::Enforced(Posture::Relaxed)
        );
    }
}
