//! A connection's data path once both sides' parameters are known: its transfer layer,
//! its channels and its reassembly budget.
//!
//! Receiving a datagram: decode and verify it (ids expanded from the windows as they are
//! before the datagram), hand acknowledgements and pings to the transfer layer, then, for a
//! frame inside the receive window, decide admission for the whole frame (a frame is
//! stored and acknowledged whole, or neither), store its messages, and let every channel
//! that got one deliver what it can. Sending: channels queue messages into the transfer
//! layer, which each flush turns into datagrams.

use std::time::Instant;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::arena::Arena;

use super::negotiate::Params;
use crate::channel::{
    Admission, Budget, Channel, ChannelParams, ChannelReceiver, ChannelSender, ENTRY_OVERHEAD, ENTRY_SIZE,
    MAX_DISPLACED, Marks, Refused, Tier, WindowAck,
};
use crate::config::PeerConfig;
use crate::event::{Event, PeerId, SendError};
use crate::seq::{FRAME_WINDOW, PACKET_WINDOW, WINDOW_ACK_SPACING};
use crate::transfer::{IdPolicy, MESSAGE_OVERHEAD, OutMessage, Priority, SPAN_COST, Transfer, TransferConfig};
use crate::wire::{ConnectRequest, Data, DecodeError, Expand, Fragment, Key, Message, MessageKind, SendMode};

/// Counters of the data path beyond the transfer layer's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) packets_sent: u64,
    pub(crate) packets_received: u64,
    pub(crate) unreliable_dropped: u64,
    pub(crate) frames_refused: u64,
    pub(crate) violations: u64,
}

#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) transfer: Transfer,
    channels: Vec<Channel>,
    priorities: Vec<Priority>,
    caps: Vec<usize>,
    budget: Budget,
    pub(crate) params: Params,
    send_key: Key,
    recv_key: Key,
    pub(crate) counters: Counters,
}

/// Expands truncated ids from the transfer layer's and the channels' windows.
struct Windows<'s> {
    transfer: &'s Transfer,
    channels: &'s [Channel],
}

impl Expand for Windows<'_> {
    fn frame_id(&self, truncated: u32, bytes: u32) -> u32 {
        self.transfer.expand_frame_id(truncated, bytes)
    }

    fn ack_largest(&self, truncated: u16) -> u32 {
        self.transfer.expand_ack_largest(truncated)
    }

    fn packet_id(&self, channel: u8, truncated: u16) -> u32 {
        // An unknown channel is a violation the store pass reports; any value will do.
        self.channels.get(usize::from(channel)).map_or(u32::from(truncated), |c| c.recv.expand(truncated))
    }
}

/// The windows as they start, before any session exists: how a connecting side verifies
/// the first data frame it receives (which then counts as the acknowledgement).
pub(crate) struct InitialWindows {
    remote_frame: u32,
    local_frame: u32,
    remote_packet: u32,
}

impl InitialWindows {
    pub(crate) fn new(local: &ConnectRequest, remote: &ConnectRequest) -> Self {
        Self { remote_frame: remote.frame_base, local_frame: local.frame_base, remote_packet: remote.packet_base }
    }
}

impl Expand for InitialWindows {
    fn frame_id(&self, truncated: u32, bytes: u32) -> u32 {
        crate::seq::SeqSpace::FRAME.expand(truncated, 8 * bytes, self.remote_frame)
    }

    fn ack_largest(&self, truncated: u16) -> u32 {
        crate::seq::SeqSpace::FRAME.expand_below(u32::from(truncated), 16, self.local_frame)
    }

    fn packet_id(&self, _channel: u8, truncated: u16) -> u32 {
        crate::seq::SeqSpace::PACKET.expand(u32::from(truncated), 16, self.remote_packet)
    }
}

/// Which of a frame's messages [`Session::admit`] lets in.
struct Admit {
    /// All of them, and the frame is acknowledged. Otherwise only the progress messages
    /// and fragments for room already reserved, and the sender resends the frame.
    whole: bool,
    /// The messages (indices in the frame) stored beyond the budget, for progress.
    progress: SmallVec<[usize; 4]>,
}

/// The messages of one verified frame, decoded once. Inline up to a full datagram of
/// 32-byte messages; a frame of many tiny ones spills to the heap.
pub(crate) type FrameMessages<'d> = SmallVec<[Message<'d>; 64]>;

/// The sending channels decide how wide each id must be.
struct Ids<'s>(&'s [Channel]);

impl IdPolicy for Ids<'_> {
    fn short_id(&self, channel: u8, id: u32) -> bool {
        self.0.get(usize::from(channel)).is_some_and(|c| c.send.short_id(id))
    }
}

/// `payload` as a slice of `datagram`, without copying. `payload` always comes from
/// decoding `datagram`; should it not, it is copied rather than trusted.
fn share(datagram: &Bytes, payload: &[u8]) -> Bytes {
    let base = datagram.as_ptr() as usize;
    let start = (payload.as_ptr() as usize).wrapping_sub(base);
    match start.checked_add(payload.len()) {
        _ if payload.is_empty() => Bytes::new(),
        Some(end) if end <= datagram.len() => datagram.slice(start..end),
        _ => Bytes::copy_from_slice(payload),
    }
}

/// Most frames and message slots the in-flight record may span (see
/// `TransferConfig::span_limit`). Every message held costs its channel at least a queue
/// slot of its limit, so twice the messages the limits allow leaves room for done frames
/// in between.
fn span_limit(cfg: &PeerConfig) -> usize {
    let queued: usize = cfg.channels.iter().map(|c| c.max_queued_bytes).sum();
    (2 * queued / MESSAGE_OVERHEAD).clamp(64, FRAME_WINDOW as usize)
}

/// An upper bound on the heap a connected peer holds under `cfg`, whatever the remote
/// does (see [`PeerConfig::memory_limit`], which documents the terms).
pub(crate) fn memory_bound(cfg: &PeerConfig) -> usize {
    let channels = cfg.channels.len();
    let queued: usize = cfg.channels.iter().map(|c| c.max_queued_bytes).sum();
    let packet = cfg.max_packet_size + cfg.mtu + ENTRY_OVERHEAD;
    let reassembly = cfg.max_reassembly_bytes + channels * (3 * packet + cfg.mtu);
    // Entries holding data are charged their slots (twice over) within `reassembly`;
    // sentinel-only entries are not (at most N_Q / M per channel), nor the markers of
    // displaced passive packets (at most MAX_DISPLACED).
    let sentinels = channels * ((PACKET_WINDOW / WINDOW_ACK_SPACING) as usize + MAX_DISPLACED);
    let receive = 2 * reassembly + 2 * sentinels * ENTRY_SIZE;
    let send = 5 * queued + span_limit(cfg) * SPAN_COST;
    let fixed = size_of::<Session>() + channels * (size_of::<Channel>() + 2 * size_of::<usize>()) + FIXED_SLACK;
    receive + send + fixed
}

/// The small structures a session holds besides its queues: acknowledgement ranges, the
/// ping ring, the queues' minimum capacities.
const FIXED_SLACK: usize = 16 << 10;

impl Session {
    /// A session between `local` (this side's request) and `remote` (the other's).
    /// `seed`: secret randomness for the frame ids the transfer layer skips.
    pub(crate) fn new(
        cfg: &PeerConfig,
        params: Params,
        local: &ConnectRequest,
        remote: &ConnectRequest,
        seed: u64,
    ) -> Self {
        let mut tc = TransferConfig::new(params.mtu, params.channels);
        tc.skip_seed = seed | 1;
        tc.initial_window = cfg.initial_window * params.mtu;
        tc.bandwidth = params.send_bandwidth;
        tc.ping_interval = cfg.ping_interval;
        tc.span_limit = span_limit(cfg);
        let fragment = crate::wire::fragment_payload(params.mtu);
        let channels = cfg
            .channels
            .iter()
            .enumerate()
            .map(|(i, c)| Channel {
                index: i as u8,
                send: ChannelSender::new(i as u8, c.priority, ChannelParams::default(), fragment, local.packet_base),
                recv: ChannelReceiver::new(
                    ChannelParams::default(),
                    fragment,
                    params.recv_max_packet,
                    remote.packet_base,
                ),
            })
            .collect();
        Self {
            transfer: Transfer::new(tc, local.frame_base, remote.frame_base),
            channels,
            priorities: cfg.channels.iter().map(|c| c.priority).collect(),
            caps: cfg.channels.iter().map(|c| c.max_queued_bytes).collect(),
            budget: Budget::new(cfg.max_reassembly_bytes),
            params,
            send_key: Key::connection(local.nonce, remote.nonce),
            recv_key: Key::connection(remote.nonce, local.nonce),
            counters: Counters::default(),
        }
    }

    /// Queues a packet on `channel`.
    pub(crate) fn send(&mut self, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        let channels = self.channels.len();
        let cap = self.caps.get(channel).copied().unwrap_or(0);
        let Some(ch) = self.channels.get_mut(channel) else {
            return Err(SendError::NoSuchChannel { channel, channels });
        };
        let len = data.len();
        if len > self.params.send_max_packet {
            return Err(SendError::TooLarge { size: len, max: self.params.send_max_packet });
        }
        match ch.send(data, mode, cap, &mut self.transfer) {
            Ok(dropped) => {
                self.counters.packets_sent += 1;
                self.counters.unreliable_dropped += dropped as u64;
                Ok(())
            }
            Err(Refused::QueueFull) => Err(SendError::QueueFull { channel }),
            Err(Refused::NeverFits { max }) => Err(SendError::TooLarge { size: len, max }),
        }
    }

    /// Decodes and verifies a connection datagram against the current windows, collecting
    /// its messages in `msgs` (cleared first).
    pub(crate) fn decode<'d>(&self, datagram: &'d [u8], msgs: &mut FrameMessages<'d>) -> Result<Data<'d>, DecodeError> {
        msgs.clear();
        let windows = Windows { transfer: &self.transfer, channels: &self.channels };
        let data = Data::decode_with(datagram, self.recv_key, &windows, |m| msgs.push(m));
        if data.is_err() {
            msgs.clear();
        }
        data
    }

    /// Processes a verified datagram; delivered packets become events for `peer`.
    pub(crate) fn process(
        &mut self,
        now: Instant,
        data: &Data<'_>,
        msgs: &[Message<'_>],
        datagram: &Bytes,
        peer: PeerId,
        events: &mut impl Extend<Event>,
    ) {
        self.transfer.on_datagram(now, data, datagram.len());
        let Some(k) = data.frame_id else { return };
        if !self.transfer.frame_in_window(k) {
            return;
        }
        let admit = self.admit(msgs);
        if admit.whole {
            self.transfer.accept_frame(k);
        } else {
            self.counters.frames_refused += 1;
        }
        let mut touched = [0u64; 4];
        for (j, m) in msgs.iter().enumerate() {
            let exempt = admit.progress.contains(&j);
            // Of a frame refused, progress messages and fragments for room already
            // reserved; never control messages, which the resent frame brings again.
            if !admit.whole && !exempt {
                let reserved = matches!(m.kind, MessageKind::Fragment(_))
                    && self.channels.get(usize::from(m.channel)).is_some_and(|c| c.recv.memory_need(m) == 0);
                if !reserved {
                    continue;
                }
            }
            let i = usize::from(m.channel);
            let Some(ch) = self.channels.get_mut(i) else {
                self.counters.violations += 1;
                continue;
            };
            if m.kind == MessageKind::WindowAck {
                if ch.send.on_window_ack(m.id, &mut self.transfer) == WindowAck::Invalid {
                    self.counters.violations += 1;
                }
                continue;
            }
            if let Some((data, mode)) = ch.recv.deliver_now(m, || share(datagram, m.payload)) {
                self.counters.packets_received += 1;
                events.extend(Some(Event::Received { peer, channel: i, mode, data }));
                continue;
            }
            match ch.recv.on_message(m, share(datagram, m.payload), &mut self.budget, exempt) {
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
            let counters = &mut self.counters;
            ch.recv.deliver(&mut self.budget, |data, mode| {
                counters.packets_received += 1;
                events.extend(Some(Event::Received { peer, channel: i, mode, data }));
            });
            ch.recv.detach();
        }
    }

    /// Decides which of a frame's messages may be stored.
    ///
    /// The whole frame when it fits the budget, after evicting unreliable data if need
    /// be. Each channel may also exceed the budget by what it needs to make progress
    /// ([`Admission::Progress`]), one message per channel per frame, so that the bound in
    /// the channel docs holds however a frame is packed. When the rest does not fit, the
    /// frame goes unacknowledged and only part of it is stored: those progress messages,
    /// and fragments that fill room already reserved (see [`Session::process`]). The
    /// sender resends the frame; its stored messages are then duplicates, and the
    /// progress they made (a packet completed and delivered) frees the room the rest
    /// needs. Storing nothing would deadlock: the fragment that completes the packet the
    /// channel waits for can share a frame with packets that wait behind it.
    fn admit(&mut self, msgs: &[Message<'_>]) -> Admit {
        let mut need = 0;
        for m in msgs {
            if let Some(ch) = self.channels.get(usize::from(m.channel)) {
                need += ch.recv.memory_need(m);
            }
        }
        // Nothing new to hold is always fine, even when progress has taken the budget
        // over its cap.
        if need == 0 || self.budget.shortfall(need) == 0 {
            return Admit { whole: true, progress: SmallVec::new() };
        }
        let mut marks: SmallVec<[(u8, Marks); 4]> = SmallVec::new();
        let mut granted = [0u64; 4];
        let mut progress = SmallVec::new();
        need = 0;
        for (i, m) in msgs.iter().enumerate() {
            let c = m.channel;
            let Some(ch) = self.channels.get(usize::from(c)) else { continue };
            let mk = match marks.iter().find(|(k, _)| *k == c) {
                Some(&(_, mk)) => mk,
                None => {
                    let mk = ch.recv.marks();
                    marks.push((c, mk));
                    mk
                }
            };
            let (word, bit) = (usize::from(c / 64), 1u64 << (c % 64));
            match ch.recv.admission(m, &mk) {
                Admission::Free => {}
                Admission::Progress if granted.get(word).is_some_and(|w| w & bit == 0) => {
                    if let Some(w) = granted.get_mut(word) {
                        *w |= bit;
                    }
                    progress.push(i);
                }
                Admission::Progress => need += ch.recv.memory_need(m),
                Admission::Needs(n) => need += n,
            }
        }
        let whole = |progress| Admit { whole: true, progress };
        if need == 0 {
            return whole(progress);
        }
        for tier in Tier::ALL {
            for ch in &mut self.channels {
                let short = self.budget.shortfall(need);
                if short == 0 {
                    return whole(progress);
                }
                ch.recv.evict(tier, short, &mut self.budget);
            }
        }
        Admit { whole: self.budget.shortfall(need) == 0, progress }
    }

    /// Runs timers and writes every datagram the windows allow now.
    pub(crate) fn flush(&mut self, now: Instant, arena: &mut Arena, mut emit: impl FnMut(Bytes)) {
        self.transfer.on_timeout(now);
        for (i, ch) in self.channels.iter_mut().enumerate() {
            if let Some(m) = ch.recv.take_window_ack() {
                let priority = self.priorities.get(i).copied().unwrap_or_default();
                self.transfer.enqueue(
                    priority,
                    OutMessage {
                        kind: MessageKind::WindowAck,
                        channel: i as u8,
                        id: m,
                        dependency: 0,
                        fragment: Fragment::WHOLE,
                        payload: Bytes::new(),
                    },
                );
            }
        }
        loop {
            let out = arena.room(self.params.mtu);
            let ids = Ids(&self.channels);
            let Some(n) = self.transfer.poll_datagram(now, self.send_key, &ids, out) else { break };
            emit(out.split_to(n).freeze());
        }
    }

    /// Whether every packet sent has been handed over and acknowledged (or, unreliable,
    /// sent and forgotten).
    pub(crate) fn is_drained(&self) -> bool {
        self.transfer.is_idle() && self.channels.iter().all(|c| c.send.is_drained())
    }

    /// Drops every packet waiting to be sent.
    pub(crate) fn clear(&mut self) {
        self.transfer.clear();
        for ch in &mut self.channels {
            ch.send.clear();
        }
    }

    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        self.transfer.next_timeout()
    }

    /// Bytes this connection holds: its structures, queued and in-flight payloads, and
    /// reassembly memory.
    pub(crate) fn memory(&self) -> usize {
        size_of::<Self>()
            + self.transfer.memory()
            + self.channels.capacity() * size_of::<Channel>()
            + self.channels.iter().map(|c| c.send.memory() + c.recv.memory()).sum::<usize>()
            + (self.priorities.capacity() + self.caps.capacity()) * size_of::<usize>()
            + self.budget.used()
    }

    pub(crate) fn reassembly_bytes(&self) -> usize {
        self.budget.used()
    }

    pub(crate) fn queued_bytes(&self) -> usize {
        self.channels.iter().map(|c| c.held(&self.transfer)).sum()
    }
}

/// What a peer that knows the keys could compute; fuzzing forges datagrams with it to
/// reach the code behind the check.
#[cfg(feature = "arbitrary")]
impl Session {
    /// The references this side expands ids around: one past the newest frame received,
    /// the next frame id it sends, and each channel's next expected packet id.
    pub(crate) fn id_references(&self) -> (u32, u32, Vec<u32>) {
        let (recv, send) = self.transfer.id_references();
        (recv, send, self.channels.iter().map(|c| c.recv.window_base()).collect())
    }

    /// The check this side accepts on `body`, a data datagram without its check.
    pub(crate) fn seal(&self, body: &[u8]) -> Result<u32, DecodeError> {
        Data::seal(body, self.recv_key, &Windows { transfer: &self.transfer, channels: &self.channels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_slices_without_copying_and_never_panics() {
        let d = Bytes::from_static(b"hello world");
        let s = share(&d, &d[6..]);
        assert_eq!(&s[..], b"world");
        assert_eq!(s.as_ptr(), d[6..].as_ptr(), "a slice, not a copy");
        assert!(share(&d, &[]).is_empty());
        let other = [1u8, 2, 3];
        assert_eq!(&share(&d, &other)[..], &other, "foreign bytes are copied");
    }
}
