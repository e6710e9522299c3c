//! The driver task: owns the socket, steps the core, routes its events to the handles.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;

use async_channel::{Receiver, Sender};
use futures_core::Stream;
use porous_proto::Event;
use porous_udp::{RecvBackoff, UdpIo};

use crate::connections::PeerInfo;
use crate::handle::{Command, HostShared, Opening, PeerParts, PeerShared, disconnect_now, lock, reject};
use crate::mailbox::Mailbox;
use crate::requests::{RequestParts, Requests};
use crate::runtime::{AsyncTimer, AsyncUdpSocket, Interest};
use crate::transport::{Arrival, PeerChange, Transports};
use crate::{AdmissionError, DisconnectReason, Error, Packet, PeerId, SendMode};

/// Rounds of receive, step and send per poll of the driver before it yields to the
/// runtime's other tasks (and is woken again at once).
const ROUNDS_PER_POLL: usize = 16;

/// Receive system calls per round (each up to 32 buffers of up to 64 datagrams).
const RECVS_PER_ROUND: usize = 8;

/// How long the driver stops reading the socket for a consumer whose delivery queue is
/// full and who does not read, before it reads again and leaves that consumer's datagrams
/// unread (so that a stalled consumer cannot hold up the others for longer). The time
/// starts again whenever the consumer makes room.
const READER_GRACE: Duration = Duration::from_millis(5);

/// How long the driver of a host whose handles are all gone waits for the socket to take
/// its last datagrams (the remotes' disconnection notices).
const CLOSING_GRACE: Duration = Duration::from_millis(100);

/// The driver: a future that runs until every handle of its host is gone.
pub(crate) struct Driver {
    socket: Box<dyn AsyncUdpSocket>,
    io: UdpIo,
    backoff: RecvBackoff,
    timer: Pin<Box<dyn AsyncTimer>>,
    /// What the timer is set to.
    timer_at: Option<Instant>,
    core: Arc<Mutex<porous_proto::Host>>,
    /// Pinned: the receiver is not `Unpin` (it keeps a listener while it waits).
    commands: Pin<Box<Receiver<Command>>>,
    routes: Routes,
    shared: Arc<HostShared>,
    /// Every handle is gone: send the last datagrams until then, and stop.
    closing: Option<Instant>,
}

/// What a round leaves to do.
enum Next {
    /// Go round again: something may be ready.
    Again,
    /// Wait for a wake-up: every source of work has registered the waker.
    Wait,
    /// The host is closed.
    Done,
}

/// Hashes `PeerId`s for the driver's tables, which every received packet looks up: ids
/// are the core's own (a slot index and a generation), not chosen by remotes, so a simple
/// multiplicative hash is enough and far cheaper than the default SipHash.
type IdHash = BuildHasherDefault<IdHasher>;

/// See [`IdHash`].
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(32) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where the core's events go.
struct Routes {
    accept: Sender<PeerParts>,
    /// The driver's own end of the accept queue, to empty it when no `Host` handle is left
    /// (boxed: a receiver is not `Unpin`, and the driver must be).
    backlog: Pin<Box<Receiver<PeerParts>>>,
    /// Requests awaiting the application's decision, for `Host::incoming`.
    requests: Arc<Requests>,
    /// Outgoing connections, and admitted requests, under way, with the `connect` or
    /// `Incoming::accept` call waiting for each.
    connecting: HashMap<PeerId, Sender<Result<PeerParts, Error>>, IdHash>,
    inboxes: HashMap<PeerId, Inbox, IdHash>,
    /// Connections whose inbox holds packets: after `flush_held`, those whose mailbox is
    /// full.
    held: Vec<PeerId>,
    /// Since when `held` has not been empty and no held packet found room.
    held_since: Option<Instant>,
    /// Where the established connections are listed and their events published.
    shared: Arc<HostShared>,
    /// The transports beside the socket; they hear of their remotes' connections.
    transports: Transports,
}

/// The driver's end of one connection's delivery queue.
struct Inbox {
    mailbox: Arc<Mailbox>,
    /// Dropped when the core reports the end, which wakes `Peer::disconnect`.
    ended: Option<Sender<Infallible>>,
    /// Packets not yet in the mailbox, oldest first: those of this round, and reliable and
    /// passive ones waiting for room.
    held: VecDeque<Packet>,
    /// In `Routes::held`.
    listed: bool,
    /// `held` may contain unreliable packets.
    unreliable: bool,
    shared: Arc<PeerShared>,
}

impl Driver {
    #[allow(clippy::too_many_arguments)] // one call site, in `Host::bind_with`
    pub(crate) fn new(
        socket: Box<dyn AsyncUdpSocket>,
        io: UdpIo,
        timer: Pin<Box<dyn AsyncTimer>>,
        core: Arc<Mutex<porous_proto::Host>>,
        commands: Receiver<Command>,
        accept: Sender<PeerParts>,
        backlog: Receiver<PeerParts>,
        requests: Arc<Requests>,
        shared: Arc<HostShared>,
    ) -> Self {
        let routes = Routes {
            accept,
            backlog: Box::pin(backlog),
            requests,
            connecting: HashMap::default(),
            inboxes: HashMap::default(),
            held: Vec::new(),
            held_since: None,
            shared: Arc::clone(&shared),
            transports: Transports::default(),
        };
        Self {
            socket,
            io,
            backoff: RecvBackoff::new(),
            timer,
            timer_at: None,
            core,
            commands: Box::pin(commands),
            routes,
            shared,
            closing: None,
        }
    }

    /// One round: commands, datagrams, a step of the core, its events and datagrams out,
    /// and the timer set to the core's next deadline.
    fn round(&mut self, cx: &mut Context<'_>) -> Next {
        let Self { socket, io, backoff, timer, timer_at, core, commands, routes, shared, closing } = self;
        let now = Instant::now();
        let mut again = false;
        // Handles' changes from here on need another round: let them send a wake-up.
        shared.wake_pending.store(false, Ordering::Release);
        let mut core = lock(core);

        while closing.is_none() {
            match commands.as_mut().poll_next(cx) {
                Poll::Ready(Some(command)) => routes.command(&mut core, io, now, command),
                Poll::Ready(None) => {
                    // Every handle is gone: end every connection at once, telling the remotes.
                    *closing = Some(now + CLOSING_GRACE);
                    let peers: Vec<PeerId> = core.peers().collect();
                    for peer in peers {
                        disconnect_now(&mut core, peer, 0);
                    }
                }
                Poll::Pending => break,
            }
        }
        if routes.flush_held() {
            routes.held_since = None;
        }
        // A consumer that is behind gets `READER_GRACE` to make room, during which the
        // socket is not read: its datagrams wait in the kernel's buffer instead of being
        // dropped. Its `recv` wakes the driver as soon as there is room.
        let readers_behind = routes.readers_behind(now);
        let catching_up = readers_behind.is_some_and(|until| now < until);
        // Past the grace, the datagrams of a consumer still behind are left unread.
        let defer = readers_behind.is_some();

        if closing.is_none() && !backoff.paused(now) && !catching_up {
            let mut calls = 0;
            loop {
                if calls == RECVS_PER_ROUND {
                    // Maybe more to read: yield to the rest of the round, then come back.
                    again = true;
                    break;
                }
                calls += 1;
                match socket.poll_io(cx, Interest::Readable, &mut |s| io.recv(s).map(drop)) {
                    Poll::Ready(Ok(())) => {
                        backoff.ok();
                        for (from, datagram) in io.received() {
                            if !routes.transports.is_empty() && routes.transports.owns(from) {
                                // A transport's address on the socket: only a spoofer sends it.
                                routes.transports.stats.spoofed += 1;
                            } else if !(defer && routes.defers(&core, from)) {
                                core.handle_datagram(now, from, datagram);
                            }
                        }
                        while let Some(event) = core.poll_event() {
                            routes.dispatch(&mut core, event);
                        }
                        routes.flush_held();
                        if readers_behind.is_none() && !routes.held.is_empty() {
                            // That batch filled a delivery queue: let its reader run.
                            break;
                        }
                    }
                    // Counted by `UdpIo`; skipped unless it keeps coming.
                    Poll::Ready(Err(_)) => {
                        backoff.error(now);
                        if backoff.paused(now) {
                            break;
                        }
                    }
                    // The socket said `WouldBlock`: it works, and the waker is registered.
                    Poll::Pending => {
                        backoff.ok();
                        break;
                    }
                }
            }
        }

        if closing.is_none() && !routes.transports.is_empty() && routes.poll_transports(cx, &mut core, now, defer) {
            again = true;
        }

        routes.refuse_unaccepted(&mut core);
        core.step(now);
        while let Some(event) = core.poll_event() {
            routes.dispatch(&mut core, event);
        }
        routes.flush_held();
        while let Some(transmit) = core.poll_transmit() {
            if !routes.transports.is_empty() && routes.transports.owns(transmit.remote) {
                routes.transports.send(transmit.remote, transmit.payload);
            } else {
                io.push(transmit);
            }
        }
        let deadline = core.poll_timeout();
        drop(core);

        if io.pending() > 0 {
            // `Ready` once the queue is empty (errors other than `WouldBlock` are counted
            // per destination inside); `Pending` with the waker registered otherwise.
            let _ = socket.poll_io(cx, Interest::Writable, &mut |s| io.send(s));
        }
        *shared.socket.lock().unwrap_or_else(PoisonError::into_inner) = io.stats();
        if !routes.transports.is_empty() {
            *shared.transports.lock().unwrap_or_else(PoisonError::into_inner) = routes.transports.stats;
        }

        if let Some(until) = *closing
            && (io.pending() == 0 || now >= until)
        {
            return Next::Done;
        }
        let readers_grace = routes.readers_behind(now).filter(|&until| now < until);
        let wake_at = [deadline, backoff.resume_at(), *closing, readers_grace].into_iter().flatten().min();
        if let Some(at) = wake_at {
            if at <= now {
                again = true;
            } else {
                if *timer_at != Some(at) {
                    timer.as_mut().reset(at);
                    *timer_at = Some(at);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    *timer_at = None;
                    again = true;
                }
            }
        }
        if again { Next::Again } else { Next::Wait }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        for _ in 0..ROUNDS_PER_POLL {
            match this.round(cx) {
                Next::Again => {}
                Next::Wait => return Poll::Pending,
                Next::Done => return Poll::Ready(()),
            }
        }
        // Busy: let the runtime's other tasks run, then carry on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Routes {
    fn command(&mut self, core: &mut porous_proto::Host, io: &mut UdpIo, now: Instant, command: Command) {
        match command {
            Command::Wake => {}
            Command::Connect(remote, opening, reply) => match match opening {
                Opening::Data(data) => core.connect_with(now, remote, &data),
                Opening::Token(token) => core.connect_with_token(now, remote, &token),
            } {
                Ok(peer) => {
                    self.connecting.insert(peer, reply);
                }
                Err(e) => {
                    let _ = reply.try_send(Err(Error::Connect(e)));
                }
            },
            Command::Accept(peer, reply) => match core.accept(now, peer) {
                // Decided already (through the core itself): the handshake is under way.
                Ok(()) | Err(AdmissionError::NotAwaiting) => {
                    self.connecting.insert(peer, reply);
                }
                // Gone: the request timed out before the decision reached the driver.
                Err(_) => {
                    let _ = reply.try_send(Err(Error::Failed(DisconnectReason::Timeout)));
                }
            },
            Command::Batching(batching) => io.set_batching(batching),
            Command::Attach(transport) => self.transports.attach(transport),
            #[cfg(feature = "fault-injection")]
            Command::Faults(faults) => io.inject(faults),
        }
    }

    fn dispatch(&mut self, core: &mut porous_proto::Host, event: Event) {
        match event {
            Event::ConnectRequest { peer, remote, data, client_id, .. } => {
                // Every queued request is a pending handshake of the core, and one that
                // times out leaves the queue, so `max_pending` bounds it; the check only
                // makes that explicit. No `Host` handle left: no one will decide.
                let room = self.requests.len() < core.config().max_pending;
                if room && self.accept.receiver_count() > 1 {
                    self.requests.push(RequestParts { id: peer, remote, data, client_id });
                } else {
                    reject(core, peer, 0);
                }
            }
            Event::Connected { peer, remote, data, client_id, .. } => {
                self.transports.connected(peer, remote);
                let info = PeerInfo { id: peer, remote, data: data.clone(), client_id };
                let (inbox, parts) = Inbox::new(peer, remote, data, client_id);
                let handed_over = match self.connecting.remove(&peer) {
                    // Fails if the `connect` future was dropped.
                    Some(reply) => reply.try_send(Ok(parts)).is_ok(),
                    // The driver's own receiver does not count: is a `Host` handle left?
                    None => self.accept.receiver_count() > 1 && self.accept.try_send(parts).is_ok(),
                };
                if handed_over {
                    self.inboxes.insert(peer, inbox);
                    self.shared.connections.connected(info);
                } else {
                    disconnect_now(core, peer, 0);
                }
            }
            Event::Received { peer, channel, mode, data, .. } => {
                if let Some(inbox) = self.inboxes.get_mut(&peer) {
                    // Into the mailbox at the next `flush_held`, with the round's others.
                    inbox.unreliable |= mode == SendMode::Unreliable;
                    inbox.held.push_back(Packet { channel, mode, data });
                    if !inbox.listed {
                        inbox.listed = true;
                        self.held.push(peer);
                    }
                }
            }
            Event::AddressChanged { peer, old, new, .. } => {
                // The connection goes on from `new`: every copy of its address follows.
                // (Before its `Connected`, a peer cannot move: only a connected one
                // validates a new address.)
                self.transports.moved(peer, new);
                if let Some(inbox) = self.inboxes.get(&peer) {
                    inbox.shared.set_remote(new);
                }
                self.shared.connections.moved(peer, old, new);
            }
            Event::Disconnected { peer, reason, .. } => {
                self.transports.ended(peer);
                // A request that timed out undecided leaves the queue.
                self.requests.remove(peer);
                self.shared.connections.disconnected(peer, reason);
                if let Some(reply) = self.connecting.remove(&peer) {
                    let _ = reply.try_send(Err(Error::Failed(reason)));
                }
                if let Some(inbox) = self.inboxes.get_mut(&peer) {
                    let _ = inbox.shared.reason.set(reason);
                    inbox.ended = None;
                    // With packets held, `flush_held` closes the queue after the last one.
                    if inbox.held.is_empty() {
                        inbox.mailbox.close();
                        self.inboxes.remove(&peer);
                    }
                }
            }
            _ => {}
        }
    }

    /// Hands the core what the transports report: a path opening (its datagram size), its
    /// datagrams (those of a remote whose reader is behind dropped, as the socket's are
    /// left unread: `defer`), its closing; then routes the core's events. True if a
    /// transport may have more.
    fn poll_transports(
        &mut self,
        cx: &mut Context<'_>,
        core: &mut porous_proto::Host,
        now: Instant,
        defer: bool,
    ) -> bool {
        let mut transports = std::mem::take(&mut self.transports);
        let mut refused = Vec::new();
        let more = transports.poll(cx, &mut |stats, arrival| match arrival {
            Arrival::Opened { remote, mtu } => {
                if core.set_path_mtu(remote, mtu).is_err() {
                    // Too small for the protocol: the transport closes it.
                    stats.refused += 1;
                    refused.push(remote);
                }
            }
            Arrival::Datagram { from, data } => {
                if defer && self.defers(core, from) {
                    stats.deferred += 1;
                } else {
                    stats.datagrams_received += 1;
                    core.handle_datagram(now, from, data);
                }
            }
            Arrival::Closed { remote } => core.close_path(now, remote),
        });
        for remote in refused {
            transports.peer(remote, PeerChange::Ended);
        }
        self.transports = transports;
        while let Some(event) = core.poll_event() {
            self.dispatch(core, event);
        }
        self.flush_held();
        more
    }

    /// Moves held packets into mailboxes that have room, drops unreliable ones that find
    /// a mailbox full, and closes the mailboxes of ended connections once they got their
    /// last packet. True if any packet went into a mailbox.
    fn flush_held(&mut self) -> bool {
        let inboxes = &mut self.inboxes;
        let mut moved = false;
        self.held.retain(|peer| {
            let Some(inbox) = inboxes.get_mut(peer) else { return false };
            let before = inbox.held.len() as u64;
            let dropped = inbox.mailbox.fill(&mut inbox.held, &mut inbox.unreliable);
            if dropped > 0 {
                inbox.shared.unreliable_dropped.fetch_add(dropped, Ordering::Relaxed);
            }
            moved |= (inbox.held.len() as u64) + dropped < before;
            if !inbox.held.is_empty() {
                return true;
            }
            inbox.listed = false;
            if inbox.ended.is_none() {
                inbox.mailbox.close();
                inboxes.remove(peer);
            }
            false
        });
        moved
    }

    /// While some inbox holds packets back: until when its reader has to catch up before the
    /// socket is read again regardless.
    fn readers_behind(&mut self, now: Instant) -> Option<Instant> {
        if self.held.is_empty() {
            self.held_since = None;
            return None;
        }
        Some(*self.held_since.get_or_insert(now) + READER_GRACE)
    }

    /// Whether to leave a datagram unread: it is from a live connection whose inbox holds
    /// packets back. This is the backpressure on reliable and passive data.
    fn defers(&self, core: &porous_proto::Host, from: SocketAddr) -> bool {
        if self.held.is_empty() {
            return false;
        }
        let inbox = core.peer_by_addr(from).and_then(|peer| self.inboxes.get(&peer));
        let Some(inbox) = inbox.filter(|i| i.ended.is_some() && !i.held.is_empty()) else { return false };
        inbox.shared.datagrams_deferred.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Ends connections still waiting in the accept queue, and rejects requests still
    /// waiting for a decision, once no `Host` handle is left.
    fn refuse_unaccepted(&mut self, core: &mut porous_proto::Host) {
        if self.accept.receiver_count() == 1 {
            while let Ok(parts) = self.backlog.try_recv() {
                disconnect_now(core, parts.id, 0);
            }
            for request in self.requests.drain() {
                reject(core, request.id, 0);
            }
        }
    }
}

impl Inbox {
    fn new(id: PeerId, remote: SocketAddr, data: Bytes, client_id: Option<u64>) -> (Self, PeerParts) {
        let mailbox = Arc::new(Mailbox::default());
        let (ended, ended_rx) = async_channel::bounded(1);
        let shared = Arc::new(PeerShared::new(remote));
        let parts = PeerParts {
            id,
            data,
            client_id,
            mailbox: Arc::clone(&mailbox),
            ended: ended_rx,
            shared: Arc::clone(&shared),
        };
        (Self { mailbox, ended: Some(ended), held: VecDeque::new(), listed: false, unreliable: false, shared }, parts)
    }
}

impl Drop for Routes {
    /// A driver dropped before its end (its runtime shut down): readers must not wait for
    /// packets that will never come.
    fn drop(&mut self) {
        for inbox in self.inboxes.values() {
            inbox.mailbox.close();
        }
        self.requests.close();
        self.shared.connections.close();
    }
}
