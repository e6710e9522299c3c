//! The trace of a simulation: every datagram, who sent it, and what became of it; and the
//! tap, which adds its bytes.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::Fate;

/// One datagram offered to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TraceRecord {
    /// When it was sent, from the simulation's start.
    pub sent: Duration,
    /// Sender.
    pub from: SocketAddr,
    /// Destination.
    pub to: SocketAddr,
    /// Size in bytes.
    pub len: usize,
    /// What became of it (a duplicate gets a record of its own).
    pub fate: Fate,
}

impl core::fmt::Display for TraceRecord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(f, "{:>10.3} ms  {} -> {}  {:>5} B  ", ms(self.sent), self.from, self.to, self.len)?;
        match self.fate {
            Fate::Delivered(at) => write!(f, "delivered at {:.3} ms", ms(at)),
            Fate::Corrupted(at) => write!(f, "delivered CORRUPTED at {:.3} ms", ms(at)),
            Fate::Lost => f.write_str("lost"),
            Fate::QueueFull => f.write_str("dropped: queue full"),
            Fate::TooBig => f.write_str("dropped: above the link MTU"),
            Fate::Down => f.write_str("dropped: link down"),
            Fate::Scripted => f.write_str("dropped by script"),
            Fate::Held => f.write_str("held"),
        }
    }
}

/// One datagram offered to a link, with its bytes: what the tap records
/// ([`Network::enable_tap`](super::Network::enable_tap)). The same records as the trace,
/// in the same order, each with the bytes as the sender emitted them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TapRecord {
    /// When it was sent, from the simulation's start.
    pub sent: Duration,
    /// Sender.
    pub from: SocketAddr,
    /// Destination.
    pub to: SocketAddr,
    /// The datagram as sent (a copy the link corrupts arrives with one bit flipped: see
    /// `fate`).
    pub payload: Bytes,
    /// What became of it (a duplicate gets a record of its own).
    pub fate: Fate,
}

impl TapRecord {
    /// The record without its bytes, as the trace holds it.
    pub fn trace(&self) -> TraceRecord {
        TraceRecord { sent: self.sent, from: self.from, to: self.to, len: self.payload.len(), fate: self.fate }
    }
}
