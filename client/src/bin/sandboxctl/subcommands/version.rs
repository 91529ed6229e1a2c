//! `sandboxctl version`: the client's and the daemon's versions, as
//! `docker version` prints both sides.
//!
//! It must answer when nothing else can: against a daemon of another
//! protocol version (the handshake's mismatch error carries the daemon's
//! protocol), against a daemon that does not let this user read its status
//! (then only the protocol is known), and with no daemon at all.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sandboxd_client::{ClientError, SandboxdClient, PROTOCOL_VERSION};
use serde::Serialize;

use crate::failure::Failure;
use crate::render::emit;

/// Both sides' versions, or the client's alone (with why) when no socket
/// could be found; never an error about the daemon.
pub async fn answer(socket: Result<PathBuf, Failure>, json: bool) -> Result<String, Failure> {
    let versions = match socket {
        Ok(socket) => ask(&socket).await,
        Err(Failure::Usage(why)) => client_only(why),
        Err(failure) => return Err(failure),
    };
    emit(json, &versions, render)
}

/// Both sides' versions; what is unknown of the daemon is `None`.
#[derive(Debug, Serialize)]
pub struct Versions {
    pub client: Side,
    pub daemon: Side,
    /// Why some of the daemon's facts are missing, if they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daemon_error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Side {
    pub version: Option<String>,
    pub protocol_version: Option<u32>,
}

/// The client's side alone, with why nothing is known of the daemon's
/// (no socket path could be found, say).
fn client_only(why: String) -> Versions {
    Versions {
        client: client_side(),
        daemon: Side {
            version: None,
            protocol_version: None,
        },
        daemon_error: Some(why),
    }
}

fn client_side() -> Side {
    Side {
        version: Some(env!("CARGO_PKG_VERSION").to_string()),
        protocol_version: Some(PROTOCOL_VERSION),
    }
}

/// Asks the daemon at `socket` what it can.
async fn ask(socket: &Path) -> Versions {
    let client = client_side();
    let unknown = |protocol_version, error: String| Versions {
        client: Side {
            version: client.version.clone(),
            protocol_version: client.protocol_version,
        },
        daemon: Side {
            version: None,
            protocol_version,
        },
        daemon_error: Some(error),
    };
    let connection = match SandboxdClient::connect(socket).await {
        Ok(connection) => connection,
        Err(error @ ClientError::ProtocolMismatch { daemon, .. }) => {
            return unknown(Some(daemon), error.to_string())
        }
        Err(error) => return unknown(None, error.to_string()),
    };
    match connection.status().await {
        Ok(status) => Versions {
            client,
            daemon: Side {
                version: Some(status.version),
                protocol_version: Some(status.protocol_version),
            },
            daemon_error: None,
        },
        // Connected, so the handshake agreed: the protocol is ours.
        Err(error) => unknown(Some(PROTOCOL_VERSION), error.to_string()),
    }
}

fn render(versions: &Versions) -> String {
    let known = |value: Option<String>| value.unwrap_or_else(|| "unknown".to_string());
    let mut out = String::new();
    for (who, side) in [("client", &versions.client), ("daemon", &versions.daemon)] {
        let _ = writeln!(
            out,
            "{who}: version {}, protocol {}",
            known(side.version.clone()),
            known(side.protocol_version.map(|version| version.to_string()))
        );
    }
    if let Some(error) = &versions.daemon_error {
        let _ = writeln!(out, "  (daemon: {error})");
    }
    out
}
