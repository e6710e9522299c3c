//! The two priority send queues (spec §3.1, Figure 5).
//!
//! Messages wait here until frame assembly takes them from the front: the high queue
//! first, the low queue only when the high one is empty, each in FIFO order. A queue never
//! reorders its messages, and a channel sends all its messages at one priority, so a
//! channel's messages leave in the order it queued them.
//!
//! Unreliable data may be dropped from a queue before it is ever sent (when its channel
//! runs out of queue space); dropping leaves a tombstone that assembly skips, so dropping is
//! O(1) per message and never shifts the queue.

use std::collections::VecDeque;

use bytes::Bytes;

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

    pub(crate) fn is_reliable(&self) -> bool {
        self.kind.is_reliable()
    }

    /// Bytes this message holds against its channel's queue limit: its payload and its
    /// place in a queue, so that even empty packets are bounded. Sentinels and window
    /// acknowledgements are the protocol's own (at most one per [`WINDOW_ACK_SPACING`]
    /// packets) and cost nothing.
    ///
    /// [`WINDOW_ACK_SPACING`]: crate::seq::WINDOW_ACK_SPACING
    pub(crate) fn cost(&self) -> usize {
        match self.kind {
            MessageKind::Fragment(_) => self.payload.len() + MESSAGE_OVERHEAD,
            MessageKind::Sentinel | MessageKind::WindowAck => 0,
        }
    }
}

/// What a queued message costs besides its payload (see [`OutMessage::cost`]).
pub(crate) const MESSAGE_OVERHEAD: usize = size_of::<Option<OutMessage>>();

/// The high and low priority send queues.
#[derive(Debug, Default)]
pub(crate) struct SendQueues {
    high: VecDeque<Option<OutMessage>>,
    low: VecDeque<Option<OutMessage>>,
    live: usize,
}

impl SendQueues {
    fn queue(&mut self, priority: Priority) -> &mut VecDeque<Option<OutMessage>> {
        match priority {
            Priority::High => &mut self.high,
            Priority::Low => &mut self.low,
        }
    }

    pub(crate) fn push(&mut self, priority: Priority, m: OutMessage) {
        self.queue(priority).push_back(Some(m));
        self.live += 1;
    }

    /// Bytes of the queues' own storage (payloads are counted by their channels).
    pub(crate) fn memory(&self) -> usize {
        (self.high.capacity() + self.low.capacity()) * size_of::<Option<OutMessage>>()
    }

    /// Number of messages waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn trim(&mut self, priority: Priority) {
        let q = self.queue(priority);
        while q.front().is_some_and(Option::is_none) {
            q.pop_front();
        }
    }

    /// The next message assembly would take, if any, and its priority.
    pub(crate) fn front(&mut self) -> Option<(Priority, &OutMessage)> {
        self.trim(Priority::High);
        self.trim(Priority::Low);
        match (self.high.front(), self.low.front()) {
            (Some(Some(m)), _) => Some((Priority::High, m)),
            (_, Some(Some(m))) => Some((Priority::Low, m)),
            _ => None,
        }
    }

    /// Takes the front message of `priority`.
    pub(crate) fn pop(&mut self, priority: Priority) -> Option<OutMessage> {
        self.trim(priority);
        let m = self.queue(priority).pop_front().flatten();
        if m.is_some() {
            self.live -= 1;
        }
        m
    }

    /// Drops queued unreliable packets of `channel`, oldest first, until at least `need`
    /// bytes are freed or none are left; every fragment of a dropped packet goes with it.
    /// Sentinels stay: the receiver needs them to move its window. Calls `dropped` with each
    /// dropped message; returns the bytes freed.
    pub(crate) fn drop_unreliable(&mut self, channel: u8, need: usize, mut dropped: impl FnMut(&OutMessage)) -> usize {
        let mut freed = 0;
        let mut victim: Option<u32> = None;
        for q in [&mut self.high, &mut self.low] {
            for slot in q.iter_mut() {
                let Some(m) = slot else { continue };
                if m.channel != channel || m.kind != MessageKind::Fragment(SendMode::Unreliable) {
                    continue;
                }
                match victim {
                    Some(id) if id == m.id => {}
                    _ if freed >= need => continue,
                    _ => victim = Some(m.id),
                }
                freed += m.cost();
                dropped(m);
                *slot = None;
                self.live -= 1;
            }
        }
        freed
    }

    /// Removes every queued message, calling `f` with each.
    pub(crate) fn clear(&mut self, mut f: impl FnMut(&OutMessage)) {
        for q in [&mut self.high, &mut self.low] {
            for m in q.drain(..).flatten() {
                f(&m);
            }
        }
        self.live = 0;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn high_before_low_fifo_within() {
        let mut q = SendQueues::default();
        q.push(Priority::Low, msg(1, 0, SendMode::Reliable, 1));
        q.push(Priority::High, msg(0, 0, SendMode::Reliable, 1));
        q.push(Priority::Low, msg(1, 1, SendMode::Reliable, 1));
        q.push(Priority::High, msg(0, 1, SendMode::Reliable, 1));
        let mut order = Vec::new();
        while let Some((p, m)) = q.front() {
            let key = (m.channel, m.id);
            q.pop(p);
            order.push(key);
        }
        assert_eq!(order, [(0, 0), (0, 1), (1, 0), (1, 1)]);
        assert!(q.is_empty());
    }

    #[test]
    fn dropping_unreliable_takes_whole_packets_oldest_first_and_keeps_the_rest() {
        let mut q = SendQueues::default();
        let frag =
            |id, index| OutMessage { fragment: Fragment { index, count: 2 }, ..msg(3, id, SendMode::Unreliable, 10) };
        q.push(Priority::High, frag(5, 0));
        q.push(Priority::High, msg(3, 6, SendMode::Reliable, 10));
        q.push(Priority::High, frag(5, 1));
        q.push(Priority::High, msg(4, 7, SendMode::Unreliable, 10));
        q.push(Priority::High, frag(8, 0));
        q.push(
            Priority::High,
            OutMessage { kind: MessageKind::Sentinel, payload: Bytes::new(), ..msg(3, 8, SendMode::Unreliable, 0) },
        );
        let mut seen = Vec::new();
        let freed = q.drop_unreliable(3, 1, |m| seen.push((m.id, m.fragment.index)));
        assert_eq!(freed, 2 * (10 + MESSAGE_OVERHEAD));
        assert_eq!(seen, [(5, 0), (5, 1)]);
        assert_eq!(q.len(), 4);
        let rest: Vec<_> = std::iter::from_fn(|| q.front().map(|(p, _)| p).and_then(|p| q.pop(p)))
            .map(|m| (m.channel, m.id))
            .collect();
        assert_eq!(rest, [(3, 6), (4, 7), (3, 8), (3, 8)]);
    }
}
