//! The sending half of a channel (spec §3.2, §3.2.1-§3.2.3).
//!
//! Each packet gets the next 24-bit id, provided it lies in the channel transfer window
//! `Q_t = [n_b, n_b + N_Q)`; packets that do not fit wait, unnumbered, until a window
//! acknowledgement moves `n_b`. A packet depends on the previously sent reliable packet,
//! written as the distance back to it, or 0 when there is none or the distance reaches
//! N_Q (the window already orders such packets). A packet larger than a fragment of the
//! datagram size in use when it is numbered is cut into fragments of that size (whole
//! granules, see [`crate::wire::granule`]) that share the caller's buffer; a smaller one
//! travels whole, whatever its length against the negotiated size. Unreliable packets whose id satisfies
//! `id mod M = M - 1` are followed by a reliable sentinel message with the same id and
//! dependency. On an unordered channel every packet is reliable and depends on nothing:
//! the receiver delivers each as soon as it is complete.
//!
//! All messages go to the transfer layer at the channel's priority, in order.

use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use super::{ChannelParams, MessageSink};
use crate::config::Priority;
use crate::seq::SeqSpace;
pub(crate) use crate::transfer::MESSAGE_OVERHEAD;
use crate::transfer::{OutMessage, Tag, stamped};
use crate::wire::{Fragment, MessageKind, SendMode};

/// What a packet of `len` bytes costs against its channel's queue limit once it is split
/// into `fragment_size` messages (see `OutMessage::cost`). At the negotiated fragment size
/// (the most messages a packet is cut into when it is numbered), it is what a packet
/// waiting for window space is charged, and what decides whether a packet can ever fit.
pub(crate) fn packet_cost(len: usize, fragment_size: usize) -> usize {
    len + len.div_ceil(fragment_size).max(1) * MESSAGE_OVERHEAD
}

/// A packet the application sent, not yet cut into messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Packet {
    pub(crate) data: Bytes,
    pub(crate) mode: SendMode,
    /// `Within` a deadline (unreliable data on a channel that has one), stamped into
    /// `Expires` at the next call that gives the time; `Plain` otherwise.
    pub(crate) deadline: Tag,
}

/// What a window acknowledgement did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WindowAck {
    /// It moved the transfer window.
    Moved,
    /// It was applied before (honest: a resent frame or a duplicated datagram).
    Duplicate,
    /// It names an id that is not spaced or was never sent: a protocol violation.
    Invalid,
}

#[derive(Debug)]
pub(crate) struct ChannelSender {
    index: u8,
    priority: Priority,
    params: ChannelParams,
    /// Payload bytes of a fragment at the negotiated datagram size (at most a datagram: a
    /// `u32`, so the sender is 8 bytes smaller than with a `usize`); the granule is a 16th
    /// of it.
    fragment: u32,
    /// The id the next packet gets.
    next: u32,
    /// `n_b`, the base of the transfer window.
    base: u32,
    last_reliable: Option<u32>,
    /// Packets waiting for window space, not yet numbered.
    waiting: VecDeque<Packet>,
    /// How long an unreliable packet may wait to be sent (`None`: as long as it takes).
    deadline: Option<Duration>,
    /// A newer unreliable packet replaces older ones still queued.
    latest_only: bool,
    /// The receiver delivers in any order: packets carry no dependency.
    unordered: bool,
    waiting_bytes: usize,
}

impl ChannelSender {
    pub(crate) fn new(
        index: u8,
        priority: Priority,
        params: ChannelParams,
        fragment_size: usize,
        first_id: u32,
    ) -> Self {
        Self {
            index,
            priority,
            params,
            fragment: u32::try_from(fragment_size).unwrap_or(u32::MAX),
            next: first_id,
            base: first_id,
            last_reliable: None,
            waiting: VecDeque::new(),
            deadline: None,
            latest_only: false,
            unordered: false,
            waiting_bytes: 0,
        }
    }

    /// Makes the channel unordered: its packets carry no dependency.
    pub(crate) fn with_unordered(mut self, unordered: bool) -> Self {
        self.unordered = unordered;
        self
    }

    /// Whether the channel is unordered (and so carries reliable packets only).
    pub(crate) fn unordered(&self) -> bool {
        self.unordered
    }

    /// Sets the channel's policy for unreliable data: its deadline, and whether a newer
    /// packet replaces older ones still queued.
    pub(crate) fn with_unreliable_policy(mut self, deadline: Option<Duration>, latest_only: bool) -> Self {
        self.deadline = deadline;
        self.latest_only = latest_only;
        self
    }

    /// Whether a newer unreliable packet replaces older ones still queued.
    pub(crate) fn latest_only(&self) -> bool {
        self.latest_only
    }

    /// The packet `data`, sent in `mode`, with its deadline if it has one.
    pub(crate) fn packet(&self, data: Bytes, mode: SendMode) -> Packet {
        let deadline = match (mode, self.deadline) {
            (SendMode::Unreliable, Some(d)) => Tag::Within(d),
            _ => Tag::Plain,
        };
        Packet { data, mode, deadline }
    }

    /// Stamps the deadlines of packets waiting since the last stamp, as counted from
    /// `now` (see `SendQueues::stamp`).
    pub(crate) fn stamp(&mut self, now: Time) {
        for p in self.waiting.iter_mut().rev() {
            let Tag::Within(d) = p.deadline else { break };
            p.deadline = stamped(now, d);
        }
    }

    /// The priority all this channel's messages go at.
    pub(crate) fn priority(&self) -> Priority {
        self.priority
    }

    /// Payload bytes of a fragment at the negotiated datagram size.
    pub(crate) fn fragment_size(&self) -> usize {
        self.fragment as usize
    }

    /// The connection's granule (see [`crate::wire::granule`]).
    pub(crate) fn granule(&self) -> usize {
        crate::wire::granule_of(self.fragment_size())
    }

    /// Payload bytes of a fragment cut at the negotiated datagram size: its whole
    /// granules (16).
    pub(crate) fn base_cut(&self) -> usize {
        (self.fragment_size() / self.granule()).max(1) * self.granule()
    }

    /// What a packet of `len` bytes costs against the queue limit at most, cut at the
    /// negotiated size (see [`packet_cost`]).
    pub(crate) fn cost(&self, len: usize) -> usize {
        packet_cost(len, self.base_cut())
    }

    fn window_open(&self) -> bool {
        SeqSpace::PACKET.distance(self.base, self.next) < self.params.window
    }

    /// Sends a packet now, or keeps it until the window opens.
    pub(crate) fn send(&mut self, packet: Packet, sink: &mut impl MessageSink) {
        if self.waiting.is_empty() && self.window_open() {
            self.emit(packet, sink);
        } else {
            self.waiting_bytes += self.cost(packet.data.len());
            self.waiting.push_back(packet);
        }
    }

    fn emit(&mut self, Packet { data, mode, deadline }: Packet, sink: &mut impl MessageSink) {
        let s = SeqSpace::PACKET;
        let id = self.next;
        self.next = s.add(id, 1);
        let dependency = match self.last_reliable {
            Some(r) if !self.unordered && s.distance(r, id) < self.params.window => s.distance(r, id),
            _ => 0,
        };
        if mode == SendMode::Reliable {
            self.last_reliable = Some(id);
        }
        let len = data.len();
        // The size in use now, never below the negotiated one the receiver's limits count.
        let room = sink.fragment_room().max(self.fragment_size());
        let message = |fragment, payload| OutMessage {
            kind: MessageKind::Fragment(mode),
            channel: self.index,
            id,
            dependency,
            fragment,
            payload,
            tag: deadline,
        };
        if len <= room {
            // The caller's buffer itself: no slice, no reference count to touch.
            sink.enqueue(self.priority, message(Fragment::WHOLE, data));
        } else {
            // Whole granules per fragment, as many as the size in use holds.
            let granule = self.granule();
            let cut = (room / granule).max(1) * granule;
            let count = len.div_ceil(granule) as u32;
            for from in (0..len).step_by(cut) {
                let to = (from + cut).min(len);
                let fragment = Fragment { index: (from / granule) as u32, count };
                sink.enqueue(self.priority, message(fragment, data.slice(from..to)));
            }
        }
        if mode == SendMode::Unreliable && s.is_spaced(id, self.params.ack_spacing) {
            sink.enqueue(
                self.priority,
                OutMessage {
                    kind: MessageKind::Sentinel,
                    channel: self.index,
                    id,
                    dependency,
                    fragment: Fragment::WHOLE,
                    payload: Bytes::new(),
                    tag: Tag::Plain,
                },
            );
        }
    }

    /// A window acknowledgement for `m` arrived. Changes nothing unless `m` is a spaced id
    /// inside the transfer window that was sent.
    pub(crate) fn on_window_ack(&mut self, m: u32, sink: &mut impl MessageSink) -> WindowAck {
        let s = SeqSpace::PACKET;
        let sent = s.distance(self.base, self.next);
        if !s.is_spaced(m, self.params.ack_spacing) {
            return WindowAck::Invalid;
        }
        if s.distance(self.base, m) >= sent {
            // Behind the window by at most a window: one already applied, carried again
            // by a resent frame or a duplicated datagram. Anything else was never sent.
            let behind = s.distance(m, self.base);
            return if (1..=self.params.window).contains(&behind) { WindowAck::Duplicate } else { WindowAck::Invalid };
        }
        self.base = s.add(m, 1);
        while self.window_open() {
            let Some(packet) = self.waiting.pop_front() else { break };
            self.waiting_bytes -= self.cost(packet.data.len());
            self.emit(packet, sink);
        }
        WindowAck::Moved
    }

    /// Whether an id may travel as its low 16 bits: the receiver's window base lies in
    /// `[n_b, next]`, and every id sent and not yet window-acknowledged stays within a
    /// quarter of the 16-bit range of it, leaving margin for ids that move while a datagram
    /// is in flight.
    pub(crate) fn short_id(&self, id: u32) -> bool {
        let s = SeqSpace::PACKET;
        let span = s.distance(self.base, self.next);
        span <= (1 << 14) && s.distance(self.base, id) < span
    }

    /// Bytes this half holds: its waiting list and the packets in it.
    pub(crate) fn memory(&self) -> usize {
        self.waiting.capacity() * size_of::<Packet>() + self.waiting_bytes
    }

    /// What the packets waiting for window space cost (see [`ChannelSender::cost`]).
    pub(crate) fn waiting_bytes(&self) -> usize {
        self.waiting_bytes
    }

    /// Drops waiting unreliable packets, oldest first, until `need` bytes are freed.
    /// Returns the bytes and packets freed.
    pub(crate) fn drop_waiting_unreliable(&mut self, need: usize) -> (usize, usize) {
        let (mut freed, mut packets) = (0, 0);
        let cut = self.base_cut();
        self.waiting.retain(|p| {
            if freed < need && p.mode == SendMode::Unreliable {
                freed += packet_cost(p.data.len(), cut);
                packets += 1;
                false
            } else {
                true
            }
        });
        self.waiting_bytes -= freed;
        (freed, packets)
    }

    /// Whether every packet has been handed to the transfer layer.
    pub(crate) fn is_drained(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Forgets waiting packets.
    pub(crate) fn clear(&mut self) {
        self.waiting.clear();
        self.waiting_bytes = 0;
    }

    /// `n_b`.
    #[cfg(test)]
    pub(crate) fn window_base(&self) -> u32 {
        self.base
    }
}
