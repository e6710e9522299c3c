//! Deliberate faults, to test the code above a [`UdpIo`](crate::UdpIo).

use std::io;
use std::net::SocketAddr;

/// Faults a [`UdpIo`](crate::UdpIo) injects instead of making the system call (feature
/// `fault-injection`). Meant for tests of adapters and applications: a kernel without
/// GSO, an ICMP error reported on every receive, a destination the network refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Faults {
    /// Every receive call fails with this error.
    pub recv_error: Option<io::ErrorKind>,
    /// Every send to this destination fails (with `PermissionDenied`, as a send to a
    /// broadcast address does without `SO_BROADCAST`).
    pub unreachable: Option<SocketAddr>,
    /// Every send that carries several datagrams fails with `EIO`'s kind (`Other`), as on a
    /// network driver that announces GSO and then refuses it.
    pub gso_refused: bool,
    /// Every `sendmmsg` fails (`Unsupported`), as in a sandbox that forbids the call.
    pub mmsg_refused: bool,
}

impl Faults {
    /// No fault.
    pub const NONE: Self = Self { recv_error: None, unreachable: None, gso_refused: false, mmsg_refused: false };

    /// Every receive call fails with `kind`.
    pub fn recv_error(kind: io::ErrorKind) -> Self {
        Self { recv_error: Some(kind), ..Self::NONE }
    }

    /// Every send to `remote` fails.
    pub fn unreachable(remote: SocketAddr) -> Self {
        Self { unreachable: Some(remote), ..Self::NONE }
    }

    /// Every GSO send fails.
    pub fn gso_refused() -> Self {
        Self { gso_refused: true, ..Self::NONE }
    }

    /// Every `sendmmsg` fails.
    pub fn mmsg_refused() -> Self {
        Self { mmsg_refused: true, ..Self::NONE }
    }
}
