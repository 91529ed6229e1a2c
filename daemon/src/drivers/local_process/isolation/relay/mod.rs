//! The daemon's side of a private sandbox's network: the relay that
//! carries what the namespace's table diverts (`crate::egress::divert`).
//!
//! Its sockets are made inside the sandbox's namespace (a socket belongs
//! to the namespace it was made in) and served on the daemon's runtime:
//! a TCP listener on [`RELAY_PORT`] and a UDP socket on port 53 of
//! 127.0.0.1 and of ::1. Each connection diverted to the listener is
//! judged by where it was going (`SO_ORIGINAL_DST`) and dialled from the
//! host ([`tcp`]); each DNS query goes to the resolvers ([`dns`]).
//!
//! Why a relay of the daemon's own, measured against the alternatives:
//! - pasta (Debian's `passt`), the opt-in of the last release: a process
//!   per sandbox, 30 MiB resident each (its packet buffers) and 10-160 ms
//!   to start on this host; the packaged version passes no reset back, so
//!   a refused connect hung inside until its timeout.
//! - a veth pair and NAT per sandbox: the host forwards the sandbox's
//!   packets, and a host whose firewall drops forwarded packets (Docker
//!   sets the iptables FORWARD policy to DROP) drops them, whatever our
//!   own table accepts; loopback endpoints need `route_localnet` and a
//!   DNAT per sandbox.
//! - this relay: no process and no host-wide setting; per sandbox three
//!   sockets, one task and the namespace itself, ready in a few
//!   milliseconds (most of it nft loading the table). What it does not
//!   carry: UDP other than DNS, and ICMP (both refused with EPERM).
//!
//! What it costs the daemon: two descriptors per carried connection,
//! bounded per sandbox by `[network] relayed_connections` (a connection
//! over the bound is reset and logged once per sandbox).

mod dns;
mod tcp;

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::Arc;

use sandboxd_protocol::egress::Posture;
use tokio::runtime::Handle;
use tokio::sync::Semaphore;
use tokio::task::{AbortHandle, JoinSet};

use crate::egress::divert::{DNS_PORT, RELAY_PORT};

/// How long the relay waits after a failed accept before the next.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// What every sandbox's relay works by.
#[derive(Debug)]
pub struct RelaySettings {
    /// `None`: `egress = "none"`.
    pub posture: Option<Posture>,
    /// The runner's endpoints' TCP ports on the host's loopback.
    pub endpoint_ports: Vec<u16>,
    /// Where DNS queries go; empty: the host's `/etc/resolv.conf`.
    pub resolvers: Vec<SocketAddr>,
    /// Connections and queries carried at once per sandbox.
    pub connections: usize,
}

/// A relay's sockets, made in a sandbox's namespace, not served yet.
pub struct RelaySockets {
    listener: TcpListener,
    dns_v4: UdpSocket,
    dns_v6: UdpSocket,
}

impl RelaySockets {
    /// Binds them in the calling thread's network namespace.
    pub fn bind_here() -> io::Result<RelaySockets> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, RELAY_PORT)))?;
        listener.set_nonblocking(true)?;
        let dns_v4 = UdpSocket::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, DNS_PORT)))?;
        dns_v4.set_nonblocking(true)?;
        let dns_v6 = UdpSocket::bind(SocketAddr::from((Ipv6Addr::LOCALHOST, DNS_PORT)))?;
        dns_v6.set_nonblocking(true)?;
        Ok(RelaySockets {
            listener,
            dns_v4,
            dns_v6,
        })
    }
}

/// A sandbox's relay, served until dropped: then its sockets close and
/// every connection it carries ends.
pub struct Relay {
    task: AbortHandle,
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Relay {
    /// Serves `sockets` on `runtime`.
    pub fn start(runtime: &Handle, settings: Arc<RelaySettings>, sockets: RelaySockets) -> Relay {
        let task = runtime.spawn(async move {
            if let Err(error) = serve(settings, sockets).await {
                tracing::error!(%error, "a sandbox's network relay stopped: its connections out are refused from now on");
            }
        });
        Relay {
            task: task.abort_handle(),
        }
    }
}

/// One relay's loop: accepts, answers, and keeps every carried
/// connection in a set that ends with it.
async fn serve(settings: Arc<RelaySettings>, sockets: RelaySockets) -> io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(sockets.listener)?;
    let dns_v4 = Arc::new(tokio::net::UdpSocket::from_std(sockets.dns_v4)?);
    let dns_v6 = Arc::new(tokio::net::UdpSocket::from_std(sockets.dns_v6)?);
    let bound = Bound::new(settings.connections);
    let mut carried = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((inside, _)) => match bound.take() {
                    Some(permit) => {
                        carried.spawn(tcp::carry(inside, settings.clone(), permit));
                    }
                    None => tcp::reset(inside),
                },
                // The daemon out of descriptors, or a connection reset
                // before it was taken: that connection is lost, the relay
                // goes on (after a pause, so a lasting error cannot spin).
                Err(error) => {
                    bound.tell_once(&format!("a sandbox's relay could not take a connection: {error}"));
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
            },
            ready = dns_v4.readable() => {
                ready?;
                dns::take_query(&dns_v4, &settings, &bound, &mut carried);
            }
            ready = dns_v6.readable() => {
                ready?;
                dns::take_query(&dns_v6, &settings, &bound, &mut carried);
            }
            Some(_) = carried.join_next() => {}
        }
    }
}

/// The per-sandbox bound on what is carried at once.
struct Bound {
    permits: Arc<Semaphore>,
    told: std::sync::atomic::AtomicBool,
}

impl Bound {
    fn new(connections: usize) -> Bound {
        Bound {
            permits: Arc::new(Semaphore::new(connections)),
            told: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A permit, or `None` (logged the first time) when the bound is reached.
    fn take(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        let permit = self.permits.clone().try_acquire_owned().ok();
        if permit.is_none() {
            self.tell_once("a sandbox reached [network] relayed_connections: connections and DNS queries over it are refused until some end");
        }
        permit
    }

    /// Logs `what` if nothing was logged for this relay yet: one sandbox
    /// cannot flood the daemon's log.
    fn tell_once(&self, what: &str) {
        if !self.told.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!("{what}");
        }
    }
}
