//! One connection: the peer state machine (spec §2.2, §2.3, §2.5).
//!
//! ```text
//!              ack + compatible request (or a verified data frame)
//!  connecting ────────────────────────────────────────────────► connected
//!    │  │  refused, incompatible, ack of another id,                 │  │
//!    │  │  disconnection request                                     │  │ disconnect()
//!    │  └──────────────────────────► disconnected ◄── request ───────┘  ▼
//!    │ connect timeout                  │  ▲  ◄──── ack or timeout ── disconnecting
//!    ▼                                  │  └── request (any state but these two)
//!  zombie ◄──── linger ─────────────────┘
//!    ▲ ◄──── nothing heard for `timeout` (connected or disconnecting)
//!    └── deleted by the host
//! ```
//!
//! The handshake is four-way: each side sends a request with its random nonce and
//! parameters, and acknowledges the other's. A side is connected once it holds both an
//! acknowledgement of its request and a compatible request of the other's. The listening
//! side answers a request with its own request and the acknowledgement in one datagram.
//! Both sides may start at once (simultaneous open): each then receives the other's
//! request while connecting and answers it the same way.
//!
//! Once a side knows both nonces it can verify connection datagrams; a verified data
//! frame proves the sender holds this side's nonce, so it counts as the acknowledgement
//! (the spec's lost-acknowledgement case, Figure 2 (a), then costs nothing).
//!
//! The state is one enum, [`State`], whose variants hold what each state needs and
//! nothing else: the handshake (boxed: both requests, the negotiated parameters, connect
//! data, the retry timer; about 350 bytes) while connecting; the session (transfer layer,
//! channels, buffers) and the connection's keys once connected, inline, so that a
//! connected peer's fixed state is one record in the host's slot (a pending peer has that
//! room, about 1.5 KB, without the buffers, and `max_pending` bounds how many there are);
//! what the disconnection is doing while disconnecting; the final counters once ended.
//! A connected peer answers a late request from the nonces and keys it keeps, and never
//! sends one again.
//!
//! Datagrams reach the state machine opened ([`Peer::open`], then [`Peer::handle`]): the
//! peer's keys (`keys`) verify a control datagram or a sealed one before anything acts on
//! it; requests are opened by the host's listener and come as [`Input::Request`].
//!
//! An incoming handshake holds to the attempt it answered: a request of another attempt
//! changes nothing here (the host replaces the whole peer for a requester that proves it
//! receives at the address: [`Peer::is_held_against`]). Under manual admission an
//! incoming request first awaits the application's decision: it is reported once
//! (`Event::ConnectRequest`), left unanswered, and its retries change nothing. Accepted,
//! it answers as any incoming handshake would; rejected, it sends one refusal and ends at
//! once.
//!
//! A peer's parts, one file each: `keys` (opening what arrives, sealing what leaves, in
//! both modes), `secure` (secure mode's token and connection ciphers), `negotiate` (the
//! parameters of a connection), `session` (the data path: transfer layer, channels),
//! `settings` (what it keeps of the configuration), `output` (where its datagrams and
//! events go), `timers` (its timer table).

mod keys;
mod negotiate;
mod output;
mod path;
mod secure;
mod session;
mod settings;
mod timers;

use crate::time::Time;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::arena::Arena;
use crate::event::{DisconnectReason, Event, PeerId, SendError, SendMode};
use crate::lean::Nanos;
use crate::stats::{PeerState, PeerStats, TransferStats};
use crate::token::VerifiedToken;
use crate::wire::secure::SecretKey;
use crate::wire::{self, ConnectRequest, Control, Cookie, Key, KeyClass, PathCookie, RefuseReason};
pub(crate) use keys::Input;
use keys::{Connection, Keys, send_connection};
pub(crate) use negotiate::{Params, negotiate, refusal, request, unordered};
pub(crate) use output::Outputs;
pub(crate) use path::PathCookies;
use path::{Path, Probe};
pub(crate) use secure::SecureState;
pub(crate) use session::Session;
use session::{FrameMessages, initial_windows};
pub(crate) use settings::Settings;
use timers::{Timer, Timers};

/// The longest interval between handshake or disconnection retries.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// This side of a new connection: the id events about it carry, the remote's address, the
/// host's settings, this side's request (its nonce and first ids) and secret randomness
/// for its session (the frame ids it skips).
#[derive(Debug)]
pub(crate) struct Start {
    pub(crate) id: PeerId,
    pub(crate) remote: SocketAddr,
    pub(crate) settings: Arc<Settings>,
    pub(crate) local: ConnectRequest,
    pub(crate) seed: u64,
    /// The largest datagram path MTU discovery may reach towards this remote: the
    /// configured `max_mtu`, less on a path whose size the adapter fixed.
    pub(crate) mtu_ceiling: usize,
}

/// A connection request the listener took: what an incoming peer is made from.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The requester's parameters.
    pub(crate) request: ConnectRequest,
    /// What the connection runs with, negotiated from them.
    pub(crate) params: Params,
    /// Its connect data (plain mode) or its token's user data (secure mode).
    pub(crate) data: Bytes,
    /// Secure mode: its verified token.
    pub(crate) token: Option<VerifiedToken>,
}

/// The remote's attempt, once its request is known: what the connection runs with.
#[derive(Debug)]
struct Remote {
    req: ConnectRequest,
    params: Params,
    /// Its connect data (or its token's user data), until `Connected` hands it over.
    data: Bytes,
    /// The connection's keys, from both nonces.
    conn: Connection,
}

/// Who started the connection, and what that side of the handshake holds.
#[derive(Debug)]
enum Side {
    /// This side called `connect`: the application holds the id from the start, and
    /// this side sends its request until it is answered.
    Outgoing {
        /// This side's connect data, sent with every request (never with a reply).
        data: Bytes,
        /// When the next request goes.
        next_send: Time,
        /// The wait after it (8 bytes: `lean::Nanos`).
        retry: Nanos,
        remote: Awaited,
    },
    /// A request arrived: this side answers it, and never sends on its own.
    Incoming { remote: Remote, admission: Admission },
}

/// What an outgoing attempt knows of the remote.
#[derive(Debug)]
enum Awaited {
    /// Not its request yet; `acked`: its acknowledgement of this side's request came
    /// first.
    Unknown { acked: bool },
    /// Its request (both sides connecting at once), not yet its acknowledgement.
    Known(Remote),
}

/// Where an incoming request stands with the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    /// Reported (`Event::ConnectRequest`) and awaiting the application's decision:
    /// nothing is answered.
    Awaiting,
    /// Being answered; `reported`: the application learned the id from
    /// `Event::ConnectRequest` (so it must hear of its end).
    Answering { reported: bool },
}

/// A handshake under way: what it sends and what it learned until it is connected.
#[derive(Debug)]
struct Handshake {
    /// When the attempt began: it gives up `connect_timeout` later.
    since: Time,
    local: ConnectRequest,
    /// Secret seed of the frame ids the session skips (see `Transfer`).
    skip_seed: u64,
    /// The first handshake datagram sent and how many were sent: a reply to a lone one is
    /// a clean round-trip sample (Karn: never one to a retried one).
    sent: Option<(Time, u32)>,
    side: Side,
    /// See [`Start::mtu_ceiling`].
    mtu_ceiling: usize,
}

impl Handshake {
    fn remote(&self) -> Option<&Remote> {
        match &self.side {
            Side::Outgoing { remote: Awaited::Known(r), .. } | Side::Incoming { remote: r, .. } => Some(r),
            Side::Outgoing { remote: Awaited::Unknown { .. }, .. } => None,
        }
    }

    fn remote_mut(&mut self) -> Option<&mut Remote> {
        match &mut self.side {
            Side::Outgoing { remote: Awaited::Known(r), .. } | Side::Incoming { remote: r, .. } => Some(r),
            Side::Outgoing { remote: Awaited::Unknown { .. }, .. } => None,
        }
    }

    fn is_incoming(&self) -> bool {
        matches!(self.side, Side::Incoming { .. })
    }

    fn is_awaiting(&self) -> bool {
        matches!(self.side, Side::Incoming { admission: Admission::Awaiting, .. })
    }

    /// Whether the application knows the id: it called `connect`, or was asked.
    fn known_to_app(&self) -> bool {
        match self.side {
            Side::Outgoing { .. } => true,
            Side::Incoming { admission, .. } => admission != Admission::Answering { reported: false },
        }
    }

    /// The parts a connection is made of, once the remote's request is known.
    fn into_connection(self: Box<Self>) -> Result<Made, Box<Self>> {
        match self.side {
            Side::Outgoing { remote: Awaited::Known(remote), .. } | Side::Incoming { remote, .. } => {
                let mtu_ceiling = self.mtu_ceiling;
                Ok(Made { remote, local: self.local, seed: self.skip_seed, sent: self.sent, mtu_ceiling })
            }
            Side::Outgoing { remote: Awaited::Unknown { .. }, .. } => Err(self),
        }
    }

    /// Bytes held beyond the box: the connect data both ways and the connection's keys.
    fn memory(&self) -> usize {
        let (local, remote) = match &self.side {
            Side::Outgoing { data, remote: Awaited::Known(r), .. } => (data.len(), Some(r)),
            Side::Outgoing { data, remote: Awaited::Unknown { .. }, .. } => (data.len(), None),
            Side::Incoming { remote, .. } => (0, Some(remote)),
        };
        size_of::<Self>() + local + remote.map_or(0, |r| r.data.len() + r.conn.memory())
    }
}

/// What a completed handshake leaves to the connection.
struct Made {
    remote: Remote,
    local: ConnectRequest,
    seed: u64,
    sent: Option<(Time, u32)>,
    mtu_ceiling: usize,
}

/// What a graceful disconnection is doing.
#[derive(Debug)]
enum Closing {
    /// Sending what is pending first, until `deadline`.
    Flushing { deadline: Time, session: Session },
    /// Sending disconnection requests since `started`, the next at `next_send`, and
    /// acknowledging what still arrives. A disconnection that began before the handshake
    /// completed has no session.
    Requesting { started: Time, next_send: Time, retry: Nanos, session: Option<Session> },
}

/// A peer's state: what each of the five states of `PeerState` holds.
#[derive(Debug)]
enum State {
    /// The handshake is under way.
    Connecting(Box<Handshake>),
    /// Packets flow; `last_recv`: when the remote was last heard.
    Connected { session: Session, conn: Connection, last_recv: Time },
    /// Closing gracefully, telling the remote `code`.
    Disconnecting { closing: Closing, conn: Connection, last_recv: Time, code: u32 },
    /// Ended; lingers from `since` to acknowledge repeated disconnection requests (with the
    /// connection's keys, if it had any). `last`: its counters when it ended.
    Disconnected { since: Time, conn: Option<Connection>, last: PeerStats },
    /// About to be deleted.
    Zombie { last: PeerStats },
}

impl State {
    fn peer_state(&self) -> PeerState {
        match self {
            Self::Connecting(_) => PeerState::Connecting,
            Self::Connected { .. } => PeerState::Connected,
            Self::Disconnecting { .. } => PeerState::Disconnecting,
            Self::Disconnected { .. } => PeerState::Disconnected,
            Self::Zombie { .. } => PeerState::Zombie,
        }
    }

    /// The connection's keys, in every state that has them.
    fn connection_mut(&mut self) -> Option<&mut Connection> {
        match self {
            Self::Connecting(h) => h.remote_mut().map(|r| &mut r.conn),
            Self::Connected { conn, .. } | Self::Disconnecting { conn, .. } => Some(conn),
            Self::Disconnected { conn, .. } => conn.as_mut(),
            Self::Zombie { .. } => None,
        }
    }

    fn connection(&self) -> Option<&Connection> {
        match self {
            Self::Connecting(h) => h.remote().map(|r| &r.conn),
            Self::Connected { conn, .. } | Self::Disconnecting { conn, .. } => Some(conn),
            Self::Disconnected { conn, .. } => conn.as_ref(),
            Self::Zombie { .. } => None,
        }
    }

    /// Whether data datagrams are acted on: once both nonces are known, until the
    /// connection ends.
    fn takes_data(&self) -> bool {
        match self {
            Self::Connecting(h) => h.remote().is_some(),
            Self::Connected { .. } | Self::Disconnecting { .. } => true,
            Self::Disconnected { .. } | Self::Zombie { .. } => false,
        }
    }

    fn session(&self) -> Option<&Session> {
        match self {
            Self::Connected { session, .. }
            | Self::Disconnecting { closing: Closing::Flushing { session, .. }, .. }
            | Self::Disconnecting { closing: Closing::Requesting { session: Some(session), .. }, .. } => Some(session),
            _ => None,
        }
    }

    fn session_mut(&mut self) -> Option<&mut Session> {
        match self {
            Self::Connected { session, .. }
            | Self::Disconnecting { closing: Closing::Flushing { session, .. }, .. }
            | Self::Disconnecting { closing: Closing::Requesting { session: Some(session), .. }, .. } => Some(session),
            _ => None,
        }
    }

    /// A placeholder while a transition moves the state's parts: ended, counters empty.
    fn empty() -> Self {
        Self::Zombie { last: stats_of(PeerState::Zombie, SocketAddr::from(([0, 0, 0, 0], 0)), None, 0) }
    }

    /// The connection's keys and session, taken out of the state (which is left ended).
    fn take(&mut self) -> (Option<Connection>, Option<Session>) {
        match std::mem::replace(self, Self::empty()) {
            Self::Connecting(h) => (h.into_connection().ok().map(|m| m.remote.conn), None),
            Self::Connected { session, conn, .. } => (Some(conn), Some(session)),
            Self::Disconnecting { closing: Closing::Flushing { session, .. }, conn, .. } => (Some(conn), Some(session)),
            Self::Disconnecting { closing: Closing::Requesting { session, .. }, conn, .. } => (Some(conn), session),
            Self::Disconnected { conn, .. } => (conn, None),
            Self::Zombie { .. } => (None, None),
        }
    }
}

/// A peer's counters from its session (if it has one): what `Host::peer_stats` reports.
fn stats_of(state: PeerState, remote: SocketAddr, s: Option<&Session>, malformed: u64) -> PeerStats {
    let t = s.map(|s| &s.transfer);
    let c = s.map(Session::counters).unwrap_or_default();
    PeerStats {
        state,
        remote,
        rtt: t.map_or(Duration::ZERO, |t| t.rtt()),
        rttvar: t.map_or(Duration::ZERO, |t| t.rttvar()),
        latest_rtt: t.map_or(Duration::ZERO, |t| t.latest_rtt()),
        rto: t.map_or(Duration::ZERO, |t| t.rto()),
        cwnd: t.map_or(0, |t| t.cwnd()),
        congestion: t.map(|t| t.congestion()).unwrap_or_default(),
        ssthresh: t.map_or(0, |t| t.ssthresh()),
        flight: t.map_or(0, |t| t.flight()),
        frames_in_flight: t.map_or(0, |t| t.frames_in_flight()),
        mtu: s.map_or(0, |s| s.current_mtu()),
        transfer: t.map_or(TransferStats::default(), |t| t.stats()),
        packets_sent: c.packets_sent,
        packets_received: c.packets_received,
        unreliable_dropped: c.unreliable_dropped,
        unreliable_replaced: c.unreliable_replaced,
        frames_refused: c.frames_refused,
        protocol_violations: c.violations,
        malformed,
        reassembly_bytes: s.map_or(0, Session::reassembly_bytes),
        queued_bytes: s.map_or(0, Session::queued_bytes),
    }
}

/// How a request reached [`Peer::on_request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// A request: anyone may have put the address on it.
    Request,
    /// A `RequestAck`, keyed to this side's nonce: its sender received this side's
    /// request, and it acknowledges it.
    RequestAck,
}

/// Which end a connection comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Disconnected, lingering.
    Disconnected,
    /// To be deleted at once.
    Zombie,
}

#[derive(Debug)]
pub(crate) struct Peer {
    /// The id events about this peer carry.
    id: PeerId,
    remote: SocketAddr,
    settings: Arc<Settings>,
    /// This side's nonce and, in secure mode, its token.
    keys: Keys,
    /// Nothing heard for this long ends the connection: the configuration's, or in secure
    /// mode the token's (8 bytes: `lean::Nanos`).
    timeout: Nanos,
    /// Datagrams from the peer's address that failed to open or decode.
    malformed: u64,
    /// Address change: a new address of the remote being validated, and when the
    /// connection last moved (`path.rs`).
    path: Option<Box<Path>>,
    state: State,
}

impl Peer {
    fn new(now: Time, start: Start, keys: Keys, side: Side) -> Self {
        let Start { id, remote, settings, local, seed, mtu_ceiling } = start;
        // Secure mode: the token's timeout, never within two keepalive intervals, so an
        // idle connection lives.
        let timeout = match keys.secure() {
            Some(s) => s.timeout.max(settings.config.ping_interval * 2),
            None => settings.config.timeout,
        };
        Self {
            id,
            remote,
            timeout: Nanos::of(timeout),
            keys,
            settings,
            malformed: 0,
            path: None,
            state: State::Connecting(Box::new(Handshake {
                since: now,
                local,
                skip_seed: seed,
                sent: None,
                side,
                mtu_ceiling,
            })),
        }
    }

    /// A peer for `connect`: it starts sending requests, with connect data `data`, at the
    /// next step. In secure mode `secure` holds the client's token.
    pub(crate) fn outgoing(now: Time, start: Start, data: Bytes, secure: Option<SecureState>) -> Self {
        let retry = Nanos::of(start.settings.config.connect_retry);
        let remote = Awaited::Unknown { acked: false };
        let keys = Keys::new(start.local.nonce, secure);
        Self::new(now, start, keys, Side::Outgoing { data, next_send: now, retry, remote })
    }

    /// A peer for a request the listener took. It answers at once, or, when the
    /// application decides (`manual`), reports the request and waits for
    /// [`Peer::accept`] or [`Peer::reject`]. In secure mode `secure` holds the verified
    /// token's keys and the connect data is its user data.
    pub(crate) fn incoming(
        now: Time,
        start: Start,
        admitted: Admitted,
        secure: Option<SecureState>,
        manual: bool,
        out: &mut Outputs,
    ) -> Self {
        let keys = Keys::new(start.local.nonce, secure);
        let conn = keys.connect(admitted.request.nonce);
        let data = admitted.data;
        let remote = Remote { req: admitted.request, params: admitted.params, data: data.clone(), conn };
        let admission = if manual { Admission::Awaiting } else { Admission::Answering { reported: false } };
        let mut p = Self::new(now, start, keys, Side::Incoming { remote, admission });
        if manual {
            let client_id = p.keys.secure().and_then(SecureState::client_id);
            out.event(Event::ConnectRequest { peer: p.id, remote: p.remote, data, client_id });
        } else {
            p.send_handshake(now, out);
        }
        p
    }

    pub(crate) fn id(&self) -> PeerId {
        self.id
    }

    pub(crate) fn state(&self) -> PeerState {
        self.state.peer_state()
    }

    pub(crate) fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Whether this is an incoming connection still in its handshake: the kind of peer a
    /// flood of requests creates, capped separately by the host.
    pub(crate) fn is_pending(&self) -> bool {
        matches!(&self.state, State::Connecting(h) if h.is_incoming())
    }

    /// Whether this is a request awaiting the application's decision.
    pub(crate) fn is_awaiting(&self) -> bool {
        matches!(&self.state, State::Connecting(h) if h.is_awaiting())
    }

    /// Whether the application knows this peer's id (so it must hear of its end).
    fn known_to_app(&self) -> bool {
        match &self.state {
            State::Connecting(h) => h.known_to_app(),
            State::Connected { .. } | State::Disconnecting { .. } => true,
            State::Disconnected { .. } | State::Zombie { .. } => false,
        }
    }

    /// Whether `req` (under `token`, in secure mode) is the attempt this peer's handshake
    /// answered or its connection was made with: the same nonce, and the same token.
    fn is_attempt(&self, req: &ConnectRequest, token: Option<&VerifiedToken>) -> bool {
        let token_matches = match (self.keys.secure(), token) {
            (None, None) => true,
            (Some(s), Some(t)) => s.is_token(t),
            _ => false,
        };
        token_matches && self.state.connection().is_some_and(|c| c.remote_nonce == req.nonce)
    }

    /// Whether this is an incoming handshake and `req` (under `token`) another attempt
    /// than the one it answered. The handshake holds to its attempt: only a requester that
    /// proves it receives at this address may replace it, which is the host's to check
    /// (then [`Peer::supersede`]). Anyone can put an address on a request, and in secure
    /// mode anyone can get a token: a request alone never changes a connection's keys, id
    /// or state.
    pub(crate) fn is_held_against(&self, req: &ConnectRequest, token: Option<&VerifiedToken>) -> bool {
        self.is_pending() && !self.is_attempt(req, token)
    }

    /// An incoming handshake replaced by another attempt from its address, one that
    /// proved it receives there: it ends, and an application that was asked about it
    /// hears so ([`DisconnectReason::Stale`]).
    pub(crate) fn supersede(&mut self, now: Time, out: &mut Outputs) {
        self.end(now, End::Zombie, DisconnectReason::Stale, out);
    }

    /// Ends the connection with `reason`, telling the application if it knows the peer;
    /// its counters are kept as they were then (`Host::peer_stats` reads them until it is
    /// deleted).
    fn end(&mut self, now: Time, end: End, reason: DisconnectReason, out: &mut Outputs) {
        self.path = None;
        if self.known_to_app() {
            out.event(Event::Disconnected { peer: self.id, reason });
        }
        let (conn, mut session) = self.state.take();
        if let Some(s) = &mut session {
            s.clear();
        }
        let state = match end {
            End::Disconnected => PeerState::Disconnected,
            End::Zombie => PeerState::Zombie,
        };
        // Its counters as they were; what it held (reassembly, queues) goes with the session.
        let last = PeerStats {
            reassembly_bytes: 0,
            queued_bytes: 0,
            ..stats_of(state, self.remote, session.as_ref(), self.malformed)
        };
        self.state = match end {
            End::Disconnected => State::Disconnected { since: now, conn, last },
            End::Zombie => State::Zombie { last },
        };
    }

    fn connected(&mut self, now: Time, out: &mut Outputs) {
        let h = match std::mem::replace(&mut self.state, State::empty()) {
            State::Connecting(h) => h,
            other => {
                self.state = other;
                return;
            }
        };
        let Made { remote, local, seed, sent, mtu_ceiling } = match h.into_connection() {
            Ok(parts) => parts,
            Err(h) => {
                self.state = State::Connecting(h);
                return;
            }
        };
        let sealed = self.keys.secure().is_some();
        let mut session = Session::new(&self.settings, remote.params, &local, &remote.req, seed, (sealed, mtu_ceiling));
        if let Some((first, 1)) = sent {
            session.transfer.rtt_sample(now.saturating_duration_since(first));
        }
        self.state = State::Connected { session, conn: remote.conn, last_recv: now };
        let client_id = self.keys.secure().and_then(SecureState::client_id);
        out.event(Event::Connected { peer: self.id, remote: self.remote, data: remote.data, client_id });
    }

    /// Sends this side's request, acknowledging the other's when it is known.
    ///
    /// Only the side that called `connect` resends on a timer. An incoming handshake
    /// answers each request it receives once and never on its own: its address has not
    /// proven it receives, and every request it sends is answered by one reply no larger,
    /// so nobody can make this host send a spoofed address more than it sent (a lost
    /// reply is covered by the requester's own retry).
    fn send_handshake(&mut self, now: Time, out: &mut Outputs) {
        let Self { keys, state, remote, .. } = self;
        // Only ever called while connecting.
        let State::Connecting(h) = state else { return };
        match (h.remote(), &h.side) {
            (Some(r), _) => keys.reply(out, *remote, &Control::RequestAck(h.local), r.req.nonce, None),
            (None, Side::Outgoing { data, .. }) => keys.send_request(out, *remote, &h.local, data),
            (None, Side::Incoming { .. }) => {}
        }
        if let Side::Outgoing { next_send, retry, .. } = &mut h.side {
            *next_send = now + retry.get();
            *retry = Nanos::of((retry.get() * 2).min(MAX_RETRY));
        }
        // Every handshake datagram counts, timer-driven or a reply: a round-trip sample
        // is taken only when exactly one went out (Karn's rule).
        h.sent = Some(match h.sent {
            Some((first, n)) => (first, n + 1),
            None => (now, 1),
        });
    }

    /// Sends `c` in answer to the request of nonce `to`. Plain: keyed with that nonce.
    /// Secure: a server seals it with `key` (the reply key of a request under another
    /// token) or this attempt's reply key; a client's only answer is its `Ack`, a datagram
    /// of the connection.
    fn reply(&mut self, c: &Control<'_>, to: u32, key: Option<SecretKey>, out: &mut Outputs) {
        if self.keys.is_client() {
            if matches!(c, Control::Ack) {
                send_connection(out, self.remote, c, self.state.connection_mut());
            }
            return;
        }
        self.keys.reply(out, self.remote, c, to, key);
    }

    /// Sends a control datagram of the connection (`Disconnect`, `DisconnectAck`), once its
    /// keys exist.
    fn send_connection(&mut self, c: &Control<'_>, out: &mut Outputs) {
        send_connection(out, self.remote, c, self.state.connection_mut());
    }

    // ---- input ---------------------------------------------------------------------

    /// Opens a datagram of type `ty` (peeked already; requests go through the host's
    /// listener) from this peer's address with its keys: a control datagram verified, a
    /// data datagram copied (plain) or verified and decrypted (secure) into `arena`.
    /// `Ok(None)`: nothing to act on (data before both nonces are known, or after the
    /// end). What fails is counted here, replays aside.
    #[inline]
    pub(crate) fn open<'d>(
        &mut self,
        ty: u8,
        datagram: &'d [u8],
        arena: &mut Arena,
    ) -> Result<Option<Input<'d>>, wire::DecodeError> {
        let data = self.state.takes_data();
        let opened = self.keys.open(ty, datagram, self.state.connection_mut(), data, arena);
        if let Err(e) = &opened
            && *e != wire::DecodeError::Replayed
        {
            self.malformed += 1;
        }
        opened
    }

    /// Acts on an opened datagram ([`Peer::open`]) or a request from this peer's address
    /// (verified by the host). A data datagram is decoded against the windows; one that
    /// does not decode is counted and its error returned.
    #[inline]
    pub(crate) fn handle(&mut self, now: Time, input: Input<'_>, out: &mut Outputs) -> Result<(), wire::DecodeError> {
        if self.path.as_ref().is_none_or(|p| p.routed().is_none()) {
            return self.act(now, input, out);
        }
        // The remote's newest frame from its validated address: that address receives
        // after all, and the probed one does not get the connection's data.
        let newest = self.newest_received();
        let result = self.act(now, input, out);
        if self.newest_received() != newest {
            self.unroute(now);
        }
        result
    }

    /// Acts on a datagram or request of this peer, wherever it came from.
    fn act(&mut self, now: Time, input: Input<'_>, out: &mut Outputs) -> Result<(), wire::DecodeError> {
        match input {
            Input::Control(control) => {
                self.on_control(now, control, out);
                Ok(())
            }
            Input::Data { datagram, key } => self.receive(now, &datagram, key, out),
            Input::Request { request, data, token } => {
                self.on_request_from(now, request, data, token, out);
                Ok(())
            }
        }
    }

    /// A connection request from this peer's address. Another attempt than this peer's
    /// changes nothing: a connected peer tells it its attempt is stale; one still
    /// connecting answers only its own (an incoming handshake's other attempts go to the
    /// host first: [`Peer::is_held_against`]). The reply is sealed for the request it
    /// answers.
    fn on_request_from(
        &mut self,
        now: Time,
        req: ConnectRequest,
        data: &[u8],
        token: Option<&VerifiedToken>,
        out: &mut Outputs,
    ) {
        if self.keys.is_client() {
            // A client takes no requests (it cannot open them).
            return;
        }
        let Some(token) = token.filter(|_| self.keys.secure().is_some()) else {
            return self.on_request(now, req, data, None, Via::Request, out);
        };
        let reply_key = Some(token.keys().1.derive(wire::secure::Use::Reply, req.nonce, 0));
        if !self.is_attempt(&req, Some(token)) {
            // Another token: nothing of this connection is its business. A connected peer
            // says its own attempt holds (sealed for the requester, which may be this
            // client restarted with a new token).
            if let State::Connected { conn, .. } = &self.state {
                let held = conn.remote_nonce;
                self.reply(&Control::AckOther { acked: held }, req.nonce, reply_key, out);
            }
            return;
        }
        // A secure request's data is its token's, which the peer holds already.
        self.on_request(now, req, &[], reply_key, Via::Request, out);
    }

    /// Acts on a verified control datagram: the remote was heard (only the remote side can
    /// make replies and connection datagrams).
    fn on_control(&mut self, now: Time, control: Control<'_>, out: &mut Outputs) {
        if let State::Connected { last_recv, .. } | State::Disconnecting { last_recv, .. } = &mut self.state {
            *last_recv = now;
        }
        match control {
            // Requests reach the peer as `Input::Request`.
            Control::Request { .. } => {}
            Control::RequestAck(req) => self.on_request(now, req, &[], None, Via::RequestAck, out),
            Control::Ack => self.on_ack(now, out),
            Control::AckOther { .. } => {
                if let State::Connecting(_) = self.state {
                    self.end(now, End::Disconnected, DisconnectReason::Stale, out);
                }
            }
            Control::Refuse(reason) => {
                if let State::Connecting(_) = self.state {
                    let reason = negotiate::refused(&self.settings.config, reason);
                    self.end(now, End::Disconnected, reason, out);
                }
            }
            Control::Challenge(cookie) => self.on_challenge(now, cookie, out),
            Control::Disconnect { code } => self.on_disconnect(now, code, out),
            Control::DisconnectAck => {
                if let State::Disconnecting { .. } = self.state {
                    let reason = self.graceful_end();
                    self.end(now, End::Disconnected, reason, out);
                }
            }
            Control::PathChallenge { data } => self.answer_challenge(self.remote, data, out),
            // Only one from the address probed counts ([`Peer::handle_from`]), and a moved
            // only from a new address ([`Peer::moved`]): from the remote's own, the
            // connection is where it says (an unknown path forged from the remote's
            // address asked for it).
            Control::PathResponse { .. } | Control::Moved { .. } => {}
            // Goes to the host, which finds the peer by the sender's address.
            Control::UnknownPath(_) => {}
        }
    }

    // ---- address change (`path`) ---------------------------------------------------

    /// Opens a datagram of type `ty` from another address than the peer's with its keys,
    /// and verifies a data datagram against its windows without acting on it: whether it
    /// is this connection's (see [`Peer::handle_from`]). Only a connected peer's datagrams
    /// move (data, and control datagrams keyed with the connection), and nothing here
    /// counts a failure: most candidates a host tries are not the sender.
    pub(crate) fn open_elsewhere<'d>(
        &mut self,
        ty: u8,
        datagram: &'d [u8],
        arena: &mut Arena,
    ) -> Result<Option<Input<'d>>, wire::DecodeError> {
        if !matches!(self.state, State::Connected { .. } | State::Disconnecting { .. })
            || (ty & 0x80 != 0 && wire::key_class(ty) != KeyClass::Connection)
        {
            return Ok(None);
        }
        let input = self.keys.open(ty, datagram, self.state.connection_mut(), true, arena)?;
        if let Some(Input::Data { datagram, key }) = &input {
            let Some(session) = self.state.session() else { return Ok(None) };
            let mut msgs = FrameMessages::new();
            session.decode(datagram, *key, &mut msgs)?;
        }
        Ok(input)
    }

    /// Acts on a datagram of this connection (opened by [`Peer::open_elsewhere`]) that
    /// came from `from`, not the peer's address, `len` bytes long. It is acted on as any
    /// other (its packets delivered); a datagram other than a path challenge or response
    /// makes `from` the address to validate, with a challenge drawn from `fresh`, and
    /// routes the connection's datagrams there when it carries the remote's newest frame.
    /// The echo of that challenge from `from` moves the connection there.
    pub(crate) fn handle_from(
        &mut self,
        now: Time,
        from: SocketAddr,
        len: usize,
        input: Input<'_>,
        fresh: impl FnOnce() -> u64,
        out: &mut Outputs,
    ) -> Result<(), wire::DecodeError> {
        let probing = matches!(input, Input::Control(Control::PathChallenge { .. } | Control::PathResponse { .. }));
        if !probing && self.probe().is_some_and(|p| p.addr != from) {
            // Another address replaces the probe: a routing to the old one ends (and pauses
            // routing) as any other, or copies raced from two addresses in turn would hold
            // the data again at each.
            self.unroute(now);
        }
        let path = self.path.get_or_insert_with(Box::default);
        if !probing && path.probe.as_ref().is_none_or(|p| p.addr != from) {
            path.probe = Some(Probe::new(from, fresh()));
        }
        if let Some(p) = path.probe.as_mut().filter(|p| p.addr == from) {
            p.received += len as u64;
        }
        let newest = self.newest_received();
        let result = match input {
            Input::Control(c @ (Control::PathChallenge { .. } | Control::PathResponse { .. })) => {
                if let State::Connected { last_recv, .. } | State::Disconnecting { last_recv, .. } = &mut self.state {
                    *last_recv = now;
                }
                match c {
                    Control::PathChallenge { data } => self.answer_challenge(from, data, out),
                    Control::PathResponse { data } => self.on_path_response(now, from, data, out),
                    _ => {}
                }
                Ok(())
            }
            other => self.act(now, other, out),
        };
        if !probing && self.newest_received() != newest {
            self.route(now, from);
        }
        self.challenge(now, out);
        result
    }

    /// One past the newest frame received, once connected.
    fn newest_received(&self) -> Option<u32> {
        self.state.session().map(|s| s.transfer.newest_received())
    }

    /// Routes the connection's datagrams to the probe at `from`, which the remote's newest
    /// frame came from. What is in flight went to the old address: it is resent.
    fn route(&mut self, now: Time, from: SocketAddr) {
        let Self { path: Some(path), state, .. } = self else { return };
        if !path.may_route(now) {
            return;
        }
        let Some(session) = state.session_mut() else { return };
        let Some(p) = path.probe.as_mut().filter(|p| p.addr == from && p.routed.is_none()) else { return };
        p.routed = Some(now);
        session.transfer.on_path_change(now);
    }

    /// Ends the routing to the probe, if there is one: what went there is resent to the
    /// validated address.
    fn unroute(&mut self, now: Time) {
        let Self { path: Some(path), state, .. } = self else { return };
        if path.unroute(now)
            && let Some(session) = state.session_mut()
        {
            session.transfer.on_path_change(now);
        }
    }

    /// When a routing left unanswered ends: two resend timeouts after it began (one lost
    /// challenge is resent within that).
    fn route_deadline(&self) -> Option<Time> {
        let since = self.path.as_ref()?.routed()?.routed?;
        Some(since + 2 * self.state.session()?.transfer.rto())
    }

    /// The address being validated, if any.
    pub(crate) fn probe_addr(&self) -> Option<SocketAddr> {
        self.probe().map(|p| p.addr)
    }

    fn probe(&self) -> Option<&Probe> {
        self.path.as_ref().and_then(|p| p.probe.as_ref())
    }

    /// This side's nonce: the id a moved names the connection by.
    pub(crate) fn local_nonce(&self) -> u32 {
        self.keys.local_nonce()
    }

    /// A moved (opened by [`Peer::open_elsewhere`]) from `from`, with a cookie the host
    /// issued to `from` at `issued`: the echo proves `from` receives, so the connection
    /// moves there at once, unless it moved since the cookie was issued (a moved that
    /// arrives late, from an address the remote has left since).
    pub(crate) fn moved(&mut self, now: Time, from: SocketAddr, issued: Time, out: &mut Outputs) {
        if !matches!(self.state, State::Connected { .. } | State::Disconnecting { .. }) {
            return;
        }
        let path = self.path.get_or_insert_with(Box::default);
        if path.moved_at.is_some_and(|m| issued <= m) {
            return;
        }
        if let State::Connected { last_recv, .. } | State::Disconnecting { last_recv, .. } = &mut self.state {
            *last_recv = now;
        }
        self.move_to(now, from, out);
    }

    /// Moves the connection to `to` (validated) and tells the application. What is in
    /// flight went to the old address and is resent to the new one at once.
    fn move_to(&mut self, now: Time, to: SocketAddr, out: &mut Outputs) {
        let path = self.path.get_or_insert_with(Box::default);
        let routed_here = path.routed().is_some_and(|p| p.addr == to);
        path.probe = None;
        path.moved_at = Some(now);
        let old = std::mem::replace(&mut self.remote, to);
        if old != to {
            if !routed_here && let Some(session) = self.state.session_mut() {
                session.transfer.on_path_change(now);
            }
            out.event(Event::AddressChanged { peer: self.id, old, new: to });
        }
    }

    /// An unknown path from the remote's address: the remote knows no connection of this
    /// side's address, which changed. Answers a moved naming the connection by the
    /// remote's nonce and echoing `cookie`, at most once a round trip (a forged unknown
    /// path can make this side send no more than that).
    pub(crate) fn on_unknown_path(&mut self, now: Time, cookie: PathCookie, out: &mut Outputs) {
        let pace = self.state.session().map_or(self.settings.config.connect_retry, |s| s.transfer.rtt());
        let (State::Connected { conn, .. } | State::Disconnecting { conn, .. }) = &mut self.state else { return };
        let path = self.path.get_or_insert_with(Box::default);
        if path.moved_sent.is_some_and(|t| now.saturating_duration_since(t) < pace) {
            return;
        }
        path.moved_sent = Some(now);
        let id = conn.remote_nonce;
        send_connection(out, self.remote, &Control::Moved { id, cookie }, Some(conn));
    }

    /// Echoes a path challenge to where it came from: as large as the challenge, so never
    /// more than that address sent.
    fn answer_challenge(&mut self, to: SocketAddr, data: u64, out: &mut Outputs) {
        let before = out.transmits.len();
        send_connection(out, to, &Control::PathResponse { data }, self.state.connection_mut());
        if let Some(p) = self.path.as_mut().and_then(|p| p.probe.as_mut()).filter(|p| p.addr == to) {
            p.sent += out.transmits.iter().skip(before).map(|t| t.payload.len() as u64).sum::<u64>();
        }
    }

    /// A path response from `from`: the echo of the probe's challenge from the probed
    /// address moves the connection there.
    fn on_path_response(&mut self, now: Time, from: SocketAddr, data: u64, out: &mut Outputs) {
        if !self.probe().is_some_and(|p| p.addr == from && p.challenge == data) {
            return;
        }
        self.move_to(now, from, out);
    }

    /// Bytes of a path challenge (or its echo) on the wire.
    fn challenge_size(&self) -> usize {
        let extra = if self.keys.secure().is_some() { wire::secure::TAG_LEN } else { 0 };
        wire::PATH_DATAGRAM + extra
    }

    /// Sends the probe's challenge, if one may go now.
    fn challenge(&mut self, now: Time, out: &mut Outputs) {
        let size = self.challenge_size();
        let resend = self.state.session().map_or(self.settings.config.connect_retry, |s| s.transfer.rto());
        let Self { path: Some(path), state, .. } = self else { return };
        let Some(p) = path.probe.as_mut() else { return };
        if !p.may_challenge(now, size, resend) {
            return;
        }
        let before = out.transmits.len();
        send_connection(out, p.addr, &Control::PathChallenge { data: p.challenge }, state.connection_mut());
        let sent: usize = out.transmits.iter().skip(before).map(|t| t.payload.len()).sum();
        debug_assert_eq!(sent, size, "a challenge's size is known before it is sent");
        p.challenged(now, sent);
    }

    /// A request (with its connect data; none in a `RequestAck`) from this peer's address.
    /// `reply_key`: in secure mode, the key replies to it are sealed with.
    fn on_request(
        &mut self,
        now: Time,
        req: ConnectRequest,
        data: &[u8],
        reply_key: Option<SecretKey>,
        via: Via,
        out: &mut Outputs,
    ) {
        let State::Connecting(h) = &mut self.state else {
            if let State::Connected { conn, .. } = &self.state {
                // The acknowledgement was lost (Figure 2 (a)), or the remote restarted
                // while this side still holds the old connection: acknowledge the id it
                // holds, which tells a restarted remote its attempt is stale.
                let held = conn.remote_nonce;
                let reply = if held == req.nonce { Control::Ack } else { Control::AckOther { acked: held } };
                self.reply(&reply, req.nonce, reply_key, out);
            }
            return;
        };
        // Awaiting the application: its retries get no answer and make no event.
        if h.is_awaiting() {
            return;
        }
        // Another attempt than the one this side answered: only one proven to come from
        // the remote changes the attempt, and an incoming handshake's never does here
        // (the host replaces the peer for a requester that proves its address).
        let other = h.remote().is_some_and(|r| r.req.nonce != req.nonce);
        if other && (h.is_incoming() || via == Via::Request) {
            return;
        }
        let extra = if self.keys.secure().is_some() { wire::secure::SEAL_EXTRA } else { 0 };
        // This side's datagram size is what its request announced (the path's, if smaller).
        let mtu = h.local.mtu as usize;
        let params = match negotiate(&self.settings.config, mtu, &req, extra) {
            Ok(p) => p,
            Err(m) => {
                self.reply(&Control::Refuse(refusal(m)), req.nonce, reply_key, out);
                self.end(now, End::Disconnected, DisconnectReason::Incompatible(m), out);
                return;
            }
        };
        let State::Connecting(h) = &mut self.state else { return };
        let mut acked = via == Via::RequestAck;
        match &mut h.side {
            Side::Outgoing { remote, .. } if other || matches!(remote, Awaited::Unknown { .. }) => {
                // A first request, or the remote restarted its attempt (proven).
                acked |= matches!(remote, Awaited::Unknown { acked: true });
                let conn = self.keys.connect(req.nonce);
                let data = if self.keys.secure().is_some() { Bytes::new() } else { Bytes::copy_from_slice(data) };
                *remote = Awaited::Known(Remote { req, params, data, conn });
            }
            _ => {
                if let Some(r) = h.remote_mut()
                    && r.data.is_empty()
                    && !data.is_empty()
                {
                    // Its request after its reply (both sides connecting at once).
                    r.data = Bytes::copy_from_slice(data);
                }
            }
        }
        if acked {
            self.reply(&Control::Ack, req.nonce, reply_key, out);
            self.connected(now, out);
        } else {
            self.send_handshake(now, out);
        }
    }

    fn on_ack(&mut self, now: Time, out: &mut Outputs) {
        let State::Connecting(h) = &mut self.state else { return };
        match &mut h.side {
            // Nothing was answered: the requester cannot have made this.
            Side::Incoming { admission: Admission::Awaiting, .. } => {}
            Side::Outgoing { remote: Awaited::Unknown { acked }, .. } => *acked = true,
            _ => self.connected(now, out),
        }
    }

    fn on_challenge(&mut self, now: Time, cookie: Cookie, out: &mut Outputs) {
        if let State::Connecting(h) = &mut self.state
            && h.remote().is_none()
        {
            h.local.cookie = Some(cookie);
            self.send_handshake(now, out);
        }
    }

    fn on_disconnect(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if self.state.connection().is_none() {
            return;
        }
        match &self.state {
            // Awaiting, nothing was answered: the requester cannot have made this.
            State::Connecting(h) if h.is_awaiting() => {}
            State::Connecting(_) | State::Connected { .. } | State::Disconnecting { .. } => {
                self.send_connection(&Control::DisconnectAck, out);
                self.end(now, End::Disconnected, DisconnectReason::Remote { code }, out);
            }
            State::Disconnected { .. } => self.send_connection(&Control::DisconnectAck, out),
            State::Zombie { .. } => {}
        }
    }

    /// Verifies and processes a connection datagram (`datagram`: as received in plain
    /// mode, the verified plaintext in secure mode).
    fn receive(&mut self, now: Time, datagram: &Bytes, key: Key, out: &mut Outputs) -> Result<(), wire::DecodeError> {
        if let State::Connecting(h) = &self.state {
            // Connecting: verify against the windows as they start, before making anything.
            let Some(remote) = h.remote().filter(|_| !h.is_awaiting()) else { return Ok(()) };
            let initial = initial_windows(&h.local, &remote.req);
            if let Err(e) = wire::Data::decode(datagram, key, &initial) {
                self.malformed += 1;
                return Err(e);
            }
            // Only a holder of this side's nonce can make it: an acknowledgement.
            self.connected(now, out);
        }
        let Self { state, malformed, id, .. } = self;
        let (State::Connected { session, last_recv, .. }
        | State::Disconnecting { closing: Closing::Flushing { session, .. }, last_recv, .. }
        | State::Disconnecting { closing: Closing::Requesting { session: Some(session), .. }, last_recv, .. }) = state
        else {
            return Ok(());
        };
        session.stamp(now);
        let mut msgs = FrameMessages::new();
        let data = match session.decode(datagram, key, &mut msgs) {
            Ok(d) => d,
            Err(e) => {
                *malformed += 1;
                return Err(e);
            }
        };
        *last_recv = now;
        let (id, events) = (*id, &mut out.events);
        session.process(now, &data, &msgs, datagram, |channel, mode, data| {
            events.push_back(Event::Received { peer: id, channel, mode, data });
        });
        if session.transfer.misbehaving() {
            self.send_connection(&Control::Disconnect { code: 0 }, out);
            self.end(now, End::Disconnected, DisconnectReason::Misbehaving, out);
        }
        Ok(())
    }

    // ---- application calls ---------------------------------------------------------

    /// Queues a packet; `now` is the host's latest time (see `Channels::send`).
    pub(crate) fn send(&mut self, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        match &mut self.state {
            State::Connected { session, .. } => session.send(channel, data, mode),
            _ => Err(SendError::NotConnected),
        }
    }

    /// Answers a request awaiting the application's decision: the handshake goes on as
    /// if the request had just arrived. Returns whether it was awaiting.
    pub(crate) fn accept(&mut self, now: Time, out: &mut Outputs) -> bool {
        let State::Connecting(h) = &mut self.state else { return false };
        let Side::Incoming { admission: admission @ Admission::Awaiting, .. } = &mut h.side else { return false };
        *admission = Admission::Answering { reported: true };
        self.send_handshake(now, out);
        true
    }

    /// Refuses a request awaiting the application's decision with the application's
    /// `code`, and ends the peer at once (the host deletes it at its next step): it costs
    /// no more than a refusal. Returns whether it was awaiting.
    pub(crate) fn reject(&mut self, now: Time, code: u32, out: &mut Outputs) -> bool {
        let State::Connecting(h) = &self.state else { return false };
        let Side::Incoming { remote, admission: Admission::Awaiting } = &h.side else { return false };
        let nonce = remote.req.nonce;
        self.reply(&Control::Refuse(RefuseReason::Rejected(code)), nonce, None, out);
        self.end(now, End::Zombie, DisconnectReason::Local, out);
        true
    }

    /// Starts a graceful disconnection, telling the remote `code`: pending packets are sent
    /// first. A request awaiting the application's decision is rejected with `code`.
    pub(crate) fn disconnect(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if self.reject(now, code, out) {
            return;
        }
        match &self.state {
            &State::Connected { last_recv, .. } => {
                let (conn, session) = self.state.take();
                let (Some(conn), Some(session)) = (conn, session) else { return };
                let deadline = now + self.settings.config.timeout;
                let closing = Closing::Flushing { deadline, session };
                self.state = State::Disconnecting { closing, conn, last_recv, code };
            }
            State::Connecting(h) if h.remote().is_some() => {
                // The idle timeout counts from here: a handshake keeps no time of the last
                // datagram heard, and the disconnection's own timeout ends this sooner.
                let (Some(conn), _) = self.state.take() else { return };
                let retry = Nanos::of(self.settings.config.connect_retry);
                let closing = Closing::Requesting { started: now, next_send: now, retry, session: None };
                self.state = State::Disconnecting { closing, conn, last_recv: now, code };
            }
            State::Connecting(_) => self.end(now, End::Disconnected, DisconnectReason::Local, out),
            _ => {}
        }
    }

    /// Disconnects at once, telling the remote `code`: pending packets are dropped, one
    /// disconnection request is sent, and the application hears of it now. A request
    /// awaiting the application's decision is rejected with `code`.
    pub(crate) fn disconnect_now(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if matches!(self.state, State::Disconnected { .. } | State::Zombie { .. }) || self.reject(now, code, out) {
            return;
        }
        self.send_connection(&Control::Disconnect { code }, out);
        self.end(now, End::Disconnected, DisconnectReason::Local, out);
    }

    /// The transport under the connection is gone (`Host::close_path`): the connection
    /// ends at once, sending nothing, and the peer is deleted at the next poll.
    pub(crate) fn transport_closed(&mut self, now: Time, out: &mut Outputs) {
        if !matches!(self.state, State::Zombie { .. }) {
            self.end(now, End::Zombie, DisconnectReason::TransportClosed, out);
        }
    }

    // ---- timers and output ---------------------------------------------------------

    /// Runs the timers due at `now` and sends what is due.
    pub(crate) fn poll(&mut self, now: Time, step: Duration, out: &mut Outputs) {
        if let Some(s) = self.state.session_mut() {
            s.stamp(now);
            s.transfer.set_step_interval(step);
        }
        match &self.state {
            State::Connecting(h) => {
                if now.saturating_duration_since(h.since) >= self.settings.config.connect_timeout {
                    self.end(now, End::Zombie, DisconnectReason::Timeout, out);
                } else if matches!(h.side, Side::Outgoing { next_send, .. } if next_send <= now) {
                    self.send_handshake(now, out);
                }
            }
            State::Connected { last_recv, .. } => {
                if self.heard_nothing(now, *last_recv) {
                    self.end(now, End::Zombie, DisconnectReason::Timeout, out);
                } else {
                    self.flush(now, out);
                }
            }
            State::Disconnecting { .. } => self.poll_closing(now, out),
            State::Disconnected { since, .. } => {
                if now.saturating_duration_since(*since) >= self.settings.config.linger
                    && let State::Disconnected { last, .. } = std::mem::replace(&mut self.state, State::empty())
                {
                    self.state = State::Zombie { last: PeerStats { state: PeerState::Zombie, ..last } };
                }
            }
            State::Zombie { .. } => {}
        }
    }

    fn heard_nothing(&self, now: Time, last_recv: Time) -> bool {
        now.saturating_duration_since(last_recv) >= self.timeout.get()
    }

    /// Sends what the connection has to send: to its address, or to the probe it is
    /// routed to within what the probe's address may still get.
    fn flush(&mut self, now: Time, out: &mut Outputs) {
        if self.path.as_ref().is_some_and(|p| p.routed().is_some()) {
            return self.flush_routed(now, out);
        }
        // Not routed (the common case): to the peer's address, without a limit.
        let Self { state, remote, .. } = self;
        let (State::Connected { session, conn, .. }
        | State::Disconnecting { closing: Closing::Flushing { session, .. }, conn, .. }
        | State::Disconnecting { closing: Closing::Requesting { session: Some(session), .. }, conn, .. }) = state
        else {
            return;
        };
        let (arena, emit) = out.datagrams(*remote);
        session.flush(now, arena, conn.sealing(), emit);
    }

    /// [`Peer::flush`] while routed to a probe: the routing ends at its deadline, else the
    /// datagrams go to the probe within its allowance.
    #[cold]
    #[inline(never)]
    fn flush_routed(&mut self, now: Time, out: &mut Outputs) {
        if self.route_deadline().is_some_and(|t| now >= t) {
            self.unroute(now);
        }
        let challenge = self.challenge_size();
        let Self { state, path, remote, .. } = self;
        let (State::Connected { session, conn, .. }
        | State::Disconnecting { closing: Closing::Flushing { session, .. }, conn, .. }
        | State::Disconnecting { closing: Closing::Requesting { session: Some(session), .. }, conn, .. }) = state
        else {
            return;
        };
        let routed = path.as_mut().and_then(|p| p.probe.as_mut()).filter(|p| p.routed.is_some());
        let (to, limit) = routed.as_ref().map_or((*remote, u64::MAX), |p| (p.addr, p.allowance(challenge)));
        let (arena, emit) = out.datagrams(to);
        let sent = session.flush_within(now, arena, conn.sealing(), limit, emit);
        if let Some(p) = routed {
            p.sent += sent;
        }
    }

    /// How a graceful disconnection ends: `Local` when everything sent was acknowledged,
    /// `FlushTimeout` when some of it may never have arrived.
    fn graceful_end(&self) -> DisconnectReason {
        if self.state.session().is_none_or(Session::is_drained) {
            DisconnectReason::Local
        } else {
            DisconnectReason::FlushTimeout
        }
    }

    fn poll_closing(&mut self, now: Time, out: &mut Outputs) {
        let State::Disconnecting { last_recv, .. } = self.state else { return };
        if self.heard_nothing(now, last_recv) {
            let reason = self.graceful_end();
            self.end(now, End::Zombie, reason, out);
            return;
        }
        if let State::Disconnecting { closing: Closing::Flushing { deadline, .. }, .. } = self.state {
            self.flush(now, out);
            let drained = self.state.session().is_none_or(Session::is_drained);
            if !(drained || now >= deadline) {
                return;
            }
            let retry = Nanos::of(self.settings.config.connect_retry);
            if let State::Disconnecting { closing, .. } = &mut self.state {
                let requesting = Closing::Requesting { started: now, next_send: now, retry, session: None };
                if let (Closing::Flushing { session, .. }, Closing::Requesting { session: s, .. }) =
                    (std::mem::replace(closing, requesting), closing)
                {
                    *s = Some(session);
                }
            }
        }
        let State::Disconnecting { closing: Closing::Requesting { started, .. }, .. } = self.state else { return };
        if now.saturating_duration_since(started) >= self.settings.config.disconnect_timeout {
            let reason = self.graceful_end();
            self.end(now, End::Disconnected, reason, out);
            return;
        }
        // Keep acknowledging what still arrives while waiting.
        self.flush(now, out);
        let Self { state, remote, .. } = self;
        if let State::Disconnecting { closing: Closing::Requesting { next_send, retry, .. }, conn, code, .. } = state
            && *next_send <= now
        {
            send_connection(out, *remote, &Control::Disconnect { code: *code }, Some(conn));
            *next_send = now + retry.get();
            *retry = Nanos::of((retry.get() * 2).min(MAX_RETRY));
        }
    }

    /// When [`Peer::poll`] must run next: the earliest row of the peer's timer table,
    /// refreshed from its state.
    pub(crate) fn next_timeout(&mut self, now: Time) -> Option<Time> {
        let cfg = &self.settings.config;
        let mut timers = Timers::default();
        let t = &mut timers;
        let session = match &self.state {
            State::Connecting(h) => {
                if let Side::Outgoing { next_send, .. } = h.side {
                    t.set(Timer::Retry, Some(next_send));
                }
                t.set(Timer::ConnectTimeout, Some(h.since + cfg.connect_timeout));
                None
            }
            State::Connected { session, last_recv, .. } => {
                t.set(Timer::Idle, Some(*last_recv + self.timeout.get()));
                Some(session)
            }
            State::Disconnecting { closing, last_recv, .. } => {
                t.set(Timer::Idle, Some(*last_recv + self.timeout.get()));
                match closing {
                    Closing::Flushing { deadline, session } => {
                        t.set(Timer::Close, Some(*deadline));
                        Some(session)
                    }
                    Closing::Requesting { started, next_send, session, .. } => {
                        t.set(Timer::Retry, Some(*next_send));
                        t.set(Timer::Close, Some(*started + cfg.disconnect_timeout));
                        session.as_ref()
                    }
                }
            }
            State::Disconnected { since, .. } => {
                t.set(Timer::Close, Some(*since + cfg.linger));
                None
            }
            State::Zombie { .. } => {
                t.set(Timer::Delete, Some(now));
                None
            }
        };
        // No "send now" row: this runs right after a flush that sent all it could; new
        // chances come as input (which marks the peer) or as these timers.
        let route_deadline = self.route_deadline();
        if let Some(s) = session {
            let s = &s.transfer;
            let mut rows = [
                (Timer::Loss, s.loss_deadline()),
                (Timer::Ping, s.ping_deadline()),
                (Timer::Pacing, s.pacing_deadline()),
                (Timer::Probe, s.probe_deadline()),
                (Timer::Ack, s.ack_deadline()),
                (Timer::Mtu, s.mtu_deadline()),
            ];
            if route_deadline.is_some() {
                // Routed to an address not yet validated, what is due and did not go waits
                // for bytes from there (input) or the routing's end, not for a timer.
                for (_, at) in &mut rows {
                    *at = at.filter(|&at| at > now);
                }
            }
            for (timer, at) in rows {
                t.set(timer, at);
            }
        }
        t.set(Timer::Path, route_deadline);
        t.next()
    }

    /// The connection's data path, once it is made (fuzzing reaches past the check
    /// through it; see `fuzzing::hooks`).
    #[cfg(feature = "arbitrary")]
    pub(crate) fn session(&self) -> Option<&Session> {
        self.state.session()
    }

    /// Bytes this peer holds.
    pub(crate) fn memory(&self) -> usize {
        size_of::<Self>()
            + self.keys.memory()
            + self.path.as_ref().map_or(0, |_| size_of::<Path>())
            + match &self.state {
                State::Connecting(h) => h.memory(),
                State::Connected { session, conn, .. } => session.heap() + conn.memory(),
                State::Disconnecting { conn, .. } => self.state.session().map_or(0, Session::heap) + conn.memory(),
                State::Disconnected { conn, .. } => conn.as_ref().map_or(0, Connection::memory),
                State::Zombie { .. } => 0,
            }
    }

    pub(crate) fn stats(&self) -> PeerStats {
        match &self.state {
            State::Disconnected { last, .. } | State::Zombie { last } => {
                PeerStats { malformed: self.malformed, ..*last }
            }
            _ => stats_of(self.state(), self.remote, self.state.session(), self.malformed),
        }
    }
}
