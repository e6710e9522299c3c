//! Sending: one datagram of a flush ([`Transfer::poll_datagram`]), and the frames it
//! assembles (repair copies, tail-loss probes, skipped ids, path MTU probes).
//!
//! A datagram's parts are settled in order, one short step each: what obliges a datagram
//! to go ([`Due`]); a path MTU probe instead, when one is due; the acknowledgement ranges
//! ([`AckSection`]); the frame, where the pacer lets one go ([`Gate`], [`Plan`]); how the
//! ranges share the datagram with it ([`AckFit`]); then the datagram is written and what
//! went is recorded. A datagram may be planned for a limit below the MTU in use (an
//! address not yet validated gets no more than it sent): what does not fit waits, it is
//! not cut for the limit. Invariants: a datagram never exceeds the MTU in use nor its
//! limit; due
//! acknowledgements ride with the frame or go alone before it; a frame counts as sent
//! (its time, its pacing, its stats) only once its datagram is written.

use super::*;

/// How many skipped ids [`Transfer`] remembers: at one skip in 128 frames, the last
/// ~4,000 frames, far more than any acknowledgement range spans and far less than the
/// 2^32 ids after which an id is honestly reused.
pub(super) const SKIPS_REMEMBERED: usize = 32;

/// What obliges this flush to send a datagram, read once at its start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Due {
    /// Acknowledgements are owed: they ride on whatever goes.
    acks: bool,
    /// ... and can wait no longer for a ride: they go alone if nothing else goes.
    acks_urgent: bool,
    /// The echo of the peer's ping can wait no longer.
    echo_urgent: bool,
    /// Nothing has gone for the keepalive interval.
    keepalive: bool,
}

impl Due {
    /// Whether a datagram goes even with no frame in it.
    fn alone(self) -> bool {
        self.acks_urgent || self.echo_urgent || self.keepalive
    }
}

/// The acknowledgement section a datagram may carry: the delay field, and the section's
/// encoded size with it (0 when there are no ranges).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AckSection {
    delay: u32,
    delay_len: usize,
    len: usize,
}

/// Whether the pacer lets this datagram's frame go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    Open,
    /// Only a frame of unreliable data, which the pacer does not hold behind the reliable
    /// data it spreads out.
    Urgent,
    /// No frame: the pacer's timer says when one may go.
    Closed,
}

/// The frame a datagram carries, with its messages' encoded size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Resend the lost frame `id`.
    Resend { id: u32, len: usize },
    /// Send the new frame `id`, just assembled.
    New { id: u32, len: usize },
    /// No frame: acknowledgements and pings only.
    NoFrame,
}

impl Plan {
    fn frame(self) -> Option<u32> {
        match self {
            Self::Resend { id, .. } | Self::New { id, .. } => Some(id),
            Self::NoFrame => None,
        }
    }

    fn msgs_len(self) -> usize {
        match self {
            Self::Resend { len, .. } | Self::New { len, .. } => len,
            Self::NoFrame => 0,
        }
    }
}

/// How the acknowledgement ranges gathered share the datagram with its frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckFit {
    /// All of them fit (beside the frame, if there is one).
    All,
    /// Due ones do not fit beside the frame (a resend: a new frame leaves room for them):
    /// they go alone, and the frame in the next datagram.
    Alone,
    /// Repeats only: the newest `n` that fit the room left.
    Newest(usize),
}

/// How `ranges` (newest first, with `section` their encoded size) fit the `room` bytes
/// the frame leaves.
fn fit_acks(ranges: &[AckRange], section: AckSection, room: usize, acks_due: bool) -> AckFit {
    if section.len <= room {
        return AckFit::All;
    }
    if acks_due {
        return AckFit::Alone;
    }
    let mut len = section.delay_len;
    let mut fit = 0;
    for (i, r) in ranges.iter().enumerate() {
        len += crate::wire::ack_range_len(i.checked_sub(1).and_then(|j| ranges.get(j)), r);
        if len > room {
            break;
        }
        fit = i + 1;
    }
    AckFit::Newest(fit)
}

/// What a datagram carries besides pings and echoes, once settled.
#[derive(Clone, Copy, Debug)]
struct Parts<'r> {
    plan: Plan,
    /// The acknowledgement ranges, newest first, and their delay field.
    acks: &'r [AckRange],
    ack_delay: u32,
    /// Whether it is the keepalive (it carries a ping whatever the ping period says).
    keepalive: bool,
}

/// A datagram written: what [`Transfer::record`] books.
#[derive(Clone, Copy, Debug)]
struct Written {
    len: usize,
    plan: Plan,
    /// Acknowledgement ranges it carried.
    ranges: usize,
    /// Whether it carried an echo of the peer's ping.
    echo: bool,
}

impl Transfer {
    /// Whether a new frame may open now: something waits (queued data, or a tail-loss
    /// probe), and the transfer window, the record's span and the congestion window allow.
    fn can_open_frame(&self, now: Time) -> bool {
        (!self.queues.is_empty() || self.probe_due(now))
            && self.may_transmit()
            && self.inflight.window_open(self.shared.frame_window)
            && self.inflight.span() < self.shared.span_limit
            && self.cc.window() > self.inflight.flight() + FRAME_BASE
    }

    /// Writes the next datagram of this flush into `out`, returning its length, or `None`
    /// when there is nothing (more) to send now.
    pub(crate) fn poll_datagram<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        now: Time,
        key: Key,
        ids: &impl IdPolicy,
        out: &mut B,
    ) -> Option<usize> {
        // The common case: the limit's checks fold away.
        self.datagram_within(now, key, ids, usize::MAX, out)
    }

    /// [`Transfer::poll_datagram`] for a datagram of at most `limit` bytes before the
    /// key's extra (an address not yet validated may get no more than it sent). What does
    /// not fit waits rather than being cut for the limit: a lost frame larger than it is
    /// resent once the limit allows (nothing newer goes before it), queued messages stay
    /// queued, and no path MTU probe goes.
    pub(crate) fn poll_datagram_within<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        now: Time,
        key: Key,
        ids: &impl IdPolicy,
        limit: usize,
        out: &mut B,
    ) -> Option<usize> {
        self.datagram_within(now, key, ids, limit, out)
    }

    /// The body of [`Transfer::poll_datagram_within`], inlined into both entry points so
    /// that without a limit (the common case) its checks fold away. The steps it calls are
    /// inlined too (`#[inline(always)]`): with two callers the compiler would call them
    /// instead, which costs the common case more than the checks did.
    #[inline(always)]
    fn datagram_within<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        now: Time,
        key: Key,
        ids: &impl IdPolicy,
        limit: usize,
        out: &mut B,
    ) -> Option<usize> {
        let size = self.pmtu.current().min(limit);
        let due = self.due(now);
        let rate = self.cc.pacing_rate();
        if let Some(rate) = rate {
            self.pacer.refill(now, rate, pacing::depth(rate, self.rtt.step(), self.mtu));
        }
        self.pacing_wait = None;
        // A limit below the largest size discovery may try lets no probe go: a probe is
        // larger than the size in use, and the limit's address is not the path to learn.
        if limit >= self.pmtu.ceiling()
            && let Some(len) = self.send_mtu_probe(now, key, rate.is_some(), out)
        {
            return Some(len);
        }
        // Every flush ends with a call that sends nothing: it is answered before the
        // ranges and the frame are worked out (they would reach the same answer with the
        // same bookkeeping).
        if !self.has_work(now, due) {
            self.delivery.on_app_limited(self.inflight.flight());
            return None;
        }
        if size <= FRAME_OVERHEAD_MAX {
            return None; // not even an acknowledgement fits the limit yet.
        }
        let mut ranges: SmallVec<[AckRange; MAX_RANGES]> = SmallVec::new();
        let section = self.ack_section(now, due.acks, size, &mut ranges);
        let plan = self.choose_frame(now, ids, rate, if due.acks { section.len } else { 0 }, size);
        let room = (size - FRAME_OVERHEAD_MAX).saturating_sub(plan.msgs_len());
        let (plan, sent, acks_alone) = match fit_acks(&ranges, section, room, due.acks) {
            AckFit::All => (plan, ranges.len(), false),
            AckFit::Alone => (Plan::NoFrame, ranges.len(), plan.frame().is_some()),
            AckFit::Newest(n) => (plan, n, false),
        };
        if plan.frame().is_none() && !due.alone() && !acks_alone {
            self.hold(now);
            return None;
        }
        let acks = ranges.get(..sent).unwrap_or_default();
        if plan.frame().is_none() && acks.is_empty() && !due.keepalive && !due.echo_urgent {
            // Acknowledgements due, none of which fits the limit: they wait for it.
            self.hold(now);
            return None;
        }
        let parts = Parts { plan, acks, ack_delay: section.delay, keepalive: due.keepalive };
        let written = self.write(now, key, ids, parts, out);
        debug_assert!(written.len <= size + key.extra_len(), "a datagram of {} bytes", written.len);
        self.record(now, written, due.acks);
        Some(written.len)
    }

    /// What obliges a datagram at `now`.
    fn due(&self, now: Time) -> Due {
        // Due acknowledgements and echoes wait for a datagram that goes anyway, while this
        // side's next frame is expected soon; then they go alone.
        Due {
            acks: self.receiver.ack_due(),
            acks_urgent: self.receiver.ack_urgent(now, &self.cadence),
            echo_urgent: self.ping.echo_deadline(&self.cadence).is_some_and(|t| now >= t),
            keepalive: self.keepalive_at().is_none_or(|t| now >= t),
        }
    }

    /// Whether anything may make a datagram go: a frame to resend, data queued, a
    /// tail-loss probe, or what goes alone.
    fn has_work(&self, now: Time, due: Due) -> bool {
        self.inflight.has_lost() || !self.queues.is_empty() || self.probe_due(now) || due.alone()
    }

    /// Gathers into `ranges` the acknowledgement ranges to send, newest first: when some
    /// are due, or repeats are left to send. They fit a datagram of `size` alone.
    #[inline(always)]
    fn ack_section(
        &self,
        now: Time,
        acks_due: bool,
        size: usize,
        ranges: &mut SmallVec<[AckRange; MAX_RANGES]>,
    ) -> AckSection {
        // The delay field rides with any acknowledgement: its bytes count wherever the
        // section's do.
        let delay = self.receiver.ack_delay(now);
        let delay_len = ack_delay_len(delay);
        if acks_due || self.receiver.has_repeats() {
            // Never more than an acknowledgement alone can carry at this connection's size.
            let room = self.mtu.min(size).saturating_sub(FRAME_OVERHEAD_MAX + delay_len);
            self.receiver.ranges_to_send(ranges, room);
        }
        let len = if ranges.is_empty() { 0 } else { crate::wire::ack_section_len(ranges) + delay_len };
        AckSection { delay, delay_len, len }
    }

    /// Chooses the datagram's frame: a lost frame's resend first, else a new frame from
    /// the queues, either only where the pacer lets it go, in a datagram of `size`. A new
    /// frame leaves `reserve` bytes for the due acknowledgements.
    #[inline(always)]
    fn choose_frame(&mut self, now: Time, ids: &impl IdPolicy, rate: Option<u64>, reserve: usize, size: usize) -> Plan {
        let resend =
            self.inflight.first_resendable(self.cc.window()).filter(|_| self.may_transmit()).map(|f| (f.id, f.msgs()));
        match self.pacing_gate(now, rate, resend.is_some()) {
            Gate::Closed => Plan::NoFrame,
            gate => match resend {
                Some((id, range)) => self.plan_resend(id, &range, ids, size),
                None if self.can_open_frame(now) => self.plan_new(now, ids, reserve, gate == Gate::Urgent, size),
                None => Plan::NoFrame,
            },
        }
    }

    /// Whether the pacer, when it paces (`rate`), lets a frame go now; when it holds one
    /// back (`resend` waiting, or a new frame could open), it sets the pacing timer.
    fn pacing_gate(&mut self, now: Time, rate: Option<u64>, resend: bool) -> Gate {
        let Some(rate) = rate.filter(|_| !self.pacer.allows()) else { return Gate::Open };
        // Unreliable data is time-critical: the pacer does not hold it behind reliable
        // data it is spreading out (a fragmented bulk packet would delay a tick's state by
        // a datagram's time at the pacing rate, 4 ms at 300 kB/s). A frame of unreliable
        // messages alone may take the pacer one datagram into debt, which the reliable
        // data behind it then waits off; it stays inside the congestion window.
        if !resend && self.pacer.allows_urgent(self.mtu) && self.can_open_frame(now) && self.unreliable_next(now) {
            return Gate::Urgent;
        }
        if resend || self.can_open_frame(now) {
            self.pacing_wait = Some(self.pacer.ready_at(now, rate));
        }
        Gate::Closed
    }

    /// Resends lost frame `id` (its messages at `range`), cut to the size in use; none
    /// when it does not fit a `size` below that (a limit that grows soon).
    #[inline(always)]
    fn plan_resend(&mut self, id: u32, range: &Range<u64>, ids: &impl IdPolicy, size: usize) -> Plan {
        let room = self.pmtu.current() - FRAME_OVERHEAD_MAX;
        let mut len = self.messages_len(range, ids);
        if len > size - FRAME_OVERHEAD_MAX && size < self.pmtu.current() {
            return Plan::NoFrame;
        }
        if len > room {
            // Sent at a size path MTU discovery has since given up: what does not fit
            // now goes back to the queue, to travel in frames of the size that passes.
            self.requeue_beyond(id, room);
            len = self.inflight.get(id).map_or(0, |f| self.messages_len(&f.msgs(), ids));
        }
        Plan::Resend { id, len }
    }

    /// Assembles a new frame (of unreliable data only, when `urgent`) inside the room a
    /// datagram of `size`, the `reserve` for due acknowledgements and the congestion
    /// window leave. Messages are cut (and checked for a resend) at the size in use.
    #[inline(always)]
    fn plan_new(&mut self, now: Time, ids: &impl IdPolicy, reserve: usize, urgent: bool, size: usize) -> Plan {
        let room = self.pmtu.current() - FRAME_OVERHEAD_MAX;
        let window = self.cc.window().saturating_sub(self.inflight.flight() + FRAME_BASE);
        let budget = (size.min(self.pmtu.current()) - FRAME_OVERHEAD_MAX).saturating_sub(reserve).min(window);
        match self.assemble(now, ids, budget, room, urgent) {
            Some((id, len)) => Plan::New { id, len },
            None => Plan::NoFrame,
        }
    }

    /// Nothing goes: the flush ends here.
    fn hold(&mut self, now: Time) {
        if self.pacing_wait.is_some() {
            return; // the pacer holds data back; its timer wakes the next flush.
        }
        if self.queues.is_empty() && !self.inflight.has_lost() {
            // Nothing held back: what is sampled until this flight is delivered says the
            // path is at least that fast, not that it is no faster.
            self.delivery.on_app_limited(self.inflight.flight());
        }
        if self.probe_due(now) {
            // The probe could not go (the window is full, or copies are at their share):
            // the candidates wait for a datagram that goes anyway.
            self.probe_at = None;
        }
    }

    /// Writes the datagram: its header (the frame id, a ping when one is due, the echo
    /// owed, the acknowledgement ranges and their delay), then the frame's messages.
    #[inline(always)]
    fn write<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        now: Time,
        key: Key,
        ids: &impl IdPolicy,
        parts: Parts<'_>,
        out: &mut B,
    ) -> Written {
        let Parts { plan, acks, ack_delay, keepalive } = parts;
        let frame = plan.frame();
        // A ping rides on whatever goes, once per round trip while frames are in flight
        // (their acknowledgements sample the RTT too) or per `ping_interval` otherwise; it
        // goes alone only as the keepalive.
        let busy = frame.is_some() || self.inflight.outstanding() > 0;
        let ping = (keepalive || self.ping.due(now, self.ping_period(busy))).then(|| self.ping.send(now));
        let echo = self.ping.echo();
        let frame_field = frame.map(|id| {
            let bytes = SeqSpace::FRAME.truncation_bytes(id, self.inflight.receiver_floor(), self.inflight.next_id());
            (id, bytes)
        });
        let ack_delay = if acks.is_empty() { 0 } else { ack_delay };
        let header = DataHeader { frame: frame_field, ping, ping_ack: echo, acks, ack_delay };
        let mut w = DataWriter::new(out, key, &header);
        if let Some(f) = frame.and_then(|id| self.inflight.get(id)) {
            let range = f.msgs();
            let mut msgs = self.inflight.messages(&range).peekable();
            while let Some(m) = msgs.next() {
                let last = msgs.peek().is_none();
                w.message(&m.as_wire(), ids.short_id(m.channel, m.id), last);
            }
        }
        let len = w.finish();
        // A sealed datagram is larger by what the session took off this layer's MTU.
        debug_assert!(len <= self.pmtu.current() + key.extra_len(), "a datagram of {len} bytes");
        Written { len, plan, ranges: acks.len(), echo: echo.is_some() }
    }

    /// Books a datagram written: the ranges and echo it carried, its frame as sent or
    /// resent (its time, the pacer's budget, the resend timeout's hold), the counters, and
    /// the repair credit it earns.
    #[inline(always)]
    fn record(&mut self, now: Time, w: Written, acks_due: bool) {
        if w.ranges > 0 || acks_due {
            self.receiver.sent(w.ranges);
        }
        if w.echo {
            self.ping.echo_sent();
        }
        match w.plan {
            Plan::Resend { id, len } => {
                let state = self.delivery.on_send(now, self.inflight.flight() == 0);
                self.inflight.resent(id, FRAME_BASE + len, now, state);
                self.stats.frames_resent += 1;
            }
            Plan::New { .. } => self.stats.frames_sent += 1,
            Plan::NoFrame => {}
        }
        if w.plan.frame().is_some() {
            self.pacer.spend(w.len);
            self.cadence.on_frame_sent(now);
            self.rto_hold = self.current_rto_hold();
        }
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += w.len as u64;
        self.redundancy.earn(w.len, self.held(), self.mtu);
        self.last_sent = Some(now);
    }

    /// Encoded size of a frame's live messages.
    fn messages_len(&self, range: &Range<u64>, ids: &impl IdPolicy) -> usize {
        let mut run = RunContext::default();
        let mut msgs = self.inflight.messages(range).peekable();
        let mut len = 0;
        while let Some(m) = msgs.next() {
            let w = m.as_wire();
            len += run.encoded_len(&w, ids.short_id(m.channel, m.id), msgs.peek().is_none());
            run.observe(&w);
        }
        len
    }

    /// Sends a path MTU probe when one is due and the congestion window (and the pacer,
    /// when it paces) has room for all of it: a ping padded to the size tried, no frame, so
    /// it is never resent and its loss is no drop the congestion controller hears of.
    #[inline(always)]
    fn send_mtu_probe<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
        &mut self,
        now: Time,
        key: Key,
        paced: bool,
        out: &mut B,
    ) -> Option<usize> {
        let size = self.pmtu.wanted()?;
        // A probe larger than the whole window goes when nothing else is in flight.
        let flight = self.inflight.flight();
        let room = flight == 0 || self.cc.window().saturating_sub(flight) >= size;
        if !room || (paced && !self.pacer.allows()) {
            return None;
        }
        let id = self.ping.send(now);
        let header = DataHeader { ping: Some(id), ..DataHeader::default() };
        let w = DataWriter::padded(out, key, &header, size.saturating_sub(header.len()).max(1));
        let len = w.finish();
        self.pmtu.sent(now, id);
        self.pacer.spend(len);
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.last_sent = Some(now);
        Some(len)
    }

    /// Takes the messages of lost frame `id` that do not fit `room` bytes (every field
    /// explicit) out of it, back to the front of their channels' queues: the frame is
    /// resent with the rest. They stay counted as their channel's. A first message too
    /// large for `room` on its own (cut for a size since given up) is cut at a granule: its
    /// first piece stays, the rest goes back to the queue (see [`OutMessage::split_off`]).
    fn requeue_beyond(&mut self, id: u32, room: usize) {
        let Some(range) = self.inflight.get(id).map(Frame::msgs) else { return };
        let mut used = 0;
        let mut cut = range.end;
        let mut first = true;
        for at in range.clone() {
            let Some(m) = self.inflight.message_at(at) else { continue };
            used += RunContext::explicit_len(&m.as_wire());
            if used > room {
                cut = at;
                break;
            }
            first = false;
        }
        let mut back: SmallVec<[OutMessage; 4]> = SmallVec::new();
        if first && cut < range.end {
            // Nothing fits whole: the first message keeps what fits, in this frame.
            let (granule, fits) = (self.granule(), self.fragment_cut());
            if let Some(m) = self.inflight.message_at_mut(cut)
                && let Some(rest) = m.split_off(fits, granule)
            {
                if let Some(q) = self.queued.get_mut(usize::from(rest.channel)) {
                    *q += MESSAGE_OVERHEAD;
                }
                back.push(rest);
                self.stats.messages_cut += 1;
                cut += 1;
            }
        }
        for at in cut..range.end {
            if let Some(m) = self.inflight.take_message(at) {
                back.push(m);
            }
        }
        // At the front of their lanes, in their order: they are the oldest messages.
        for m in back.into_iter().rev() {
            self.queues.push_front(&self.shared.weights, m);
        }
    }

    /// The connection's granule: a 16th of a fragment of the negotiated size.
    fn granule(&self) -> usize {
        crate::wire::granule(self.mtu)
    }

    /// Payload bytes of a piece cut to fit a frame of the size in use: the most whole
    /// granules that fit beside the largest message header.
    fn fragment_cut(&self) -> usize {
        crate::wire::fragment_cut(self.pmtu.current(), self.granule())
    }

    /// Moves messages from the send queues into a new frame: high priority first, each
    /// queue in order, while they fit `budget` bytes. Reliable messages must also fit
    /// `room` with every field explicit, so the frame still fits after its unreliable
    /// messages are stripped for a resend. `unreliable_only`: the frame ends at the first
    /// message that is not unreliable data and carries no repair copies (a frame the pacer let go early for
    /// its time-critical data). Returns the frame id and its messages' size.
    fn assemble(
        &mut self,
        now: Time,
        ids: &impl IdPolicy,
        budget: usize,
        room: usize,
        unreliable_only: bool,
    ) -> Option<(u32, usize)> {
        let first = self.inflight.store_end();
        let mut run = RunContext::default();
        let (mut used, mut explicit, mut count, mut reliable, mut last_length) = (0, 0, 0, false, 0);
        let (granule, fits) = (self.granule(), self.fragment_cut());
        loop {
            let (queued, stats) = (&mut self.queued, &mut self.stats);
            let Some(m) = self.queues.front(now, |m| expire(queued, stats, m)) else { break };
            if unreliable_only && !m.is_unreliable_data() {
                break;
            }
            let explicit_len = RunContext::explicit_len(&m.as_wire());
            if explicit_len > room {
                // Cut for a datagram size given up since (a black hole): whole granules
                // that fit go first, the rest follows as the next message of its lane.
                let Some((channel, added)) = self.queues.split_front(fits, granule) else { break };
                if let Some(q) = self.queued.get_mut(usize::from(channel)) {
                    *q += added;
                }
                self.stats.messages_cut += 1;
                continue;
            }
            let w = m.as_wire();
            let len = run.encoded_len(&w, ids.short_id(m.channel, m.id), false);
            let exp = if m.is_reliable() { explicit_len } else { 0 };
            if used + len > budget || explicit + exp > room {
                break;
            }
            run.observe(&w);
            used += len;
            explicit += exp;
            count += 1;
            reliable |= m.is_reliable();
            last_length = RunContext::length_field_len(&w);
            if let Some(m) = self.queues.pop() {
                self.inflight.store_message(m);
            }
        }
        // Spare room carries repair copies of small reliable messages sent earlier and not
        // yet acknowledged: if their datagram was lost, the copy delivers them a datagram
        // later instead of an RTO later.
        let own = self.inflight.store_end();
        while let Some(&(at, sent)) = self.repair.front().filter(|_| !unreliable_only) {
            let Some(original) = self.inflight.message_at(at) else {
                self.repair.pop_front();
                continue;
            };
            if sent >= now {
                break; // sent in this very step: a copy beside it repairs no burst.
            }
            let copy = original.copy_at(at);
            let w = copy.as_wire();
            let len = run.encoded_len(&w, ids.short_id(copy.channel, copy.id), false);
            if used + len > budget || !self.redundancy.spend(len) {
                break;
            }
            run.observe(&w);
            used += len;
            count += 1;
            last_length = RunContext::length_field_len(&w);
            self.stats.repair_copies += 1;
            self.repair.pop_front();
            self.inflight.store_message(copy);
        }
        if count == 0 {
            return None;
        }
        self.maybe_skip(now, first);
        // The exact size: the last message carries no length field.
        let len = used - last_length;
        debug_assert_eq!(len, self.messages_len(&(first..self.inflight.store_end()), ids));
        let state = self.delivery.on_send(now, self.inflight.flight() == 0);
        let id = self.inflight.push(first, reliable, FRAME_BASE + len, now, state);
        if first == own && count > 0 && self.probe_at.is_some_and(|t| t <= now) {
            self.stats.probes += 1;
        }
        // This frame's own small reliable messages become candidates where a loss would
        // cost (redundancy.rs).
        let active = self.redundancy.active(self.held());
        for at in (first..own).filter(|_| active) {
            let Some(m) = self.inflight.message_at(at) else { continue };
            let repairable = self.shared.repair.get(usize::from(m.channel)).copied().unwrap_or(false);
            if repairable && m.is_reliable() && m.fragment.count == 1 && m.payload.len() <= REPAIR_MAX {
                crate::lean::room_for_first(&mut self.repair);
                self.repair.push_back((at, now));
            }
        }
        self.probe_at = (!self.repair.is_empty() && active).then(|| now + self.probe_delay());
        Some((id, len))
    }

    /// Whether the next message assembly takes (after dropping expired ones) is unreliable.
    fn unreliable_next(&mut self, now: Time) -> bool {
        let (queued, stats) = (&mut self.queued, &mut self.stats);
        self.queues.front(now, |m| expire(queued, stats, m)).is_some_and(OutMessage::is_unreliable_data)
    }

    /// How long after a datagram with repair candidates a tail-loss probe waits for a
    /// datagram to carry their copies: half an RTT, at least two steps and 5 ms.
    fn probe_delay(&self) -> Duration {
        (self.rtt.srtt() / 2).max(2 * self.rtt.step()).max(Duration::from_millis(5))
    }

    /// Whether a tail-loss probe is due: candidates wait for a copy and nothing has gone
    /// out to carry one for the probe delay.
    fn probe_due(&self, now: Time) -> bool {
        self.probe_at.is_some_and(|t| t <= now) && !self.repair.is_empty()
    }

    /// When the tail-loss probe goes out, if one waits. While the pacer holds data back,
    /// its own timer is the one to wake for (the probe goes when the pacer lets it).
    pub(crate) fn probe_deadline(&self) -> Option<Time> {
        self.probe_at.filter(|_| !self.repair.is_empty() && self.pacing_wait.is_none())
    }

    /// Now and then (one frame in 128 on average), consumes a frame id without sending
    /// it. An honest receiver never acknowledges it; one that acknowledges frames it did
    /// not receive, to keep our congestion window open, soon acknowledges a skipped id and
    /// is found out (the defence QUIC specifies against optimistic acknowledgements).
    /// Never a sentinel position, never outside the transfer window.
    fn maybe_skip(&mut self, now: Time, at: u64) {
        if self.skip == 0 {
            return;
        }
        self.skip ^= self.skip << 13;
        self.skip ^= self.skip >> 7;
        self.skip ^= self.skip << 17;
        let id = self.inflight.next_id();
        let room = SeqSpace::FRAME.distance(self.inflight.base(), id) + 1 < self.shared.frame_window;
        if self.skip.is_multiple_of(128) && room && !SeqSpace::FRAME.is_spaced(id, self.shared.sentinel_spacing) {
            self.inflight.skip(now, at);
            self.stats.frames_skipped += 1;
            if self.skipped.len() == SKIPS_REMEMBERED {
                self.skipped.pop_front();
            }
            self.skipped.push_back(id);
        }
    }
}

#[cfg(test)]
mod tests {
    //! Each step of a datagram on its own; whole flushes are `transfer/tests.rs`'s.

    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::super::queues::tests::msg as message;
    use super::super::tests::{Exp, MS, Wide, cfg, deliver, flush};
    use super::*;
    use crate::wire::{Fragment, SendMode};
    use bytes::{Bytes, BytesMut};

    const T0: Time = Time::ZERO;
    /// A datagram size no limit lowers.
    const NO_LIMIT: usize = usize::MAX;

    fn key() -> Key {
        Key::connection(1, 2)
    }

    /// Two transfers facing each other, `a` having sent one frame to `b`, and its id.
    fn b_owing_an_ack() -> (Transfer, Transfer, u32) {
        let mut a = Transfer::new(cfg(1200), 0, 0);
        let mut b = Transfer::new(cfg(1200), 0, 0);
        a.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
        let frames: Vec<u32> =
            flush(&mut a, T0, key()).iter().filter_map(|d| deliver(&mut b, T0, key(), d)).map(|(k, _)| k).collect();
        assert_eq!(frames.len(), 1, "one frame");
        (a, b, frames.first().copied().unwrap_or_default())
    }

    #[test]
    fn the_keepalive_is_due_until_a_datagram_goes_and_again_an_interval_later() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        assert!(t.due(T0).keepalive && t.has_work(T0, t.due(T0)), "nothing has gone yet");
        assert_eq!(flush(&mut t, T0, key()).len(), 1, "the keepalive alone");
        assert_eq!(t.due(T0), Due::default());
        assert!(!t.has_work(T0, t.due(T0)));
        let next = T0 + t.shared.ping_interval;
        assert!(!t.due(next - MS).alone() && t.due(next).keepalive);
        t.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 10));
        assert!(t.has_work(T0, t.due(T0)), "queued data is work");
    }

    #[test]
    fn acknowledgements_fall_due_when_a_frame_arrives_and_are_gathered_newest_first() {
        let (_, b, k) = b_owing_an_ack();
        let due = b.due(T0);
        assert!(due.acks, "{due:?}");
        let mut ranges = SmallVec::new();
        let section = b.ack_section(T0 + MS, due.acks, NO_LIMIT, &mut ranges);
        assert_eq!(ranges.as_slice(), &[AckRange { first: k, last: k }]);
        assert_eq!(section.delay, b.receiver.ack_delay(T0 + MS));
        assert_eq!(section.len, crate::wire::ack_section_len(&ranges) + section.delay_len);
        let fresh = Transfer::new(cfg(1200), 0, 0);
        let mut none = SmallVec::new();
        assert_eq!(fresh.ack_section(T0, false, NO_LIMIT, &mut none).len, 0);
        assert!(none.is_empty());
    }

    #[test]
    fn ranges_fit_whole_go_alone_when_due_or_keep_the_newest_that_fit() {
        let ranges =
            [AckRange { first: 90, last: 100 }, AckRange { first: 50, last: 60 }, AckRange { first: 10, last: 20 }];
        let delay_len = ack_delay_len(7);
        let section = AckSection { delay: 7, delay_len, len: crate::wire::ack_section_len(&ranges) + delay_len };
        assert_eq!(fit_acks(&ranges, section, section.len, true), AckFit::All);
        assert_eq!(fit_acks(&ranges, section, section.len, false), AckFit::All);
        assert_eq!(fit_acks(&ranges, section, section.len - 1, true), AckFit::Alone);
        let two = delay_len + crate::wire::ack_section_len(&ranges[..2]);
        assert_eq!(fit_acks(&ranges, section, two, false), AckFit::Newest(2));
        assert_eq!(fit_acks(&ranges, section, two - 1, false), AckFit::Newest(1));
        assert_eq!(fit_acks(&ranges, section, 0, false), AckFit::Newest(0));
    }

    #[test]
    fn the_pacer_lets_frames_go_holds_them_with_a_timer_or_lets_only_unreliable_data_by() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        for id in 0..8 {
            t.enqueue(Priority::High, message(0, id, SendMode::Reliable, 1000));
        }
        assert_eq!(t.pacing_gate(T0, None, false), Gate::Open, "no rate: nothing paces");
        assert!(!flush(&mut t, T0, key()).is_empty());
        let rate = t.cc.pacing_rate();
        assert!(rate.is_some() && !t.pacer.allows(), "the pacer's budget is spent");
        t.pacing_wait = None;
        assert_eq!(t.pacing_gate(T0, rate, false), Gate::Closed);
        assert!(t.pacing_wait.is_some_and(|w| w > T0), "and its timer is set");
        t.enqueue(Priority::High, message(1, 99, SendMode::Unreliable, 100));
        assert_eq!(t.pacing_gate(T0, rate, false), Gate::Urgent, "a tick's state goes by");
        assert_eq!(t.pacing_gate(T0, rate, true), Gate::Closed, "not ahead of a resend");
    }

    #[test]
    fn a_new_frame_leaves_the_reserve_for_due_acknowledgements() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        t.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 500));
        t.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 500));
        let Plan::New { id, len } = t.plan_new(T0, &Wide, 300, false, NO_LIMIT) else { panic!("a frame") };
        assert_eq!(t.messages_len(&t.inflight.get(id).map(Frame::msgs).unwrap_or_default(), &Wide), len);
        assert!(len <= 1200 - FRAME_OVERHEAD_MAX - 300 && t.queued_messages() == 1, "one message fits beside {len}");
        let Plan::New { len: both, .. } = t.plan_new(T0, &Wide, 0, false, NO_LIMIT) else { panic!("a frame") };
        assert!(both > 500 && t.queued_messages() == 0, "without a reserve the second fits too");
        assert_eq!(t.plan_new(T0, &Wide, 0, false, NO_LIMIT), Plan::NoFrame, "nothing left");
        t.enqueue(Priority::High, message(0, 3, SendMode::Reliable, 10));
        assert_eq!(t.plan_new(T0, &Wide, 0, true, NO_LIMIT), Plan::NoFrame, "urgent frames take unreliable data only");
    }

    #[test]
    fn a_resend_carries_the_lost_frames_messages() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        t.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 100));
        t.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 200));
        let Plan::New { id, len } = t.plan_new(T0, &Wide, 0, false, NO_LIMIT) else { panic!("a frame") };
        let range = t.inflight.get(id).map(Frame::msgs).unwrap_or_default();
        assert_eq!(t.plan_resend(id, &range, &Wide, NO_LIMIT), Plan::Resend { id, len });
        assert_eq!(t.queued_messages(), 0, "at the size in use, nothing goes back to the queue");
    }

    #[test]
    fn a_resend_too_large_for_the_size_now_in_use_sends_what_fits_and_requeues_the_rest() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        t.enqueue(Priority::High, message(0, 1, SendMode::Reliable, 500));
        t.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 500));
        let Plan::New { id, len } = t.plan_new(T0, &Wide, 0, false, NO_LIMIT) else { panic!("a frame") };
        assert!(len > 1000, "both messages in one frame");
        // The path stopped carrying the size the frame was cut for (a black hole).
        t.pmtu = Discovery::new(600, 600);
        let range = t.inflight.get(id).map(Frame::msgs).unwrap_or_default();
        let Plan::Resend { id: again, len: cut } = t.plan_resend(id, &range, &Wide, NO_LIMIT) else {
            panic!("a resend")
        };
        assert_eq!(again, id);
        assert!(cut <= 600 - FRAME_OVERHEAD_MAX && cut > 500, "the first message alone: {cut}");
        assert_eq!(t.queued_messages(), 1, "the second goes back to the queue, for a frame of its own");
    }

    /// A packet's bytes back from the pieces that carried them (packet id, position in
    /// granules, packet length in granules, bytes), checking that the pieces tile it: each
    /// granule exactly once, every piece but the last whole granules.
    fn tile(pieces: &[(u32, Fragment, Bytes)], id: u32, granule: usize) -> Vec<u8> {
        let mut mine: Vec<_> = pieces.iter().filter(|p| p.0 == id).map(|p| (p.1, p.2.clone())).collect();
        mine.sort_by_key(|p| p.0.index);
        let mut out = Vec::new();
        for (f, payload) in &mine {
            assert_eq!(f.index as usize * granule, out.len(), "packet {id}: granule {} covered once, in turn", f.index);
            out.extend_from_slice(payload);
        }
        if let [.., (last, _)] = mine.as_slice()
            && last.count > 1
        {
            assert_eq!(out.len().div_ceil(granule), last.count as usize, "packet {id}: all its granules");
            for (f, p) in &mine[..mine.len() - 1] {
                assert!(p.len().is_multiple_of(granule), "packet {id}: granule {} whole", f.index);
            }
        }
        out
    }

    fn bytes(seed: u8, len: usize) -> Bytes {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn a_queued_message_too_large_for_the_size_in_use_is_cut_at_a_granule_and_every_byte_arrives_once() {
        // Cut for 1,452-byte datagrams before the size fell back to the negotiated 1,200:
        // a whole packet of 1,400 bytes, and fragments of 19 granules of a 3,000-byte one.
        let mut a = Transfer::new(cfg(1200), 0, 0);
        let mut b = Transfer::new(cfg(1200), 0, 0);
        let granule = crate::wire::granule(1200);
        let whole = bytes(1, 1400);
        let long = bytes(2, 3000);
        let count = 3000_u32.div_ceil(granule as u32);
        let reliable =
            |id, fragment, payload| OutMessage { fragment, payload, ..message(0, id, SendMode::Reliable, 0) };
        a.enqueue(Priority::High, reliable(1, Fragment::WHOLE, whole.clone()));
        for (index, range) in [(0, 0..1387), (19, 1387..2774), (38, 2774..3000)] {
            a.enqueue(Priority::High, reliable(2, Fragment { index, count }, long.slice(range)));
        }
        let queued = a.queued_bytes(0);
        let mut pieces = Vec::new();
        // Flushes until everything went (the pacer may space the datagrams out).
        for ms in 0..100 {
            for d in flush(&mut a, T0 + ms * MS, key()) {
                let data = Data::decode(&d, key(), &Exp(&b)).expect("valid"); // ok: test
                pieces.extend(data.messages(&Exp(&b)).map(|m| (m.id, m.fragment, Bytes::copy_from_slice(m.payload))));
                deliver(&mut b, T0 + ms * MS, key(), &d);
            }
        }
        assert_eq!(a.queued_messages(), 0, "everything went");
        // Three messages cut once each, at 16 granules (1,168 bytes): seven pieces.
        assert_eq!(a.stats.messages_cut, 3);
        let sizes: Vec<_> = pieces.iter().map(|p| (p.0, p.1.index, p.2.len())).collect();
        assert_eq!(
            sizes,
            [(1, 0, 1168), (1, 16, 232), (2, 0, 1168), (2, 16, 219), (2, 19, 1168), (2, 35, 219), (2, 38, 226)]
        );
        assert!(pieces.iter().all(|p| p.2.len() <= 16 * granule));
        assert_eq!(tile(&pieces, 1, granule), whole);
        assert_eq!(tile(&pieces, 2, granule), long);
        assert!(pieces.iter().filter(|p| p.0 == 1).all(|p| p.1.count == 1400_u32.div_ceil(granule as u32)));
        // Each piece is one more place in a queue for its channel, released on its ack.
        assert_eq!(a.queued_bytes(0), queued + 3 * MESSAGE_OVERHEAD);
    }

    #[test]
    fn a_lost_frame_of_a_size_given_up_is_resent_cut_at_a_granule_and_every_byte_arrives_once() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        // Discovery confirmed 1,452 bytes: a whole packet of 1,380 bytes and a small one
        // travel in one frame.
        t.pmtu = Discovery::new(1200, 1452);
        let probe = t.pmtu.wanted();
        t.pmtu.sent(T0, 1);
        t.pmtu.on_echo(T0, 1);
        assert_eq!((probe, t.pmtu.current()), (Some(1452), 1452));
        let granule = crate::wire::granule(1200);
        let whole = bytes(3, 1380);
        t.enqueue(Priority::High, OutMessage { payload: whole.clone(), ..message(0, 1, SendMode::Reliable, 0) });
        t.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 30));
        let Plan::New { id, .. } = t.plan_new(T0, &Wide, 0, false, NO_LIMIT) else { panic!("a frame") };
        assert_eq!(t.queued_messages(), 0, "both in one frame of 1,452 bytes");
        // The path stopped carrying it: a black hole, back to the negotiated size.
        t.pmtu = Discovery::new(1200, 1200);
        let range = t.inflight.get(id).map(Frame::msgs).unwrap_or_default();
        let Plan::Resend { id: again, len } = t.plan_resend(id, &range, &Wide, NO_LIMIT) else { panic!("a resend") };
        assert!(again == id && len <= 1200 - FRAME_OVERHEAD_MAX, "the resend fits: {len}");
        assert_eq!(t.stats.messages_cut, 1);
        let mut pieces: Vec<(u32, Fragment, Bytes)> = Vec::new();
        let mut frames = vec![id];
        while let Plan::New { id, .. } = t.plan_new(T0, &Wide, 0, false, NO_LIMIT) {
            frames.push(id);
        }
        for f in frames {
            let range = t.inflight.get(f).map(Frame::msgs).unwrap_or_default();
            pieces.extend(t.inflight.messages(&range).map(|m| (m.id, m.fragment, m.payload.clone())));
        }
        assert_eq!(tile(&pieces, 1, granule), whole);
        assert_eq!(pieces.iter().filter(|p| p.0 == 1).map(|p| p.2.len()).collect::<Vec<_>>(), [1168, 212]);
        assert_eq!(pieces.iter().filter(|p| p.0 == 2).count(), 1, "the small packet once");
    }

    #[test]
    fn under_a_limit_a_datagram_fits_it_and_what_does_not_fit_waits() {
        let (mut a, mut b, _) = b_owing_an_ack();
        let mut out = BytesMut::new();
        // Acknowledgements alone: none below what their datagram takes, then within it.
        assert_eq!(b.poll_datagram_within(T0, key(), &Wide, FRAME_OVERHEAD_MAX, &mut out), None);
        let n = b.poll_datagram_within(T0, key(), &Wide, FRAME_OVERHEAD_MAX + 8, &mut out).expect("the ack"); // ok: test
        assert!(n <= FRAME_OVERHEAD_MAX + 8, "{n} bytes");
        let ack = out.split_to(n);
        let data = Data::decode(&ack, key(), &Exp(&a)).expect("valid"); // ok: test
        assert!(data.ack_largest().is_some() && data.frame_id.is_none());
        deliver(&mut a, T0, key(), &ack);
        assert_eq!(a.inflight.outstanding(), 0, "the first frame is acknowledged");
        // A lost frame of 300 bytes, newer data queued, discovery wanting a probe: a limit
        // below the resend sends neither the resend nor anything newer, and no probe.
        a.enqueue(Priority::High, message(0, 2, SendMode::Reliable, 300));
        assert_eq!(flush(&mut a, T0, key()).len(), 1);
        a.on_path_change(T0 + MS);
        a.enqueue(Priority::High, message(0, 3, SendMode::Reliable, 10));
        a.pmtu = Discovery::new(1200, 1452);
        assert!(a.pmtu.wanted().is_some());
        let sent = a.stats.datagrams_sent;
        let limit = 200;
        while let Some(n) = a.poll_datagram_within(T0 + MS, key(), &Wide, limit, &mut out) {
            assert!(n <= limit, "{n} bytes within {limit}");
            out.clear();
        }
        assert_eq!(
            (a.stats.frames_resent, a.queued_messages()),
            (0, 1),
            "the resend waits, and the new message behind it"
        );
        assert!(a.stats.datagrams_sent - sent <= 1, "an acknowledgement or a keepalive at most");
        assert!(a.pmtu.wanted().is_some(), "no probe went");
        // The limit grows: the resend goes first, then the new frame.
        let n = a.poll_datagram_within(T0 + MS, key(), &Wide, 400, &mut out).expect("the resend"); // ok: test
        assert!(n <= 400 && a.stats.frames_resent == 1 && a.queued_messages() == 1, "{n} bytes");
        assert!(a.poll_datagram_within(T0 + MS, key(), &Wide, 400, &mut out).is_some());
        assert_eq!(a.queued_messages(), 0);
    }

    #[test]
    fn holding_keeps_the_probe_while_the_pacer_waits_and_drops_it_otherwise() {
        let mut t = Transfer::new(cfg(1200), 0, 0);
        t.repair.push_back((0, T0));
        t.probe_at = Some(T0);
        t.pacing_wait = Some(T0 + MS);
        t.hold(T0);
        assert_eq!(t.probe_at, Some(T0), "it goes when the pacer lets it");
        t.pacing_wait = None;
        t.hold(T0);
        assert_eq!(t.probe_at, None, "the candidates wait for a datagram that goes anyway");
    }

    #[test]
    fn a_datagram_written_carries_its_parts_and_recording_it_books_them() {
        let (a, mut b, k) = b_owing_an_ack();
        b.ping.on_ping(5, T0, false);
        let mut ranges = SmallVec::new();
        let section = b.ack_section(T0, true, NO_LIMIT, &mut ranges);
        let mut out = BytesMut::new();
        let parts = Parts { plan: Plan::NoFrame, acks: &ranges, ack_delay: section.delay, keepalive: true };
        let written = b.write(T0, key(), &Wide, parts, &mut out);
        assert_eq!((written.len, written.ranges, written.echo), (out.len(), 1, true));
        let data = Data::decode(&out, key(), &Exp(&a)).expect("valid"); // ok: test
        assert_eq!((data.frame_id, data.ping_ack, data.ack_largest()), (None, Some(5), Some(k)));
        assert!(data.ping.is_some(), "the keepalive carries a ping");
        let sent = b.stats.datagrams_sent;
        b.record(T0, written, true);
        assert_eq!(b.stats.datagrams_sent, sent + 1);
        assert_eq!(b.stats.frames_sent + b.stats.frames_resent, 0, "no frame went");
        assert_eq!((b.ping.echo(), b.receiver.ack_due(), b.last_sent), (None, false, Some(T0)));
    }
}
