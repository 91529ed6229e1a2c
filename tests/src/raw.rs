//! Talking to the daemon below the client library: a bare tarpc stub (no
//! client-side validation, any deadline) and a bare socket.

use std::path::Path;
use std::time::{Duration, Instant};

use sandboxd_protocol::{wire, SandboxEnv, Token};
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

/// The tarpc stub, connected over the shared framing. No version handshake
/// and no validation: whatever the test sends reaches the daemon as is.
pub async fn tarpc_client(socket: &Path) -> sandboxd_protocol::SandboxdClient {
    let stream = UnixStream::connect(socket)
        .await
        .unwrap_or_else(|error| panic!("connect {}: {error}", socket.display()));
    let transport = tarpc::serde_transport::new(Framed::new(stream, wire::frame_codec()), wire::body_codec());
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
    SandboxEnv { task_queue: task_queue.to_string(), stigmer_token: Token::new(token), caller_class: "user".to_string() }
}
