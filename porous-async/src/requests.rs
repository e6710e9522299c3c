//! Connection requests awaiting the application's decision (`manual_accept`): the driver
//! queues them, [`Host::incoming`](crate::Host::incoming) takes them one at a time.
//!
//! A request the core stops waiting for (it timed out undecided) leaves the queue at once,
//! so the queue holds only requests the core still holds as pending handshakes: never more
//! than `max_pending`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;

use crate::PeerId;

/// A request as the driver queues it.
#[derive(Debug)]
pub(crate) struct RequestParts {
    pub(crate) id: PeerId,
    pub(crate) remote: SocketAddr,
    /// Its connect data (a secure server: its token's user data).
    pub(crate) data: Bytes,
    /// A secure server: its token's client id.
    pub(crate) client_id: Option<u64>,
}

/// The queue; bounded by the driver, which pushes only below `max_pending`.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<RequestParts>,
    /// `Host::incoming` calls waiting for a request.
    waiters: Vec<Waker>,
    /// The driver has stopped: no request will come any more.
    closed: bool,
}

impl Requests {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a request and wakes the waiting `incoming` calls.
    pub(crate) fn push(&self, request: RequestParts) {
        let mut state = self.lock();
        state.queue.push_back(request);
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        for waiter in waiters {
            waiter.wake();
        }
    }

    /// Removes the request of `id`, if queued (the core stopped waiting for it).
    pub(crate) fn remove(&self, id: PeerId) {
        let mut state = self.lock();
        if let Some(at) = state.queue.iter().position(|r| r.id == id) {
            state.queue.remove(at);
        }
    }

    /// Takes every queued request (to refuse them: no one is left to decide).
    pub(crate) fn drain(&self) -> Vec<RequestParts> {
        self.lock().queue.drain(..).collect()
    }

    /// Requests waiting to be taken.
    pub(crate) fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// No request will come any more: waiting and later `incoming` calls fail.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        let waiters = std::mem::take(&mut state.waiters);
        drop(state);
        for waiter in waiters {
            waiter.wake();
        }
    }

    /// The next request, `None` once closed, or `Pending` with the waker registered.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>) -> Poll<Option<RequestParts>> {
        let mut state = self.lock();
        if let Some(request) = state.queue.pop_front() {
            return Poll::Ready(Some(request));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        if !state.waiters.iter().any(|w| w.will_wake(cx.waker())) {
            state.waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
