//! A connection's delivery queue: the driver fills it in batches,
//! [`Peer::recv`](crate::Peer::recv) empties it one packet at a time.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::{DELIVERY_QUEUE, Packet, SendMode};

/// The driver is woken to refill the queue once it has drained to this many packets, not
/// after every packet: one wake-up moves half a queue.
const REFILL_AT: usize = DELIVERY_QUEUE / 2;

/// Bounded to [`DELIVERY_QUEUE`] packets. One lock per batch on the driver's side, one per
/// packet on the reader's; a reader is woken once per batch.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    packets: VecDeque<Packet>,
    /// No packet will come any more: `recv` returns `None` once the queue is empty.
    closed: bool,
    /// Readers waiting for a packet.
    readers: Vec<Waker>,
    /// The driver holds packets that did not fit: wake it when the queue has room.
    driver_waits: bool,
}

/// What a reader got.
pub(crate) enum Take {
    /// A packet; and whether the driver must now be woken to refill the queue.
    Packet(Packet, bool),
    /// The queue is closed and empty.
    Closed,
}

impl Mailbox {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves packets from the front of `held` while there is room, then, if the queue is
    /// full, drops the unreliable packets still held (returning how many) and remembers to
    /// be woken when there is room for the rest. `held` keeps the reliable and passive
    /// packets that did not fit, in order. `unreliable` says whether `held` may contain
    /// unreliable packets (it is cleared once it does not), so that a long wait for room
    /// does not scan the held packets again and again.
    pub(crate) fn fill(&self, held: &mut VecDeque<Packet>, unreliable: &mut bool) -> u64 {
        let mut state = self.lock();
        let room = DELIVERY_QUEUE.saturating_sub(state.packets.len());
        let moving = room.min(held.len());
        state.packets.extend(held.drain(..moving));
        let mut dropped = 0;
        if !held.is_empty() && *unreliable {
            let before = held.len();
            held.retain(|p| p.mode != SendMode::Unreliable);
            dropped = (before - held.len()) as u64;
        }
        // Whatever is still held now is reliable or passive.
        *unreliable = false;
        state.driver_waits = !held.is_empty();
        let readers = if moving > 0 { std::mem::take(&mut state.readers) } else { Vec::new() };
        drop(state);
        for reader in readers {
            reader.wake();
        }
        dropped
    }

    /// No packet will come any more.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        let readers = std::mem::take(&mut state.readers);
        drop(state);
        for reader in readers {
            reader.wake();
        }
    }

    /// The next packet, or `Closed`, or `Pending` with the reader's waker registered.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Take> {
        let mut state = self.lock();
        if let Some(packet) = state.packets.pop_front() {
            let refill = state.driver_waits && state.packets.len() <= REFILL_AT;
            if refill {
                state.driver_waits = false;
            }
            return Poll::Ready(Take::Packet(packet, refill));
        }
        if state.closed {
            return Poll::Ready(Take::Closed);
        }
        if !state.readers.iter().any(|r| r.will_wake(cx.waker())) {
            state.readers.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Packets waiting to be read.
    pub(crate) fn len(&self) -> usize {
        self.lock().packets.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn packets(modes: &[SendMode]) -> VecDeque<Packet> {
        modes.iter().enumerate().map(|(i, &m)| Packet::new(0, m, vec![i as u8])).collect()
    }

    fn take(mailbox: &Mailbox, cx: &mut Context<'_>) -> Option<(u8, bool)> {
        match mailbox.poll_take(cx) {
            Poll::Ready(Take::Packet(p, refill)) => Some((p.data[0], refill)),
            Poll::Ready(Take::Closed) => None,
            Poll::Pending => panic!("pending"),
        }
    }

    #[test]
    fn a_full_queue_holds_reliable_and_passive_packets_in_order_and_drops_unreliable_ones() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let mailbox = Mailbox::default();
        assert!(mailbox.poll_take(&mut cx).is_pending());

        let mut held = packets(&vec![SendMode::Reliable; DELIVERY_QUEUE - 1]);
        assert_eq!(mailbox.fill(&mut held, &mut false), 0);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "the waiting reader was woken once");
        let mut held = packets(&[SendMode::Unreliable, SendMode::Reliable, SendMode::Unreliable, SendMode::Passive]);
        let mut unreliable = true;
        assert_eq!(mailbox.fill(&mut held, &mut unreliable), 1, "the second unreliable packet did not fit");
        assert!(!unreliable, "none is held any more");
        assert_eq!(held.iter().map(|p| p.mode).collect::<Vec<_>>(), [SendMode::Reliable, SendMode::Passive]);
        assert_eq!(mailbox.len(), DELIVERY_QUEUE);

        // The driver is asked to refill once half the queue is read, not before.
        let mut refills = Vec::new();
        for _ in 0..DELIVERY_QUEUE - REFILL_AT {
            refills.push(take(&mailbox, &mut cx).unwrap().1);
        }
        assert_eq!(refills.iter().filter(|r| **r).count(), 1);
        assert!(refills.last().copied().unwrap());
        assert_eq!(mailbox.fill(&mut held, &mut unreliable), 0);
        assert!(held.is_empty());
        mailbox.close();
        let mut rest = 0;
        while take(&mailbox, &mut cx).is_some() {
            rest += 1;
        }
        assert_eq!(rest, REFILL_AT + 2, "every packet is read before the end");
    }
}
