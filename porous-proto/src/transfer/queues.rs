//! The send queues (spec §3.1, Figure 5), with fair sharing between channels.
//!
//! Messages wait here until frame assembly takes them: every high priority message before
//! any low priority one (the spec's two queues). Each channel has its own FIFO lane, served
//! at the channel's one priority, so a channel's messages leave in the order it queued
//! them, and the lanes of a priority share by bytes, deficit round robin: each turn a lane may send its weight times a
//! datagram's worth, so a channel of large fragmented packets delays a channel of small
//! ones by about one datagram, not by a whole packet. Ahead of that round, a lane whose
//! next message is unreliable goes first: time-critical data does not wait behind bulk
//! reliable data of the same priority (it still waits for the congestion window and the
//! pacer, like everything).
//!
//! An unreliable message carries its deadline: one still queued when it passes is dropped
//! and counted, never sent late. `Host::send` takes no time, so a message is queued with
//! how long it may wait ([`Tag::Within`]) and stamped with the instant at the next call
//! that gives the time, before anything else happens ([`SendQueues::stamp`]): the
//! deadline counts from when the application next lets the host run, not from a clock
//! reading that may be long stale on a host that was idle. Unreliable data may also be dropped before it is ever sent
//! when its channel runs out of queue space, or is replaced by a newer message on a
//! "latest only" channel.
//!
//! Invariants: `live` is the number of queued messages; a lane is in the `active` list of
//! its priority's level exactly when it holds messages; `selected` names the lane
//! [`SendQueues::front`] last returned the head of, until [`SendQueues::pop`] takes it or
//! anything else changes the queues.

use crate::time::Time;
use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::config::Priority;
use crate::wire::{Fragment, Message, MessageKind, SendMode};

/// A message owned by the transfer layer. The payload is a slice of the application's
/// packet; it is never copied until it is encoded into a datagram.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OutMessage {
    pub(crate) kind: MessageKind,
    pub(crate) channel: u8,
    pub(crate) id: u32,
    pub(crate) dependency: u32,
    pub(crate) fragment: Fragment,
    pub(crate) payload: Bytes,
    /// A deadline, or what the message is a copy of.
    pub(crate) tag: Tag,
}

/// What a message carries besides its fields: a deadline (unreliable data) or the message
/// it copies (a repair copy); never both, so one field holds either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Tag {
    #[default]
    Plain,
    /// An unreliable message not sent within this long of the next time the host is
    /// given is dropped (stamped into `Expires` then).
    Within(Duration),
    /// An unreliable message not sent by then is dropped.
    Expires(Time),
    /// A repair copy of the message at this store index (see `Transfer`'s repair). A copy
    /// is never resent and costs its channel nothing.
    CopyOf(u64),
}

impl OutMessage {
    pub(crate) fn as_wire(&self) -> Message<'_> {
        Message {
            kind: self.kind,
            channel: self.channel,
            id: self.id,
            dependency: self.dependency,
            fragment: self.fragment,
            payload: &self.payload,
        }
    }

    /// Whether the frame carrying it must be resent until acknowledged: reliable data, not
    /// a repair copy.
    pub(crate) fn is_reliable(&self) -> bool {
        self.kind.is_reliable() && !matches!(self.tag, Tag::CopyOf(_))
    }

    /// Cuts this data message after its first `at` bytes, a whole number of `granule`s
    /// short of its end, and returns the rest: a fragment of the same packet, counted in
    /// granules (an unfragmented packet becomes fragments). `None`, and nothing changes,
    /// for a control message or a cut that is not inside the payload on a granule.
    ///
    /// What the send path does with a message too large for the datagram size in use
    /// (cut for a size path MTU discovery has since given up): the pieces reassemble like
    /// any other fragments, so no packet waits for a size the path no longer carries.
    pub(crate) fn split_off(&mut self, at: usize, granule: usize) -> Option<Self> {
        let len = self.payload.len();
        if !matches!(self.kind, MessageKind::Fragment(_)) || at == 0 || at >= len || !at.is_multiple_of(granule) {
            return None;
        }
        if self.fragment.count == 1 {
            self.fragment = Fragment { index: 0, count: u32::try_from(len.div_ceil(granule)).ok()? };
        }
        let index = self.fragment.index + u32::try_from(at / granule).ok()?;
        Some(Self {
            kind: self.kind,
            channel: self.channel,
            id: self.id,
            dependency: self.dependency,
            fragment: Fragment { index, count: self.fragment.count },
            payload: self.payload.split_off(at),
            tag: self.tag,
        })
    }

    /// A repair copy of this message, which sits at store index `at`.
    pub(crate) fn copy_at(&self, at: u64) -> Self {
        Self { tag: Tag::CopyOf(at), ..self.clone() }
    }

    /// Bytes this message holds against its channel's queue limit: its payload and its
    /// place in a queue, so that even empty packets are bounded. Sentinels and window
    /// acknowledgements are the protocol's own (at most one per [`WINDOW_ACK_SPACING`]
    /// packets) and cost nothing.
    ///
    /// [`WINDOW_ACK_SPACING`]: crate::seq::WINDOW_ACK_SPACING
    pub(crate) fn cost(&self) -> usize {
        match self.kind {
            _ if matches!(self.tag, Tag::CopyOf(_)) => 0,
            MessageKind::Fragment(_) => self.payload.len() + MESSAGE_OVERHEAD,
            MessageKind::Sentinel | MessageKind::WindowAck => 0,
        }
    }
}

/// The deadline `d` after `now` (one past 292 years from the host's epoch is the last
/// time there is, which never passes).
pub(crate) fn stamped(now: Time, d: Duration) -> Tag {
    Tag::Expires(now + d)
}

/// What a queued message costs besides its payload (see [`OutMessage::cost`]).
pub(crate) const MESSAGE_OVERHEAD: usize = size_of::<Option<OutMessage>>();

/// A lane's turn in the round robin, per unit of weight, in bytes: about a datagram.
pub(crate) const QUANTUM: usize = 1200;

impl OutMessage {
    /// Whether an unreliable message's deadline has passed at `now`.
    fn expired(&self, now: Time) -> bool {
        matches!(self.tag, Tag::Expires(t) if now > t)
    }

    /// What the round robin charges a lane for this message: its payload and a header.
    fn turn_cost(&self) -> usize {
        self.payload.len() + 8
    }

    pub(crate) fn is_unreliable_data(&self) -> bool {
        self.kind == MessageKind::Fragment(SendMode::Unreliable)
    }
}

/// One channel's messages. A channel sends at one priority (the channel layer queues
/// every message of a channel at the channel's priority), so it has one lane, filed in
/// the active list of that priority's level. 40 bytes: the deficit in a `u32` (it stays
/// below a message's cost plus a turn, far below 4 GB) and the weight in a `u8`
/// (validated 1 to 255).
#[derive(Debug)]
struct Lane {
    queue: VecDeque<OutMessage>,
    /// Bytes the lane may still send this turn.
    deficit: u32,
    /// The channel's weight, at least 1.
    weight: u8,
    /// The level the lane is served at while it holds messages.
    priority: Priority,
}

impl Lane {
    fn new(weight: u32) -> Self {
        let weight = u8::try_from(weight.max(1)).unwrap_or(u8::MAX);
        Self { queue: VecDeque::new(), deficit: 0, weight, priority: Priority::High }
    }

    /// Bytes the lane may still send this turn.
    fn deficit(&self) -> usize {
        self.deficit as usize
    }

    /// Sets what the lane may still send this turn (saturating, never reached: see the
    /// type's note).
    fn set_deficit(&mut self, bytes: usize) {
        self.deficit = u32::try_from(bytes).unwrap_or(u32::MAX);
    }
}

/// The levels in the order they are served.
const LEVELS: [Priority; 2] = [Priority::High, Priority::Low];

/// Index of a level in [`SendQueues::active`].
fn level(priority: Priority) -> usize {
    match priority {
        Priority::High => 0,
        Priority::Low => 1,
    }
}

/// Channels with messages at one level, in round robin order. Inline: a connection has a
/// few channels, and a list on the heap of its own would be one more cache miss per
/// message queued.
type Active = SmallVec<[u8; 8]>;

/// The send queues of one connection.
#[derive(Debug, Default)]
pub(crate) struct SendQueues {
    /// One lane per channel up to the highest one that has queued anything: made on first
    /// use, as channels are. Inline for the two channels a game usually uses (a heap
    /// block per connection fewer to reach on every send and every flush).
    lanes: SmallVec<[Lane; 2]>,
    /// Per level (see [`level`]): the channels with messages, in round robin order.
    active: [Active; 2],
    live: usize,
    /// The channel whose head [`SendQueues::front`] returned.
    selected: Option<u8>,
}

impl SendQueues {
    /// Stamps the deadlines of messages queued since the last stamp, as counted from
    /// `now`. Those are the newest of their lanes, so each lane is walked from its back
    /// only as far as they go.
    pub(crate) fn stamp(&mut self, now: Time) {
        for lane in &mut self.lanes {
            for m in lane.queue.iter_mut().rev() {
                let Tag::Within(d) = m.tag else { break };
                m.tag = stamped(now, d);
            }
        }
    }

    /// Queues `m` at `priority`, the priority of its channel. `weights`: the round robin
    /// weights of the channels (1 for any not given), for the lanes this makes.
    pub(crate) fn push(&mut self, priority: Priority, weights: &[u32], m: OutMessage) {
        let channel = m.channel;
        let i = usize::from(channel);
        while self.lanes.len() <= i {
            let weight = weights.get(self.lanes.len()).copied().unwrap_or(1);
            self.lanes.push(Lane::new(weight));
        }
        let Some(lane) = self.lanes.get_mut(i) else { return };
        if lane.queue.is_empty() {
            lane.priority = priority;
            if let Some(active) = self.active.get_mut(level(priority)) {
                active.push(channel);
            }
        }
        debug_assert_eq!(lane.priority, priority, "a channel sends at one priority");
        crate::lean::room_for_first(&mut lane.queue);
        lane.queue.push_back(m);
        self.live += 1;
        self.selected = None;
    }

    /// Queues `m` ahead of its channel's other messages, at the priority its lane was
    /// served at (the channel's: `m` was queued there before): a message a lost frame
    /// could not resend at the size in use. Otherwise as [`SendQueues::push`].
    pub(crate) fn push_front(&mut self, weights: &[u32], m: OutMessage) {
        let channel = m.channel;
        let priority = self.lanes.get(usize::from(channel)).map_or(Priority::High, |l| l.priority);
        self.push(priority, weights, m);
        if let Some(lane) = self.lanes.get_mut(usize::from(channel))
            && let Some(m) = lane.queue.pop_back()
        {
            lane.queue.push_front(m);
        }
    }

    /// Cuts the message [`SendQueues::front`] returned after its first `at` bytes (see
    /// [`OutMessage::split_off`]); the rest follows it in its lane. Returns the channel and
    /// the bytes the pieces cost beyond the message (one more place in a queue), or `None`
    /// when nothing was cut.
    pub(crate) fn split_front(&mut self, at: usize, granule: usize) -> Option<(u8, usize)> {
        let channel = self.selected?;
        let lane = self.lanes.get_mut(usize::from(channel))?;
        let head = lane.queue.front_mut()?;
        let before = head.cost();
        let rest = head.split_off(at, granule)?;
        let added = (head.cost() + rest.cost()).saturating_sub(before);
        lane.queue.insert(1, rest);
        self.live += 1;
        Some((channel, added))
    }

    /// Bytes of the queues' own storage (payloads are counted by their channels).
    pub(crate) fn memory(&self) -> usize {
        let spilled = |bytes: usize, spilled: bool| if spilled { bytes } else { 0 };
        spilled(self.lanes.capacity() * size_of::<Lane>(), self.lanes.spilled())
            + self.active.iter().map(|a| spilled(a.capacity(), a.spilled())).sum::<usize>()
            + self.lanes.iter().map(|lane| lane.queue.capacity() * size_of::<OutMessage>()).sum::<usize>()
    }

    /// Number of messages waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Takes `channel` out of its level's round robin (its lane is empty).
    fn deactivate(&mut self, channel: u8) {
        let Some(lane) = self.lanes.get_mut(usize::from(channel)) else { return };
        lane.deficit = 0;
        if let Some(active) = self.active.get_mut(level(lane.priority))
            && let Some(pos) = active.iter().position(|&c| c == channel)
        {
            active.remove(pos);
        }
    }

    /// Drops the expired unreliable messages at the head of `channel`'s lane.
    fn expire_head(&mut self, channel: u8, now: Time, expired: &mut impl FnMut(&OutMessage)) {
        let mut gone = 0;
        let Some(lane) = self.lanes.get_mut(usize::from(channel)) else { return };
        while lane.queue.front().is_some_and(|m| m.is_unreliable_data() && m.expired(now)) {
            if let Some(m) = lane.queue.pop_front() {
                expired(&m);
                gone += 1;
            }
        }
        if lane.queue.is_empty() {
            self.deactivate(channel);
        }
        self.live -= gone;
    }

    /// The next message assembly would take at `now`, dropping the expired unreliable
    /// messages it meets on the way (each given to `expired`). [`SendQueues::pop`] takes
    /// it.
    pub(crate) fn front(&mut self, now: Time, mut expired: impl FnMut(&OutMessage)) -> Option<&OutMessage> {
        self.selected = None;
        for l in LEVELS.map(level) {
            // Heads that expired go first, so what is chosen below is sendable. A lane
            // left empty leaves the list, so the walk stays at its position then.
            let mut i = 0;
            while let Some(&c) = self.active.get(l).and_then(|a| a.get(i)) {
                self.expire_head(c, now, &mut expired);
                if self.active.get(l).and_then(|a| a.get(i)) == Some(&c) {
                    i += 1;
                }
            }
            let (lanes, Some(active)) = (&mut self.lanes, self.active.get_mut(l)) else { continue };
            if active.is_empty() {
                continue;
            }
            // Time-critical first: a lane whose next message is unreliable.
            let urgent = active.iter().copied().find(|&c| {
                lanes.get(usize::from(c)).and_then(|l| l.queue.front()).is_some_and(OutMessage::is_unreliable_data)
            });
            let channel = match urgent {
                Some(c) => c,
                None => loop {
                    // Deficit round robin: the lane at the front sends while its turn lasts.
                    let c = *active.first()?;
                    let Some(lane) = lanes.get_mut(usize::from(c)) else {
                        active.remove(0);
                        continue;
                    };
                    let cost = lane.queue.front().map_or(0, OutMessage::turn_cost);
                    if lane.deficit() >= cost {
                        break c;
                    }
                    lane.set_deficit(lane.deficit() + usize::from(lane.weight) * QUANTUM);
                    active.rotate_left(1);
                },
            };
            self.selected = Some(channel);
            return self.lanes.get(usize::from(channel)).and_then(|l| l.queue.front());
        }
        None
    }

    /// Takes the message [`SendQueues::front`] returned.
    pub(crate) fn pop(&mut self) -> Option<OutMessage> {
        let channel = self.selected.take()?;
        let lane = self.lanes.get_mut(usize::from(channel))?;
        let m = lane.queue.pop_front()?;
        lane.set_deficit(lane.deficit().saturating_sub(m.turn_cost()));
        if lane.queue.is_empty() {
            self.deactivate(channel);
        } else if lane.deficit == 0
            && let Some(active) = self.active.get_mut(level(lane.priority))
            && active.first() == Some(&channel)
        {
            // The turn is over: the next lane's.
            active.rotate_left(1);
        }
        self.live -= 1;
        Some(m)
    }

    /// Drops queued unreliable packets of `channel`, oldest first, until at least `need`
    /// bytes are freed or none are left; every fragment of a dropped packet goes with it.
    /// Sentinels stay: the receiver needs them to move its window. Calls `dropped` with each
    /// dropped message; returns the bytes freed.
    pub(crate) fn drop_unreliable(&mut self, channel: u8, need: usize, mut dropped: impl FnMut(&OutMessage)) -> usize {
        let mut freed = 0;
        let mut victim: Option<u32> = None;
        let mut removed = 0;
        let Some(lane) = self.lanes.get_mut(usize::from(channel)) else { return 0 };
        lane.queue.retain(|m| {
            if !m.is_unreliable_data() {
                return true;
            }
            match victim {
                Some(id) if id == m.id => {}
                _ if freed >= need => return true,
                _ => victim = Some(m.id),
            }
            freed += m.cost();
            dropped(m);
            removed += 1;
            false
        });
        if lane.queue.is_empty() {
            self.deactivate(channel);
        }
        self.live -= removed;
        self.selected = None;
        freed
    }

    /// Unreliable packets of `channel` queued (counted once however many fragments).
    pub(crate) fn queued_unreliable(&self, channel: u8) -> usize {
        let Some(lane) = self.lanes.get(usize::from(channel)) else { return 0 };
        let mut count = 0;
        let mut last = None;
        for m in lane.queue.iter().filter(|m| m.is_unreliable_data()) {
            if last != Some(m.id) {
                count += 1;
                last = Some(m.id);
            }
        }
        count
    }

    /// Removes every queued message, calling `f` with each.
    pub(crate) fn clear(&mut self, mut f: impl FnMut(&OutMessage)) {
        for lane in &mut self.lanes {
            for m in lane.queue.drain(..) {
                f(&m);
            }
            lane.deficit = 0;
        }
        for active in &mut self.active {
            active.clear();
        }
        self.live = 0;
        self.selected = None;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// Weights of 1 for every channel.
    const EQUAL: &[u32] = &[];

    /// A whole packet's message for the transfer layer's tests; its payload repeats the
    /// id's low byte.
    pub(crate) fn msg(channel: u8, id: u32, mode: SendMode, len: usize) -> OutMessage {
        OutMessage {
            kind: MessageKind::Fragment(mode),
            channel,
            id,
            dependency: 0,
            fragment: Fragment::WHOLE,
            payload: Bytes::from(vec![id as u8; len]),
            tag: Tag::Plain,
        }
    }

    fn drain(q: &mut SendQueues, now: Time) -> Vec<(u8, u32)> {
        std::iter::from_fn(|| {
            q.front(now, |_| {})?;
            q.pop().map(|m| (m.channel, m.id))
        })
        .collect()
    }

    #[test]
    fn a_message_put_back_leads_its_lane_at_its_priority_and_a_head_is_cut_at_a_granule() {
        let mut q = SendQueues::default();
        q.push(Priority::Low, EQUAL, msg(1, 1, SendMode::Reliable, 10));
        q.push(Priority::Low, EQUAL, msg(1, 2, SendMode::Reliable, 10));
        q.push_front(EQUAL, msg(1, 0, SendMode::Reliable, 10));
        q.push(Priority::High, EQUAL, msg(0, 5, SendMode::Reliable, 10));
        assert_eq!(drain(&mut q, Time::ZERO), [(0, 5), (1, 0), (1, 1), (1, 2)], "first in its lane, still low");
        // A 100-byte whole packet cut after 3 granules of 10 bytes: fragments of 10.
        q.push(Priority::High, EQUAL, msg(0, 7, SendMode::Reliable, 100));
        q.push(Priority::High, EQUAL, msg(0, 8, SendMode::Reliable, 10));
        assert!(q.front(Time::ZERO, |_| {}).is_some());
        assert_eq!(q.split_front(25, 10), None, "not on a granule");
        assert_eq!(q.split_front(100, 10), None, "not inside the payload");
        assert_eq!(q.split_front(30, 10), Some((0, MESSAGE_OVERHEAD)));
        let mut got = Vec::new();
        while q.front(Time::ZERO, |_| {}).is_some() {
            got.extend(q.pop().map(|m| (m.id, m.fragment, m.payload.len())));
        }
        let piece = |index, len| (7, Fragment { index, count: 10 }, len);
        assert_eq!(got, [piece(0, 30), piece(3, 70), (8, Fragment::WHOLE, 10)]);
        assert!(q.is_empty());
    }

    #[test]
    fn high_before_low_fifo_within() {
        let mut q = SendQueues::default();
        q.push(Priority::Low, EQUAL, msg(1, 0, SendMode::Reliable, 1));
        q.push(Priority::High, EQUAL, msg(0, 0, SendMode::Reliable, 1));
        q.push(Priority::Low, EQUAL, msg(1, 1, SendMode::Reliable, 1));
        q.push(Priority::High, EQUAL, msg(0, 1, SendMode::Reliable, 1));
        assert_eq!(drain(&mut q, Time::ZERO), [(0, 0), (0, 1), (1, 0), (1, 1)]);
        assert!(q.is_empty());
    }

    #[test]
    fn channels_of_one_priority_share_by_bytes() {
        // Channel 0 queues ten 1,100-byte fragments, channel 1 small messages: each turn
        // is about a datagram, so the small ones interleave one per big fragment.
        let mut q = SendQueues::default();
        for i in 0..10 {
            q.push(Priority::High, EQUAL, msg(0, i, SendMode::Reliable, 1100));
        }
        for i in 0..5 {
            q.push(Priority::High, EQUAL, msg(1, 100 + i, SendMode::Reliable, 30));
        }
        let order = drain(&mut q, Time::ZERO);
        let first_small = order.iter().position(|&(c, _)| c == 1).unwrap();
        assert!(first_small <= 1, "a small message waits at most one big one: {order:?}");
        let last_small = order.iter().rposition(|&(c, _)| c == 1).unwrap();
        assert!(last_small <= 6, "{order:?}");
        // Per channel, order is kept.
        let big: Vec<u32> = order.iter().filter(|o| o.0 == 0).map(|o| o.1).collect();
        assert_eq!(big, (0..10).collect::<Vec<_>>());
        // A weight of 3 gives a channel three turns' worth.
        let mut w = SendQueues::default();
        for i in 0..12 {
            w.push(Priority::High, &[3, 1], msg(0, i, SendMode::Reliable, 1100));
            w.push(Priority::High, &[3, 1], msg(1, 100 + i, SendMode::Reliable, 1100));
        }
        let order = drain(&mut w, Time::ZERO);
        let heavy = order.iter().take(12).filter(|o| o.0 == 0).count();
        assert!((8..=10).contains(&heavy), "weight 3 to 1: {heavy} of the first 12");
    }

    #[test]
    fn a_deadline_counts_from_the_stamp_not_the_queueing() {
        let t = Time::ZERO;
        let ms = Duration::from_millis(1);
        let mut q = SendQueues::default();
        let mut old = msg(0, 1, SendMode::Unreliable, 10);
        old.tag = Tag::Within(10 * ms);
        q.push(Priority::High, EQUAL, old);
        q.stamp(t);
        // Queued after the first stamp: only the newest are stamped by the next.
        let mut new = msg(0, 2, SendMode::Unreliable, 10);
        new.tag = Tag::Within(10 * ms);
        q.push(Priority::High, EQUAL, new);
        q.stamp(t + 5 * ms);
        let mut expired = Vec::new();
        assert_eq!(q.front(t + 12 * ms, |m| expired.push(m.id)).map(|m| m.id), Some(2));
        assert_eq!(expired, [1], "10 ms after its stamp at t");
        assert!(q.front(t + 16 * ms, |m| expired.push(m.id)).is_none(), "10 ms after its own stamp");
        assert_eq!(expired, [1, 2]);
    }

    #[test]
    fn unreliable_goes_first_and_never_late() {
        let t = Time::ZERO;
        let ms = Duration::from_millis(1);
        let mut q = SendQueues::default();
        for i in 0..4 {
            q.push(Priority::High, EQUAL, msg(0, i, SendMode::Reliable, 1100));
        }
        let mut fresh = msg(1, 50, SendMode::Unreliable, 100);
        fresh.tag = Tag::Expires(t + 10 * ms);
        let mut stale = msg(1, 49, SendMode::Unreliable, 100);
        stale.tag = Tag::Expires(t + ms);
        q.push(Priority::High, EQUAL, stale);
        q.push(Priority::High, EQUAL, fresh);
        let mut expired = Vec::new();
        assert_eq!(q.front(t + 2 * ms, |m| expired.push(m.id)).map(|m| m.id), Some(50));
        assert_eq!(expired, [49], "expired before it could go: dropped, never sent");
        assert_eq!(q.pop().map(|m| m.id), Some(50), "ahead of the reliable bulk");
        assert_eq!(q.len(), 4);
        // Expired in the middle of a lane: dropped when it reaches the head.
        let mut late = msg(0, 9, SendMode::Unreliable, 10);
        late.tag = Tag::Expires(t);
        q.push(Priority::High, EQUAL, late);
        let mut dropped = 0;
        let order: Vec<u32> = std::iter::from_fn(|| {
            q.front(t + 5 * ms, |_| dropped += 1)?;
            q.pop().map(|m| m.id)
        })
        .collect();
        assert_eq!((order, dropped), (vec![0, 1, 2, 3], 1));
        assert!(q.is_empty());
    }

    #[test]
    fn dropping_unreliable_takes_whole_packets_oldest_first_and_keeps_the_rest() {
        let mut q = SendQueues::default();
        let frag =
            |id, index| OutMessage { fragment: Fragment { index, count: 2 }, ..msg(3, id, SendMode::Unreliable, 10) };
        q.push(Priority::High, EQUAL, frag(5, 0));
        q.push(Priority::High, EQUAL, msg(3, 6, SendMode::Reliable, 10));
        q.push(Priority::High, EQUAL, frag(5, 1));
        q.push(Priority::High, EQUAL, msg(4, 7, SendMode::Unreliable, 10));
        q.push(Priority::High, EQUAL, frag(8, 0));
        q.push(
            Priority::High,
            EQUAL,
            OutMessage { kind: MessageKind::Sentinel, payload: Bytes::new(), ..msg(3, 8, SendMode::Unreliable, 0) },
        );
        let mut seen = Vec::new();
        let freed = q.drop_unreliable(3, 1, |m| seen.push((m.id, m.fragment.index)));
        assert_eq!(freed, 2 * (10 + MESSAGE_OVERHEAD));
        assert_eq!(seen, [(5, 0), (5, 1)]);
        assert_eq!(q.len(), 4);
        // Unreliable heads go first (channel 4's packet, then channel 3's once it is at the
        // head); each channel's order is kept.
        assert_eq!(drain(&mut q, Time::ZERO), [(4, 7), (3, 6), (3, 8), (3, 8)]);
    }
}
