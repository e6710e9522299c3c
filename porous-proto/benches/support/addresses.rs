//! The address scheme of the benches that emulate many clients with one client host (the
//! `idle` and `active` benches): the server sees client `i` at 10.1.x.x, and the client
//! host reaches the server through alias `i` at 10.2.x.x, so one host can stand for
//! every client.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

pub(crate) const CLIENT_BASE: u32 = u32::from_be_bytes([10, 1, 0, 0]);
pub(crate) const ALIAS_BASE: u32 = u32::from_be_bytes([10, 2, 0, 0]);

/// Where the server sees client `i`.
pub(crate) fn client_addr(i: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(CLIENT_BASE + i as u32), 7000))
}

/// Where client `i` sees the server.
pub(crate) fn alias(i: usize) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ALIAS_BASE + i as u32), 7000))
}

pub(crate) fn index(addr: SocketAddr, base: u32) -> usize {
    match addr {
        SocketAddr::V4(a) => (u32::from(*a.ip()) - base) as usize,
        SocketAddr::V6(_) => unreachable!("the harness only uses IPv4"),
    }
}
