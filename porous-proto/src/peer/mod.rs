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
//! The session (transfer layer, channels, buffers) is made when the connection is, inline
//! in the peer, so that a connected peer's fixed state is one record in the host's slot:
//! a pending peer has its room (about 1.5 KB) without its buffers, and `max_pending` bounds
//! how many there are. The handshake state proper (both requests, the negotiated
//! parameters, connect data; about 320 bytes), boxed, is dropped then: a connected peer
//! answers a late request from the nonces and keys it keeps, and never sends one again.
//!
//! Under manual admission an incoming request first awaits the application's decision: it
//! is reported once (`Event::ConnectRequest`), left unanswered, and its retries, or
//! requests with another nonce from the same address, change nothing. Accepted, it answers
//! as any incoming handshake would; rejected, it sends one refusal and ends at once.
//!
//! A peer's parts, one file each: `negotiate` (the parameters of a connection),
//! `session` (the data path: transfer layer, channels, keys), `settings` (what it keeps of
//! the configuration), `output` (where its datagrams and events go), `timers` (its timer
//! table).

mod negotiate;
mod output;
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
use crate::wire::{self, ConnectRequest, Control, Cookie, Key, KeyClass, PlainKey, RefuseReason};
pub(crate) use negotiate::{Params, negotiate, refusal, request, unordered};
pub(crate) use output::Outputs;
pub(crate) use secure::SecureState;
pub(crate) use session::Session;
use session::{FrameMessages, initial_windows};
pub(crate) use settings::Settings;
use timers::{Timer, Timers};

/// The longest interval between handshake or disconnection retries.
const MAX_RETRY: Duration = Duration::from_secs(1);

/// Who started the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// This side called `connect`: the application holds the id from the start.
    Local,
    /// A request arrived: the application learns the id with `Connected`.
    Remote,
}

/// What disconnecting is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closing {
    /// Sending what is pending first, until this deadline.
    Flushing(Time),
    /// Sending disconnection requests since this time.
    Requesting(Time),
}

/// A peer's handshake state: what it sends and what it learned until it is connected.
#[derive(Debug)]
struct Handshake {
    local: ConnectRequest,
    remote_req: Option<ConnectRequest>,
    /// What the connection runs with, once the remote request is known.
    params: Option<Params>,
    /// The first handshake datagram sent and how many were sent: a reply to a lone one is
    /// a clean round-trip sample (Karn: never one to a retried one).
    sent: Option<(Time, u32)>,
    /// Secret seed of the frame ids the session skips (see `Transfer`).
    skip_seed: u64,
    /// This side's connect data, sent with every request (never with a reply).
    local_data: Bytes,
    /// The remote's connect data, from its request, until `Connected` hands it over.
    remote_data: Bytes,
}

#[derive(Debug)]
pub(crate) struct Peer {
    /// The id events about this peer carry.
    id: PeerId,
    remote: SocketAddr,
    settings: Arc<Settings>,
    state: PeerState,
    origin: Origin,
    /// `Connected` was announced to the application.
    announced: bool,
    closing: Option<Closing>,
    /// This side's nonce (the key of the replies it receives).
    local_nonce: u32,
    /// The remote's nonce, once its request is known.
    remote_nonce: Option<u32>,
    /// The connection keys (sending, receiving), once the remote request is known: derived
    /// once, not per datagram.
    keys: Option<(PlainKey, PlainKey)>,
    acked: bool,
    /// What only the handshake uses, boxed and dropped once connected: an active
    /// connection does not carry the room of its requests and connect data.
    handshake: Option<Box<Handshake>>,
    /// Inline, not boxed: a datagram or a step reaches the session through the peer's
    /// slot, and the box's address was one a server going through its peers could not
    /// fetch ahead (about 0.92x of a 10,000-peer tick without it: `docs/notes/server-scale.md`,
    /// Part 8). The price is that a pending handshake's slot has the session's room too.
    session: Option<Session>,
    /// When the current state began.
    since: Time,
    last_recv: Time,
    next_send: Option<Time>,
    /// The wait before the next handshake retry (8 bytes: `lean::Nanos`).
    retry: Nanos,
    malformed: u64,
    /// An incoming request awaiting the application's decision (manual admission): it is
    /// left unanswered, and its retries make no further event.
    awaiting: bool,
    /// The application learned this peer's id from `Event::ConnectRequest` (so it must
    /// hear of its end).
    requested: bool,
    /// The code the application gave with its disconnection, sent to the remote.
    close_code: u32,
    /// Nothing heard for this long ends the connection: the configuration's, or in secure
    /// mode the token's (8 bytes: `lean::Nanos`).
    timeout: Nanos,
    /// Secure mode's keys and counters; boxed, so a plain peer carries only the pointer.
    secure: Option<Box<SecureState>>,
}

impl Peer {
    fn new(
        now: Time,
        (id, remote): (PeerId, SocketAddr),
        settings: Arc<Settings>,
        local: ConnectRequest,
        origin: Origin,
        seed: u64,
    ) -> Self {
        let retry = Nanos::of(settings.config.connect_retry);
        let timeout = Nanos::of(settings.config.timeout);
        Self {
            id,
            remote,
            settings,
            state: PeerState::Connecting,
            origin,
            announced: false,
            closing: None,
            local_nonce: local.nonce,
            remote_nonce: None,
            keys: None,
            acked: false,
            handshake: Some(Box::new(Handshake {
                local,
                remote_req: None,
                params: None,
                sent: None,
                skip_seed: seed,
                local_data: Bytes::new(),
                remote_data: Bytes::new(),
            })),
            session: None,
            since: now,
            last_recv: now,
            // The side that connects sends its first request at the next step; an incoming
            // handshake only ever answers.
            next_send: (origin == Origin::Local).then_some(now),
            retry,
            malformed: 0,
            awaiting: false,
            requested: false,
            close_code: 0,
            timeout,
            secure: None,
        }
    }

    /// Secure mode: this peer seals with `secure`, and times out as its token says (never
    /// within two keepalive intervals, so an idle connection lives).
    fn set_secure(&mut self, secure: Option<SecureState>) {
        if let Some(s) = &secure {
            self.timeout = Nanos::of(s.timeout.max(self.settings.config.ping_interval * 2));
        }
        self.secure = secure.map(Box::new);
    }

    /// A peer for `connect`, known as `id` at `remote`: it starts sending requests, with
    /// connect data `data`, at the next step. `seed` is secret randomness for the session
    /// (the frame ids it skips).
    pub(crate) fn outgoing(
        now: Time,
        at: (PeerId, SocketAddr),
        settings: Arc<Settings>,
        (local, data): (ConnectRequest, Bytes),
        seed: u64,
        secure: Option<SecureState>,
    ) -> Self {
        let mut p = Self::new(now, at, settings, local, Origin::Local, seed);
        if let Some(h) = p.handshake.as_deref_mut() {
            h.local_data = data;
        }
        p.set_secure(secure);
        p
    }

    /// A peer for a compatible request that arrived. `accepted` is the remote request, the
    /// parameters negotiated from it and its connect data. It answers at once, or, when
    /// the application decides (`manual`), reports the request and waits for
    /// [`Peer::accept`] or [`Peer::reject`]. In secure mode `secure` holds the verified
    /// token's keys and the connect data is its user data.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn incoming(
        now: Time,
        at: (PeerId, SocketAddr),
        settings: Arc<Settings>,
        (local, seed): (ConnectRequest, u64),
        accepted: (ConnectRequest, Params, Bytes),
        manual: bool,
        secure: Option<SecureState>,
        out: &mut Outputs,
    ) -> Self {
        let mut p = Self::new(now, at, settings, local, Origin::Remote, seed);
        p.set_secure(secure);
        let (req, params, data) = accepted;
        p.set_remote(req);
        if let Some(h) = p.handshake.as_deref_mut() {
            h.params = Some(params);
            h.remote_data = data.clone();
        }
        if manual {
            p.awaiting = true;
            p.requested = true;
            let client_id = p.secure.as_deref().and_then(SecureState::client_id);
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
        self.state
    }

    pub(crate) fn remote(&self) -> SocketAddr {
        self.remote
    }

    /// Whether this is an incoming connection still in its handshake: the kind of peer a
    /// flood of requests creates, capped and evicted separately by the host.
    pub(crate) fn is_pending(&self) -> bool {
        self.state == PeerState::Connecting && self.origin == Origin::Remote
    }

    /// The keys of the connection's two directions (send, receive), once both nonces are
    /// known.
    fn keys(&self) -> Option<(Key, Key)> {
        self.keys.map(|(send, recv)| (send.key(), recv.key()))
    }

    /// The remote side's request is known: so are the connection keys.
    fn set_remote(&mut self, r: ConnectRequest) {
        if let Some(h) = self.handshake.as_deref_mut() {
            h.remote_req = Some(r);
        }
        self.remote_nonce = Some(r.nonce);
        self.keys =
            Some((PlainKey::connection(self.local_nonce, r.nonce), PlainKey::connection(r.nonce, self.local_nonce)));
        if let Some(s) = &mut self.secure {
            s.connect(self.local_nonce, r.nonce);
        }
    }

    /// Whether the application knows this peer's id (so it must hear of its end).
    fn known_to_app(&self) -> bool {
        self.announced || self.requested || self.origin == Origin::Local
    }

    /// Whether this is a request awaiting the application's decision.
    pub(crate) fn is_awaiting(&self) -> bool {
        self.awaiting
    }

    fn enter(&mut self, now: Time, state: PeerState) {
        self.state = state;
        self.since = now;
        self.next_send = None;
    }

    /// Ends the connection with `reason`, telling the application if it knows the peer.
    fn end(&mut self, now: Time, state: PeerState, reason: DisconnectReason, out: &mut Outputs) {
        if self.known_to_app() {
            out.event(Event::Disconnected { peer: self.id, reason });
        }
        // The id is dead for the application from here on.
        self.announced = false;
        self.requested = false;
        self.awaiting = false;
        self.origin = Origin::Remote;
        if let Some(s) = &mut self.session {
            s.clear();
        }
        self.closing = None;
        self.enter(now, state);
    }

    fn connected(&mut self, now: Time, out: &mut Outputs) {
        // The handshake is over: its state goes (a connected peer never sends a request
        // again; late requests are answered from the nonces and keys).
        let h = self.handshake.take();
        if let (None, Some(h)) = (&self.session, h.as_deref())
            && let (Some(params), Some(req)) = (h.params, h.remote_req)
        {
            let sealed = self.secure.is_some();
            self.session = Some(Session::new(&self.settings, params, &h.local, &req, h.skip_seed, sealed));
        }
        if let (Some((first, 1)), Some(s)) = (h.as_deref().and_then(|h| h.sent), self.session.as_mut()) {
            s.transfer.rtt_sample(now.saturating_duration_since(first));
        }
        self.enter(now, PeerState::Connected);
        self.announced = true;
        self.last_recv = now;
        let data = h.map(|h| h.remote_data).unwrap_or_default();
        let client_id = self.secure.as_deref().and_then(SecureState::client_id);
        out.event(Event::Connected { peer: self.id, remote: self.remote, data, client_id });
    }

    /// Sends this side's request, acknowledging the other's when it is known.
    ///
    /// Only the side that called `connect` resends on a timer. An incoming handshake
    /// answers each request it receives once and never on its own: its address has not
    /// proven it receives, and every request it sends is answered by one reply no larger,
    /// so nobody can make this host send a spoofed address more than it sent (a lost
    /// reply is covered by the requester's own retry).
    fn send_handshake(&mut self, now: Time, out: &mut Outputs) {
        // Only ever called while connecting, which keeps the handshake state.
        let Some((local, remote_req)) = self.handshake.as_deref().map(|h| (h.local, h.remote_req)) else { return };
        match (remote_req, &mut self.secure) {
            (Some(r), _) => self.reply(&Control::RequestAck(local), r.nonce, None, out),
            (None, Some(s)) => s.send_request(out, self.remote, &local),
            (None, None) => {
                let data = self.handshake.as_deref().map_or(&[][..], |h| &h.local_data[..]);
                let request = Control::Request { request: local, data };
                out.control(self.remote, &request, Key::version());
            }
        }
        if self.origin == Origin::Local {
            self.next_send = Some(now + self.retry.get());
            self.retry = Nanos::of((self.retry.get() * 2).min(MAX_RETRY));
        }
        // Every handshake datagram counts, timer-driven or a reply: a round-trip sample
        // is taken only when exactly one went out (Karn's rule).
        if let Some(h) = self.handshake.as_deref_mut() {
            h.sent = Some(match h.sent {
                Some((first, n)) => (first, n + 1),
                None => (now, 1),
            });
        }
    }

    /// Sends `c` in answer to the request of nonce `to`. Plain: keyed with that nonce.
    /// Secure: a server seals it with `key` (the reply key of a request with another
    /// token) or this attempt's reply key; a client's only answer is its `Ack`, a datagram
    /// of the connection.
    fn reply(&mut self, c: &Control<'_>, to: u32, key: Option<SecretKey>, out: &mut Outputs) {
        match &mut self.secure {
            None => out.control(self.remote, c, Key::reply(to)),
            Some(s) if s.is_client() => {
                if matches!(c, Control::Ack) {
                    s.send_control(out, self.remote, c);
                }
            }
            Some(s) => {
                let key = key.unwrap_or_else(|| s.reply_key(to));
                s.send_reply(out, self.remote, c, &key);
            }
        }
    }

    /// Sends a control datagram of the connection (`Disconnect`, `DisconnectAck`), once its
    /// keys exist.
    fn send_connection(&mut self, c: &Control<'_>, out: &mut Outputs) {
        let keys = self.keys();
        match (&mut self.secure, keys) {
            (Some(s), _) => s.send_control(out, self.remote, c),
            (None, Some((key, _))) => out.control(self.remote, c, key),
            (None, None) => {}
        }
    }

    // ---- input ---------------------------------------------------------------------

    /// A control datagram (type `ty`, already peeked) from this peer's address.
    pub(crate) fn handle_control(
        &mut self,
        now: Time,
        ty: u8,
        datagram: &[u8],
        out: &mut Outputs,
    ) -> Result<(), wire::DecodeError> {
        let key = match (wire::key_class(ty), self.keys()) {
            // Requests go through the host (`Peer::handle_request`).
            (KeyClass::Version, _) => return Err(wire::DecodeError::UnknownType(ty)),
            (KeyClass::Reply, _) => Key::reply(self.local_nonce),
            (KeyClass::Connection, Some((_, recv))) => recv,
            // No connection key yet: nothing can verify it.
            (KeyClass::Connection, None) => Key::version(),
        };
        let control = Control::decode(datagram, key).inspect_err(|_| self.malformed += 1)?;
        // Only the remote side can make replies and connection datagrams.
        self.last_recv = now;
        self.on_control(now, control, out);
        Ok(())
    }

    /// Secure mode: a sealed control datagram (type `ty`) from this peer's address. A
    /// client opens replies with its attempt's reply key; either side opens the
    /// connection's own control datagrams with the connection key, through the replay
    /// window. Requests are opened by the host (`Peer::handle_request`).
    pub(crate) fn handle_sealed_control(
        &mut self,
        now: Time,
        ty: u8,
        datagram: &[u8],
        out: &mut Outputs,
    ) -> Result<(), wire::DecodeError> {
        let Some(s) = self.secure.as_deref_mut() else { return Err(wire::DecodeError::UnknownType(ty)) };
        let control = match (ty, s.is_client()) {
            (0x81..=0x85, true) => s.open_reply(datagram, self.local_nonce),
            (0x82 | 0x86 | 0x87, _) => s.open_control(datagram),
            _ => Err(wire::DecodeError::UnknownType(ty)),
        };
        let control = control.inspect_err(|e| {
            if *e != wire::DecodeError::Replayed {
                self.malformed += 1;
            }
        })?;
        self.last_recv = now;
        self.on_control(now, control, out);
        Ok(())
    }

    /// Whether `req` (under `token`, in secure mode) is the attempt this peer's handshake
    /// answered or its connection was made with: the same nonce, and the same token.
    fn is_attempt(&self, req: &ConnectRequest, token: Option<&VerifiedToken>) -> bool {
        let token_matches = match (self.secure.as_deref(), token) {
            (None, None) => true,
            (Some(s), Some(t)) => s.is_token(t),
            _ => false,
        };
        token_matches && self.remote_nonce == Some(req.nonce)
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

    /// A connection request from this peer's address (verified by the host: its check in
    /// plain mode, its token and seal in secure mode, `token`). Another attempt than this
    /// peer's changes nothing: a connected peer tells it its attempt is stale; one still
    /// connecting answers only its own (an incoming handshake's other attempts go to the
    /// host first: [`Peer::is_held_against`]). The reply is sealed for the request it
    /// answers.
    pub(crate) fn handle_request(
        &mut self,
        now: Time,
        req: ConnectRequest,
        data: &[u8],
        token: Option<&VerifiedToken>,
        out: &mut Outputs,
    ) {
        if self.secure.as_deref().is_some_and(SecureState::is_client) {
            // A client takes no requests (it cannot open them).
            return;
        }
        let reply_key = token.map(|t| t.keys().1.derive(wire::secure::Use::Reply, req.nonce, 0));
        if self.secure.is_some() && !self.is_attempt(&req, token) {
            // Another token: nothing of this connection is its business. A connected peer
            // says its own attempt holds (sealed for the requester, which may be this
            // client restarted with a new token).
            if let (PeerState::Connected, Some(held)) = (self.state, self.remote_nonce) {
                self.reply(&Control::AckOther { acked: held }, req.nonce, reply_key, out);
            }
            return;
        }
        self.on_request(now, req, data, reply_key, false, out);
    }

    /// An incoming handshake replaced by another attempt from its address, one that
    /// proved it receives there: it ends, and an application that was asked about it
    /// hears so ([`DisconnectReason::Stale`]).
    pub(crate) fn supersede(&mut self, now: Time, out: &mut Outputs) {
        self.end(now, PeerState::Zombie, DisconnectReason::Stale, out);
    }

    /// Acts on a verified control datagram.
    fn on_control(&mut self, now: Time, control: Control<'_>, out: &mut Outputs) {
        match control {
            // Requests reach the peer through the host (`Peer::handle_request`).
            Control::Request { .. } => {}
            Control::RequestAck(req) => {
                if self.state == PeerState::Connecting && !self.awaiting {
                    // Noted first, so the reply is a plain acknowledgement.
                    self.acked = true;
                }
                // Keyed to this side's nonce: only the holder of it can have made it.
                self.on_request(now, req, &[], None, true, out);
            }
            Control::Ack => self.on_ack(now, out),
            Control::AckOther { .. } => {
                if self.state == PeerState::Connecting {
                    self.end(now, PeerState::Disconnected, DisconnectReason::Stale, out);
                }
            }
            Control::Refuse(reason) => {
                if self.state == PeerState::Connecting {
                    self.end(now, PeerState::Disconnected, negotiate::refused(&self.settings.config, reason), out);
                }
            }
            Control::Challenge(cookie) => self.on_challenge(now, cookie, out),
            Control::Disconnect { code } => self.on_disconnect(now, code, out),
            Control::DisconnectAck => {
                if self.state == PeerState::Disconnecting {
                    let reason = self.graceful_end();
                    self.end(now, PeerState::Disconnected, reason, out);
                }
            }
        }
    }

    /// A request (with its connect data; none in a `RequestAck`) from this peer's address.
    /// `reply_key`: in secure mode, the key replies to it are sealed with. `proven`: it came
    /// in a reply keyed to this side's nonce, so its sender received this side's request.
    fn on_request(
        &mut self,
        now: Time,
        req: ConnectRequest,
        data: &[u8],
        reply_key: Option<SecretKey>,
        proven: bool,
        out: &mut Outputs,
    ) {
        let other = self.remote_nonce.is_some_and(|n| n != req.nonce);
        match self.state {
            // Awaiting the application: its retries get no answer and make no event.
            PeerState::Connecting if self.awaiting => {}
            // Another attempt than the one this side answered: only one proven to come from
            // the remote changes the attempt, and an incoming handshake's never does here
            // (the host replaces the peer for a requester that proves its address).
            PeerState::Connecting if other && (self.origin == Origin::Remote || !proven) => {}
            PeerState::Connecting => {
                let extra = if self.secure.is_some() { wire::secure::SEAL_EXTRA } else { 0 };
                let mtu = self.handshake.as_deref().map_or(self.settings.config.mtu, |h| h.local.mtu as usize);
                let params = match negotiate(&self.settings.config, mtu, &req, extra) {
                    Ok(p) => p,
                    Err(m) => {
                        self.reply(&Control::Refuse(refusal(m)), req.nonce, reply_key, out);
                        self.end(now, PeerState::Disconnected, DisconnectReason::Incompatible(m), out);
                        return;
                    }
                };
                if self.remote_nonce.is_none_or(|n| n != req.nonce) {
                    // A first request, or the remote restarted its attempt (proven).
                    self.set_remote(req);
                    let secure = self.secure.is_some();
                    if let Some(h) = self.handshake.as_deref_mut() {
                        h.params = Some(params);
                        if !secure {
                            h.remote_data = Bytes::copy_from_slice(data);
                        }
                    }
                } else if let Some(h) = self.handshake.as_deref_mut()
                    && h.remote_data.is_empty()
                    && !data.is_empty()
                {
                    // Its request after its reply (both sides connecting at once).
                    h.remote_data = Bytes::copy_from_slice(data);
                }
                if self.acked {
                    self.reply(&Control::Ack, req.nonce, reply_key, out);
                    self.connected(now, out);
                } else {
                    self.send_handshake(now, out);
                }
            }
            PeerState::Connected => {
                // The acknowledgement was lost (Figure 2 (a)), or the remote restarted
                // while this side still holds the old connection: acknowledge the id it
                // holds, which tells a restarted remote its attempt is stale.
                let held = self.remote_nonce.unwrap_or(req.nonce);
                let reply = if held == req.nonce { Control::Ack } else { Control::AckOther { acked: held } };
                self.reply(&reply, req.nonce, reply_key, out);
            }
            _ => {}
        }
    }

    fn on_ack(&mut self, now: Time, out: &mut Outputs) {
        if self.state == PeerState::Connecting {
            self.acked = true;
            if self.remote_nonce.is_some() {
                self.connected(now, out);
            }
        }
    }

    fn on_challenge(&mut self, now: Time, cookie: Cookie, out: &mut Outputs) {
        if self.state == PeerState::Connecting && self.remote_nonce.is_none() {
            if let Some(h) = self.handshake.as_deref_mut() {
                h.local.cookie = Some(cookie);
            }
            self.send_handshake(now, out);
        }
    }

    fn on_disconnect(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if self.keys().is_none() {
            return;
        }
        match self.state {
            // Awaiting, nothing was answered: the requester cannot have made this.
            PeerState::Connecting if self.awaiting => {}
            PeerState::Connecting | PeerState::Connected | PeerState::Disconnecting => {
                self.send_connection(&Control::DisconnectAck, out);
                self.end(now, PeerState::Disconnected, DisconnectReason::Remote { code }, out);
            }
            PeerState::Disconnected => self.send_connection(&Control::DisconnectAck, out),
            PeerState::Zombie => {}
        }
    }

    /// A connection datagram, copied into shared bytes.
    pub(crate) fn handle_data(
        &mut self,
        now: Time,
        datagram: &Bytes,
        out: &mut Outputs,
    ) -> Result<(), wire::DecodeError> {
        let Some((_, recv)) = self.keys() else { return Ok(()) };
        self.receive(now, datagram, recv, out)
    }

    /// Secure mode: a sealed connection datagram. It is checked against the replay window,
    /// verified and decrypted in one pass into `arena` (delivered packets are slices of the
    /// plaintext), its counter marked as received, and then its plaintext processed.
    pub(crate) fn handle_sealed_data(
        &mut self,
        now: Time,
        datagram: &[u8],
        arena: &mut Arena,
        out: &mut Outputs,
    ) -> Result<(), wire::DecodeError> {
        let Some(s) = self.secure.as_deref() else { return Err(wire::DecodeError::BadChecksum) };
        let active = matches!(self.state, PeerState::Connecting | PeerState::Connected | PeerState::Disconnecting);
        if !active || self.remote_nonce.is_none() {
            return Ok(());
        }
        let (key, parts, n) = s.receiving(datagram).inspect_err(|e| {
            if *e != wire::DecodeError::Replayed {
                self.malformed += 1;
            }
        })?;
        let buf = arena.room(1 + parts.ciphertext.len());
        if !parts.open_into(key, n, buf) {
            self.malformed += 1;
            return Err(wire::DecodeError::BadChecksum);
        }
        let plain = buf.split().freeze();
        // Authentic from here on: the counter is spent even if the plaintext does not decode
        // (an id the receiver expanded otherwise), so a replay of it is not decrypted again.
        if let Some(s) = self.secure.as_deref_mut() {
            s.received(n);
        }
        self.receive(now, &plain, Key::opened(), out)
    }

    /// Verifies and processes a connection datagram (`datagram`: as received in plain
    /// mode, the verified plaintext in secure mode).
    fn receive(&mut self, now: Time, datagram: &Bytes, key: Key, out: &mut Outputs) -> Result<(), wire::DecodeError> {
        let active = matches!(self.state, PeerState::Connecting | PeerState::Connected | PeerState::Disconnecting);
        if !active || self.remote_nonce.is_none() {
            return Ok(());
        }
        if self.session.is_none() {
            // Connecting: verify against the windows as they start, before making anything.
            let Some((local, Some(remote))) = self.handshake.as_deref().map(|h| (h.local, h.remote_req)) else {
                return Ok(());
            };
            let initial = initial_windows(&local, &remote);
            if let Err(e) = wire::Data::decode(datagram, key, &initial) {
                self.malformed += 1;
                return Err(e);
            }
            // Only a holder of this side's nonce can make it: an acknowledgement.
            self.acked = true;
            self.connected(now, out);
        }
        let Some(session) = self.session.as_mut() else { return Ok(()) };
        session.stamp(now);
        let mut msgs = FrameMessages::new();
        let data = match session.decode(datagram, key, &mut msgs) {
            Ok(d) => d,
            Err(e) => {
                self.malformed += 1;
                return Err(e);
            }
        };
        self.last_recv = now;
        let (id, events) = (self.id, &mut out.events);
        session.process(now, &data, &msgs, datagram, |channel, mode, data| {
            events.push_back(Event::Received { peer: id, channel, mode, data });
        });
        if session.transfer.misbehaving() {
            self.send_connection(&Control::Disconnect { code: 0 }, out);
            self.end(now, PeerState::Disconnected, DisconnectReason::Misbehaving, out);
        }
        Ok(())
    }

    // ---- application calls ---------------------------------------------------------

    /// Queues a packet; `now` is the host's latest time (see `Channels::send`).
    pub(crate) fn send(&mut self, channel: usize, data: Bytes, mode: SendMode) -> Result<(), SendError> {
        match (&mut self.session, self.state) {
            (Some(s), PeerState::Connected) => s.send(channel, data, mode),
            _ => Err(SendError::NotConnected),
        }
    }

    /// Answers a request awaiting the application's decision: the handshake goes on as
    /// if the request had just arrived. Returns whether it was awaiting.
    pub(crate) fn accept(&mut self, now: Time, out: &mut Outputs) -> bool {
        if !self.awaiting {
            return false;
        }
        self.awaiting = false;
        self.send_handshake(now, out);
        true
    }

    /// Refuses a request awaiting the application's decision with the application's
    /// `code`, and ends the peer at once (the host deletes it at its next step): it costs
    /// no more than a refusal. Returns whether it was awaiting.
    pub(crate) fn reject(&mut self, now: Time, code: u32, out: &mut Outputs) -> bool {
        let (true, Some(nonce)) = (self.awaiting, self.remote_nonce) else { return false };
        self.reply(&Control::Refuse(RefuseReason::Rejected(code)), nonce, None, out);
        self.end(now, PeerState::Zombie, DisconnectReason::Local, out);
        true
    }

    /// Starts a graceful disconnection, telling the remote `code`: pending packets are sent
    /// first. A request awaiting the application's decision is rejected with `code`.
    pub(crate) fn disconnect(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if self.reject(now, code, out) {
            return;
        }
        self.close_code = code;
        match self.state {
            PeerState::Connected => {
                self.enter(now, PeerState::Disconnecting);
                self.closing = Some(Closing::Flushing(now + self.settings.config.timeout));
            }
            PeerState::Connecting if self.remote_nonce.is_some() => {
                self.enter(now, PeerState::Disconnecting);
                self.closing = Some(Closing::Requesting(now));
                self.retry = Nanos::of(self.settings.config.connect_retry);
                self.next_send = Some(now);
            }
            PeerState::Connecting => self.end(now, PeerState::Disconnected, DisconnectReason::Local, out),
            _ => {}
        }
    }

    /// Disconnects at once, telling the remote `code`: pending packets are dropped, one
    /// disconnection request is sent, and the application hears of it now. A request
    /// awaiting the application's decision is rejected with `code`.
    pub(crate) fn disconnect_now(&mut self, now: Time, code: u32, out: &mut Outputs) {
        if matches!(self.state, PeerState::Disconnected | PeerState::Zombie) || self.reject(now, code, out) {
            return;
        }
        self.send_connection(&Control::Disconnect { code }, out);
        self.end(now, PeerState::Disconnected, DisconnectReason::Local, out);
    }

    /// The transport under the connection is gone (`Host::close_path`): the connection
    /// ends at once, sending nothing, and the peer is deleted at the next poll.
    pub(crate) fn transport_closed(&mut self, now: Time, out: &mut Outputs) {
        if self.state != PeerState::Zombie {
            self.end(now, PeerState::Zombie, DisconnectReason::TransportClosed, out);
        }
    }

    // ---- timers and output ---------------------------------------------------------

    /// Runs the timers due at `now` and sends what is due.
    pub(crate) fn poll(&mut self, now: Time, step: Duration, out: &mut Outputs) {
        if let Some(s) = &mut self.session {
            s.stamp(now);
            s.transfer.set_step_interval(step);
        }
        match self.state {
            PeerState::Connecting => {
                if now.saturating_duration_since(self.since) >= self.settings.config.connect_timeout {
                    self.end(now, PeerState::Zombie, DisconnectReason::Timeout, out);
                } else if self.next_send.is_some_and(|t| t <= now) {
                    self.send_handshake(now, out);
                }
            }
            PeerState::Connected => {
                if self.heard_nothing(now) {
                    self.end(now, PeerState::Zombie, DisconnectReason::Timeout, out);
                } else {
                    self.flush(now, out);
                }
            }
            PeerState::Disconnecting => self.poll_closing(now, out),
            PeerState::Disconnected => {
                if now.saturating_duration_since(self.since) >= self.settings.config.linger {
                    self.enter(now, PeerState::Zombie);
                }
            }
            PeerState::Zombie => {}
        }
    }

    fn heard_nothing(&self, now: Time) -> bool {
        now.saturating_duration_since(self.last_recv) >= self.timeout.get()
    }

    fn flush(&mut self, now: Time, out: &mut Outputs) {
        let Some(s) = &mut self.session else { return };
        let remote = self.remote;
        let (arena, emit) = out.datagrams(remote);
        let sealing = self.secure.as_deref_mut().and_then(SecureState::sealing);
        s.flush(now, arena, sealing, emit);
    }

    /// How a graceful disconnection ends: `Local` when everything sent was acknowledged,
    /// `FlushTimeout` when some of it may never have arrived.
    fn graceful_end(&self) -> DisconnectReason {
        if self.session.as_ref().is_none_or(Session::is_drained) {
            DisconnectReason::Local
        } else {
            DisconnectReason::FlushTimeout
        }
    }

    fn poll_closing(&mut self, now: Time, out: &mut Outputs) {
        if self.heard_nothing(now) {
            let reason = self.graceful_end();
            self.end(now, PeerState::Zombie, reason, out);
            return;
        }
        if let Some(Closing::Flushing(deadline)) = self.closing {
            self.flush(now, out);
            let drained = self.session.as_ref().is_none_or(Session::is_drained);
            if !(drained || now >= deadline) {
                return;
            }
            self.closing = Some(Closing::Requesting(now));
            self.retry = Nanos::of(self.settings.config.connect_retry);
            self.next_send = Some(now);
        }
        let Some(Closing::Requesting(started)) = self.closing else { return };
        if now.saturating_duration_since(started) >= self.settings.config.disconnect_timeout {
            let reason = self.graceful_end();
            self.end(now, PeerState::Disconnected, reason, out);
            return;
        }
        // Keep acknowledging what still arrives while waiting.
        self.flush(now, out);
        if self.next_send.is_some_and(|t| t <= now) {
            self.send_connection(&Control::Disconnect { code: self.close_code }, out);
            self.next_send = Some(now + self.retry.get());
            self.retry = Nanos::of((self.retry.get() * 2).min(MAX_RETRY));
        }
    }

    /// When [`Peer::poll`] must run next: the earliest row of the peer's timer table,
    /// refreshed from its state.
    pub(crate) fn next_timeout(&mut self, now: Time) -> Option<Time> {
        let cfg = &self.settings.config;
        let mut timers = Timers::default();
        let t = &mut timers;
        match self.state {
            PeerState::Connecting => {
                t.set(Timer::Retry, self.next_send);
                t.set(Timer::ConnectTimeout, Some(self.since + cfg.connect_timeout));
            }
            PeerState::Connected | PeerState::Disconnecting => {
                t.set(Timer::Retry, self.next_send);
                t.set(Timer::Idle, Some(self.last_recv + self.timeout.get()));
                // No "send now" row: this runs right after a flush that sent all it could;
                // new chances come as input (which marks the peer) or as these timers.
                if let Some(s) = &self.session {
                    t.set(Timer::Loss, s.transfer.loss_deadline());
                    t.set(Timer::Ping, s.transfer.ping_deadline());
                    t.set(Timer::Pacing, s.transfer.pacing_deadline());
                    t.set(Timer::Probe, s.transfer.probe_deadline());
                    t.set(Timer::Ack, s.transfer.ack_deadline());
                }
                let close = match self.closing {
                    Some(Closing::Flushing(deadline)) => Some(deadline),
                    Some(Closing::Requesting(started)) => Some(started + cfg.disconnect_timeout),
                    None => None,
                };
                t.set(Timer::Close, close);
            }
            PeerState::Disconnected => t.set(Timer::Close, Some(self.since + cfg.linger)),
            PeerState::Zombie => t.set(Timer::Delete, Some(now)),
        }
        t.next()
    }

    /// The connection's data path, once it is made (fuzzing reaches past the check
    /// through it; see `fuzzing::hooks`).
    #[cfg(feature = "arbitrary")]
    pub(crate) fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// Bytes this peer holds.
    pub(crate) fn memory(&self) -> usize {
        size_of::<Self>()
            + self.secure.as_deref().map_or(0, |s| size_of::<SecureState>() + s.memory())
            + self.handshake.as_deref().map_or(0, |h| size_of::<Handshake>() + h.local_data.len() + h.remote_data.len())
            + self.session.as_ref().map_or(0, Session::heap)
    }

    pub(crate) fn stats(&self) -> PeerStats {
        let s = self.session.as_ref();
        let t = s.map(|s| &s.transfer);
        let c = s.map(Session::counters).unwrap_or_default();
        PeerStats {
            state: self.state,
            remote: self.remote,
            rtt: t.map_or(Duration::ZERO, |t| t.rtt()),
            rttvar: t.map_or(Duration::ZERO, |t| t.rttvar()),
            latest_rtt: t.map_or(Duration::ZERO, |t| t.latest_rtt()),
            rto: t.map_or(Duration::ZERO, |t| t.rto()),
            cwnd: t.map_or(0, |t| t.cwnd()),
            congestion: t.map(|t| t.congestion()).unwrap_or_default(),
            ssthresh: t.map_or(0, |t| t.ssthresh()),
            flight: t.map_or(0, |t| t.flight()),
            frames_in_flight: t.map_or(0, |t| t.frames_in_flight()),
            mtu: s.map_or(0, |s| s.mtu),
            transfer: t.map_or(TransferStats::default(), |t| t.stats()),
            packets_sent: c.packets_sent,
            packets_received: c.packets_received,
            unreliable_dropped: c.unreliable_dropped,
            unreliable_replaced: c.unreliable_replaced,
            frames_refused: c.frames_refused,
            protocol_violations: c.violations,
            malformed: self.malformed,
            reassembly_bytes: s.map_or(0, Session::reassembly_bytes),
            queued_bytes: s.map_or(0, Session::queued_bytes),
        }
    }
}
