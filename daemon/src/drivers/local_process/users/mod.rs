//! Who a runner is: the user it runs as ([`identity`]), the range its
//! sandbox's uid comes from ([`uid_range`]) and which sandbox holds which
//! uid ([`uid_pool`]), claimed host-wide so that no other daemon hands it
//! out too ([`uid_claims`]), its keyrings emptied between sandboxes
//! ([`uid_keyrings`]).

pub mod identity;
pub mod uid_claims;
pub mod uid_keyrings;
pub mod uid_pool;
pub mod uid_range;
