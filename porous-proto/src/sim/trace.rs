//! The trace of a simulation: every datagram, who sent it, and what became of it.

use std::net::SocketAddr;
use std::time::Duration;

use super::Fate;

/// One datagram offered to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
        }
    }
}
