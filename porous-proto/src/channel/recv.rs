//! The receiving half of a channel (spec §3.2, §3.2.1-§3.2.3).
//!
//! Received messages are kept in a receive queue of packet entries sorted by id, all
//! inside the receive window `Q_r = [m_b, m_b + N_Q)`. Any other id is stale (consumed,
//! skipped, or a duplicate the network delayed past a whole window) and ignored: the
//! sender never sends outside its window, which trails this one, so nothing else exists.
//!
//! Delivery walks the queue front to back (Figures 10, 11):
//!
//! - an entry whose dependency has not been delivered stops the walk: nothing behind it is
//!   considered. A dependency is delivered exactly when it is older than `m_b`, because a
//!   reliable packet is never skipped (everything skipped lies after the last reliable
//!   packet before the entry that caused the skip);
//! - a complete entry is delivered, together with skipping every incomplete entry before it;
//! - an incomplete entry marked by a sentinel is consumed without delivering anything once
//!   the newest entry is at least `N_Q - M` ids ahead of it (§3.2.2, Figure 9);
//! - any other incomplete entry is passed over for now.
//!
//! Consuming or delivering `c` sets `m_b = c + 1`. When `m_b` passes an id `m` with
//! `m mod M = M - 1`, a window acknowledgement for the newest such `m` is owed (§3.2.1).
//!
//! An *unordered* channel carries reliable packets only and delivers each as soon as it is
//! complete: a whole packet at once, a fragmented one when its last fragment arrives,
//! whatever is missing before it. Its ids then arrive out of order and are delivered out
//! of order, so `m_b` can no longer follow the newest delivery: it is the oldest id not yet
//! delivered, and the ids delivered beyond it are remembered in a bitmap relative to it
//! ([`Delivered`], at most one window of bits: 8 KiB). An id below `m_b` or marked in the
//! bitmap is stale, which is what makes a duplicate (a resend, a repair copy, a network
//! duplicate) never reach the application twice. Every id is eventually delivered, since
//! every packet is reliable, so `m_b` always catches up and window acknowledgements keep
//! the sender's window moving.
//!
//! Reassembly: a fragment's index and count are in granules of the connection (a 16th of
//! a fragment of the negotiated size, [`crate::wire::granule`]), so fragments cut for a
//! datagram size path MTU discovery grew, and the smaller pieces a resend is cut into
//! after a black hole, reassemble alike: a fragmented packet reserves `count` granules
//! when its first fragment arrives, and a bitmap notes the granules received. Fragments
//! may overlap (a resend cut differently, a late copy of the whole packet); a granule
//! counts once. A fragment that is empty, passes the packet's end, or is not a whole
//! number of granules though it does not end the packet is a violation; so is one whose
//! count, mode, dependency or end of packet disagrees with what came before.
//!
//! Memory: every entry holding data is charged to the peer's reassembly [`Budget`];
//! entries holding only a sentinel are not (there are at most N_Q / M of them in a
//! window). Admission ([`ChannelReceiver::admission`]) lets through, whatever the budget,
//! exactly what the channel needs to make progress: data that takes no new memory, the
//! head-of-line reliable packet (unique: the only incomplete reliable packet whose
//! dependency is delivered), the passive packet at the front of the channel (one at a
//! time: a newer one is displaced to make way for an older), sentinels, whole packets the
//! delivery walk reaches at once (they free all before them), and any packet when the
//! channel holds nothing else. Everything else must fit, after evicting unreliable data
//! (and finally the markers evicted entries leave). So a peer's reassembly memory never
//! exceeds its cap by more than three packets and N_Q / M sentinel entries per channel,
//! however a hostile peer numbers, packs or orders its messages.
//!
//! Passive data is otherwise never evicted: its fragments travel reliably, so once
//! acknowledged the sender never resends them, and passive packets have no sentinels to
//! skip them by. Passive data that does not fit is refused instead, like reliable data,
//! and the sender keeps resending it. A whole packet received out of order is copied out
//! of the shared receive buffer, so a stalled channel never pins datagram buffers larger
//! than what it is charged for.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::admission::{Budget, charge};
use super::{ChannelParams, Violation};
use crate::seq::SeqSpace;
use crate::wire::{Fragment, Message, MessageKind, SendMode};

/// Heap bytes of one receive queue slot.
pub(crate) const ENTRY_SIZE: usize = size_of::<Entry>();

#[derive(Debug)]
pub(super) enum EntryData {
    /// Only a sentinel has arrived.
    Empty,
    /// An unfragmented packet; `detached` once it no longer shares a datagram buffer.
    Whole { data: Bytes, detached: bool },
    /// A fragmented packet being reassembled into `buf` (`count` granules); `have` marks
    /// the granules received, `received` counts them; `len` is known once a fragment
    /// that ends the packet arrives.
    Parts { count: u32, received: u32, have: Vec<u64>, buf: BytesMut, len: Option<usize> },
    /// Data dropped to stay within the memory budget; never completes.
    Evicted,
}

#[derive(Debug)]
pub(super) struct Entry {
    pub(super) id: u32,
    pub(super) dependency: u32,
    pub(super) mode: Option<SendMode>,
    pub(super) sentinel: bool,
    pub(super) body: EntryData,
    pub(super) charged: usize,
    /// A passive packet stored beyond the budget because it was at the front of the
    /// channel (see [`ChannelReceiver::admission`]); at most one per channel.
    pub(super) exempt: bool,
    /// The marker of such a packet, displaced by an older one (see
    /// [`ChannelReceiver::displace_exempt`]).
    pub(super) displaced: bool,
}

impl Entry {
    pub(super) fn complete(&self) -> bool {
        match &self.body {
            EntryData::Whole { .. } => true,
            EntryData::Parts { count, received, .. } => received == count,
            EntryData::Empty | EntryData::Evicted => false,
        }
    }

    fn take_data(&mut self) -> Option<Bytes> {
        match std::mem::replace(&mut self.body, EntryData::Evicted) {
            EntryData::Whole { data, .. } => Some(data),
            EntryData::Parts { buf, len, .. } => {
                let mut buf = buf;
                buf.truncate(len.unwrap_or(0));
                Some(buf.freeze())
            }
            other => {
                self.body = other;
                None
            }
        }
    }
}

/// Ids delivered beyond the window base of an unordered channel: bit `i` of `words` is
/// id `start + i`, `start` being a multiple of 64 at or below the base. Ids below the base
/// are all delivered, and ids are never delivered beyond the window, so the bitmap spans at
/// most one window ([`DELIVERED_WORDS`] words).
#[derive(Debug, Default)]
pub(super) struct Delivered {
    start: u32,
    words: VecDeque<u64>,
}

/// Most words of a [`Delivered`] bitmap at the protocol's window.
pub(crate) const DELIVERED_WORDS: usize = crate::seq::PACKET_WINDOW as usize / 64 + 1;

/// Heap bytes of a [`Delivered`] bitmap's own box, besides its words.
pub(crate) const DELIVERED_SIZE: usize = size_of::<Delivered>();

impl Delivered {
    fn contains(&self, id: u32) -> bool {
        let off = SeqSpace::PACKET.distance(self.start, id) as usize;
        self.words.get(off / 64).is_some_and(|w| w & (1 << (off % 64)) != 0)
    }

    /// Marks `id`, which lies in the window that starts at `base`.
    fn insert(&mut self, base: u32, id: u32) {
        if self.words.is_empty() {
            self.start = base & !63 & SeqSpace::PACKET.mask();
        }
        let off = SeqSpace::PACKET.distance(self.start, id) as usize;
        if self.words.len() <= off / 64 {
            self.words.resize(off / 64 + 1, 0);
        }
        if let Some(w) = self.words.get_mut(off / 64) {
            *w |= 1 << (off % 64);
        }
    }

    /// The base moved past every delivered id it reaches from `base`; forgets the words
    /// behind it.
    fn advance(&mut self, mut base: u32) -> u32 {
        while self.contains(base) {
            base = SeqSpace::PACKET.add(base, 1);
        }
        while !self.words.is_empty() && SeqSpace::PACKET.distance(self.start, base) >= 64 {
            self.words.pop_front();
            self.start = SeqSpace::PACKET.add(self.start, 64);
        }
        base
    }

    fn memory(&self) -> usize {
        self.words.capacity() * size_of::<u64>()
    }
}

#[derive(Debug)]
pub(crate) struct ChannelReceiver {
    pub(super) params: ChannelParams,
    /// Payload bytes of a fragment at the negotiated datagram size (at most a datagram: a
    /// `u32`, so the receiver is 8 bytes smaller than with a `usize`); the granule
    /// ([`ChannelReceiver::granule`]) is a 16th of it.
    fragment: u32,
    /// Largest packet accepted, and the granules that can make it.
    pub(super) max_packet: usize,
    pub(super) max_granules: u32,
    /// `m_b`, the next packet expected.
    pub(super) base: u32,
    /// Budget bytes the entries hold.
    pub(super) charged: usize,
    pub(super) queue: VecDeque<Entry>,
    pub(super) window_ack: Option<u32>,
    /// Whole entries still sharing a datagram buffer.
    pub(super) attached: usize,
    /// Markers of displaced passive packets in the queue.
    pub(super) displaced: usize,
    /// Delivers each packet as soon as it is complete (reliable packets only).
    pub(super) unordered: bool,
    /// On an unordered channel (only), the ids delivered beyond `base`: boxed, so the
    /// ordered channels most connections use carry a pointer instead of its room.
    delivered: Option<Box<Delivered>>,
}

impl ChannelReceiver {
    pub(crate) fn new(params: ChannelParams, fragment_size: usize, max_packet: usize, first_id: u32) -> Self {
        let granule = crate::wire::granule_of(fragment_size);
        let max_granules = max_packet.div_ceil(granule).clamp(1, crate::wire::MAX_GRANULES as usize);
        Self {
            params,
            fragment: u32::try_from(fragment_size).unwrap_or(u32::MAX),
            max_packet,
            max_granules: max_granules as u32,
            base: first_id,
            charged: 0,
            queue: VecDeque::new(),
            window_ack: None,
            attached: 0,
            displaced: 0,
            unordered: false,
            delivered: None,
        }
    }

    /// The connection's granule: the unit of fragment indices and counts.
    pub(super) fn granule(&self) -> usize {
        crate::wire::granule_of(self.fragment as usize)
    }

    /// Makes the channel unordered (see the module docs).
    pub(crate) fn with_unordered(mut self, unordered: bool) -> Self {
        self.unordered = unordered;
        self.delivered = unordered.then(Box::default);
        self
    }

    /// `m_b`.
    #[cfg(any(test, feature = "arbitrary"))]
    pub(crate) fn window_base(&self) -> u32 {
        self.base
    }

    /// Expands a packet id sent as its low 16 bits.
    pub(crate) fn expand(&self, truncated: u16) -> u32 {
        SeqSpace::PACKET.expand(u32::from(truncated), 16, self.base)
    }

    pub(super) fn offset(&self, id: u32) -> u32 {
        SeqSpace::PACKET.distance(self.base, id)
    }

    /// Whether `id` may still be delivered: inside the window, and on an unordered channel
    /// not delivered already.
    pub(super) fn is_new(&self, id: u32) -> bool {
        self.offset(id) < self.params.window && !self.delivered.as_deref().is_some_and(|d| d.contains(id))
    }

    pub(super) fn dependency_met(&self, id: u32, dependency: u32) -> bool {
        dependency == 0 || !self.is_new(SeqSpace::PACKET.sub(id, dependency))
    }

    pub(super) fn find(&self, id: u32) -> Result<usize, usize> {
        let off = self.offset(id);
        self.queue.binary_search_by_key(&off, |e| self.offset(e.id))
    }

    /// Whether `m` is the packet to deliver next, whole, with nothing queued: the in-order
    /// case, which [`ChannelReceiver::deliver_now`] hands over without the queue or the
    /// budget.
    pub(super) fn is_next_whole(&self, m: &Message<'_>) -> bool {
        if self.unordered {
            // Any whole packet not delivered yet (and not begun as a fragmented one).
            return m.fragment.count == 1
                && m.kind == MessageKind::Fragment(SendMode::Reliable)
                && self.is_new(m.id)
                && self.check_fragment(m).is_ok()
                && self.find(m.id).is_err();
        }
        self.queue.is_empty()
            && m.id == self.base
            && m.fragment.count == 1
            && matches!(m.kind, MessageKind::Fragment(_))
            && self.check_fragment(m).is_ok()
            && self.dependency_met(m.id, m.dependency)
    }

    /// Delivers `m` at once if it is the next packet, whole, and nothing is queued; returns
    /// it with its mode. Otherwise `m` must go through [`ChannelReceiver::on_message`].
    pub(crate) fn deliver_now(
        &mut self,
        m: &Message<'_>,
        payload: impl FnOnce() -> Bytes,
    ) -> Option<(Bytes, SendMode)> {
        let MessageKind::Fragment(mode) = m.kind else { return None };
        if !self.is_next_whole(m) {
            return None;
        }
        if self.unordered {
            self.mark_delivered(m.id);
        } else {
            self.advance(SeqSpace::PACKET.add(m.id, 1));
        }
        Some((payload(), mode))
    }

    /// Notes that `id` was delivered on an unordered channel, and moves the base past
    /// every delivered id it reaches.
    fn mark_delivered(&mut self, id: u32) {
        let Some(delivered) = self.delivered.as_deref_mut() else { return };
        delivered.insert(self.base, id);
        let to = delivered.advance(self.base);
        self.advance(to);
    }

    /// Stores a fragment or sentinel message. `payload` is `m.payload` as shared bytes;
    /// `exempt` says it was admitted beyond the budget ([`Admission::Progress`]).
    /// Returns `Ok(false)` for a message with a stale id, ignored.
    pub(crate) fn on_message(
        &mut self,
        m: &Message<'_>,
        payload: Bytes,
        budget: &mut Budget,
        exempt: bool,
    ) -> Result<bool, Violation> {
        if !self.is_new(m.id) {
            return Ok(false);
        }
        let mode = match m.kind {
            MessageKind::Fragment(mode) => Some(mode),
            MessageKind::Sentinel if !SeqSpace::PACKET.is_spaced(m.id, self.params.ack_spacing) => {
                return Err(Violation::Inconsistent);
            }
            MessageKind::Sentinel => None,
            MessageKind::WindowAck => return Ok(true),
        };
        if self.unordered && mode != Some(SendMode::Reliable) {
            // Unordered channels carry reliable packets only.
            return Err(Violation::Inconsistent);
        }
        if mode.is_some() {
            self.check_fragment(m)?;
        }
        let exempt = exempt && mode == Some(SendMode::Passive) && self.find(m.id).is_err();
        if exempt {
            self.displace_exempt(budget);
        }
        let i = match self.find(m.id) {
            Ok(i) => i,
            Err(i) => {
                let e = Entry {
                    id: m.id,
                    dependency: m.dependency,
                    mode,
                    sentinel: false,
                    body: EntryData::Empty,
                    charged: 0,
                    exempt,
                    displaced: false,
                };
                self.queue.insert(i, e);
                i
            }
        };
        let granule = self.granule();
        let Some(e) = self.queue.get_mut(i) else { return Ok(true) };
        let before = e.charged;
        let stored = store(e, m, mode, payload, granule);
        let after = e.charged;
        budget.charge(after - before);
        self.charged += after - before;
        if stored? {
            self.attached += 1;
        }
        Ok(true)
    }

    /// Checks a fragment's geometry on its own: an unfragmented packet no larger than this
    /// side accepts; a fragment covering whole granules inside its packet (all but one
    /// that ends the packet), of a packet no larger than this side accepts.
    pub(super) fn check_fragment(&self, m: &Message<'_>) -> Result<(), Violation> {
        let len = m.payload.len();
        let f = m.fragment;
        if f.count == 1 {
            return if len > self.max_packet { Err(Violation::TooLarge) } else { Ok(()) };
        }
        if f.count > self.max_granules {
            return Err(Violation::TooLarge);
        }
        let granule = self.granule();
        let end = u64::from(f.index) + len.div_ceil(granule) as u64;
        let last = end == u64::from(f.count);
        if len == 0 || end > u64::from(f.count) || !last && !len.is_multiple_of(granule) {
            return Err(Violation::BadFragment);
        }
        // The count bounds every packet to the next whole granule; a fragment that ends
        // the packet gives the exact size, which must not exceed the limit either.
        if last && f.index as usize * granule + len > self.max_packet {
            return Err(Violation::TooLarge);
        }
        Ok(())
    }

    /// Delivers what the receive queue allows, calling `out` with each packet (and how it
    /// was sent) in order.
    pub(crate) fn deliver(&mut self, budget: &mut Budget, mut out: impl FnMut(Bytes, SendMode)) {
        if self.unordered {
            return self.deliver_unordered(budget, out);
        }
        while let Some(newest) = self.queue.back().map(|e| e.id) {
            let mut action = None;
            for (i, e) in self.queue.iter().enumerate() {
                if !self.dependency_met(e.id, e.dependency) {
                    break;
                }
                if e.complete() {
                    action = Some((i, true));
                    break;
                }
                let ahead = SeqSpace::PACKET.distance(e.id, newest);
                if e.sentinel && ahead >= self.params.window - self.params.ack_spacing {
                    action = Some((i, false));
                    break;
                }
            }
            let Some((i, deliver)) = action else { break };
            // Everything before `i` is incomplete and skipped.
            for _ in 0..i {
                if let Some(e) = self.queue.pop_front() {
                    self.release(&e, budget);
                }
            }
            let Some(mut e) = self.queue.pop_front() else { break };
            self.release(&e, budget);
            if deliver && let Some(data) = e.take_data() {
                out(data, e.mode.unwrap_or(SendMode::Unreliable));
            }
            self.advance(SeqSpace::PACKET.add(e.id, 1));
        }
    }

    /// Delivers every complete packet of an unordered channel, whatever is missing before
    /// it, and moves the base past what it reaches.
    fn deliver_unordered(&mut self, budget: &mut Budget, mut out: impl FnMut(Bytes, SendMode)) {
        if !self.queue.iter().any(Entry::complete) {
            return;
        }
        let mut queue = std::mem::take(&mut self.queue);
        queue.retain_mut(|e| {
            if !e.complete() {
                return true;
            }
            self.release(e, budget);
            if let Some(delivered) = self.delivered.as_deref_mut() {
                delivered.insert(self.base, e.id);
            }
            if let Some(data) = e.take_data() {
                out(data, SendMode::Reliable);
            }
            false
        });
        self.queue = queue;
        let base = self.base;
        let to = self.delivered.as_deref_mut().map_or(base, |d| d.advance(base));
        self.advance(to);
    }

    fn release(&mut self, e: &Entry, budget: &mut Budget) {
        self.displaced -= usize::from(e.displaced);
        budget.credit(e.charged);
        self.charged -= e.charged;
        if let EntryData::Whole { detached: false, .. } = e.body {
            self.attached -= 1;
        }
    }

    fn advance(&mut self, to: u32) {
        let s = SeqSpace::PACKET;
        if let Some(m) = s.last_spaced_in(self.base, to, self.params.ack_spacing) {
            self.window_ack = Some(m);
        }
        self.base = to;
    }

    /// Bytes of the receive queue's own storage (its data is charged to the budget).
    pub(crate) fn memory(&self) -> usize {
        self.queue.capacity() * size_of::<Entry>()
            + self.delivered.as_deref().map_or(0, |d| size_of::<Delivered>() + d.memory())
    }

    /// Copies every whole packet that still shares a datagram buffer into its own.
    pub(crate) fn unshare(&mut self) {
        if self.attached == 0 {
            return;
        }
        for e in &mut self.queue {
            if let EntryData::Whole { data, detached } = &mut e.body
                && !*detached
            {
                *data = Bytes::copy_from_slice(data);
                *detached = true;
            }
        }
        self.attached = 0;
    }

    /// The window acknowledgement owed, if any (only the newest is kept).
    pub(crate) fn take_window_ack(&mut self) -> Option<u32> {
        self.window_ack.take()
    }

    /// Budget bytes held by this channel.
    #[cfg(test)]
    pub(crate) fn charged(&self) -> usize {
        self.charged
    }

    /// Number of entries in the receive queue.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.queue.len()
    }
}

/// Adds a message to its entry, updating its charge; returns whether a whole packet now
/// shares a datagram buffer.
fn store(
    e: &mut Entry,
    m: &Message<'_>,
    mode: Option<SendMode>,
    payload: Bytes,
    granule: usize,
) -> Result<bool, Violation> {
    if e.dependency != m.dependency {
        return Err(Violation::Inconsistent);
    }
    let Some(mode) = mode else {
        // A sentinel: only for unreliable packets.
        if e.mode.is_some_and(|md| md != SendMode::Unreliable) {
            return Err(Violation::Inconsistent);
        }
        e.mode = Some(SendMode::Unreliable);
        e.sentinel = true;
        return Ok(false);
    };
    match e.mode {
        Some(known) if known != mode => return Err(Violation::Inconsistent),
        _ => e.mode = Some(mode),
    }
    match &mut e.body {
        EntryData::Evicted => Ok(false),
        body @ EntryData::Empty => {
            e.charged += charge(m, granule);
            if m.fragment.count == 1 {
                *body = EntryData::Whole { data: payload, detached: false };
                return Ok(true);
            }
            let count = m.fragment.count;
            let mut parts = EntryData::Parts {
                count,
                received: 0,
                have: vec![0; count.div_ceil(64) as usize],
                buf: BytesMut::zeroed(count as usize * granule),
                len: None,
            };
            store_fragment(&mut parts, m.fragment, &payload, granule)?;
            *body = parts;
            Ok(false)
        }
        EntryData::Whole { data, .. } => {
            // A fragment of a packet that arrived whole (its resend was cut smaller after
            // a black hole, and the original came after all): a duplicate if it agrees.
            let f = m.fragment;
            let ends = u64::from(f.index) + m.payload.len().div_ceil(granule) as u64 == u64::from(f.count);
            let total = f.index as usize * granule + m.payload.len();
            let agrees =
                f.count == 1 || f.count as usize == data.len().div_ceil(granule) && (!ends || total == data.len());
            if agrees { Ok(false) } else { Err(Violation::Inconsistent) }
        }
        parts @ EntryData::Parts { .. } => {
            // A whole copy of a packet being reassembled covers all its granules.
            let f = m.fragment;
            let f =
                if f.count == 1 { Fragment { index: 0, count: m.payload.len().div_ceil(granule) as u32 } } else { f };
            store_fragment(parts, f, &payload, granule).map(|()| false)
        }
    }
}

/// Stores a fragment covering granules `f.index..` of a packet being reassembled; granules
/// already received are not counted again.
fn store_fragment(body: &mut EntryData, f: Fragment, payload: &[u8], granule: usize) -> Result<(), Violation> {
    let EntryData::Parts { count, received, have, buf, len } = body else { return Ok(()) };
    if f.count != *count {
        return Err(Violation::Inconsistent);
    }
    let first = f.index as usize;
    let end = first + payload.len().div_ceil(granule);
    let start = first * granule;
    let total = start + payload.len();
    if end == *count as usize && len.is_some_and(|l| l != total) {
        // Two ends of the packet disagree on its length.
        return Err(Violation::Inconsistent);
    }
    let Some(bits) = have.get_mut(first / 64..end.div_ceil(64)) else { return Err(Violation::BadFragment) };
    let new = (first..end).filter(|&g| bits.get(g / 64 - first / 64).is_some_and(|w| w & (1 << (g % 64)) == 0)).count();
    if new == 0 {
        return Ok(()); // a duplicate
    }
    let Some(dst) = buf.get_mut(start..total) else { return Err(Violation::BadFragment) };
    dst.copy_from_slice(payload);
    for g in first..end {
        if let Some(w) = bits.get_mut(g / 64 - first / 64) {
            *w |= 1 << (g % 64);
        }
    }
    *received += new as u32;
    if end == *count as usize {
        *len = Some(total);
    }
    Ok(())
}
