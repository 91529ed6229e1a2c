//! Framing, shared so both ends agree byte for byte.
//!
//! Frames are length-delimited (4-byte big-endian length) with a limit set
//! explicitly on both ends: the codec's 8 MiB default would let one header
//! make the reader reserve that much before a byte of body arrives.
//! Bodies are bincode 1.3 with its default options, through tokio-serde.

use tokio_util::codec::LengthDelimitedCodec;

/// The largest frame either end accepts or sends.
pub const MAX_FRAME_LEN: usize = 1024 * 1024;

/// The frame codec both ends use.
pub fn frame_codec() -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .length_field_length(4)
        .max_frame_length(MAX_FRAME_LEN)
        .new_codec()
}

/// The body codec both ends use (bincode 1.3, default options).
pub fn body_codec<Item, SinkItem>() -> tokio_serde::formats::Bincode<Item, SinkItem> {
    tokio_serde::formats::Bincode::default()
}
