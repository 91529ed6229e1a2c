//! The egress postures and the one address table they share (SPEC §9).
//!
//! A posture says which destinations a sandbox, or the control plane
//! reaching a URL a user supplied, may not dial. Both postures read the
//! same table ([`RANGES`], and the IPv6 forms of its IPv4 ranges that
//! [`every_range`] adds); neither owns a copy of the ranges, and every
//! tier builds its kernel rules or policies from that table too
//! ([`Posture::refused_ranges`]), so the words a caller sees and the
//! packets the kernel refuses cannot drift apart.
//!
//! Everything here is total and synchronous: an address that does not
//! parse is refused as `"unrecognized"`, never an error, and nothing does
//! I/O (a caller resolves host names itself and hands over the list).

mod embedded;
mod judge;
mod posture;
mod table;

pub use embedded::{every_range, teredo_client, Embedding, Layout, EMBEDDINGS};
pub use judge::{blocked_reason, blocked_reason_ip, host_blocked_reason, parse_address};
pub use posture::{Posture, UnknownPosture};
pub use table::{Range, RangeKind, RANGES, UNRECOGNIZED};

#[cfg(test)]
mod tests;

#[cfg(test)]
mod address_tests;
