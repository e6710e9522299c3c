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

use super::{Budget, ChannelParams, Violation};
use crate::seq::SeqSpace;
use crate::wire::{Message, MessageKind, SendMode};

/// Drops an entry's data, leaving a marker so late fragments are ignored (a sentinel's
/// entry goes back to costing nothing). Returns the budget bytes freed.
fn evict_entry(e: &mut Entry, attached: &mut usize) -> usize {
    if matches!(e.body, Body::Empty | Body::Evicted) {
        return 0;
    }
    if let Body::Whole { detached: false, .. } = e.body {
        *attached -= 1;
    }
    let keep = if e.sentinel { 0 } else { ENTRY_OVERHEAD };
    let data = e.charged - keep;
    e.body = Body::Evicted;
    e.charged = keep;
    data
}

/// What an entry costs besides its data: its slot in the receive queue, twice over for
/// the slack of a growing queue. Charging the real cost keeps a flood of tiny fragments
/// from holding far more than `max_reassembly_bytes`.
pub(crate) const ENTRY_OVERHEAD: usize = 2 * ENTRY_SIZE;

/// Most markers of displaced passive packets a channel holds (they are not charged to
/// the budget; see [`ChannelReceiver::displace_exempt`]).
pub(crate) const MAX_DISPLACED: usize = 64;

/// Heap bytes of one receive queue slot.
pub(crate) const ENTRY_SIZE: usize = size_of::<Entry>();

#[derive(Debug)]
enum Body {
    /// Only a sentinel has arrived.
    Empty,
    /// An unfragmented packet; `detached` once it no longer shares a datagram buffer.
    Whole { data: Bytes, detached: bool },
    /// A fragmented packet being reassembled into `buf` (`count` slots of the fragment
    /// size); `len` is known once the last fragment arrives.
    Parts { count: u32, received: u32, have: Vec<u64>, buf: BytesMut, len: Option<usize> },
    /// Data dropped to stay within the memory budget; never completes.
    Evicted,
}

#[derive(Debug)]
struct Entry {
    id: u32,
    dependency: u32,
    mode: Option<SendMode>,
    sentinel: bool,
    body: Body,
    charged: usize,
    /// A passive packet stored beyond the budget because it was at the front of the
    /// channel (see [`ChannelReceiver::admission`]); at most one per channel.
    exempt: bool,
    /// The marker of such a packet, displaced by an older one (see
    /// [`ChannelReceiver::displace_exempt`]).
    displaced: bool,
}

impl Entry {
    fn complete(&self) -> bool {
        match &self.body {
            Body::Whole { .. } => true,
            Body::Parts { count, received, .. } => received == count,
            Body::Empty | Body::Evicted => false,
        }
    }

    fn take_data(&mut self) -> Option<Bytes> {
        match std::mem::replace(&mut self.body, Body::Evicted) {
            Body::Whole { data, .. } => Some(data),
            Body::Parts { buf, len, .. } => {
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

/// Which entries [`ChannelReceiver::evict`] may drop, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tier {
    IncompleteUnreliable,
    CompleteUnreliable,
    /// Evicted entries without a sentinel: removed outright. Their late fragments then
    /// start new (evictable) entries, which is all a marker saves.
    Markers,
}

impl Tier {
    pub(crate) const ALL: [Self; 3] = [Self::IncompleteUnreliable, Self::CompleteUnreliable, Self::Markers];
}

/// How storing a message relates to the memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Takes no new budget bytes.
    Free,
    /// Needed for the channel to make progress: stored whatever the budget. The rest of
    /// its frame must still fit; if it does not, this message alone is stored and the
    /// frame goes unacknowledged (see `Session::admit`).
    Progress,
    /// Stored only if this many budget bytes are available.
    Needs(usize),
}

/// Facts about a receive queue that admission decisions share (see
/// [`ChannelReceiver::marks`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    /// Offset of the first entry whose dependency is not delivered: delivery stops there.
    first_blocked: Option<u32>,
    /// The first incomplete reliable entry whose dependency is delivered.
    open_head: Option<u32>,
    /// How many such entries there are (only 0, 1 and more matter).
    open_heads: u8,
    /// Offset of the first entry holding data the channel must deliver or wait for:
    /// reliable or passive, or complete. Before it lie only lost packets and gaps.
    first_held: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct ChannelReceiver {
    params: ChannelParams,
    fragment_size: usize,
    /// Largest packet accepted, and the fragments that can make it.
    max_packet: usize,
    max_fragments: u32,
    /// `m_b`, the next packet expected.
    base: u32,
    /// Budget bytes the entries hold.
    charged: usize,
    queue: VecDeque<Entry>,
    window_ack: Option<u32>,
    /// Whole entries still sharing a datagram buffer.
    attached: usize,
    /// Markers of displaced passive packets in the queue.
    displaced: usize,
}

impl ChannelReceiver {
    pub(crate) fn new(params: ChannelParams, fragment_size: usize, max_packet: usize, first_id: u32) -> Self {
        let max_fragments = max_packet.div_ceil(fragment_size).clamp(1, crate::wire::MAX_FRAGMENTS as usize);
        Self {
            params,
            fragment_size,
            max_packet,
            max_fragments: max_fragments as u32,
            base: first_id,
            charged: 0,
            queue: VecDeque::new(),
            window_ack: None,
            attached: 0,
            displaced: 0,
        }
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

    fn offset(&self, id: u32) -> u32 {
        SeqSpace::PACKET.distance(self.base, id)
    }

    fn is_new(&self, id: u32) -> bool {
        self.offset(id) < self.params.window
    }

    fn dependency_met(&self, id: u32, dependency: u32) -> bool {
        dependency == 0 || !self.is_new(SeqSpace::PACKET.sub(id, dependency))
    }

    /// What admission needs to know about the queue, in one pass: where delivery stops,
    /// and which reliable packets could be the one the channel waits for. A frame under
    /// memory pressure computes it once per channel, not once per message, so a hostile
    /// frame of many messages costs one walk of the queue, not one per message.
    pub(crate) fn marks(&self) -> Marks {
        let mut marks = Marks::default();
        for e in &self.queue {
            let met = self.dependency_met(e.id, e.dependency);
            if !met && marks.first_blocked.is_none() {
                marks.first_blocked = Some(self.offset(e.id));
            }
            if met && e.mode == Some(SendMode::Reliable) && !e.complete() {
                marks.open_head.get_or_insert(e.id);
                marks.open_heads = marks.open_heads.saturating_add(1);
            }
            let data = !matches!(e.body, Body::Empty | Body::Evicted);
            let held = data && (matches!(e.mode, Some(SendMode::Reliable | SendMode::Passive)) || e.complete());
            if held && marks.first_held.is_none() {
                marks.first_held = Some(self.offset(e.id));
            }
            if marks.first_blocked.is_some() && marks.first_held.is_some() && marks.open_heads > 1 {
                break;
            }
        }
        marks
    }

    /// Whether `m` is a fragment of the packet this channel waits for: reliable, with its
    /// own dependency delivered, and no other such packet incomplete in the queue.
    ///
    /// An honest sender has exactly one such packet per channel, because each reliable
    /// packet depends on the one before it. The last clause keeps a hostile sender from
    /// claiming "no dependency" on every packet: each would otherwise pass as the head of
    /// line and be admitted beyond the reassembly budget (the hostile suite saw 470 MB
    /// stored against a 639 kB bound before this rule).
    fn is_head_of_line(&self, m: &Message<'_>, marks: &Marks) -> bool {
        m.kind == MessageKind::Fragment(SendMode::Reliable)
            && self.is_new(m.id)
            && self.dependency_met(m.id, m.dependency)
            && match marks.open_heads {
                0 => true,
                1 => marks.open_head == Some(m.id),
                _ => false,
            }
    }

    /// Whether `m` is a fragment of a passive packet at the front of the channel: its
    /// dependency delivered, and nothing before it but lost unreliable packets. The
    /// packets a sender resends first are at the front of their channels (everything
    /// before them was acknowledged, so is delivered or lost unreliable), and when the
    /// budget is held by later data the sender may be able to send nothing else.
    /// Reliable packets at the front are heads of line; unreliable ones are never resent.
    fn is_front(&self, m: &Message<'_>, marks: &Marks) -> bool {
        m.kind == MessageKind::Fragment(SendMode::Passive)
            && self.displaced < MAX_DISPLACED
            && self.is_new(m.id)
            && self.dependency_met(m.id, m.dependency)
            && marks.first_held.is_none_or(|h| self.offset(m.id) <= h)
    }

    /// Whether `m` is a whole packet the delivery walk reaches at once: its dependency is
    /// delivered and no entry before it waits for one. Storing it frees memory at once.
    fn delivered_at_once(&self, m: &Message<'_>, marks: &Marks) -> bool {
        m.fragment.count == 1
            && matches!(m.kind, MessageKind::Fragment(_))
            && self.dependency_met(m.id, m.dependency)
            && marks.first_blocked.is_none_or(|b| b > self.offset(m.id))
    }

    /// How storing `m` relates to the memory budget (see the module docs); `marks` are
    /// this queue's, from [`ChannelReceiver::marks`].
    pub(crate) fn admission(&self, m: &Message<'_>, marks: &Marks) -> Admission {
        let need = self.memory_need(m);
        if need == 0 {
            Admission::Free
        } else if self.charged == 0
            || self.delivered_at_once(m, marks)
            || self.is_head_of_line(m, marks)
            || self.is_front(m, marks)
        {
            Admission::Progress
        } else {
            Admission::Needs(need)
        }
    }

    fn find(&self, id: u32) -> Result<usize, usize> {
        let off = self.offset(id);
        self.queue.binary_search_by_key(&off, |e| self.offset(e.id))
    }

    /// Budget bytes storing `m` would add (0 for old ids, duplicates and control
    /// messages on existing entries).
    pub(crate) fn memory_need(&self, m: &Message<'_>) -> usize {
        if !self.is_new(m.id) || self.is_next_whole(m) {
            return 0;
        }
        let existing = self.find(m.id).ok().and_then(|i| self.queue.get(i));
        match (m.kind, existing) {
            (MessageKind::WindowAck | MessageKind::Sentinel, _) => 0,
            (MessageKind::Fragment(_), Some(e)) if !matches!(e.body, Body::Empty) => 0,
            (MessageKind::Fragment(_), _) => charge(m, self.fragment_size),
        }
    }

    /// Whether `m` is the packet to deliver next, whole, with nothing queued: the in-order
    /// case, which [`ChannelReceiver::deliver_now`] hands over without the queue or the
    /// budget.
    fn is_next_whole(&self, m: &Message<'_>) -> bool {
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
        self.advance(SeqSpace::PACKET.add(m.id, 1));
        Some((payload(), mode))
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
                    body: Body::Empty,
                    charged: 0,
                    exempt,
                    displaced: false,
                };
                self.queue.insert(i, e);
                i
            }
        };
        let fragment_size = self.fragment_size;
        let Some(e) = self.queue.get_mut(i) else { return Ok(true) };
        let before = e.charged;
        let stored = store(e, m, mode, payload, fragment_size);
        let after = e.charged;
        budget.charge(after - before);
        self.charged += after - before;
        if stored? {
            self.attached += 1;
        }
        Ok(true)
    }

    fn check_fragment(&self, m: &Message<'_>) -> Result<(), Violation> {
        let len = m.payload.len();
        let f = m.fragment;
        if f.count > self.max_fragments {
            return Err(Violation::TooLarge);
        }
        let last = f.index + 1 == f.count;
        let ok = if f.count == 1 {
            len <= self.fragment_size
        } else if last {
            (1..=self.fragment_size).contains(&len)
        } else {
            len == self.fragment_size
        };
        if !ok {
            return Err(Violation::BadFragment);
        }
        // The count bounds every packet to the next whole fragment; the last fragment (or
        // the only one) gives the exact size, which must not exceed the limit either.
        if last && (f.count as usize - 1) * self.fragment_size + len > self.max_packet {
            return Err(Violation::TooLarge);
        }
        Ok(())
    }

    /// Delivers what the receive queue allows, calling `out` with each packet (and how it
    /// was sent) in order.
    pub(crate) fn deliver(&mut self, budget: &mut Budget, mut out: impl FnMut(Bytes, SendMode)) {
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

    fn release(&mut self, e: &Entry, budget: &mut Budget) {
        self.displaced -= usize::from(e.displaced);
        budget.credit(e.charged);
        self.charged -= e.charged;
        if let Body::Whole { detached: false, .. } = e.body {
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
    }

    /// Copies every whole packet that still shares a datagram buffer into its own.
    pub(crate) fn detach(&mut self) {
        if self.attached == 0 {
            return;
        }
        for e in &mut self.queue {
            if let Body::Whole { data, detached } = &mut e.body
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

    /// Drops entries of `tier`, oldest first, until `need` budget bytes are freed. Evicted
    /// entries stay as markers so late fragments are ignored and sentinels still count.
    pub(crate) fn evict(&mut self, tier: Tier, need: usize, budget: &mut Budget) -> usize {
        let mut freed = 0;
        if tier == Tier::Markers {
            self.queue.retain(|e| {
                let marker = matches!(e.body, Body::Evicted) && !e.sentinel;
                if marker && freed < need {
                    freed += e.charged;
                    false
                } else {
                    true
                }
            });
            budget.credit(freed);
            self.charged -= freed;
            return freed;
        }
        for e in &mut self.queue {
            if freed >= need {
                break;
            }
            let complete = e.complete();
            let hit = match (tier, e.mode) {
                (Tier::IncompleteUnreliable, Some(SendMode::Unreliable)) => !complete,
                (Tier::CompleteUnreliable, Some(SendMode::Unreliable)) => complete,
                _ => false,
            };
            if hit {
                freed += evict_entry(e, &mut self.attached);
            }
        }
        budget.credit(freed);
        self.charged -= freed;
        freed
    }

    /// Evicts the passive packet stored beyond the budget, if any, to make way for an
    /// earlier one at the front of the channel. Passive data is otherwise never evicted,
    /// but the earlier packet is what the channel delivers first, and the sender may be
    /// able to send nothing else until it is stored. Keeping one such packet per channel
    /// is what bounds the memory a peer can claim this way: a peer sending passive packets
    /// newest first displaces each with the next.
    ///
    /// The displaced packet's fragments were acknowledged, so the rest never comes again
    /// and it can never complete. It leaves an uncharged marker that ignores its late
    /// fragments (a new entry from one would hold memory for good) and that the delivery
    /// walk consumes like a lost unreliable packet's sentinel, so the window moves past
    /// it. At most [`MAX_DISPLACED`] such markers exist per channel; beyond that, a
    /// passive packet at the front must fit like any other.
    fn displace_exempt(&mut self, budget: &mut Budget) {
        let mut freed = 0;
        for e in self.queue.iter_mut().filter(|e| e.exempt) {
            let data = evict_entry(e, &mut self.attached);
            freed += data + e.charged;
            e.charged = 0;
            e.exempt = false;
            e.displaced = true;
            e.sentinel = true;
            self.displaced += 1;
        }
        budget.credit(freed);
        self.charged -= freed;
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

/// Budget bytes an entry holding the packet of fragment `m` is charged: the entry, and the
/// packet (a fragmented one's whole reassembly buffer and bitmap, reserved up front).
fn charge(m: &Message<'_>, fragment_size: usize) -> usize {
    let count = m.fragment.count as usize;
    let data = if count > 1 { count * fragment_size + count.div_ceil(64) * 8 } else { m.payload.len() };
    ENTRY_OVERHEAD + data
}

/// Adds a message to its entry, updating its charge; returns whether a whole packet now
/// shares a datagram buffer.
fn store(
    e: &mut Entry,
    m: &Message<'_>,
    mode: Option<SendMode>,
    payload: Bytes,
    fragment_size: usize,
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
        Body::Evicted => Ok(false),
        body @ Body::Empty => {
            e.charged += charge(m, fragment_size);
            if m.fragment.count == 1 {
                *body = Body::Whole { data: payload, detached: false };
                return Ok(true);
            }
            let count = m.fragment.count;
            let mut parts = Body::Parts {
                count,
                received: 0,
                have: vec![0; count.div_ceil(64) as usize],
                buf: BytesMut::zeroed(count as usize * fragment_size),
                len: None,
            };
            store_fragment(&mut parts, m, &payload, fragment_size)?;
            *body = parts;
            Ok(false)
        }
        Body::Whole { .. } => match m.fragment.count {
            1 => Ok(false), // a duplicate
            _ => Err(Violation::Inconsistent),
        },
        parts @ Body::Parts { .. } => store_fragment(parts, m, &payload, fragment_size).map(|()| false),
    }
}

fn store_fragment(body: &mut Body, m: &Message<'_>, payload: &[u8], fragment_size: usize) -> Result<(), Violation> {
    let Body::Parts { count, received, have, buf, len } = body else { return Ok(()) };
    if m.fragment.count != *count {
        return Err(Violation::Inconsistent);
    }
    let index = m.fragment.index;
    let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
    let Some(w) = have.get_mut(word) else { return Err(Violation::BadFragment) };
    if *w & bit != 0 {
        return Ok(()); // a duplicate
    }
    let start = index as usize * fragment_size;
    let Some(dst) = buf.get_mut(start..start + payload.len()) else { return Err(Violation::BadFragment) };
    dst.copy_from_slice(payload);
    *w |= bit;
    *received += 1;
    if index + 1 == *count {
        *len = Some(start + payload.len());
    }
    Ok(())
}
