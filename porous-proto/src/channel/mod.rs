//! The sequencing layer (spec §3.2): channels that turn packets into messages for the
//! transfer layer and received messages back into packets, in order and exactly once.
//!
//! Each channel has an independent packet id space per direction (Y = 2^24), a sending
//! half ([`send`]) and a receiving half ([`recv`]). Reliable and passive fragments travel
//! reliably in the transfer layer, unreliable fragments unreliably, sentinels and window
//! acknowledgements reliably; every message of a channel goes at the channel's priority, so
//! the transfer layer never reorders a channel's messages on the way out.
//!
//! Guarantees, per channel and direction:
//!
//! - reliable packets are delivered exactly once, in send order, and the channel stalls
//!   until each is;
//! - unreliable and passive packets are delivered at most once and never out of order; an
//!   undelivered one is skipped only when a newer packet is delivered;
//! - a stall is confined to its channel; once losses stop, sentinels and window
//!   acknowledgements keep both windows moving, so nothing stalls forever.
//!
//! Memory on the receiving side is charged to a per-peer [`Budget`].

pub(crate) mod recv;
pub(crate) mod send;

use bytes::Bytes;

use crate::seq::{PACKET_WINDOW, WINDOW_ACK_SPACING};
use crate::transfer::{OutMessage, Priority, Transfer};
use crate::wire::SendMode;
pub(crate) use recv::{Admission, ChannelReceiver, ENTRY_OVERHEAD, ENTRY_SIZE, MAX_DISPLACED, Marks, Tier};
pub(crate) use send::{ChannelSender, WindowAck, packet_cost};

/// The channel window constants, parameters so tests can use the spec's small figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChannelParams {
    /// N_Q.
    pub(crate) window: u32,
    /// M, a power of two dividing N_Q.
    pub(crate) ack_spacing: u32,
}

impl Default for ChannelParams {
    fn default() -> Self {
        Self { window: PACKET_WINDOW, ack_spacing: WINDOW_ACK_SPACING }
    }
}

/// Where a channel's sending half puts its messages: the transfer layer, or a test.
pub(crate) trait MessageSink {
    fn enqueue(&mut self, priority: Priority, m: OutMessage);
    /// Bytes of `channel`'s messages queued or in flight.
    fn queued_bytes(&self, channel: u8) -> usize;
    /// Drops queued unsent unreliable packets of `channel`, oldest first, to free `need`
    /// bytes; returns the bytes freed.
    fn drop_unreliable(&mut self, channel: u8, need: usize) -> usize;
}

impl MessageSink for Transfer {
    fn enqueue(&mut self, priority: Priority, m: OutMessage) {
        Self::enqueue(self, priority, m);
    }

    fn queued_bytes(&self, channel: u8) -> usize {
        Self::queued_bytes(self, channel)
    }

    fn drop_unreliable(&mut self, channel: u8, need: usize) -> usize {
        Self::drop_unreliable(self, channel, need)
    }
}

/// A peer's reassembly memory: what its channels' receive queues hold, against a cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    used: usize,
    cap: usize,
}

impl Budget {
    pub(crate) fn new(cap: usize) -> Self {
        Self { used: 0, cap }
    }

    pub(crate) fn charge(&mut self, bytes: usize) {
        self.used += bytes;
    }

    pub(crate) fn credit(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }

    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Bytes that must be freed before `need` more fit.
    pub(crate) fn shortfall(&self, need: usize) -> usize {
        (self.used + need).saturating_sub(self.cap)
    }
}

/// A message the peer should not have sent; counted and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Violation {
    /// A fragment disagreeing with earlier ones of its packet (count, mode, dependency).
    Inconsistent,
    /// A fragment of the wrong size for its position.
    BadFragment,
    /// A packet larger than this side accepts.
    TooLarge,
}

/// One channel of a connection: both directions.
#[derive(Debug)]
pub(crate) struct Channel {
    pub(crate) index: u8,
    pub(crate) send: ChannelSender,
    pub(crate) recv: ChannelReceiver,
}

/// Why a channel did not take a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The send queue is full of data that may not be dropped; it drains as the remote
    /// acknowledges.
    QueueFull,
    /// The packet alone costs more than the queue limit: it could never be queued. `max`
    /// is the largest packet that can.
    NeverFits { max: usize },
}

/// The largest packet whose [`packet_cost`] fits `cap` bytes.
fn largest_fitting(cap: usize, fragment_size: usize) -> usize {
    let whole = cap / (fragment_size + send::MESSAGE_OVERHEAD);
    let rest = cap - whole * (fragment_size + send::MESSAGE_OVERHEAD);
    whole * fragment_size + rest.saturating_sub(send::MESSAGE_OVERHEAD)
}

impl Channel {
    /// Bytes this channel holds on the sending side: waiting for window space, queued, or in
    /// flight awaiting acknowledgement.
    pub(crate) fn held(&self, sink: &impl MessageSink) -> usize {
        sink.queued_bytes(self.index) + self.send.waiting_bytes()
    }

    /// Sends a packet within the channel's queue limit of `cap` bytes. Reliable and passive
    /// data that does not fit is refused; unreliable data makes room by dropping older
    /// unreliable packets, and is itself dropped when that is not enough. Returns how many
    /// unreliable packets were dropped (the new one included). A packet larger than the
    /// limit itself is refused in every mode: no waiting would let it in.
    pub(crate) fn send(
        &mut self,
        data: Bytes,
        mode: SendMode,
        cap: usize,
        sink: &mut impl MessageSink,
    ) -> Result<usize, Refused> {
        let cost = self.send.cost(data.len());
        if cost > cap {
            return Err(Refused::NeverFits { max: largest_fitting(cap, self.send.fragment_size()) });
        }
        let over = (self.held(sink) + cost).saturating_sub(cap);
        let mut dropped = 0;
        if over > 0 {
            if mode != SendMode::Unreliable {
                return Err(Refused::QueueFull);
            }
            // Oldest first: what already waits in the transfer queues, then the packets
            // still waiting for window space.
            let mut freed = sink.drop_unreliable(self.index, over);
            if freed < over {
                let (bytes, packets) = self.send.drop_waiting_unreliable(over - freed);
                freed += bytes;
                dropped += packets;
            }
            if freed < over {
                return Ok(dropped + 1);
            }
        }
        self.send.send(data, mode, sink);
        Ok(dropped)
    }
}

#[cfg(test)]
mod tests;
