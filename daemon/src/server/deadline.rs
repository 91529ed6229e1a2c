//! Clamping a request's deadline while it is still bytes.
//!
//! tarpc sends `Context::deadline` as a relative `Duration` and turns it
//! back into an `Instant` with `Instant::now() + duration`, which panics on
//! overflow; its deadline queue (tokio's `DelayQueue`) panics on timeouts
//! too far ahead as well. One client asking for a deadline of centuries
//! would take down its connection's task with a panic (and the whole daemon,
//! were it ever built with `panic = "abort"`). So every incoming body passes through
//! [`ClampDeadline`], which rewrites a request's deadline to at most
//! [`MAX_DEADLINE_SECS`] before tarpc decodes it.
//!
//! The layout, with bincode 1.3's default options (what tokio-serde's
//! `Bincode` uses: variable-length integers, little endian), and checked by
//! the tests against a real `tarpc::ClientMessage`:
//!
//! ```text
//! ClientMessage::Request = varint(0)                      enum variant
//!                          varint(secs: u64)              Context.deadline
//!                          varint(nanos: u32)               (a Duration)
//!                          trace context, request id, message…
//! ```
//!
//! A varint is one byte when below 251, else a marker 251 / 252 / 253
//! followed by a little-endian u16 / u32 / u64. bincode accepts
//! non-canonical encodings (a zero spelled `251 0 0`), so this parser reads
//! every form bincode would; a frame it cannot read is passed on untouched,
//! for bincode to refuse.

use std::pin::Pin;

use tokio_serde::{Deserializer, Serializer};
use tokio_util::bytes::{Bytes, BytesMut};

/// The longest deadline a request may ask for. Longer than any call needs
/// (a deprovision waits at most the stop grace), far below the point where
/// tarpc or tokio panic. A clamped call that really runs this long ends
/// with the client's deadline error, and the driver finishes its teardown
/// in the background either way.
pub const MAX_DEADLINE_SECS: u64 = 300;

/// The variant index of `ClientMessage::Request`.
const REQUEST_VARIANT: u64 = 0;

const SINGLE_BYTE_MAX: u8 = 250;
const U16_MARKER: u8 = 251;
const U32_MARKER: u8 = 252;
const U64_MARKER: u8 = 253;

/// Reads one bincode varint at `at`: its value and its encoded length.
/// `None` when the bytes run out or the marker is not one a u64 can have.
fn read_varint(frame: &[u8], at: usize) -> Option<(u64, usize)> {
    let marker = *frame.get(at)?;
    let width = match marker {
        0..=SINGLE_BYTE_MAX => return Some((u64::from(marker), 1)),
        U16_MARKER => 2,
        U32_MARKER => 4,
        U64_MARKER => 8,
        _ => return None,
    };
    let bytes = frame.get(at + 1..at + 1 + width)?;
    let mut value = [0u8; 8];
    value[..width].copy_from_slice(bytes);
    Some((u64::from_le_bytes(value), 1 + width))
}

/// Appends `value` as a canonical bincode varint.
fn write_varint(out: &mut BytesMut, value: u64) {
    if value <= u64::from(SINGLE_BYTE_MAX) {
        out.extend_from_slice(&[value as u8]);
    } else if let Ok(value) = u16::try_from(value) {
        out.extend_from_slice(&[U16_MARKER]);
        out.extend_from_slice(&value.to_le_bytes());
    } else if let Ok(value) = u32::try_from(value) {
        out.extend_from_slice(&[U32_MARKER]);
        out.extend_from_slice(&value.to_le_bytes());
    } else {
        out.extend_from_slice(&[U64_MARKER]);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// The frame re-encoded with its request deadline clamped to
/// [`MAX_DEADLINE_SECS`], or `None` when it needs no change: not a request,
/// a deadline within the limit, or bytes too malformed to read (which
/// bincode then refuses).
pub fn clamp_deadline(frame: &[u8]) -> Option<BytesMut> {
    let (variant, variant_len) = read_varint(frame, 0)?;
    if variant != REQUEST_VARIANT {
        return None;
    }
    let (secs, secs_len) = read_varint(frame, variant_len)?;
    if secs <= MAX_DEADLINE_SECS {
        return None;
    }
    let nanos_at = variant_len + secs_len;
    let (_nanos, nanos_len) = read_varint(frame, nanos_at)?;
    let rest = &frame[nanos_at + nanos_len..];
    let mut clamped = BytesMut::with_capacity(rest.len() + 8);
    write_varint(&mut clamped, REQUEST_VARIANT);
    write_varint(&mut clamped, MAX_DEADLINE_SECS);
    write_varint(&mut clamped, 0);
    clamped.extend_from_slice(rest);
    Some(clamped)
}

/// A body codec that clamps each incoming request's deadline, then hands
/// the bytes to the wrapped codec. Outgoing bodies pass through unchanged.
#[derive(Debug)]
pub struct ClampDeadline<C> {
    inner: C,
}

impl<C> ClampDeadline<C> {
    pub fn new(inner: C) -> Self {
        ClampDeadline { inner }
    }
}

impl<T, C> Deserializer<T> for ClampDeadline<C>
where
    C: Deserializer<T> + Unpin,
{
    type Error = C::Error;

    fn deserialize(self: Pin<&mut Self>, src: &BytesMut) -> Result<T, Self::Error> {
        let inner = Pin::new(&mut self.get_mut().inner);
        match clamp_deadline(src) {
            Some(clamped) => {
                tracing::debug!(max_secs = MAX_DEADLINE_SECS, "clamped a request's deadline");
                inner.deserialize(&clamped)
            }
            None => inner.deserialize(src),
        }
    }
}

impl<T, C> Serializer<T> for ClampDeadline<C>
where
    C: Serializer<T> + Unpin,
{
    type Error = C::Error;

    fn serialize(self: Pin<&mut Self>, item: &T) -> Result<Bytes, Self::Error> {
        Pin::new(&mut self.get_mut().inner).serialize(item)
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::panic::AssertUnwindSafe;
    use std::time::{Duration, Instant};

    use sandboxd_protocol::service::SandboxdRequest;
    use sandboxd_protocol::{wire, Scope};
    use tarpc::{context, ClientMessage, Request};

    use super::*;

    type Message = ClientMessage<SandboxdRequest>;

    const HUNDRED_YEARS: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

    fn probe_request(deadline_in: Duration) -> Message {
        let mut context = context::current();
        context.deadline = Instant::now() + deadline_in;
        ClientMessage::Request(Request {
            context,
            id: 7,
            message: SandboxdRequest::Probe {
                scope: Scope::Session,
                id: "ses_01".to_string(),
            },
        })
    }

    /// Encodes as the client's transport does.
    fn encode(message: &Message) -> BytesMut {
        let mut codec = wire::body_codec::<Message, Message>();
        BytesMut::from(&Pin::new(&mut codec).serialize(message).unwrap()[..])
    }

    /// Decodes as the daemon's transport does.
    fn decode(frame: &[u8]) -> io::Result<Message> {
        let mut codec = ClampDeadline::new(wire::body_codec::<Message, Message>());
        Pin::new(&mut codec).deserialize(&BytesMut::from(frame))
    }

    fn expect_request(message: Message) -> Request<SandboxdRequest> {
        match message {
            ClientMessage::Request(request) => request,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    fn remaining(request: &Request<SandboxdRequest>) -> Duration {
        request
            .context
            .deadline
            .saturating_duration_since(Instant::now())
    }

    #[test]
    fn the_layout_is_variant_then_deadline_secs_then_nanos() {
        let frame = encode(&probe_request(Duration::from_secs(1000)));
        assert_eq!(frame[0], 0, "Request is variant 0, one byte");
        let (secs, secs_len) = read_varint(&frame, 1).unwrap();
        assert_eq!(frame[1], U16_MARKER, "1000 does not fit one byte");
        assert!((998..=1000).contains(&secs), "secs {secs}");
        let (nanos, _) = read_varint(&frame, 1 + secs_len).unwrap();
        assert!(nanos < 1_000_000_000, "nanos {nanos}");

        // Rewriting exactly those bytes changes the deadline tarpc decodes.
        let mut rewritten = BytesMut::new();
        write_varint(&mut rewritten, 0);
        write_varint(&mut rewritten, 42);
        write_varint(&mut rewritten, 0);
        let nanos_len = read_varint(&frame, 1 + secs_len).unwrap().1;
        rewritten.extend_from_slice(&frame[1 + secs_len + nanos_len..]);
        let request = expect_request(decode(&rewritten).unwrap());
        assert!(
            (41..=42).contains(&remaining(&request).as_secs()),
            "{:?}",
            remaining(&request)
        );
        assert_eq!(request.id, 7);
    }

    #[test]
    fn a_hundred_year_deadline_is_clamped_and_decodes() {
        let frame = encode(&probe_request(HUNDRED_YEARS));
        let clamped = clamp_deadline(&frame).expect("clamped");
        assert!(clamped.len() < frame.len(), "the long secs varint shrank");
        let request = expect_request(decode(&frame).unwrap());
        let left = remaining(&request);
        assert!(left <= Duration::from_secs(MAX_DEADLINE_SECS), "{left:?}");
        assert!(
            left >= Duration::from_secs(MAX_DEADLINE_SECS - 5),
            "{left:?}"
        );
        assert_eq!(request.id, 7);
        assert!(
            matches!(&request.message, SandboxdRequest::Probe { scope: Scope::Session, id } if id == "ses_01"),
            "{:?}",
            request.message
        );
    }

    /// A deadline of u64::MAX seconds makes tarpc's `Instant::now() + d`
    /// panic; clamped, it decodes.
    #[test]
    fn an_overflowing_deadline_is_clamped_instead_of_panicking() {
        let frame = encode(&probe_request(Duration::from_secs(10)));
        let (_, secs_len) = read_varint(&frame, 1).unwrap();
        let mut hostile = BytesMut::from(&[0u8][..]);
        hostile.extend_from_slice(&[U64_MARKER]);
        hostile.extend_from_slice(&u64::MAX.to_le_bytes());
        hostile.extend_from_slice(&frame[1 + secs_len..]);

        let mut plain = wire::body_codec::<Message, Message>();
        let unclamped = std::panic::catch_unwind(AssertUnwindSafe(|| {
            Pin::new(&mut plain).deserialize(&hostile)
        }));
        assert!(
            unclamped.is_err(),
            "without the clamp, tarpc's decode panics"
        );

        let request = expect_request(decode(&hostile).unwrap());
        assert!(remaining(&request) <= Duration::from_secs(MAX_DEADLINE_SECS));
    }

    #[test]
    fn a_non_canonical_variant_is_still_recognised() {
        let frame = encode(&probe_request(HUNDRED_YEARS));
        let mut spelled_long = BytesMut::from(&[U16_MARKER, 0, 0][..]);
        spelled_long.extend_from_slice(&frame[1..]);
        assert!(clamp_deadline(&spelled_long).is_some());
        let request = expect_request(decode(&spelled_long).unwrap());
        assert!(remaining(&request) <= Duration::from_secs(MAX_DEADLINE_SECS));
    }

    #[test]
    fn a_normal_deadline_is_untouched() {
        let frame = encode(&probe_request(Duration::from_secs(10)));
        assert!(clamp_deadline(&frame).is_none());
        let request = expect_request(decode(&frame).unwrap());
        assert!(remaining(&request) > Duration::from_secs(8));
    }

    #[test]
    fn a_cancel_is_untouched() {
        let cancel: Message = ClientMessage::Cancel {
            trace_context: context::current().trace_context,
            request_id: 7,
        };
        let frame = encode(&cancel);
        assert_ne!(frame[0], 0);
        assert!(clamp_deadline(&frame).is_none());
        match decode(&frame).unwrap() {
            ClientMessage::Cancel { request_id, .. } => assert_eq!(request_id, 7),
            other => panic!("expected a cancel, got {other:?}"),
        }
    }

    #[test]
    fn truncated_and_garbage_frames_fail_without_panicking() {
        let frame = encode(&probe_request(HUNDRED_YEARS));
        for end in 0..frame.len() {
            let _ = clamp_deadline(&frame[..end]);
            assert!(
                decode(&frame[..end]).is_err(),
                "prefix of {end} bytes decoded"
            );
        }
        for garbage in [
            &[0xffu8; 16][..],
            &[0, 254, 1, 2][..],
            &[0, 253, 1][..],
            b"GET / HTTP/1.1\r\n",
        ] {
            let _ = clamp_deadline(garbage);
            assert!(decode(garbage).is_err(), "{garbage:?} decoded");
        }
    }
}
