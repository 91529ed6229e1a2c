//! The two postures and their names.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::embedded::every_range;
use super::table::{Range, RangeKind};

/// Which ranges of the table are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Posture {
    /// Only link-local and the clouds' metadata addresses (in any IPv6
    /// form that carries them): a service beside a self-hosted control
    /// plane, on loopback or a private network, stays reachable. The
    /// open-source default.
    Relaxed,
    /// Every range of the table: loopback, private, link-local,
    /// unspecified, shared, site-local, reserved, and the IPv6 prefixes
    /// whose embedded IPv4 cannot be checked. For hosts with reach into
    /// internal services.
    Strict,
}

impl Posture {
    pub const ALL: [Posture; 2] = [Posture::Relaxed, Posture::Strict];

    /// The posture's name, as configured and as shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Posture::Relaxed => "relaxed",
            Posture::Strict => "strict",
        }
    }

    /// True when this posture refuses addresses of `kind`.
    pub fn refuses(self, kind: RangeKind) -> bool {
        match self {
            Posture::Relaxed => matches!(kind, RangeKind::LinkLocal | RangeKind::CloudMetadata),
            Posture::Strict => true,
        }
    }

    /// The networks this posture refuses, in table order, none inside
    /// another (one that a wider refused range covers is left out): what
    /// a kernel rule set or a NetworkPolicy lists.
    pub fn refused_ranges(self) -> impl Iterator<Item = Range> {
        let refused: Vec<(usize, &Range)> = every_range()
            .iter()
            .filter(|range| self.refuses(range.kind))
            .enumerate()
            .collect();
        let outermost: Vec<Range> = refused
            .iter()
            .filter(|(index, range)| {
                !refused.iter().any(|(other, wider)| {
                    other != index
                        && wider.covers(range)
                        && (wider.prefix_len < range.prefix_len || other < index)
                })
            })
            .map(|(_, range)| **range)
            .collect();
        outermost.into_iter()
    }
}

impl fmt::Display for Posture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A posture name that is neither `relaxed` nor `strict`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown egress posture '{}' — known postures: relaxed, strict", shown(.0))]
pub struct UnknownPosture(pub String);

impl FromStr for Posture {
    type Err = UnknownPosture;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Posture::ALL
            .into_iter()
            .find(|posture| posture.as_str() == name)
            .ok_or_else(|| UnknownPosture(name.to_string()))
    }
}

/// The rejected name, bounded and with control characters escaped.
fn shown(name: &str) -> String {
    let mut shown: String = name.chars().take(64).flat_map(char::escape_debug).collect();
    if name.chars().count() > 64 {
        shown.push('…');
    }
    shown
}
