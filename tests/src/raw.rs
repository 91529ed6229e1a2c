//! Talking to the daemon below the client library: a bare tarpc stub (no
//! client-side validation, any deadline) and a bare socket.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_protocol::service::{SandboxdRequest, SandboxdResponse};
use sandboxd_protocol::{wire, SandboxEnv, Token};
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Framed;

/// The tarpc stub, connected over the shared framing. No version handshake
/// and no validation: whatever the test sends reaches the daemon as is.
pub async fn tarpc_client(socket: &Path) -> sandboxd_protocol::SandboxdClient {
    let stream = UnixStream::connect(socket)
        .await
        .unwrap_or_else(|error| panic!("connect {}: {error}", socket.display()));
    let transport =
        tarpc::serde_transport::new(Framed::new(stream, wire::frame_codec()), wire::body_codec());
    sandboxd_protocol::SandboxdClient::new(tarpc::client::Config::default(), transport).spawn()
}

/// A tarpc context whose deadline is `timeout` from now.
pub fn context(timeout: Duration) -> tarpc::context::Context {
    let mut ctx = tarpc::context::current();
    ctx.deadline = Instant::now() + timeout;
    ctx
}

/// A valid sandbox environment.
pub fn sandbox_env(task_queue: &str, token: &str) -> SandboxEnv {
    SandboxEnv {
        task_queue: task_queue.to_string(),
        stigmer_token: Token::new(token),
        caller_class: "user".to_string(),
    }
}

/// A framed tarpc request whose deadline is `deadline_secs` seconds from
/// now — any value, including ones no tarpc client can send (its own
/// deadline queue panics beyond about two years).
pub fn request_frame(id: u64, deadline_secs: u64, message: SandboxdRequest) -> Vec<u8> {
    let mut codec = wire::body_codec::<(), tarpc::ClientMessage<SandboxdRequest>>();
    let request = tarpc::ClientMessage::Request(tarpc::Request {
        context: context(Duration::from_secs(10)),
        id,
        message,
    });
    let body = tokio_serde::Serializer::serialize(std::pin::Pin::new(&mut codec), &request)
        .expect("encode a request");
    // bincode 1.3 default options (varints): variant 0, then the deadline's
    // seconds as a one-byte varint (9 or 10), then its nanoseconds, …
    assert!(
        body[0] == 0 && (9..=10).contains(&body[1]),
        "unexpected request layout: {body:?}"
    );
    let mut patched = vec![0u8];
    match u32::try_from(deadline_secs) {
        Ok(secs) if secs <= 250 => patched.push(secs as u8),
        Ok(secs) if secs <= u32::from(u16::MAX) => {
            patched.push(251);
            patched.extend_from_slice(&(secs as u16).to_le_bytes());
        }
        Ok(secs) => {
            patched.push(252);
            patched.extend_from_slice(&secs.to_le_bytes());
        }
        Err(_) => {
            patched.push(253);
            patched.extend_from_slice(&deadline_secs.to_le_bytes());
        }
    }
    patched.extend_from_slice(&body[2..]);
    let mut frame = (patched.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&patched);
    frame
}

/// Reads one framed tarpc response; `None` when the connection closes first.
pub async fn read_response(stream: &mut UnixStream) -> Option<tarpc::Response<SandboxdResponse>> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes(header) as usize;
    assert!(
        len <= wire::MAX_REPLY_LEN,
        "the daemon sent a {len}-byte frame"
    );
    let mut body = BytesMut::zeroed(len);
    stream.read_exact(&mut body).await.ok()?;
    let mut codec = wire::body_codec::<tarpc::Response<SandboxdResponse>, ()>();
    Some(
        tokio_serde::Deserializer::deserialize(std::pin::Pin::new(&mut codec), &body)
            .expect("decode a response"),
    )
}
