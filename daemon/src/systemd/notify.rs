//! sd_notify(3): telling systemd how the service is, one datagram at a time.
//!
//! A message is newline-separated `KEY=value` assignments (`READY=1`,
//! `STATUS=…`, `WATCHDOG=1`, `STOPPING=1`) sent as one datagram to the
//! socket `NOTIFY_SOCKET` names: a filesystem path, or an abstract address
//! written with a leading `@`. With `NotifyAccess=main` systemd accepts only
//! datagrams from the service's main process, which every thread of this
//! one is.
//!
//! A failed send is logged, never fatal: the daemon serves callers whether
//! or not its supervisor hears about it. The first failure is a warning,
//! later ones debug lines, so a broken channel does not flood the log with
//! one line per watchdog tick.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long one send may block when systemd's receive queue is full. It is
/// drained continuously, so this is a bound for a wedged manager, not a
/// wait anyone sees.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// Why `NOTIFY_SOCKET` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("NOTIFY_SOCKET={0:?} is neither an absolute path nor an abstract address (@name)")]
    UnknownAddress(String),
    #[error("NOTIFY_SOCKET={value:?}: {source}")]
    Socket { value: String, source: io::Error },
}

/// The channel to systemd.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
    /// `NOTIFY_SOCKET` as given, for messages.
    shown: String,
    warned: AtomicBool,
}

impl Notifier {
    /// A notifier for the address in `NOTIFY_SOCKET`.
    pub fn new(value: &str) -> Result<Notifier, NotifyError> {
        let failed = |source| NotifyError::Socket {
            value: value.to_string(),
            source,
        };
        let address = if let Some(name) = value.strip_prefix('@') {
            SocketAddr::from_abstract_name(name.as_bytes()).map_err(failed)?
        } else if value.starts_with('/') {
            SocketAddr::from_pathname(Path::new(value)).map_err(failed)?
        } else {
            return Err(NotifyError::UnknownAddress(value.to_string()));
        };
        // std opens it close-on-exec: no runner inherits the channel.
        let socket = UnixDatagram::unbound().map_err(failed)?;
        socket
            .set_write_timeout(Some(SEND_TIMEOUT))
            .map_err(failed)?;
        Ok(Notifier {
            socket,
            address,
            shown: value.to_string(),
            warned: AtomicBool::new(false),
        })
    }

    /// The service is up: the socket accepts and the driver is ready.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A short line for `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// The orderly stop has begun.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    /// Still alive.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// Sends one message; logs (never returns) a failure.
    pub fn send(&self, message: &str) {
        match self.socket.send_to_addr(message.as_bytes(), &self.address) {
            Ok(_) => tracing::trace!(message, "notified systemd"),
            Err(error) if !self.warned.swap(true, Ordering::Relaxed) => tracing::warn!(
                notify_socket = %self.shown,
                %error,
                "cannot notify systemd (further failures are logged at debug level)"
            ),
            Err(error) => {
                tracing::debug!(notify_socket = %self.shown, %error, "cannot notify systemd")
            }
        }
    }
}

/// A value for one assignment: a newline would start a new one.
fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receiver(name: &str) -> (UnixDatagram, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("sandboxd-notify-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        (socket, path)
    }

    fn receive(socket: &UnixDatagram) -> String {
        let mut buffer = [0u8; 4096];
        let n = socket.recv(&mut buffer).expect("a datagram arrives");
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    }

    #[test]
    fn messages_arrive_as_single_datagrams() {
        let (socket, path) = receiver("path");
        let notifier = Notifier::new(path.to_str().unwrap()).unwrap();
        notifier.ready("serving\non two lines");
        assert_eq!(receive(&socket), "READY=1\nSTATUS=serving on two lines");
        notifier.watchdog();
        assert_eq!(receive(&socket), "WATCHDOG=1");
        notifier.stopping("bye");
        assert_eq!(receive(&socket), "STOPPING=1\nSTATUS=bye");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn abstract_addresses_work() {
        let name = format!("sandboxd-notify-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&address).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let notifier = Notifier::new(&format!("@{name}")).unwrap();
        notifier.status("hello");
        assert_eq!(receive(&socket), "STATUS=hello");
    }

    #[test]
    fn relative_and_other_addresses_are_refused_by_name() {
        let error = Notifier::new("vsock:2:1234").unwrap_err();
        assert!(error.to_string().contains("\"vsock:2:1234\""), "{error}");
    }

    #[test]
    fn a_missing_socket_is_not_fatal() {
        let notifier = Notifier::new("/nonexistent/sandboxd/notify.sock").unwrap();
        notifier.watchdog();
        notifier.watchdog();
        assert!(notifier.warned.load(Ordering::Relaxed));
    }
}
