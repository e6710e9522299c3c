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
//!   until each is; on an unordered channel (reliable packets only) exactly once, each as
//!   soon as it is complete, and nothing stalls;
//! - unreliable and passive packets are delivered at most once and never out of order; an
//!   undelivered one is skipped only when a newer packet is delivered;
//! - a stall is confined to its channel; once losses stop, sentinels and window
//!   acknowledgements keep both windows moving, so nothing stalls forever.
//!
//! [`Channels`] is the layer's one interface to the connection above it: it owns every
//! channel of a connection, their queue limits and the reassembly budget they share, and
//! offers what the session needs: send a packet, expand a truncated packet id, admit a
//! received frame ([`admission`]), receive its messages, queue owed window
//! acknowledgements, and say how wide an id must travel.
//!
//! Memory on the receiving side is charged to a per-peer [`Budget`]; what may be stored is
//! decided in [`admission`] alone.

mod admission;
pub(crate) mod recv;
pub(crate) mod send;

use crate::time::Time;
use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::config::{ChannelConfig, ConfigError, PeerConfig, Priority};
use crate::event::SendError;
use crate::seq::{PACKET_WINDOW, WINDOW_ACK_SPACING};
use crate::transfer::{IdPolicy, OutMessage, Tag, Transfer};
use crate::wire::{Fragment, Message, MessageKind, SendMode};
pub(crate) use admission::{Budget, ENTRY_OVERHEAD, FrameAdmission, MAX_DISPLACED};
pub(crate) use recv::{ChannelReceiver, DELIVERED_SIZE, DELIVERED_WORDS, ENTRY_SIZE};
pub(crate) use send::{ChannelSender, Packet, WindowAck, packet_cost};

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
    /// Payload bytes of a fragment of the datagram size in use now (path MTU discovery
    /// may have grown it from the negotiated one): packets are cut for it when numbered.
    fn fragment_room(&self) -> usize;
    /// Bytes of `channel`'s messages queued or in flight.
    fn queued_bytes(&self, channel: u8) -> usize;
    /// Drops queued unsent unreliable packets of `channel`, oldest first, to free `need`
    /// bytes; returns the bytes freed.
    fn drop_unreliable(&mut self, channel: u8, need: usize) -> usize;
    /// Unreliable packets of `channel` queued and not yet sent.
    fn queued_unreliable(&self, channel: u8) -> usize;
}

impl MessageSink for Transfer {
    fn enqueue(&mut self, priority: Priority, m: OutMessage) {
        Self::enqueue(self, priority, m);
    }

    fn fragment_room(&self) -> usize {
        crate::wire::fragment_payload(self.current_mtu())
    }

    fn queued_bytes(&self, channel: u8) -> usize {
        Self::queued_bytes(self, channel)
    }

    fn drop_unreliable(&mut self, channel: u8, need: usize) -> usize {
        Self::drop_unreliable(self, channel, need)
    }

    fn queued_unreliable(&self, channel: u8) -> usize {
        Self::queued_unreliable(self, channel)
    }
}

/// A message the peer should not have sent; counted and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Violation {
    /// A fragment disagreeing with earlier ones of its packet (count, mode, dependency).
    Inconsistent,
    /// A fragment whose granules do not fit its packet: empty, passing the packet's end,
    /// or not a whole number of granules though it does not end the packet.
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

/// What sending a packet cost other unreliable packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sent {
    /// Dropped for want of queue space (the new packet included, if it was).
    pub(crate) dropped: usize,
    /// Replaced, unsent, by the new packet on a "latest only" channel.
    pub(crate) replaced: usize,
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
    /// unreliable packets were dropped (the new one included) and, on a "latest only"
    /// channel, replaced. A packet larger than the limit itself is refused in every mode: no
    /// waiting would let it in.
    pub(crate) fn send(&mut self, packet: Packet, cap: usize, sink: &mut impl MessageSink) -> Result<Sent, Refused> {
        let cost = self.send.cost(packet.data.len());
        if cost > cap {
            return Err(Refused::NeverFits { max: largest_fitting(cap, self.send.base_cut()) });
        }
        let mut sent = Sent::default();
        if packet.mode == SendMode::Unreliable && self.send.latest_only() {
            // The newest state replaces what is still queued of the older.
            let before = sink.queued_unreliable(self.index);
            sink.drop_unreliable(self.index, usize::MAX);
            let (_, waiting) = self.send.drop_waiting_unreliable(usize::MAX);
            sent.replaced = before + waiting;
        }
        let over = (self.held(sink) + cost).saturating_sub(cap);
        let mut dropped = 0;
        if over > 0 {
            if packet.mode != SendMode::Unreliable {
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
                sent.dropped = dropped + 1;
                return Ok(sent);
            }
        }
        self.send.send(packet, sink);
        sent.dropped = dropped;
        Ok(sent)
    }
}

/// Counters of a connection's channels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChannelCounters {
    pub(crate) packets_sent: u64,
    pub(crate) packets_received: u64,
    /// Unreliable packets dropped on the sending side for want of queue space.
    pub(crate) unreliable_dropped: u64,
    /// Unreliable packets replaced, unsent, by newer ones on "latest only" channels.
    pub(crate) unreliable_replaced: u64,
    /// Frames held back (not acknowledged) because the reassembly budget was full.
    pub(crate) frames_refused: u64,
    /// Messages the peer should not have sent.
    pub(crate) violations: u64,
}

/// What the channels of a host's connections share: each channel's configuration, set
/// from the host's, built once per host and kept behind one `Arc` (as `transfer::Shared`
/// is), so a connection does not carry its own copy. A per-channel option is read here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shared {
    /// Each channel's configuration (validated), in channel order.
    pub(crate) channels: Box<[ChannelConfig]>,
}

impl Shared {
    /// The channels' settings of a host whose connections are configured by `config`.
    pub(crate) fn of(config: &PeerConfig) -> Self {
        Self { channels: config.channels.clone().into_boxed_slice() }
    }

    /// Checks each channel's configuration in `config`: a queue that holds one largest
    /// packet, a weight the send lanes can hold, a positive unreliable deadline. Part of
    /// [`PeerConfig::validate`], which has checked the `mtu` and `max_packet_size` first.
    pub(crate) fn check(config: &PeerConfig) -> Result<(), ConfigError> {
        let need = packet_cost(
            config.max_packet_size,
            crate::wire::fragment_cut(config.mtu, crate::wire::granule(config.mtu)),
        );
        if let Some(i) = config.channels.iter().position(|c| c.max_queued_bytes < need) {
            return Err(ConfigError::ChannelQueue {
                channel: i,
                size: config.channels.get(i).map_or(0, |c| c.max_queued_bytes),
                need,
            });
        }
        for (i, c) in config.channels.iter().enumerate() {
            if !(1..=255).contains(&c.weight) {
                return Err(ConfigError::ChannelWeight { channel: i, weight: c.weight });
            }
            if c.unreliable_deadline.is_some_and(|d| d.is_zero()) {
                return Err(ConfigError::ChannelDeadline { channel: i });
            }
        }
        Ok(())
    }
}

/// Every channel of one connection, with their queue limits and shared reassembly budget.
///
/// A channel is made on first use (a packet sent on it, or a frame carrying one of its
/// messages): most connections use few of the channels configured, and an unused channel
/// is a pointer instead of its whole state. Until then it is exactly as a new channel
/// would be, so anything that only reads it reads a new one (made on the stack, see
/// [`Channels::view`]), and anything that would change it makes it first.
#[derive(Debug)]
pub(crate) struct Channels {
    channels: SmallVec<[Option<Box<Channel>>; 4]>,
    /// The host's channel settings: each channel's configuration and queue limit.
    shared: Arc<Shared>,
    /// What a new channel starts with: fragment size, largest packet received, first
    /// packet id each way.
    fragment: usize,
    recv_max_packet: usize,
    send_base: u32,
    recv_base: u32,
    budget: Budget,
    /// The largest packet this side may send (negotiated).
    send_max_packet: usize,
    counters: ChannelCounters,
}

impl Channels {
    /// The channels of a connection whose fragments carry `fragment` bytes, that may send
    /// packets up to `send_max_packet` bytes and accepts up to `recv_max_packet`; packet ids
    /// start at `send_base` one way and `recv_base` the other; received packets may hold
    /// `max_reassembly` bytes.
    pub(crate) fn new(
        shared: Arc<Shared>,
        fragment: usize,
        (send_max_packet, recv_max_packet): (usize, usize),
        (send_base, recv_base): (u32, u32),
        max_reassembly: usize,
    ) -> Self {
        Self {
            channels: shared.channels.iter().map(|_| None).collect(),
            shared,
            fragment,
            recv_max_packet,
            send_base,
            recv_base,
            budget: Budget::new(max_reassembly),
            send_max_packet,
            counters: ChannelCounters::default(),
        }
    }

    /// Channel `i` as it starts.
    fn make(&self, i: usize) -> Option<Channel> {
        let c = self.shared.channels.get(i)?;
        let params = ChannelParams::default();
        Some(Channel {
            index: i as u8,
            send: ChannelSender::new(i as u8, c.priority, params, self.fragment, self.send_base)
                .with_unreliable_policy(c.unreliable_deadline, c.latest_only)
                .with_unordered(c.unordered),
            recv: ChannelReceiver::new(params, self.fragment, self.recv_max_packet, self.recv_base)
                .with_unordered(c.unordered),
        })
    }

    /// Runs `f` on channel `i`, or on a new one in its place if it is not made yet.
    #[inline]
    fn view<R>(&self, i: usize, f: impl FnOnce(&Channel) -> R) -> Option<R> {
        match self.channels.get(i)? {
            Some(ch) => Some(f(ch)),
            None => self.view_new(i, f),
        }
    }

    /// [`Channels::view`] of a channel not made yet: rare, and out of line.
    #[cold]
    #[inline(never)]
    fn view_new<R>(&self, i: usize, f: impl FnOnce(&Channel) -> R) -> Option<R> {
        self.make(i).map(|ch| f(&ch))
    }

    /// Channel `i`, made if it is not yet.
    #[inline]
    fn live(&mut self, i: usize) -> Option<&mut Channel> {
        if matches!(self.channels.get(i), Some(None)) {
            self.make_in_place(i);
        }
        self.channels.get_mut(i)?.as_deref_mut()
    }

    /// Makes channel `i`, once per connection: out of line, so that [`Channels::live`],
    /// on every packet's path, stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn make_in_place(&mut self, i: usize) {
        let made = self.make(i).map(Box::new);
        if let Some(slot) = self.channels.get_mut(i) {
            *slot = made;
        }
    }

    /// The channels made so far.
    fn made(&self) -> impl Iterator<Item = &Channel> {
        self.channels.iter().flatten().map(|c| &**c)
    }

    /// The channels made so far, to change.
    fn made_mut(&mut self) -> impl Iterator<Item = &mut Channel> {
        self.channels.iter_mut().flatten().map(|c| &mut **c)
    }

    /// Stamps the deadlines of packets still waiting for window space that were sent since
    /// the last stamp.
    pub(crate) fn stamp(&mut self, now: Time) {
        for ch in self.made_mut() {
            ch.send.stamp(now);
        }
    }

    /// Queues a packet on `channel`, its messages going to `sink`. An unreliable packet's
    /// deadline counts from the next [`Channels::stamp`].
    pub(crate) fn send(
        &mut self,
        channel: usize,
        data: Bytes,
        mode: SendMode,
        sink: &mut impl MessageSink,
    ) -> Result<(), SendError> {
        let channels = self.channels.len();
        let Some(cap) = self.shared.channels.get(channel).map(|c| c.max_queued_bytes) else {
            return Err(SendError::NoSuchChannel { channel, channels });
        };
        let send_max_packet = self.send_max_packet;
        let Some(ch) = self.live(channel) else {
            return Err(SendError::NoSuchChannel { channel, channels });
        };
        if ch.send.unordered() && mode != SendMode::Reliable {
            return Err(SendError::ModeNotAllowed { channel, mode });
        }
        let size = data.len();
        if size > send_max_packet {
            return Err(SendError::TooLarge { size, max: send_max_packet });
        }
        let packet = ch.send.packet(data, mode);
        match ch.send(packet, cap, sink) {
            Ok(sent) => {
                self.counters.packets_sent += 1;
                self.counters.unreliable_dropped += sent.dropped as u64;
                self.counters.unreliable_replaced += sent.replaced as u64;
                Ok(())
            }
            Err(Refused::QueueFull) => Err(SendError::QueueFull { channel }),
            Err(Refused::NeverFits { max }) => Err(SendError::TooLarge { size, max }),
        }
    }

    /// Expands a packet id on `channel` sent as its low 16 bits.
    pub(crate) fn expand_packet_id(&self, channel: u8, truncated: u16) -> u32 {
        // An unknown channel is a violation the receive pass reports; any value will do.
        self.view(usize::from(channel), |c| c.recv.expand(truncated)).unwrap_or(u32::from(truncated))
    }

    /// Stores and delivers the messages of a verified frame that [`Channels::admit`]
    /// judged (window acknowledgements go to the sending halves, whose released packets
    /// go to `sink`). `datagram` holds the messages' payloads: whole packets are delivered
    /// as slices of it. Calls `deliver` with each packet, in order per channel.
    pub(crate) fn receive(
        &mut self,
        msgs: &[Message<'_>],
        admission: &FrameAdmission,
        datagram: &Bytes,
        sink: &mut impl MessageSink,
        mut deliver: impl FnMut(usize, SendMode, Bytes),
    ) {
        if !admission.whole {
            self.counters.frames_refused += 1;
        }
        let mut touched = [0u64; 4];
        for (j, m) in msgs.iter().enumerate() {
            let i = usize::from(m.channel);
            self.live(i);
            let Some(ch) = self.channels.get_mut(i).and_then(Option::as_deref_mut) else {
                self.counters.violations += 1;
                continue;
            };
            let Some(exempt) = admission.stores(j, m, &ch.recv) else { continue };
            if m.kind == MessageKind::WindowAck {
                if ch.send.on_window_ack(m.id, sink) == WindowAck::Invalid {
                    self.counters.violations += 1;
                }
                continue;
            }
            if let Some((data, mode)) = ch.recv.deliver_now(m, || slice_of(datagram, m.payload)) {
                self.counters.packets_received += 1;
                deliver(i, mode, data);
                continue;
            }
            match ch.recv.on_message(m, slice_of(datagram, m.payload), &mut self.budget, exempt) {
                Ok(true) => {
                    if let Some(w) = touched.get_mut(i / 64) {
                        *w |= 1 << (i % 64);
                    }
                }
                Ok(false) => {}
                Err(_) => self.counters.violations += 1,
            }
        }
        for (i, ch) in self.channels.iter_mut().enumerate() {
            if touched.get(i / 64).is_none_or(|w| w & (1 << (i % 64)) == 0) {
                continue;
            }
            let Some(ch) = ch.as_deref_mut() else { continue };
            let counters = &mut self.counters;
            ch.recv.deliver(&mut self.budget, |data, mode| {
                counters.packets_received += 1;
                deliver(i, mode, data);
            });
            ch.recv.unshare();
        }
    }

    /// Queues the window acknowledgements the receiving halves owe, at each channel's
    /// priority.
    pub(crate) fn queue_window_acks(&mut self, sink: &mut impl MessageSink) {
        for ch in self.made_mut() {
            if let Some(m) = ch.recv.take_window_ack() {
                let message = OutMessage {
                    kind: MessageKind::WindowAck,
                    channel: ch.index,
                    id: m,
                    dependency: 0,
                    fragment: Fragment::WHOLE,
                    payload: Bytes::new(),
                    tag: Tag::Plain,
                };
                sink.enqueue(ch.send.priority(), message);
            }
        }
    }

    /// Whether every packet has been handed to the transfer layer.
    pub(crate) fn is_drained(&self) -> bool {
        self.made().all(|c| c.send.is_drained())
    }

    /// Forgets the packets waiting for window space.
    pub(crate) fn clear(&mut self) {
        for ch in self.made_mut() {
            ch.send.clear();
        }
    }

    /// Bytes the channels hold on the sending side (see [`Channel::held`]).
    pub(crate) fn queued_bytes(&self, sink: &impl MessageSink) -> usize {
        (0..self.channels.len()).filter_map(|i| self.view(i, |c| c.held(sink))).sum()
    }

    /// Reassembly bytes held for received packets.
    pub(crate) fn reassembly_bytes(&self) -> usize {
        self.budget.used()
    }

    /// Heap bytes of the channels' own structures and the reassembly memory.
    pub(crate) fn memory(&self) -> usize {
        let spilled = |bytes: usize, spilled: bool| if spilled { bytes } else { 0 };
        spilled(self.channels.capacity() * size_of::<Option<Box<Channel>>>(), self.channels.spilled())
            + self.made().map(|c| size_of::<Channel>() + c.send.memory() + c.recv.memory()).sum::<usize>()
            + self.budget.used()
    }

    pub(crate) fn counters(&self) -> ChannelCounters {
        self.counters
    }

    /// Each channel's next expected packet id (`m_b`); fuzzing forges datagrams with them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn window_bases(&self) -> Vec<u32> {
        (0..self.channels.len()).filter_map(|i| self.view(i, |c| c.recv.window_base())).collect()
    }
}

/// The sending halves decide how wide each id must travel.
impl IdPolicy for Channels {
    fn short_id(&self, channel: u8, id: u32) -> bool {
        self.view(usize::from(channel), |c| c.send.short_id(id)).unwrap_or(false)
    }
}

/// `payload` as a slice of `datagram`, without copying. `payload` always comes from
/// decoding `datagram`; should it not, it is copied rather than trusted.
fn slice_of(datagram: &Bytes, payload: &[u8]) -> Bytes {
    let base = datagram.as_ptr() as usize;
    let start = (payload.as_ptr() as usize).wrapping_sub(base);
    match start.checked_add(payload.len()) {
        _ if payload.is_empty() => Bytes::new(),
        Some(end) if end <= datagram.len() => datagram.slice(start..end),
        _ => Bytes::copy_from_slice(payload),
    }
}

#[cfg(test)]
mod tests;
