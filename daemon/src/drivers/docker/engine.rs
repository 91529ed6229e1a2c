//! The connection to the Docker engine, and getting it back.
//!
//! The daemon must start and serve even when the engine is down, so the
//! link is lazy: it is made on first use (and by the [events
//! watcher](super::events), which keeps trying in the background), and a
//! transport error marks it down so the next call makes it anew. While it
//! is down, calls fail at once with `unavailable` naming the engine's
//! address; no call waits on bollard's 120 s default: every request runs
//! under a timeout of our own.

use std::fmt;
use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bollard::Docker;
use sandboxd_protocol::SandboxError;

/// How long making the link (one `/version` round trip) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(1500);
/// Bound on reads: inspect, list.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on writes that the engine finishes promptly: create, start, kill, remove.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// While the link is down, calls within this long of the last failed
/// attempt fail at once instead of trying again.
const RETRY_AFTER: Duration = Duration::from_millis(500);
/// bollard's own per-request limit, set far out: ours (above) always apply
/// first, and a long `wait` must not be cut by it.
const BOLLARD_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The state of the link.
enum Link {
    Up {
        docker: Docker,
        engine_version: String,
        api_version: String,
    },
    Down {
        error: String,
        since: Instant,
        last_attempt: Option<Instant>,
    },
}

/// One engine, by address; cheap to share.
pub struct Engine {
    address: String,
    link: Mutex<Link>,
    /// One connection attempt at a time; the others wait for its outcome.
    connecting: tokio::sync::Mutex<()>,
}

/// How a call that reached for the engine failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The engine answered with an HTTP error status.
    Refused { status: u16, message: String },
    /// The engine could not be reached or did not answer in time. The
    /// message names the engine's address.
    Unreachable(String),
    /// The engine answered something we could not read.
    Malformed(String),
}

impl CallError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, CallError::Refused { status: 404, .. })
    }

    pub fn is_conflict(&self) -> bool {
        matches!(self, CallError::Refused { status: 409, .. })
    }

    /// The error a caller gets, with `what` saying which call on which object failed.
    pub fn into_sandbox_error(self, what: &str) -> SandboxError {
        match self {
            CallError::Refused { status, message } => SandboxError::Unavailable(format!(
                "{what}: the engine answered {status}: {message}"
            )),
            CallError::Unreachable(message) => {
                SandboxError::Unavailable(format!("{what}: {message}"))
            }
            CallError::Malformed(message) => SandboxError::Internal(format!("{what}: {message}")),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Refused { status, message } => {
                write!(f, "the engine answered {status}: {message}")
            }
            CallError::Unreachable(message) | CallError::Malformed(message) => f.write_str(message),
        }
    }
}

/// How a watcher of the engine's event stream gets (back) to the engine:
/// the client once it answers, waiting 250 ms and doubling up to 5 s while
/// it does not; and the pause before subscribing again after a stream
/// ended. Shared by every watcher (`events.rs`, `network_watch.rs`).
pub struct Reconnect {
    wait: std::time::Duration,
}

impl Reconnect {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(250);
    const MOST: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn new() -> Reconnect {
        Reconnect { wait: Self::FIRST }
    }

    /// The engine's client, waiting while the engine does not answer.
    pub async fn docker(&mut self, engine: &Engine) -> Docker {
        loop {
            match engine.docker().await {
                Ok(docker) => {
                    self.wait = Self::FIRST;
                    return docker;
                }
                Err(_) => {
                    tokio::time::sleep(self.wait).await;
                    self.wait = (self.wait * 2).min(Self::MOST);
                }
            }
        }
    }

    /// The pause before subscribing again after a stream ended.
    pub async fn pause(&self) {
        tokio::time::sleep(self.wait).await;
    }
}

impl Engine {
    /// An engine at `address`, not yet connected. Fails only on an address
    /// this build cannot speak to (a scheme other than unix, tcp or http).
    pub fn new(address: &str) -> Result<Engine, String> {
        Transport::parse(address)?;
        Ok(Engine {
            address: address.to_string(),
            link: Mutex::new(Link::Down {
                error: "not connected yet".to_string(),
                since: Instant::now(),
                last_attempt: None,
            }),
            connecting: tokio::sync::Mutex::new(()),
        })
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    fn link(&self) -> MutexGuard<'_, Link> {
        self.link
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// One line for `status`: the engine's version, or why it is unreachable.
    pub fn health(&self) -> String {
        match &*self.link() {
            Link::Up {
                engine_version,
                api_version,
                ..
            } => {
                format!(
                    "engine {} reachable (Docker {engine_version}, API {api_version})",
                    self.address
                )
            }
            Link::Down { error, since, .. } => format!(
                "engine {} UNREACHABLE for {}s: {error}",
                self.address,
                since.elapsed().as_secs()
            ),
        }
    }

    /// The client, connecting first when the link is down. Fails fast (the
    /// last error, without a new attempt) when an attempt just failed.
    pub async fn docker(&self) -> Result<Docker, CallError> {
        if let Some(docker) = self.up_or_fail_fast()? {
            return Ok(docker);
        }
        let _attempt = self.connecting.lock().await;
        // Whoever held the lock before us may have settled it either way.
        if let Some(docker) = self.up_or_fail_fast()? {
            return Ok(docker);
        }
        self.connect().await
    }

    /// `Some` when up; `Err` when down and an attempt failed within [`RETRY_AFTER`].
    fn up_or_fail_fast(&self) -> Result<Option<Docker>, CallError> {
        match &*self.link() {
            Link::Up { docker, .. } => Ok(Some(docker.clone())),
            Link::Down {
                error,
                last_attempt: Some(at),
                ..
            } if at.elapsed() < RETRY_AFTER => Err(self.unreachable(error)),
            Link::Down { .. } => Ok(None),
        }
    }

    /// Makes the link: a client for the address, with the API version
    /// negotiated down to the engine's (Docker 20.10 speaks 1.41).
    async fn connect(&self) -> Result<Docker, CallError> {
        let attempt = async {
            let docker = Transport::parse(&self.address)?
                .client()
                .map_err(|error| error.to_string())?;
            let docker = docker
                .negotiate_version()
                .await
                .map_err(|error| error.to_string())?;
            let version = docker.version().await.map_err(|error| error.to_string())?;
            Ok::<_, String>((docker, version))
        };
        let outcome = match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("no answer within {CONNECT_TIMEOUT:?}")),
        };
        let mut link = self.link();
        match outcome {
            Ok((docker, version)) => {
                let engine_version = version.version.unwrap_or_else(|| "unknown".to_string());
                let api_version = version.api_version.unwrap_or_else(|| "unknown".to_string());
                let was_down_for = match &*link {
                    Link::Down {
                        since,
                        last_attempt: Some(_),
                        ..
                    } => Some(since.elapsed()),
                    _ => None,
                };
                tracing::info!(engine = %self.address, version = %engine_version, api = %api_version, was_down_for = ?was_down_for, "connected to the Docker engine");
                *link = Link::Up {
                    docker: docker.clone(),
                    engine_version,
                    api_version,
                };
                Ok(docker)
            }
            Err(error) => {
                let since = match &*link {
                    Link::Down { since, .. } => *since,
                    Link::Up { .. } => Instant::now(),
                };
                *link = Link::Down {
                    error: error.clone(),
                    since,
                    last_attempt: Some(Instant::now()),
                };
                Err(self.unreachable(&error))
            }
        }
    }

    /// Marks the link down after a transport failure; the next call reconnects.
    pub fn lost(&self, error: &str) {
        let mut link = self.link();
        if matches!(&*link, Link::Up { .. }) {
            tracing::warn!(engine = %self.address, %error, "lost the Docker engine; will reconnect");
            *link = Link::Down {
                error: error.to_string(),
                since: Instant::now(),
                last_attempt: None,
            };
        }
    }

    fn unreachable(&self, error: &str) -> CallError {
        CallError::Unreachable(format!(
            "the Docker engine at {} is unreachable: {error}",
            self.address
        ))
    }

    /// Runs one request against the engine within `timeout`, sorting its
    /// failure: an HTTP status is the engine's answer; anything on the way
    /// there marks the link down.
    pub async fn call<T, F, Fut>(&self, timeout: Duration, request: F) -> Result<T, CallError>
    where
        F: FnOnce(Docker) -> Fut,
        Fut: Future<Output = Result<T, bollard::errors::Error>>,
    {
        let docker = self.docker().await?;
        match tokio::time::timeout(timeout, request(docker)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.classify(error)),
            Err(_) => Err(CallError::Unreachable(format!(
                "the Docker engine at {} did not answer within {timeout:?}",
                self.address
            ))),
        }
    }

    /// Sorts a bollard error (see [`Engine::call`]).
    pub fn classify(&self, error: bollard::errors::Error) -> CallError {
        use bollard::errors::Error;
        match error {
            Error::DockerResponseServerError {
                status_code,
                message,
            } => CallError::Refused {
                status: status_code,
                message,
            },
            Error::JsonDataError { .. }
            | Error::JsonSerdeError { .. }
            | Error::APIVersionParseError {} => CallError::Malformed(format!(
                "cannot read the answer of the engine at {}: {error}",
                self.address
            )),
            other => {
                let error = other.to_string();
                self.lost(&error);
                self.unreachable(&error)
            }
        }
    }
}

/// How an address is spoken to.
enum Transport<'a> {
    Unix(&'a str),
    Http(&'a str),
}

impl<'a> Transport<'a> {
    fn parse(address: &'a str) -> Result<Transport<'a>, String> {
        if let Some(path) = address.strip_prefix("unix://") {
            Ok(Transport::Unix(path))
        } else if address.starts_with('/') {
            Ok(Transport::Unix(address))
        } else if address.starts_with("tcp://") || address.starts_with("http://") {
            Ok(Transport::Http(address))
        } else {
            Err(format!(
                "Docker engine address '{address}' is not supported: use unix:///path, tcp://host:port or http://host:port"
            ))
        }
    }

    fn client(&self) -> Result<Docker, bollard::errors::Error> {
        // The version passed here is the newest bollard speaks; the caller
        // negotiates it down to the engine's.
        let docker = match self {
            Transport::Unix(path) => Docker::connect_with_unix(
                path,
                BOLLARD_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            )?,
            Transport::Http(address) => Docker::connect_with_http(
                address,
                BOLLARD_TIMEOUT.as_secs(),
                bollard::API_DEFAULT_VERSION,
            )?,
        };
        Ok(docker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert!(Engine::new("unix:///var/run/docker.sock").is_ok());
        assert!(Engine::new("/var/run/docker.sock").is_ok());
        assert!(Engine::new("tcp://127.0.0.1:2375").is_ok());
        let error = Engine::new("ssh://host").err().unwrap();
        assert!(error.contains("ssh://host"), "{error}");
    }

    #[tokio::test]
    async fn a_missing_socket_is_unavailable_at_once_and_named() {
        let engine = Engine::new("unix:///nonexistent/sandboxd-test.sock").unwrap();
        let started = Instant::now();
        let error = engine
            .call(READ_TIMEOUT, |docker| async move { docker.ping().await })
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        let CallError::Unreachable(message) = &error else {
            panic!("{error:?}")
        };
        assert!(
            message.contains("unix:///nonexistent/sandboxd-test.sock"),
            "{message}"
        );
        assert!(
            engine.health().contains("UNREACHABLE"),
            "{}",
            engine.health()
        );
        // A second call right away fails fast with the same error.
        let again = engine.docker().await.unwrap_err();
        assert_eq!(again, error);
    }

    #[tokio::test]
    async fn a_refused_tcp_port_is_unavailable_quickly() {
        // Bind then drop a listener: nothing listens on that port now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let engine = Engine::new(&format!("tcp://127.0.0.1:{port}")).unwrap();
        let started = Instant::now();
        let error = engine.docker().await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(
            error.to_string().contains(&format!("127.0.0.1:{port}")),
            "{error}"
        );
    }
}
