//! The driver task: owns the socket, steps the core, routes its events to the handles.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::{self, Future};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Instant;

use async_std::channel::{self, Receiver, RecvError, Sender, TrySendError};
use async_std::net::UdpSocket;
use async_std::task;
use bytes::Bytes;
use porous_proto::{Event, PeerId, SendMode, Transmit};

use crate::handle::{Command, PeerParts, PeerShared, lock};
use crate::{DELIVERY_QUEUE, Error};

/// The largest UDP payload.
const DATAGRAM: usize = 64 * 1024;

type Packet = (usize, Bytes);

pub(crate) struct Driver {
    socket: UdpSocket,
    core: Arc<Mutex<porous_proto::Host>>,
    commands: Receiver<Command>,
    routes: Routes,
}

/// Where the core's events go.
struct Routes {
    accept: Sender<PeerParts>,
    /// The driver's own end of the accept queue, to empty it when no `Host` handle is left.
    backlog: Receiver<PeerParts>,
    /// Outgoing connections under way, with the `connect` call waiting for each.
    connecting: HashMap<PeerId, Sender<Result<PeerParts, Error>>>,
    inboxes: HashMap<PeerId, Inbox>,
    /// Connections whose inbox holds packets back.
    held: Vec<PeerId>,
}

/// The driver's end of one connection's delivery queue.
struct Inbox {
    packets: Sender<Packet>,
    /// Dropped when the core reports the end, which wakes `Peer::disconnect`.
    ended: Option<Sender<Infallible>>,
    /// Reliable and passive packets waiting for room in the queue, oldest first.
    held: VecDeque<Packet>,
    shared: Arc<PeerShared>,
}

impl Driver {
    pub(crate) fn new(
        socket: UdpSocket,
        core: Arc<Mutex<porous_proto::Host>>,
        commands: Receiver<Command>,
        accept: Sender<PeerParts>,
        backlog: Receiver<PeerParts>,
    ) -> Self {
        let routes = Routes { accept, backlog, connecting: HashMap::new(), inboxes: HashMap::new(), held: Vec::new() };
        Self { socket, core, commands, routes }
    }

    /// The task: wait for a datagram, a command or the core's deadline; turn the core;
    /// send what it produced. Returns once every handle is gone.
    pub(crate) async fn run(mut self) {
        let mut buf = vec![0; DATAGRAM];
        let mut out = Vec::new();
        loop {
            let deadline = lock(&self.core).poll_timeout();
            let (datagram, command) = wait(&self.socket, &self.commands, &mut buf, deadline).await;
            // A receive error concerns one datagram (an ICMP report on some platforms): skip it.
            let datagram = datagram.and_then(Result::ok).map(|(n, from)| (from, &buf[..n]));
            let open = self.turn(Instant::now(), datagram, command, &mut out);
            for t in out.drain(..) {
                // UDP is lossy anyway: the core resends what matters.
                let _ = self.socket.send_to(&t.payload, t.remote).await;
            }
            if !open {
                return;
            }
        }
    }

    /// One round with the core locked: input, step, output. False when the driver must stop.
    fn turn(
        &mut self,
        now: Instant,
        datagram: Option<(SocketAddr, &[u8])>,
        command: Option<Result<Command, RecvError>>,
        out: &mut Vec<Transmit>,
    ) -> bool {
        let mut core = lock(&self.core);
        let open = !matches!(command, Some(Err(_)));
        if open {
            for command in command.into_iter().flatten().chain(std::iter::from_fn(|| self.commands.try_recv().ok())) {
                self.routes.command(&mut core, now, command);
            }
        } else {
            // Every handle is gone: end every connection at once, telling the remotes.
            let peers: Vec<PeerId> = core.peers().collect();
            for peer in peers {
                core.disconnect_now(now, peer);
            }
        }
        self.routes.flush_held();
        if let Some((from, bytes)) = datagram
            && !self.routes.defers(&core, from)
        {
            core.handle_datagram(now, from, bytes);
        }
        self.routes.refuse_unaccepted(&mut core);
        core.step(now);
        while let Some(event) = core.poll_event() {
            self.routes.dispatch(&mut core, event);
        }
        out.extend(std::iter::from_fn(|| core.poll_transmit()));
        open
    }
}

/// Waits for the first of a datagram, a command and `deadline`, and returns whichever of
/// the first two are ready, so a busy one cannot starve the other. Dropping the pending
/// futures loses nothing: both only take their item when they return it.
async fn wait(
    socket: &UdpSocket,
    commands: &Receiver<Command>,
    buf: &mut [u8],
    deadline: Option<Instant>,
) -> (Option<io::Result<(usize, SocketAddr)>>, Option<Result<Command, RecvError>>) {
    let mut datagram = pin!(socket.recv_from(buf));
    let mut command = pin!(commands.recv());
    let mut timer = pin!(async {
        match deadline {
            Some(t) => task::sleep(t.saturating_duration_since(Instant::now())).await,
            None => future::pending().await,
        }
    });
    future::poll_fn(|cx| {
        let d = ready(datagram.as_mut().poll(cx));
        let c = ready(command.as_mut().poll(cx));
        if d.is_some() || c.is_some() || timer.as_mut().poll(cx).is_ready() {
            Poll::Ready((d, c))
        } else {
            Poll::Pending
        }
    })
    .await
}

fn ready<T>(poll: Poll<T>) -> Option<T> {
    match poll {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

impl Routes {
    fn command(&mut self, core: &mut porous_proto::Host, now: Instant, command: Command) {
        match command {
            Command::Wake => {}
            Command::Connect(remote, reply) => match core.connect(now, remote) {
                Ok(peer) => {
                    self.connecting.insert(peer, reply);
                }
                Err(e) => {
                    let _ = reply.try_send(Err(Error::Connect(e)));
                }
            },
        }
    }

    fn dispatch(&mut self, core: &mut porous_proto::Host, event: Event) {
        match event {
            Event::Connected { peer, remote } => {
                let (inbox, parts) = Inbox::new(peer, remote);
                let handed_over = match self.connecting.remove(&peer) {
                    // Fails if the `connect` future was dropped.
                    Some(reply) => reply.try_send(Ok(parts)).is_ok(),
                    // The driver's own receiver does not count: is a `Host` handle left?
                    None => self.accept.receiver_count() > 1 && self.accept.try_send(parts).is_ok(),
                };
                if handed_over {
                    self.inboxes.insert(peer, inbox);
                } else {
                    core.disconnect_now(Instant::now(), peer);
                }
            }
            Event::Received { peer, channel, mode, data } => {
                if let Some(inbox) = self.inboxes.get_mut(&peer) {
                    inbox.deliver((channel, data), mode);
                    if !inbox.held.is_empty() && !self.held.contains(&peer) {
                        self.held.push(peer);
                    }
                }
            }
            Event::Disconnected { peer, reason } => {
                if let Some(reply) = self.connecting.remove(&peer) {
                    let _ = reply.try_send(Err(Error::Failed(reason)));
                }
                if let Some(inbox) = self.inboxes.get_mut(&peer) {
                    let _ = inbox.shared.reason.set(reason);
                    inbox.ended = None;
                    // With packets held, `flush_held` closes the queue after the last one.
                    if inbox.held.is_empty() {
                        self.inboxes.remove(&peer);
                    }
                }
            }
            _ => {}
        }
    }

    /// Moves held packets into queues that have room again.
    fn flush_held(&mut self) {
        let inboxes = &mut self.inboxes;
        self.held.retain(|peer| {
            let Some(inbox) = inboxes.get_mut(peer) else { return false };
            if !inbox.flush() {
                return true;
            }
            if inbox.ended.is_none() {
                inboxes.remove(peer);
            }
            false
        });
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

    /// Ends connections still waiting in the accept queue once no `Host` handle is left.
    fn refuse_unaccepted(&mut self, core: &mut porous_proto::Host) {
        if self.accept.receiver_count() == 1 {
            while let Ok(parts) = self.backlog.try_recv() {
                core.disconnect_now(Instant::now(), parts.id);
            }
        }
    }
}

impl Inbox {
    fn new(id: PeerId, remote: SocketAddr) -> (Self, PeerParts) {
        let (packets, packet_rx) = channel::bounded(DELIVERY_QUEUE);
        let (ended, ended_rx) = channel::bounded(1);
        let shared = Arc::new(PeerShared::default());
        let parts = PeerParts { id, remote, packets: packet_rx, ended: ended_rx, shared: Arc::clone(&shared) };
        (Self { packets, ended: Some(ended), held: VecDeque::new(), shared }, parts)
    }

    /// Queues a packet for the handles, or holds it back, or drops it if it is unreliable.
    fn deliver(&mut self, packet: Packet, mode: SendMode) {
        let packet = if self.flush() {
            match self.offer(packet) {
                Ok(()) => return,
                Err(packet) => packet,
            }
        } else {
            packet
        };
        if mode == SendMode::Unreliable {
            self.shared.unreliable_dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            self.held.push_back(packet);
        }
    }

    /// Queues held packets while there is room. True when none is left.
    fn flush(&mut self) -> bool {
        while let Some(packet) = self.held.pop_front() {
            if let Err(packet) = self.offer(packet) {
                self.held.push_front(packet);
                return false;
            }
        }
        true
    }

    /// Puts a packet in the queue, or gives it back if the queue is full. With no handle
    /// left to read it, the packet is discarded (the connection is being disconnected).
    fn offer(&self, packet: Packet) -> Result<(), Packet> {
        let Err(TrySendError::Full(packet)) = self.packets.try_send(packet) else { return Ok(()) };
        // Ask the next `recv` to wake the driver, then look again: a `recv` that ran
        // before the flag was set would not have.
        self.shared.parked.store(true, Ordering::SeqCst);
        match self.packets.try_send(packet) {
            Err(TrySendError::Full(packet)) => Err(packet),
            _ => Ok(()),
        }
    }
}
