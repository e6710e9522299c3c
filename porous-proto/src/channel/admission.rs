//! Admission: what a peer's channels may store of a received frame, against the peer's
//! reassembly budget (`max_reassembly_bytes`). Everything that decides it lives here: the
//! [`Budget`], what each message costs, which messages a channel needs to make progress
//! (stored whatever the budget), the frame-level verdict, and eviction.
//!
//! A frame is stored whole and acknowledged when it fits, after evicting unreliable data if
//! need be. Each channel may exceed the budget by what it needs to make progress, at most
//! one message per channel per frame: data that takes no new memory, the head-of-line
//! reliable packet (unique: the only incomplete reliable packet whose dependency is
//! delivered), the passive packet at the front of the channel (one at a time: a newer one
//! is displaced to make way for an older), whole packets the delivery walk reaches at once
//! (they free all before them), and any packet when the channel holds nothing else. When
//! the rest of a frame does not fit, it goes unacknowledged and only those progress
//! messages, and fragments for room already reserved, are stored; the sender resends the
//! frame. So a peer's reassembly memory never exceeds its cap by more than three packets
//! and N_Q / M sentinel entries per channel, however a hostile peer numbers, packs or
//! orders its messages (`docs/protocol.md`, Memory).
//!
//! Invariant: `Budget::used` is the sum of every entry's `charged`, and each receiver's
//! `charged` the sum of its own entries'.

use smallvec::SmallVec;

use super::Channels;
use super::recv::{ChannelReceiver, ENTRY_SIZE, Entry, EntryData};
use crate::wire::{Message, MessageKind, SendMode};

/// What an entry costs besides its data: its slot in the receive queue, twice over for
/// the slack of a growing queue. Charging the real cost keeps a flood of tiny fragments
/// from holding far more than `max_reassembly_bytes`.
pub(crate) const ENTRY_OVERHEAD: usize = 2 * ENTRY_SIZE;

/// Most markers of displaced passive packets a channel holds (they are not charged to
/// the budget; see [`ChannelReceiver::displace_exempt`]).
pub(crate) const MAX_DISPLACED: usize = 64;

/// A peer's reassembly memory: what its channels' receive queues hold, against a cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Budget {
    used: usize,
    cap: usize,
}

impl Budget {
    pub(super) fn new(cap: usize) -> Self {
        Self { used: 0, cap }
    }

    pub(super) fn charge(&mut self, bytes: usize) {
        self.used += bytes;
    }

    pub(super) fn credit(&mut self, bytes: usize) {
        self.used = self.used.saturating_sub(bytes);
    }

    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Bytes that must be freed before `need` more fit.
    pub(super) fn shortfall(&self, need: usize) -> usize {
        (self.used + need).saturating_sub(self.cap)
    }
}

/// Which entries [`ChannelReceiver::evict`] may drop, in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EvictionTier {
    IncompleteUnreliable,
    CompleteUnreliable,
    /// Evicted entries without a sentinel: removed outright. Their late fragments then
    /// start new (evictable) entries, which is all a marker saves.
    Markers,
}

impl EvictionTier {
    pub(super) const ALL: [Self; 3] = [Self::IncompleteUnreliable, Self::CompleteUnreliable, Self::Markers];
}

/// How storing a message relates to the memory budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admission {
    /// Takes no new budget bytes.
    Free,
    /// Needed for the channel to make progress: stored whatever the budget. The rest of
    /// its frame must still fit; if it does not, this message alone is stored and the
    /// frame goes unacknowledged (see [`Channels::admit`]).
    Progress,
    /// Stored only if this many budget bytes are available.
    Needs(usize),
}

/// Facts about a receive queue that admission decisions share (see
/// [`ChannelReceiver::summary`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct QueueSummary {
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

/// Which of a frame's messages [`Channels::admit`] lets in.
#[derive(Debug)]
pub(crate) struct FrameAdmission {
    /// All of them, and the frame is acknowledged. Otherwise only the progress messages
    /// and fragments for room already reserved, and the sender resends the frame.
    pub(crate) whole: bool,
    /// The messages (indices in the frame) stored beyond the budget, for progress.
    progress: SmallVec<[usize; 4]>,
}

impl FrameAdmission {
    /// Whether message `j` of the frame (`m`, for `recv`) is stored, and if so whether
    /// beyond the budget: of a frame refused, only progress messages and fragments for
    /// room already reserved, never control messages (the resent frame brings them again).
    pub(super) fn stores(&self, j: usize, m: &Message<'_>, recv: &ChannelReceiver) -> Option<bool> {
        let exempt = self.progress.contains(&j);
        let reserved = matches!(m.kind, MessageKind::Fragment(_)) && recv.memory_need(m) == 0;
        (self.whole || exempt || reserved).then_some(exempt)
    }
}

impl Channels {
    /// Decides which of a frame's messages may be stored.
    ///
    /// The whole frame when it fits the budget, after evicting unreliable data if need
    /// be. Each channel may also exceed the budget by what it needs to make progress
    /// ([`Admission::Progress`]), one message per channel per frame, so that the bound in
    /// the channel docs holds however a frame is packed. When the rest does not fit, the
    /// frame goes unacknowledged and only part of it is stored: those progress messages,
    /// and fragments that fill room already reserved (see [`FrameAdmission::stores`]). The
    /// sender resends the frame; its stored messages are then duplicates, and the
    /// progress they made (a packet completed and delivered) frees the room the rest
    /// needs. Storing nothing would deadlock: the fragment that completes the packet the
    /// channel waits for can share a frame with packets that wait behind it.
    pub(crate) fn admit(&mut self, msgs: &[Message<'_>]) -> FrameAdmission {
        // A channel a frame reaches is made before anything reads it: what follows then
        // finds every channel of the frame made.
        for m in msgs {
            self.live(usize::from(m.channel));
        }
        let mut need = 0;
        for m in msgs {
            if let Some(ch) = self.channels.get(usize::from(m.channel)).and_then(Option::as_deref) {
                need += ch.recv.memory_need(m);
            }
        }
        // Nothing new to hold is always fine, even when progress has taken the budget
        // over its cap.
        if need == 0 || self.budget.shortfall(need) == 0 {
            return FrameAdmission { whole: true, progress: SmallVec::new() };
        }
        let mut summaries: SmallVec<[(u8, QueueSummary); 4]> = SmallVec::new();
        let mut granted = [0u64; 4];
        let mut progress = SmallVec::new();
        need = 0;
        for (i, m) in msgs.iter().enumerate() {
            let c = m.channel;
            let Some(ch) = self.channels.get(usize::from(c)).and_then(Option::as_deref) else { continue };
            let summary = match summaries.iter().find(|(k, _)| *k == c) {
                Some(&(_, summary)) => summary,
                None => {
                    let summary = ch.recv.summary();
                    summaries.push((c, summary));
                    summary
                }
            };
            let (word, bit) = (usize::from(c / 64), 1u64 << (c % 64));
            match ch.recv.admission(m, &summary) {
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
        let whole = |progress| FrameAdmission { whole: true, progress };
        if need == 0 {
            return whole(progress);
        }
        for tier in EvictionTier::ALL {
            for ch in self.channels.iter_mut().flatten() {
                let short = self.budget.shortfall(need);
                if short == 0 {
                    return whole(progress);
                }
                ch.recv.evict(tier, short, &mut self.budget);
            }
        }
        FrameAdmission { whole: self.budget.shortfall(need) == 0, progress }
    }
}

impl ChannelReceiver {
    /// What admission needs to know about the queue, in one pass: where delivery stops,
    /// and which reliable packets could be the one the channel waits for. A frame under
    /// memory pressure computes it once per channel, not once per message, so a hostile
    /// frame of many messages costs one walk of the queue, not one per message.
    pub(super) fn summary(&self) -> QueueSummary {
        let mut summary = QueueSummary::default();
        for e in &self.queue {
            let met = self.dependency_met(e.id, e.dependency);
            if !met && summary.first_blocked.is_none() {
                summary.first_blocked = Some(self.offset(e.id));
            }
            if met && e.mode == Some(SendMode::Reliable) && !e.complete() {
                summary.open_head.get_or_insert(e.id);
                summary.open_heads = summary.open_heads.saturating_add(1);
            }
            let data = !matches!(e.body, EntryData::Empty | EntryData::Evicted);
            let held = data && (matches!(e.mode, Some(SendMode::Reliable | SendMode::Passive)) || e.complete());
            if held && summary.first_held.is_none() {
                summary.first_held = Some(self.offset(e.id));
            }
            if summary.first_blocked.is_some() && summary.first_held.is_some() && summary.open_heads > 1 {
                break;
            }
        }
        summary
    }

    /// Whether `m` is a fragment of the packet this channel waits for: reliable, with its
    /// own dependency delivered, and no other such packet incomplete in the queue.
    ///
    /// An honest sender has exactly one such packet per channel, because each reliable
    /// packet depends on the one before it. The last clause keeps a hostile sender from
    /// claiming "no dependency" on every packet: each would otherwise pass as the head of
    /// line and be admitted beyond the reassembly budget (the hostile suite saw 470 MB
    /// stored against a 639 kB bound before this rule).
    fn is_head_of_line(&self, m: &Message<'_>, summary: &QueueSummary) -> bool {
        m.kind == MessageKind::Fragment(SendMode::Reliable)
            && self.is_new(m.id)
            && self.dependency_met(m.id, m.dependency)
            && match summary.open_heads {
                0 => true,
                1 => summary.open_head == Some(m.id),
                _ => false,
            }
    }

    /// Whether `m` is a fragment of a passive packet at the front of the channel: its
    /// dependency delivered, and nothing before it but lost unreliable packets. The
    /// packets a sender resends first are at the front of their channels (everything
    /// before them was acknowledged, so is delivered or lost unreliable), and when the
    /// budget is held by later data the sender may be able to send nothing else.
    /// Reliable packets at the front are heads of line; unreliable ones are never resent.
    fn is_front(&self, m: &Message<'_>, summary: &QueueSummary) -> bool {
        m.kind == MessageKind::Fragment(SendMode::Passive)
            && self.displaced < MAX_DISPLACED
            && self.is_new(m.id)
            && self.dependency_met(m.id, m.dependency)
            && summary.first_held.is_none_or(|h| self.offset(m.id) <= h)
    }

    /// Whether `m` is a whole packet the delivery walk reaches at once: its dependency is
    /// delivered and no entry before it waits for one. Storing it frees memory at once.
    fn delivered_at_once(&self, m: &Message<'_>, summary: &QueueSummary) -> bool {
        m.fragment.count == 1
            && matches!(m.kind, MessageKind::Fragment(_))
            && self.dependency_met(m.id, m.dependency)
            && summary.first_blocked.is_none_or(|b| b > self.offset(m.id))
    }

    /// How storing `m` relates to the memory budget (see the module docs); `marks` are
    /// this queue's, from [`ChannelReceiver::summary`].
    pub(super) fn admission(&self, m: &Message<'_>, summary: &QueueSummary) -> Admission {
        let need = self.memory_need(m);
        if need == 0 {
            Admission::Free
        } else if self.unordered {
            // Unordered: the packet at the base is the oldest not delivered, the one whose
            // fragments the sender resends first; it is unique. Whole packets are delivered
            // at once and need nothing (`memory_need`).
            if self.charged == 0 || m.id == self.base { Admission::Progress } else { Admission::Needs(need) }
        } else if self.charged == 0
            || self.delivered_at_once(m, summary)
            || self.is_head_of_line(m, summary)
            || self.is_front(m, summary)
        {
            Admission::Progress
        } else {
            Admission::Needs(need)
        }
    }

    /// Budget bytes storing `m` would add (0 for old ids, duplicates and control
    /// messages on existing entries).
    pub(super) fn memory_need(&self, m: &Message<'_>) -> usize {
        if !self.is_new(m.id) || self.is_next_whole(m) {
            return 0;
        }
        let existing = self.find(m.id).ok().and_then(|i| self.queue.get(i));
        match (m.kind, existing) {
            (MessageKind::WindowAck | MessageKind::Sentinel, _) => 0,
            // Refused as violations on an unordered channel: nothing to store.
            (MessageKind::Fragment(mode), _) if self.unordered && mode != SendMode::Reliable => 0,
            (MessageKind::Fragment(_), Some(e)) if !matches!(e.body, EntryData::Empty) => 0,
            (MessageKind::Fragment(_), _) => charge(m, self.granule()),
        }
    }

    /// Drops entries of `tier`, oldest first, until `need` budget bytes are freed. Evicted
    /// entries stay as markers so late fragments are ignored and sentinels still count.
    pub(super) fn evict(&mut self, tier: EvictionTier, need: usize, budget: &mut Budget) -> usize {
        let mut freed = 0;
        if tier == EvictionTier::Markers {
            self.queue.retain(|e| {
                let marker = matches!(e.body, EntryData::Evicted) && !e.sentinel;
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
                (EvictionTier::IncompleteUnreliable, Some(SendMode::Unreliable)) => !complete,
                (EvictionTier::CompleteUnreliable, Some(SendMode::Unreliable)) => complete,
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
    pub(super) fn displace_exempt(&mut self, budget: &mut Budget) {
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
}

/// Drops an entry's data, leaving a marker so late fragments are ignored (a sentinel's
/// entry goes back to costing nothing). Returns the budget bytes freed.
fn evict_entry(e: &mut Entry, attached: &mut usize) -> usize {
    if matches!(e.body, EntryData::Empty | EntryData::Evicted) {
        return 0;
    }
    if let EntryData::Whole { detached: false, .. } = e.body {
        *attached -= 1;
    }
    let keep = if e.sentinel { 0 } else { ENTRY_OVERHEAD };
    let data = e.charged - keep;
    e.body = EntryData::Evicted;
    e.charged = keep;
    data
}

/// Budget bytes an entry holding the packet of fragment `m` is charged: the entry, and the
/// packet (a fragmented one's whole reassembly buffer, `count` granules, and its bitmap of
/// them, reserved up front).
pub(super) fn charge(m: &Message<'_>, granule: usize) -> usize {
    let count = m.fragment.count as usize;
    let data = if count > 1 { count * granule + count.div_ceil(64) * 8 } else { m.payload.len() };
    ENTRY_OVERHEAD + data
}
