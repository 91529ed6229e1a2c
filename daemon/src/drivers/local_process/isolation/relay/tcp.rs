//! One diverted TCP connection: where it was going, whether it may go
//! there, and the bytes carried both ways until both sides are done.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;

use nix::sys::socket::{getsockopt, sockopt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use super::RelaySettings;
use crate::egress::divert::allows;

/// Carries `inside` to where it was going, or resets it: a destination
/// the posture refuses, a loopback port that is not an endpoint, or a
/// dial that failed (the sandbox sees ECONNRESET where a direct connect
/// would have seen the refusal; the posture's own refusals already came
/// back as ECONNREFUSED from the namespace's table).
pub async fn carry(
    mut inside: TcpStream,
    settings: Arc<RelaySettings>,
    _permit: OwnedSemaphorePermit,
) {
    let Some(target) = original_destination(&inside).filter(|target| may_dial(&settings, *target))
    else {
        reset(inside);
        return;
    };
    let mut outside = match TcpStream::connect(target).await {
        Ok(outside) => outside,
        Err(_) => {
            reset(inside);
            return;
        }
    };
    let _ = inside.set_nodelay(true);
    let _ = outside.set_nodelay(true);
    if tokio::io::copy_bidirectional(&mut inside, &mut outside)
        .await
        .is_err()
    {
        reset(inside);
    }
}

/// Ends `inside` with a reset rather than a close, so the sandbox's side
/// fails at once instead of reading an empty answer.
pub fn reset(inside: TcpStream) {
    let _ = inside.set_zero_linger();
}

/// Whether the relay dials `target` for a sandbox: the loopback only at an
/// endpoint's port, anything else as the posture says.
fn may_dial(settings: &RelaySettings, target: SocketAddr) -> bool {
    let allowed = allows(settings.posture, target.ip());
    match target.ip().is_loopback() {
        true => allowed && settings.endpoint_ports.contains(&target.port()),
        false => allowed,
    }
}

/// Where the sandbox was connecting to before the table diverted it.
fn original_destination(inside: &TcpStream) -> Option<SocketAddr> {
    if let Ok(v4) = getsockopt(inside, sockopt::OriginalDst) {
        let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
        return Some(SocketAddr::V4(SocketAddrV4::new(
            ip,
            u16::from_be(v4.sin_port),
        )));
    }
    let v6 = getsockopt(inside, sockopt::Ip6tOriginalDst).ok()?;
    let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
    let target = match ip.to_ipv4_mapped() {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), u16::from_be(v6.sin6_port)),
        None => SocketAddr::V6(SocketAddrV6::new(ip, u16::from_be(v6.sin6_port), 0, 0)),
    };
    Some(target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandboxd_protocol::egress::Posture;

    fn settings(posture: Option<Posture>) -> RelaySettings {
        RelaySettings {
            posture,
            endpoint_ports: vec![7233],
            resolvers: Vec::new(),
            connections: 1,
        }
    }

    #[test]
    fn the_loopback_is_dialled_only_at_an_endpoint() {
        let relaxed = settings(Some(Posture::Relaxed));
        assert!(may_dial(&relaxed, "127.0.0.1:7233".parse().unwrap()));
        assert!(may_dial(&relaxed, "[::1]:7233".parse().unwrap()));
        assert!(!may_dial(&relaxed, "127.0.0.1:22".parse().unwrap()));
        assert!(!may_dial(&relaxed, "127.0.0.1:1".parse().unwrap()));
        let strict = settings(Some(Posture::Strict));
        assert!(!may_dial(&strict, "127.0.0.1:7233".parse().unwrap()));
    }

    #[test]
    fn the_posture_judges_every_other_address() {
        let relaxed = settings(Some(Posture::Relaxed));
        assert!(may_dial(&relaxed, "192.0.2.10:443".parse().unwrap()));
        assert!(!may_dial(&relaxed, "169.254.169.254:80".parse().unwrap()));
        assert!(!may_dial(&relaxed, "[fd00:ec2::254]:80".parse().unwrap()));
        assert!(may_dial(
            &settings(None),
            "169.254.169.254:80".parse().unwrap()
        ));
    }
}
