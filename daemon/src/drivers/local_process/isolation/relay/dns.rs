//! DNS queries from a private sandbox: each sent from the host to the
//! first resolver the posture lets the sandbox reach, its answer sent back
//! from the address the query was sent to (the namespace's table undoes
//! the diversion on the way back).
//!
//! Why the host's resolvers rather than the address the query named: a
//! diverted datagram does not carry its original destination to a plain
//! socket (only TCP has `SO_ORIGINAL_DST`), and the sandbox's view shows
//! the host's own `/etc/resolv.conf`, so the two are the same unless
//! `[network] resolvers` names others. A resolver the posture refuses is
//! skipped, as the sandbox's own query to it would have been refused on a
//! shared network: under `strict`, a resolver on the loopback or a
//! private address answers no sandbox.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinSet;

use super::{Bound, RelaySettings};
use crate::egress::divert::allows;

/// How long a resolver has to answer one query.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest DNS message over UDP.
const LARGEST: usize = 65_535;

/// Takes one waiting query off `socket` (none waiting: nothing to do) and
/// answers it on a task of `carried`.
pub(super) fn take_query(
    socket: &Arc<UdpSocket>,
    settings: &Arc<RelaySettings>,
    bound: &Bound,
    carried: &mut JoinSet<()>,
) {
    // Allocated only once a query is waiting: an idle sandbox holds no buffer.
    let mut query = vec![0; LARGEST];
    let Ok((length, asker)) = socket.try_recv_from(&mut query) else {
        return;
    };
    query.truncate(length);
    let Some(permit) = bound.take() else {
        return;
    };
    carried.spawn(answer(
        socket.clone(),
        settings.clone(),
        query,
        asker,
        permit,
    ));
}

async fn answer(
    socket: Arc<UdpSocket>,
    settings: Arc<RelaySettings>,
    query: Vec<u8>,
    asker: SocketAddr,
    _permit: OwnedSemaphorePermit,
) {
    let Some(resolver) = resolvers(&settings)
        .into_iter()
        .find(|resolver| allows(settings.posture, resolver.ip()))
    else {
        return;
    };
    if let Ok(Ok(answer)) = tokio::time::timeout(ANSWER_TIMEOUT, ask(resolver, &query)).await {
        let _ = socket.send_to(&answer, asker).await;
    }
}

/// Sends `query` to `resolver` from a socket of its own and reads the answer.
async fn ask(resolver: SocketAddr, query: &[u8]) -> io::Result<Vec<u8>> {
    let local: SocketAddr = match resolver.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(resolver).await?;
    socket.send(query).await?;
    let mut answer = vec![0; LARGEST];
    let length = socket.recv(&mut answer).await?;
    answer.truncate(length);
    Ok(answer)
}

/// The configured resolvers, else the host's `/etc/resolv.conf` ones
/// (read at each query, so a changed file counts at once).
fn resolvers(settings: &RelaySettings) -> Vec<SocketAddr> {
    if !settings.resolvers.is_empty() {
        return settings.resolvers.clone();
    }
    std::fs::read_to_string("/etc/resolv.conf")
        .map(|text| nameservers(&text))
        .unwrap_or_default()
}

/// The `nameserver` lines of a resolv.conf, at port 53.
fn nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .filter_map(|address| address.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nameservers_are_read_from_resolv_conf() {
        let text = "# generated\nsearch example\nnameserver 10.255.255.53\nnameserver fe80::1%eth0\nnameserver bogus\noptions ndots:1\n";
        assert_eq!(
            nameservers(text),
            vec![
                "10.255.255.53:53".parse::<SocketAddr>().unwrap(),
                "[fe80::1]:53".parse().unwrap()
            ]
        );
    }
}
