//! Framing, shared so both ends agree byte for byte.
//!
//! Frames are length-delimited (4-byte big-endian length) with limits set
//! explicitly: the codec's 8 MiB default would let one header make the
//! reader reserve that much before a byte of body arrives. Bodies are
//! bincode 1.3 with its default options, through tokio-serde.
//!
//! The limits differ by direction. A reply comes from the daemon, which
//! the caller trusts, and one `list` names every sandbox: a few hundred
//! bytes each, so 2,000 sandboxes already pass 1 MiB (a daemon of 2,000
//! used to close the connection of whoever listed them). A request is
//! small and comes from any caller the socket lets in. The codec (tarpc's
//! transport takes this one codec for both directions) allows
//! [`MAX_REPLY_LEN`]; the daemon's reader refuses a request whose header
//! says more than [`MAX_REQUEST_LEN`] before the codec sees it.

use tokio_util::codec::LengthDelimitedCodec;

/// The largest request a daemon reads.
pub const MAX_REQUEST_LEN: usize = 1024 * 1024;

/// The most data (bytes, arguments) one request may carry: the rest of
/// [`MAX_REQUEST_LEN`] is room for the call's other fields, so a request
/// at this bound still fits its frame (a frame past it closes the
/// connection before any error could be sent).
pub const MAX_REQUEST_DATA: usize = MAX_REQUEST_LEN - 16 * 1024;

/// The largest reply a daemon sends and a client reads: a `list` of more
/// than 100,000 sandboxes, the most one daemon is sized for.
pub const MAX_REPLY_LEN: usize = 64 * 1024 * 1024;

/// The frame codec both ends use.
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_REPLY_LEN)
        .new_codec()
}

/// The body codec both ends use (bincode 1.3, default options).
pub fn body_codec<Item, SinkItem>() -> tokio_serde::formats::Bincode<Item, SinkItem> {
    tokio_serde::formats::Bincode::default()
}
