//! The transfer queue: frames sent and not yet done with (spec §3.1.2).
//!
//! Frames are kept in id order from `k_b`, the oldest frame not yet done, to `next`, the
//! id the next new frame gets; `frames[i]` has id `k_b + i`. A frame is *in flight* after
//! each transmission, *lost* once considered dropped while it waits for its resend, and
//! *done* once acknowledged or discarded. Done frames leave only from the front, which is
//! what advances `k_b` and with it the transfer window `[k_b, k_b + N_P)`.
//!
//! Messages live in one store in frame order; a frame names its messages by a range of
//! store indices, so assembling and releasing frames never allocates. Removing a message
//! (an unreliable one from a lost frame) leaves a hole.
//!
//! The *flight size* is the sum of the sizes of frames in flight or lost: lost reliable
//! frames still hold their place in the congestion window until they are resent or
//! acknowledged.
//!
//! Transmissions are also kept in send order with a serial number, which makes both loss
//! rules a walk from the front: a transmission is lost when it was sent an RTO ago, or
//! when a later transmission has been acknowledged and it has been outstanding longer than
//! the reordering window (a time-based rule in the manner of RACK, RFC 8985: reordering
//! within the window never causes a resend, whatever the number of frames overtaken).

use crate::time::Time;
use std::collections::VecDeque;
use std::ops::Range;
use std::time::Duration;

use super::delivery::SendState;
use super::queues::OutMessage;
use crate::seq::SeqSpace;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    InFlight,
    Lost,
    Done,
    /// Declared lost and given up (an unreliable frame, or one whose reliable messages
    /// repair copies delivered): done, but a late acknowledgement of it still proves its
    /// loss spurious.
    GivenUp,
    /// An id deliberately never sent: an acknowledgement for it proves the peer
    /// acknowledges frames it never received.
    Skipped,
}

/// A frame sent and not yet done with: its messages, its transmissions and what the
/// connection had delivered when the latest left.
///
/// One cache line, aligned to one: an acknowledgement reaches its frame, and a datagram
/// sent writes a new one, on every tick of an active connection, and on a server whose
/// peers do not stay in cache a frame across two lines costs a memory access more each
/// time (72 bytes unaligned spanned two or three).
#[derive(Clone, Debug)]
#[repr(align(64))]
pub(crate) struct Frame {
    pub(crate) id: u32,
    pub(crate) state: State,
    /// Carries a reliable message, or is a sentinel frame.
    pub(crate) reliable: bool,
    /// Bytes counted in the flight size while in flight or lost: at most a datagram, so
    /// four bytes are enough (see [`Frame::bytes`]).
    size: u32,
    /// The frame's messages: store indices `first_msg..first_msg + msg_count` (a frame's
    /// messages each take a byte of a datagram at least, so a datagram's count fits).
    first_msg: u64,
    msg_count: u32,
    pub(crate) serial: u64,
    pub(crate) sent_at: Time,
    /// Transmissions so far, saturating: only whether there was exactly one is asked.
    transmissions: u8,
    /// What the connection had delivered when the latest transmission left (a
    /// [`SendState`], see [`Frame::delivery`]), kept field by field so its flag packs
    /// beside the frame's other small fields instead of padding a struct of its own.
    delivered: u64,
    delivered_at: Time,
    first_sent_at: Time,
    app_limited: bool,
}

/// A frame's size as kept: a datagram's size always fits.
fn kept_size(size: usize) -> u32 {
    u32::try_from(size).unwrap_or(u32::MAX)
}

/// A frame's message count as kept: a datagram's count always fits.
fn kept_count(count: u64) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

impl Frame {
    /// The store indices of the frame's messages.
    pub(crate) fn msgs(&self) -> Range<u64> {
        self.first_msg..self.first_msg + u64::from(self.msg_count)
    }

    /// Sent exactly once: its acknowledgement is a clean round-trip sample.
    pub(crate) fn sent_once(&self) -> bool {
        self.transmissions == 1
    }

    /// Bytes counted in the flight size while in flight or lost.
    pub(crate) fn bytes(&self) -> usize {
        self.size as usize
    }

    /// What the connection had delivered when the latest transmission left.
    pub(crate) fn delivery(&self) -> SendState {
        SendState {
            delivered: self.delivered,
            delivered_at: self.delivered_at,
            first_sent_at: self.first_sent_at,
            app_limited: self.app_limited,
        }
    }

    /// Records `d` for the latest transmission.
    fn set_delivery(&mut self, d: SendState) {
        self.delivered = d.delivered;
        self.delivered_at = d.delivered_at;
        self.first_sent_at = d.first_sent_at;
        self.app_limited = d.app_limited;
    }
}

#[derive(Clone, Copy, Debug)]
struct Sent {
    serial: u64,
    id: u32,
    at: Time,
}

/// Heap bytes the record needs per unit of [`InFlight::span`] at most: a frame, a message
/// slot and two log entries, each in a queue that may be up to twice as long as its
/// contents.
pub(crate) const SPAN_COST: usize = 2 * (size_of::<Frame>() + size_of::<Option<OutMessage>>() + 2 * size_of::<Sent>());

/// What became of an acknowledged or dropped frame, for the caller's accounting.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Acknowledged: `size` bytes left the flight. `sent_once` is the send time of a frame
    /// transmitted exactly once (a clean round-trip sample), with its serial; `delivery`
    /// and `sent_at` describe the latest transmission, for the delivery rate. `was_lost`:
    /// the frame had been declared lost and was waiting for its resend; `early`: it was
    /// resent, sooner before this acknowledgement than any round trip. Either way an
    /// earlier transmission arrived: the loss was spurious.
    Acked {
        size: usize,
        sent_once: Option<(u64, Time)>,
        delivery: SendState,
        sent_at: Time,
        was_lost: bool,
        early: bool,
    },
    /// Dropped and discarded (an unreliable frame).
    Discarded,
    /// A frame given up after it was declared lost was acknowledged after all: the loss
    /// was spurious. Nothing else changes (it left the flight when given up).
    LateAck,
    /// Dropped and now waiting to be resent; unreliable messages were stripped.
    ToResend,
    /// A dropped unreliable frame, now an empty reliable sentinel frame waiting to be sent.
    Sentinel,
    /// The id was skipped: never sent, so never receivable.
    Skipped,
}

#[derive(Debug)]
pub(crate) struct InFlight {
    frames: VecDeque<Frame>,
    store: VecDeque<Option<OutMessage>>,
    store_base: u64,
    k_b: u32,
    next: u32,
    largest_acked: Option<u32>,
    largest_acked_serial: Option<u64>,
    sent: VecDeque<Sent>,
    next_serial: u64,
    flight: usize,
    /// Frames in flight or lost, and of those the lost ones: kept as counts so that the
    /// per-datagram questions (anything outstanding? anything to resend?) do not walk
    /// the queue.
    live: usize,
    lost: usize,
}

impl InFlight {
    pub(crate) fn new(first_id: u32) -> Self {
        Self {
            frames: VecDeque::new(),
            store: VecDeque::new(),
            store_base: 0,
            k_b: first_id,
            next: first_id,
            largest_acked: None,
            largest_acked_serial: None,
            sent: VecDeque::new(),
            next_serial: 0,
            flight: 0,
            live: 0,
            lost: 0,
        }
    }

    /// Bytes of the transfer queue's own storage (payloads are counted by their channels).
    pub(crate) fn memory(&self) -> usize {
        self.frames.capacity() * size_of::<Frame>()
            + self.store.capacity() * size_of::<Option<OutMessage>>()
            + self.sent.capacity() * size_of::<Sent>()
    }

    /// The serial the next transmission gets: every transmission numbered from it on
    /// was made after now.
    pub(crate) fn next_serial(&self) -> u64 {
        self.next_serial
    }

    /// Whether a transmission numbered `serial` or later has been acknowledged.
    pub(crate) fn acked_since(&self, serial: u64) -> bool {
        self.largest_acked_serial.is_some_and(|l| l >= serial)
    }

    /// `k_b`: the oldest frame not done, or the next id when none is outstanding.
    pub(crate) fn base(&self) -> u32 {
        self.k_b
    }

    /// `H`: the id the next new frame gets.
    pub(crate) fn next_id(&self) -> u32 {
        self.next
    }

    pub(crate) fn flight(&self) -> usize {
        self.flight
    }

    /// Frames not yet done (in flight or lost).
    pub(crate) fn outstanding(&self) -> usize {
        debug_assert_eq!(
            (self.live, self.lost),
            (
                self.frames.iter().filter(|f| matches!(f.state, State::InFlight | State::Lost)).count(),
                self.frames.iter().filter(|f| f.state == State::Lost).count()
            ),
            "frame counts out of step with the queue"
        );
        self.live
    }

    /// Frames or message slots held from the oldest outstanding frame, whichever is more
    /// (the transmission log is kept below twice the frames).
    pub(crate) fn span(&self) -> usize {
        self.frames.len().max(self.store.len())
    }

    /// Whether a lost frame waits to be resent.
    pub(crate) fn has_lost(&self) -> bool {
        self.lost > 0
    }

    /// Whether a transmission is in flight (sent, and neither acknowledged nor lost).
    pub(crate) fn has_in_flight(&self) -> bool {
        self.live > self.lost
    }

    /// Frames in flight (sent, and neither acknowledged nor lost).
    pub(crate) fn in_flight_frames(&self) -> usize {
        self.live - self.lost
    }

    /// Whether a new frame would still fall inside the transfer window of `window` frames.
    pub(crate) fn window_open(&self, window: u32) -> bool {
        SeqSpace::FRAME.distance(self.k_b, self.next) < window
    }

    /// The lowest id the receiver may still be expecting as new: one past the newest frame
    /// acknowledged, or `k_b` before any acknowledgement.
    pub(crate) fn receiver_floor(&self) -> u32 {
        self.largest_acked.map_or(self.k_b, |l| SeqSpace::FRAME.add(l, 1))
    }

    fn index(&self, id: u32) -> Option<usize> {
        let d = SeqSpace::FRAME.distance(self.k_b, id) as usize;
        (d < self.frames.len()).then_some(d)
    }

    /// Appends a message to the store for the frame being assembled.
    pub(crate) fn store_message(&mut self, m: OutMessage) {
        crate::lean::room_for_first(&mut self.store);
        self.store.push_back(Some(m));
    }

    /// The message at absolute store index `at`, if it is still held (not acknowledged,
    /// stripped or popped).
    pub(crate) fn message_at(&self, at: u64) -> Option<&OutMessage> {
        let i = usize::try_from(at.checked_sub(self.store_base)?).ok()?;
        self.store.get(i)?.as_ref()
    }

    /// The message at absolute store index `at`, to cut (a lost frame too large to resend
    /// whole), if it is still held.
    pub(crate) fn message_at_mut(&mut self, at: u64) -> Option<&mut OutMessage> {
        let i = usize::try_from(at.checked_sub(self.store_base)?).ok()?;
        self.store.get_mut(i)?.as_mut()
    }

    /// Takes the message at absolute store index `at` out of its frame (a lost frame too
    /// large to resend whole), if it is still held.
    pub(crate) fn take_message(&mut self, at: u64) -> Option<OutMessage> {
        let i = usize::try_from(at.checked_sub(self.store_base)?).ok()?;
        self.store.get_mut(i)?.take()
    }

    /// Absolute store index the next stored message gets.
    pub(crate) fn store_end(&self) -> u64 {
        self.store_base + self.store.len() as u64
    }

    /// The live messages of a frame, in order.
    pub(crate) fn messages(&self, msgs: &Range<u64>) -> impl Iterator<Item = &OutMessage> + Clone {
        let from = (msgs.start - self.store_base) as usize;
        let to = (msgs.end - self.store_base) as usize;
        self.store.range(from..to).flatten()
    }

    /// Records a new frame over the messages stored since `first_msg`; returns its id.
    pub(crate) fn push(&mut self, first_msg: u64, reliable: bool, size: usize, now: Time, delivery: SendState) -> u32 {
        let id = self.next;
        self.next = SeqSpace::FRAME.add(id, 1);
        let serial = self.take_serial(id, now);
        crate::lean::room_for_first(&mut self.frames);
        let frame = Frame {
            id,
            state: State::InFlight,
            reliable,
            size: kept_size(size),
            first_msg,
            msg_count: kept_count(self.store_end() - first_msg),
            serial,
            sent_at: now,
            transmissions: 1,
            delivered: delivery.delivered,
            delivered_at: delivery.delivered_at,
            first_sent_at: delivery.first_sent_at,
            app_limited: delivery.app_limited,
        };
        self.frames.push_back(frame);
        self.flight += size;
        self.live += 1;
        id
    }

    /// Consumes the next id without sending anything under it. `at` is the store index
    /// where the next frame's messages begin: message ranges follow frame ids, so the
    /// skipped frame's empty range must sit before them.
    pub(crate) fn skip(&mut self, now: Time, at: u64) {
        let id = self.next;
        self.next = SeqSpace::FRAME.add(id, 1);
        self.frames.push_back(Frame {
            id,
            state: State::Skipped,
            reliable: false,
            size: 0,
            first_msg: at,
            msg_count: 0,
            serial: 0,
            sent_at: now,
            transmissions: 0,
            // As a `SendState` of nothing delivered, both times `now`.
            delivered: 0,
            delivered_at: now,
            first_sent_at: now,
            app_limited: false,
        });
    }

    /// Logs a transmission of frame `id` at `at` and returns its serial. The caller then
    /// records the serial on the frame (which may not be in `frames` yet).
    fn take_serial(&mut self, id: u32, at: Time) -> u64 {
        // Superseded transmissions leave the log only from its front; behind a live one
        // they pile up (a frame resent again and again). Past twice the frames, sweep,
        // before logging the new transmission: its frame does not carry its serial yet,
        // and a sweep after would drop it, leaving a frame that no loss rule could ever
        // find (it stalled a transfer at the 128-byte MTU).
        if self.sent.len() >= 2 * self.frames.len() + 64 {
            let (k_b, frames) = (self.k_b, &self.frames);
            self.sent.retain(|s| {
                let i = SeqSpace::FRAME.distance(k_b, s.id) as usize;
                frames.get(i).is_some_and(|f| f.serial == s.serial && f.state == State::InFlight)
            });
        }
        let serial = self.next_serial;
        self.next_serial += 1;
        crate::lean::room_for_first(&mut self.sent);
        self.sent.push_back(Sent { serial, id, at });
        serial
    }

    /// The first lost frame whose end lies inside `cwnd`, measured from the front of the
    /// queue (spec §3.1: resends only inside the congestion window).
    pub(crate) fn first_resendable(&self, cwnd: usize) -> Option<&Frame> {
        if self.lost == 0 {
            return None;
        }
        let mut cumulative = 0;
        for f in &self.frames {
            if matches!(f.state, State::Done | State::GivenUp) {
                continue;
            }
            cumulative += f.bytes();
            if cumulative > cwnd {
                return None;
            }
            if f.state == State::Lost {
                return Some(f);
            }
        }
        None
    }

    /// A lost frame was transmitted again, now `size` bytes.
    pub(crate) fn resent(&mut self, id: u32, size: usize, now: Time, delivery: SendState) {
        let Some(i) = self.index(id) else { return };
        let serial = self.take_serial(id, now);
        let Some(f) = self.frames.get_mut(i) else { return };
        self.flight = self.flight - f.bytes() + size;
        if f.state == State::Lost {
            self.lost -= 1;
        }
        f.size = kept_size(size);
        f.state = State::InFlight;
        f.serial = serial;
        f.sent_at = now;
        f.transmissions = f.transmissions.saturating_add(1);
        f.set_delivery(delivery);
    }

    /// Handles an acknowledgement of `id` at `now`, `min_rtt` being the shortest round trip
    /// seen. Returns `None` when the id is not an outstanding frame (already done, or never
    /// sent: see [`InFlight::is_unsent`]). Calls `release` with every message of the frame.
    ///
    /// An acknowledgement that comes sooner after a resend than any round trip reports an
    /// earlier transmission, not the resend: it does not count as the resend's delivery for
    /// the reordering rule (RFC 8985 §6.2 skips it so), or every transmission made before
    /// the resend would count as overtaken, each spurious resend making the next.
    pub(crate) fn ack(
        &mut self,
        id: u32,
        now: Time,
        min_rtt: Option<Duration>,
        mut release: impl FnMut(&OutMessage),
    ) -> Option<Outcome> {
        let i = self.index(id)?;
        let f = self.frames.get_mut(i)?;
        let was_lost = f.state == State::Lost;
        match f.state {
            State::Done => return None,
            State::GivenUp => {
                f.state = State::Done;
                return Some(Outcome::LateAck);
            }
            State::Skipped => return Some(Outcome::Skipped),
            State::InFlight => {}
            State::Lost => self.lost -= 1,
        }
        self.live -= 1;
        let acked_serial = f.serial;
        let sent_once = f.sent_once().then_some((f.serial, f.sent_at));
        let early = sent_once.is_none() && min_rtt.is_some_and(|m| now.saturating_duration_since(f.sent_at) < m);
        let (delivery, sent_at) = (f.delivery(), f.sent_at);
        f.state = State::Done;
        let size = f.bytes();
        let msgs = f.msgs();
        self.flight -= size;
        let s = SeqSpace::FRAME;
        if self.largest_acked.is_none_or(|l| s.is_newer(id, l)) {
            self.largest_acked = Some(id);
        }
        if !early && self.largest_acked_serial.is_none_or(|l| acked_serial > l) {
            self.largest_acked_serial = Some(acked_serial);
        }
        // A repair copy delivered its original too: release it, so that the original's
        // frame is not resent for it (a frame left with no reliable message is discarded
        // when it is found lost).
        let mut originals: smallvec::SmallVec<[u64; 4]> = smallvec::SmallVec::new();
        self.release(msgs, |_| true, &mut |m: &OutMessage| {
            if let super::queues::Tag::CopyOf(at) = m.tag {
                originals.push(at);
            }
            release(m);
        });
        for at in originals {
            if at >= self.store_base {
                let i = (at - self.store_base) as usize;
                if let Some(m) = self.store.get_mut(i).and_then(Option::take) {
                    release(&m);
                }
            }
        }
        Some(Outcome::Acked { size, sent_once, delivery, sent_at, was_lost, early })
    }

    /// Whether `id` was never sent: at or beyond `next`, within half the space.
    #[cfg(test)]
    pub(crate) fn is_unsent(&self, id: u32) -> bool {
        let s = SeqSpace::FRAME;
        id == self.next || s.is_newer(id, self.next)
    }

    fn release(
        &mut self,
        msgs: Range<u64>,
        which: impl Fn(&OutMessage) -> bool,
        release: &mut impl FnMut(&OutMessage),
    ) {
        let from = (msgs.start - self.store_base) as usize;
        let to = (msgs.end - self.store_base) as usize;
        for slot in self.store.range_mut(from..to) {
            if slot.as_ref().is_some_and(&which)
                && let Some(m) = slot.take()
            {
                release(&m);
            }
        }
    }

    /// Walks transmissions from the oldest and marks every frame lost that was sent at
    /// least `rto` before `now`, or that was sent before the newest acknowledged
    /// transmission at least `window` before `now`. Calls `lost` with each, in send order.
    /// Returns the serial of the newest transmission the timeout found (rather than the
    /// reordering window), if any.
    pub(crate) fn detect_losses(
        &mut self,
        now: Time,
        rto: Duration,
        window: Duration,
        mut lost: impl FnMut(&mut Self, u32),
    ) -> Option<u64> {
        let mut timed_out = None;
        while let Some(&s) = self.sent.front() {
            let current = self.index(s.id).and_then(|i| self.frames.get(i));
            let live = current.is_some_and(|f| f.serial == s.serial && f.state == State::InFlight);
            if !live {
                self.sent.pop_front();
                continue;
            }
            let age = now.saturating_duration_since(s.at);
            let overtaken = self.largest_acked_serial.is_some_and(|l| s.serial < l);
            if !(age >= rto || overtaken && age >= window) {
                break;
            }
            if !(overtaken && age >= window) {
                timed_out = Some(s.serial);
            }
            self.sent.pop_front();
            lost(self, s.id);
        }
        timed_out
    }

    /// The oldest transmission still in flight: its send time, and whether a later one
    /// has been acknowledged (so the reordering window applies to it).
    pub(crate) fn oldest_send(&self) -> Option<(Time, bool)> {
        self.sent
            .iter()
            .find(|s| {
                self.index(s.id)
                    .and_then(|i| self.frames.get(i))
                    .is_some_and(|f| f.serial == s.serial && f.state == State::InFlight)
            })
            .map(|s| (s.at, self.largest_acked_serial.is_some_and(|l| s.serial < l)))
    }

    /// Marks frame `id` dropped (spec §3.1.2): a reliable frame loses its unreliable
    /// messages and waits to be resent; an unreliable frame becomes an empty reliable
    /// sentinel frame if `sentinel` says so, and is discarded otherwise. `size_of` gives the
    /// new size of a frame from its remaining messages.
    pub(crate) fn drop_frame(
        &mut self,
        id: u32,
        sentinel: bool,
        mut release: impl FnMut(&OutMessage),
        size_of: impl Fn(&Self, &Range<u64>) -> usize,
    ) -> Option<Outcome> {
        let i = self.index(id)?;
        let (reliable, msgs, old) = {
            let f = self.frames.get(i)?;
            if f.state != State::InFlight {
                return None;
            }
            (f.reliable, f.msgs(), f.bytes())
        };
        self.release(msgs.clone(), |m| !m.is_reliable(), &mut release);
        // A frame whose reliable messages were all delivered by repair copies has nothing
        // left to resend.
        let reliable = reliable && self.messages(&msgs).next().is_some();
        let outcome = if reliable || sentinel {
            let size = size_of(self, &msgs);
            self.flight = self.flight - old + size;
            if let Some(f) = self.frames.get_mut(i) {
                f.size = kept_size(size);
                f.reliable = true;
                f.state = State::Lost;
            }
            self.lost += 1;
            if reliable { Outcome::ToResend } else { Outcome::Sentinel }
        } else {
            self.flight -= old;
            if let Some(f) = self.frames.get_mut(i) {
                f.state = State::GivenUp;
            }
            self.live -= 1;
            Outcome::Discarded
        };
        Some(outcome)
    }

    /// Pops done frames off the front, advancing `k_b`, and frees their messages.
    pub(crate) fn pop_done(&mut self) {
        while self.frames.front().is_some_and(|f| matches!(f.state, State::Done | State::GivenUp | State::Skipped)) {
            if let Some(f) = self.frames.pop_front() {
                self.k_b = SeqSpace::FRAME.add(f.id, 1);
                while self.store_base < f.msgs().end {
                    self.store.pop_front();
                    self.store_base += 1;
                }
            }
        }
        if self.frames.is_empty() {
            self.k_b = self.next;
        }
    }

    /// A frame by id, if outstanding or done but not yet popped.
    pub(crate) fn get(&self, id: u32) -> Option<&Frame> {
        self.index(id).and_then(|i| self.frames.get(i))
    }

    /// Discards everything, calling `release` with each remaining message.
    pub(crate) fn clear(&mut self, mut release: impl FnMut(&OutMessage)) {
        self.store_base += self.store.len() as u64;
        for m in self.store.drain(..).flatten() {
            release(&m);
        }
        self.frames.clear();
        self.sent.clear();
        self.flight = 0;
        self.live = 0;
        self.lost = 0;
        self.k_b = self.next;
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::transfer::queues::tests::msg;
    use crate::wire::SendMode;

    #[test]
    fn a_frame_keeps_its_delivery_state_exactly() {
        let base = Time::ZERO + Duration::from_secs(3600);
        let mut q = InFlight::new(7);
        let state = SendState {
            delivered: 12_345,
            delivered_at: base - Duration::from_nanos(1_234_567_891),
            first_sent_at: base - Duration::from_millis(40),
            app_limited: true,
        };
        let id = q.push(0, true, 100, base, state);
        let Some(Outcome::Acked { delivery, sent_at, .. }) = q.ack(id, base, None, |_| {}) else { panic!("acked") };
        assert_eq!((delivery, sent_at), (state, base));
        assert_eq!((size_of::<Frame>(), align_of::<Frame>()), (64, 64), "a frame is one cache line");
    }

    fn frame(q: &mut InFlight, modes: &[SendMode], now: Time) -> u32 {
        let first = q.store_end();
        for (i, &m) in modes.iter().enumerate() {
            q.store_message(msg(0, i as u32, m, 100));
        }
        let reliable = modes.iter().any(|&m| m != SendMode::Unreliable);
        let delivery = SendState { delivered: 0, delivered_at: now, first_sent_at: now, app_limited: false };
        q.push(first, reliable, 100 * modes.len(), now, delivery)
    }

    #[test]
    fn acks_release_frames_and_advance_the_base_only_from_the_front() {
        let t = Time::ZERO;
        let mut q = InFlight::new(u32::MAX - 1);
        let a = frame(&mut q, &[SendMode::Reliable], t);
        let b = frame(&mut q, &[SendMode::Reliable, SendMode::Unreliable], t);
        let c = frame(&mut q, &[SendMode::Unreliable], t);
        assert_eq!((a, b, c), (u32::MAX - 1, u32::MAX, 0));
        assert_eq!(q.flight(), 400);
        let mut released = 0;
        assert!(matches!(
            q.ack(b, t, None, |_| released += 1),
            Some(Outcome::Acked { size: 200, sent_once: Some((1, _)), .. })
        ));
        assert!(q.ack(b, t, None, |_| released += 1).is_none(), "acknowledged once");
        q.pop_done();
        assert_eq!(q.base(), a, "b is done but a still holds the window");
        q.ack(a, t, None, |_| released += 1);
        q.pop_done();
        assert_eq!((q.base(), released, q.flight()), (c, 3, 100));
        assert!(q.is_unsent(1) && !q.is_unsent(c));
    }

    #[test]
    fn losses_by_reordering_and_by_timeout() {
        let t = Time::ZERO;
        let ms = Duration::from_millis(1);
        let mut q = InFlight::new(0);
        let ids: Vec<u32> = (0..6).map(|i| frame(&mut q, &[SendMode::Reliable], t + i * ms)).collect();
        // Frame 3 is acknowledged: 0, 1 and 2 were overtaken, but reordering within the
        // 10 ms window is not loss.
        q.ack(ids[3], t, None, |_| {});
        let mut lost = Vec::new();
        q.detect_losses(t + 5 * ms, 100 * ms, 10 * ms, |_, id| lost.push(id));
        assert!(lost.is_empty());
        assert_eq!(q.oldest_send(), Some((t, true)));
        // Past the window, the overtaken frames are lost; 4 and 5 were not overtaken.
        let timed_out = q.detect_losses(t + 11 * ms, 100 * ms, 10 * ms, |_, id| lost.push(id));
        assert_eq!((lost.as_slice(), timed_out), ([0, 1].as_slice(), None), "the reordering window, not the timeout");
        lost.clear();
        q.detect_losses(t + 12 * ms, 100 * ms, 10 * ms, |_, id| lost.push(id));
        assert_eq!(lost, [2]);
        // The RTO catches the rest once it has elapsed.
        lost.clear();
        let timed_out = q.detect_losses(t + 104 * ms, 100 * ms, 10 * ms, |_, id| lost.push(id));
        assert_eq!(lost, [4], "5 was sent later than 4 ms");
        assert_eq!(timed_out, Some(4), "the timeout found 4 (its serial: sent fifth)");
    }

    #[test]
    fn an_early_acknowledgement_of_a_resend_overtakes_nothing() {
        let t = Time::ZERO;
        let ms = Duration::from_millis(1);
        let state = SendState { delivered: 0, delivered_at: t, first_sent_at: t, app_limited: false };
        let mut q = InFlight::new(0);
        let a = frame(&mut q, &[SendMode::Reliable], t);
        let b = frame(&mut q, &[SendMode::Reliable], t + 20 * ms);
        // a times out and is resent; its first transmission's acknowledgement comes 10 ms
        // after the resend, sooner than any round trip (50 ms): it reports the first.
        let mut lost = Vec::new();
        q.detect_losses(t + 60 * ms, 60 * ms, 10 * ms, |q, id| {
            q.drop_frame(id, false, |_| {}, |_, _| 100);
            lost.push(id);
        });
        assert_eq!(lost, [a]);
        q.resent(a, 100, t + 60 * ms, state);
        let ack = q.ack(a, t + 70 * ms, Some(50 * ms), |_| {});
        assert!(matches!(ack, Some(Outcome::Acked { early: true, was_lost: false, .. })));
        // b, sent before the resend and still on its way, is not overtaken by it.
        assert_eq!(q.oldest_send(), Some((t + 20 * ms, false)));
        q.detect_losses(t + 75 * ms, 60 * ms, 10 * ms, |_, id| lost.push(id));
        assert_eq!(lost, [a], "b is not lost");
        let _ = b;
    }

    #[test]
    fn dropped_frames_strip_unreliable_messages_or_become_sentinels() {
        let t = Time::ZERO;
        let mut q = InFlight::new(10);
        let mixed = frame(&mut q, &[SendMode::Reliable, SendMode::Unreliable], t);
        let unrel = frame(&mut q, &[SendMode::Unreliable], t);
        let spaced = frame(&mut q, &[SendMode::Unreliable], t);
        let size_of = |q: &InFlight, r: &Range<u64>| 9 + 100 * q.messages(r).count();
        let mut stripped = 0;
        assert!(matches!(q.drop_frame(mixed, false, |_| stripped += 1, size_of), Some(Outcome::ToResend)));
        assert!(matches!(q.drop_frame(unrel, false, |_| stripped += 1, size_of), Some(Outcome::Discarded)));
        assert!(matches!(q.drop_frame(spaced, true, |_| stripped += 1, size_of), Some(Outcome::Sentinel)));
        assert_eq!(stripped, 3);
        let f = q.get(spaced).unwrap();
        assert!(f.reliable && f.state == State::Lost && q.messages(&f.msgs()).count() == 0);
        assert_eq!(q.flight(), 109 + 9);
        assert_eq!(q.first_resendable(usize::MAX).map(|f| f.id), Some(mixed));
        // Only inside the window: the lost frame at the front needs 109 bytes.
        assert!(q.first_resendable(100).is_none());
        q.resent(mixed, 109, t, SendState { delivered: 0, delivered_at: t, first_sent_at: t, app_limited: false });
        assert_eq!(q.first_resendable(usize::MAX).map(|f| f.id), Some(spaced));
    }

    #[test]
    fn skipped_ids_are_never_outstanding_and_their_acks_are_caught() {
        let t = Time::ZERO;
        let mut q = InFlight::new(100);
        let a = frame(&mut q, &[SendMode::Reliable], t);
        let at = q.store_end();
        q.skip(t, at);
        let c = frame(&mut q, &[SendMode::Reliable], t);
        assert_eq!((a, c), (100, 102), "101 was skipped");
        assert_eq!(q.outstanding(), 2);
        assert!(matches!(q.ack(101, t, None, |_| {}), Some(Outcome::Skipped)));
        let mut released = 0;
        q.ack(a, t, None, |_| released += 1);
        q.pop_done();
        // The skipped id pops with a, and c's message is still held.
        assert_eq!(q.base(), c);
        assert_eq!(q.messages(&q.get(c).unwrap().msgs()).count(), 1);
        q.ack(c, t, None, |_| released += 1);
        q.pop_done();
        assert_eq!((released, q.outstanding()), (2, 0));
    }
}
