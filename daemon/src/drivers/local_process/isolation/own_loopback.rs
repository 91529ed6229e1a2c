//! A new network namespace's only link, its loopback, made the way to
//! everywhere: up, given the IPv4 dummy address, and default routes for
//! IPv4 and IPv6 through it. A connection to any address then leaves by
//! the loopback, where the namespace's table diverts it to the daemon's
//! relay (`crate::egress::divert`); without a route, `connect` would fail
//! with ENETUNREACH before any rule saw the packet.
//!
//! Why 192.0.0.8: it is the IPv4 dummy address (RFC 7600), set aside as
//! the source of a host that has no IPv4 address of its own. A route
//! through the loopback with only 127.0.0.1 on it would leave IPv4
//! connections with source 0.0.0.0, which no reply reaches; IPv6 takes
//! ::1, as it should.
//!
//! Plain rtnetlink requests, one socket, four acknowledgements: no `ip`
//! process, so a namespace is ready in well under a millisecond.

use std::io;
use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL,
    NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage, AddressScope};
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::route::{
    RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// The sandbox's own IPv4 address, the source of its connections.
pub const DUMMY_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 0, 8);

/// The loopback's index: always 1, the first link of every namespace.
const LOOPBACK: u32 = 1;

/// Sets the calling thread's (new) network namespace up as above.
pub fn set_up() -> io::Result<()> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    request(&socket, RouteNetlinkMessage::SetLink(loopback_up()), 0)?;
    let created = NLM_F_CREATE | NLM_F_EXCL;
    request(
        &socket,
        RouteNetlinkMessage::NewAddress(dummy_address()),
        created,
    )?;
    for family in [AddressFamily::Inet, AddressFamily::Inet6] {
        request(
            &socket,
            RouteNetlinkMessage::NewRoute(default_route(family)),
            created,
        )?;
    }
    Ok(())
}

fn loopback_up() -> LinkMessage {
    let mut link = LinkMessage::default();
    link.header.index = LOOPBACK;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    link
}

fn dummy_address() -> AddressMessage {
    let mut address = AddressMessage::default();
    address.header.family = AddressFamily::Inet;
    address.header.prefix_len = 32;
    address.header.scope = AddressScope::Universe;
    address.header.index = LOOPBACK;
    let ip = IpAddr::V4(DUMMY_V4);
    address.attributes = vec![AddressAttribute::Local(ip), AddressAttribute::Address(ip)];
    address
}

fn default_route(family: AddressFamily) -> RouteMessage {
    let mut route = RouteMessage::default();
    route.header = RouteHeader {
        address_family: family,
        table: RouteHeader::RT_TABLE_MAIN,
        protocol: RouteProtocol::Boot,
        scope: RouteScope::Link,
        kind: RouteType::Unicast,
        ..Default::default()
    };
    route.attributes = vec![RouteAttribute::Oif(LOOPBACK)];
    route
}

/// Sends one request and waits for its acknowledgement.
fn request(socket: &Socket, message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK | flags;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::from(message));
    message.finalize();
    let mut buffer = vec![0; message.buffer_len()];
    message.serialize(&mut buffer);
    socket.send(&buffer, 0)?;
    let mut answer = vec![0; 8192];
    let length = socket.recv(&mut &mut answer[..], 0)?;
    let parsed = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[..length])
        .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
    match parsed.payload {
        NetlinkPayload::Error(error) => match error.code {
            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
            None => Ok(()),
        },
        _ => Ok(()),
    }
}
