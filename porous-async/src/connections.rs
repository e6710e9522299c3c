//! The host's established connections as the application sees them, and the subscribers
//! to their events: what [`Host::peers`](crate::Host::peers) lists and what
//! [`Host::events`](crate::Host::events) streams.
//!
//! The driver is the only writer. It adds a connection when it hands it to the application
//! (to `connect`, to `Incoming::accept`, or into the accept backlog), changes its address
//! when the core reports that it moved, and removes it when the core reports its end; each
//! under this module's one lock, which also publishes the event to every subscriber. So
//! `peers()` and the streams agree: after a subscriber reads `AddressChanged` for a
//! connection, `peers()` lists it at the new address; after it reads `Disconnected`,
//! `peers()` no longer lists it; and every `Connected` a subscriber reads is followed by
//! exactly one `Disconnected` for that id.
//!
//! Each subscriber's queue is bounded (`cap`, at least twice `max_peers`: a connection
//! and a disconnection for every slot of the table); one that falls further behind loses
//! the oldest events and reads [`HostEvent::Lagged`] with their count, then can read
//! `peers()` again to resynchronise.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use futures_core::Stream;
use porous_proto::PeerMap;

use crate::{DisconnectReason, PeerId};

/// Events each subscriber may hold before it loses the oldest: at least this many, and at
/// least twice the host's `max_peers`.
pub const EVENT_QUEUE: usize = 1024;

/// An established connection of a [`Host`](crate::Host), as [`Host::peers`](crate::Host::peers)
/// lists it and [`HostEvent`]s report it: what the connection's [`Peer`](crate::Peer)
/// handle also says.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PeerInfo {
    /// The connection's id ([`Peer::id`](crate::Peer::id)).
    pub id: PeerId,
    /// The remote address ([`Peer::remote`](crate::Peer::remote)).
    pub remote: SocketAddr,
    /// The remote's connect data ([`Peer::connect_data`](crate::Peer::connect_data)); on
    /// a secure server, its connect token's user data.
    pub data: Bytes,
    /// On a secure server, the client id of the connect token
    /// ([`Peer::client_id`](crate::Peer::client_id)); `None` otherwise.
    pub client_id: Option<u64>,
}

/// A change among a host's connections, from [`Host::events`](crate::Host::events).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostEvent {
    /// A connection is established (either side started it). Every `Connected` is followed
    /// by exactly one `Disconnected` for the same id, unless the subscriber lags.
    #[non_exhaustive]
    Connected {
        /// The connection.
        peer: PeerInfo,
    },
    /// A connection moved to a new address of its remote, which proved it receives there
    /// (a NAT rebound the remote's mapping; see
    /// [`HostConfig::address_change`](crate::HostConfig::address_change)): the core's
    /// [`Event::AddressChanged`](crate::Event::AddressChanged). From now on
    /// [`Host::peers`](crate::Host::peers) and the connection's
    /// [`Peer::remote`](crate::Peer::remote) say the new address.
    #[non_exhaustive]
    AddressChanged {
        /// The connection, with its new address in `remote`.
        peer: PeerInfo,
        /// The address it had.
        old: SocketAddr,
    },
    /// A connection ended: what its [`Peer::recv`](crate::Peer::recv) returns once its
    /// packets are read.
    #[non_exhaustive]
    Disconnected {
        /// The connection, as [`Host::peers`](crate::Host::peers) last listed it (with
        /// the address it had last).
        peer: PeerInfo,
        /// Why it ended.
        reason: DisconnectReason,
    },
    /// The subscriber fell behind by more than its queue holds: this many events, the
    /// oldest, were dropped. [`Host::peers`](crate::Host::peers) tells the state now.
    #[non_exhaustive]
    Lagged {
        /// Events lost.
        missed: u64,
    },
}

/// The connections and the subscribers, under one lock.
#[derive(Debug)]
pub(crate) struct Connections {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    peers: PeerMap<PeerInfo>,
    subscribers: Vec<Weak<Subscriber>>,
    /// Each subscriber's bound.
    cap: usize,
    /// The driver has stopped: no event will come.
    closed: bool,
}

impl Connections {
    pub(crate) fn new(max_peers: usize) -> Self {
        let cap = EVENT_QUEUE.max(max_peers.saturating_mul(2));
        Self { state: Mutex::new(State { peers: PeerMap::new(), subscribers: Vec::new(), cap, closed: false }) }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A connection handed to the application.
    pub(crate) fn connected(&self, peer: PeerInfo) {
        let mut state = self.lock();
        state.peers.insert(peer.id, peer.clone());
        state.publish(&HostEvent::Connected { peer });
    }

    /// The core reported that `id` moved from `old` to `new`; nothing if it was never
    /// handed over (or has ended).
    pub(crate) fn moved(&self, id: PeerId, old: SocketAddr, new: SocketAddr) {
        let mut state = self.lock();
        let Some(peer) = state.peers.get_mut(id) else { return };
        peer.remote = new;
        let peer = peer.clone();
        state.publish(&HostEvent::AddressChanged { peer, old });
    }

    /// The core reported the end of `id`; nothing if it was never handed over.
    pub(crate) fn disconnected(&self, id: PeerId, reason: DisconnectReason) {
        let mut state = self.lock();
        if let Some(peer) = state.peers.remove(id) {
            state.publish(&HostEvent::Disconnected { peer, reason });
        }
    }

    /// The established connections, in slot order.
    pub(crate) fn peers(&self) -> Vec<PeerInfo> {
        self.lock().peers.iter().map(|(_, p)| p.clone()).collect()
    }

    /// Calls `f` with each established connection's id, under the lock (which the driver
    /// takes only while it holds the core's: take the core's first).
    pub(crate) fn for_each_id(&self, mut f: impl FnMut(PeerId)) {
        for (id, _) in self.lock().peers.iter() {
            f(id);
        }
    }

    /// A new subscriber, whose stream starts with a `Connected` for every connection
    /// established now.
    pub(crate) fn subscribe(&self) -> Events {
        let mut state = self.lock();
        let queue: VecDeque<HostEvent> =
            state.peers.iter().map(|(_, p)| HostEvent::Connected { peer: p.clone() }).collect();
        let subscriber = Arc::new(Subscriber {
            state: Mutex::new(Queue { events: queue, missed: 0, waker: None, closed: state.closed }),
        });
        state.subscribers.push(Arc::downgrade(&subscriber));
        Events { subscriber }
    }

    /// No event will come any more (the driver has stopped): streams end once read.
    pub(crate) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        for subscriber in state.subscribers.iter().filter_map(Weak::upgrade) {
            let mut queue = subscriber.lock();
            queue.closed = true;
            if let Some(waker) = queue.waker.take() {
                waker.wake();
            }
        }
    }
}

impl State {
    fn publish(&mut self, event: &HostEvent) {
        let cap = self.cap;
        // Subscribers whose stream was dropped leave the list here.
        self.subscribers.retain(|weak| {
            let Some(subscriber) = weak.upgrade() else { return false };
            let mut queue = subscriber.lock();
            if queue.events.len() == cap {
                queue.events.pop_front();
                queue.missed += 1;
            }
            queue.events.push_back(event.clone());
            if let Some(waker) = queue.waker.take() {
                waker.wake();
            }
            true
        });
    }
}

#[derive(Debug)]
struct Subscriber {
    state: Mutex<Queue>,
}

#[derive(Debug)]
struct Queue {
    events: VecDeque<HostEvent>,
    /// Events dropped since the last `Lagged` was read.
    missed: u64,
    waker: Option<Waker>,
    closed: bool,
}

impl Subscriber {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The stream of a host's connection events, from [`Host::events`](crate::Host::events):
/// a `Connected` for every connection established when it was made, then every change.
/// Ends (yields `None`) once the host's driver has stopped and every event is read.
///
/// Read it with [`Events::next`], or as a [`Stream`] (`futures_core::Stream`). Dropping it
/// unsubscribes.
#[derive(Debug)]
pub struct Events {
    subscriber: Arc<Subscriber>,
}

impl Events {
    /// The next event; `None` once the driver has stopped and every event is read.
    pub async fn next(&mut self) -> Option<HostEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&self, cx: &mut Context<'_>) -> Poll<Option<HostEvent>> {
        let mut queue = self.subscriber.lock();
        if queue.missed > 0 {
            let missed = std::mem::take(&mut queue.missed);
            return Poll::Ready(Some(HostEvent::Lagged { missed }));
        }
        if let Some(event) = queue.events.pop_front() {
            return Poll::Ready(Some(event));
        }
        if queue.closed {
            return Poll::Ready(None);
        }
        if !queue.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            queue.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Stream for Events {
    type Item = HostEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<HostEvent>> {
        self.poll_event(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use porous_proto::HostConfig;

    use super::*;

    fn info(id: PeerId) -> PeerInfo {
        PeerInfo { id, remote: SocketAddr::from(([10, 0, 0, 1], 1)), data: Bytes::new(), client_id: None }
    }

    /// Real ids, from a core connecting to `n` addresses.
    fn ids(n: u16) -> Vec<PeerId> {
        let mut config = HostConfig::default();
        config.max_peers = usize::from(n);
        let mut core = porous_proto::Host::with_seed(config, 1).unwrap();
        let now = Instant::now();
        (1..=n).map(|port| core.connect(now, SocketAddr::from(([10, 0, 0, 2], port))).unwrap()).collect()
    }

    fn drain(events: &Events) -> Vec<HostEvent> {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        std::iter::from_fn(|| match events.poll_event(&mut cx) {
            Poll::Ready(event) => event,
            Poll::Pending => None,
        })
        .collect()
    }

    /// A stream that falls behind loses the oldest events, says how many, and goes on with
    /// the newest in order; a stream that keeps up loses nothing.
    #[test]
    fn a_lagging_stream_loses_the_oldest_and_says_how_many() {
        let ids = ids(8);
        let connections = Connections::new(ids.len());
        let slow = connections.subscribe();
        let fast = connections.subscribe();
        let mut fast_seen = 0;
        let rounds = EVENT_QUEUE / ids.len() / 2 + 3;
        for _ in 0..rounds {
            for &id in &ids {
                connections.connected(info(id));
            }
            for &id in &ids {
                connections.disconnected(id, DisconnectReason::Timeout);
            }
            fast_seen += drain(&fast).len();
        }
        let published = rounds * ids.len() * 2;
        assert_eq!(fast_seen, published);
        let events = drain(&slow);
        assert_eq!(events[0], HostEvent::Lagged { missed: (published - EVENT_QUEUE) as u64 });
        assert_eq!(events.len(), EVENT_QUEUE + 1);
        assert!(matches!(events[EVENT_QUEUE], HostEvent::Disconnected { ref peer, .. } if peer.id == ids[7]));
    }

    /// A move updates the listing and is published with both addresses; a stream opened
    /// afterwards starts with the new address, the departure carries it too, and a move
    /// of a connection never handed over (or gone) publishes nothing.
    #[test]
    fn a_move_is_listed_and_published() {
        let ids = ids(2);
        let connections = Connections::new(2);
        let events = connections.subscribe();
        let (old, new) = (SocketAddr::from(([10, 0, 0, 1], 1)), SocketAddr::from(([10, 0, 0, 1], 2)));
        connections.connected(info(ids[0]));
        connections.moved(ids[0], old, new);
        connections.moved(ids[1], old, new);
        assert_eq!(connections.peers().iter().map(|p| p.remote).collect::<Vec<_>>(), [new]);
        let seen = drain(&events);
        assert_eq!(seen.len(), 2);
        assert!(
            matches!(&seen[1], HostEvent::AddressChanged { peer, old: o } if peer.id == ids[0] && peer.remote == new && *o == old)
        );
        let late = connections.subscribe();
        assert!(matches!(&drain(&late)[..], [HostEvent::Connected { peer }] if peer.remote == new));
        connections.disconnected(ids[0], DisconnectReason::Timeout);
        connections.moved(ids[0], new, old);
        assert!(matches!(&drain(&events)[..], [HostEvent::Disconnected { peer, .. }] if peer.remote == new));
    }

    /// A disconnection of a connection never handed over publishes nothing; a stream made
    /// after the end of the driver ends at once.
    #[test]
    fn only_connections_handed_over_are_reported() {
        let ids = ids(2);
        let connections = Connections::new(2);
        let events = connections.subscribe();
        connections.disconnected(ids[0], DisconnectReason::Timeout);
        connections.connected(info(ids[1]));
        connections.disconnected(ids[1], DisconnectReason::Local);
        assert_eq!(drain(&events).len(), 2);
        assert!(connections.peers().is_empty());
        connections.close();
        let late = connections.subscribe();
        let mut cx = Context::from_waker(Waker::noop());
        assert_eq!(late.poll_event(&mut cx), Poll::Ready(None));
    }
}
