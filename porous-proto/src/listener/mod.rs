//! The listener: the host's side of incoming connection requests, in both modes. It opens
//! each request ([`Listener::open`]: its check in plain mode; in secure mode the gate of
//! `tokens`, its token and seal) into one [`Request`] value, decides for a request from an
//! address with no peer whether to answer it with a cookie challenge, a refusal, nothing
//! for now, or a new pending peer ([`Listener::judge`], whose [`Verdict::Accept`] carries
//! the one [`Admitted`] value a peer is made from), and keeps the count of pending
//! handshakes that the decision depends on.
//!
//! The rules (`docs/protocol.md`, Handshake; `docs/security.md`):
//!
//! - at or above `challenge_above` pending handshakes, a request without a cookie valid
//!   for its address and nonce is answered with a stateless cookie ([`cookie`]), so
//!   spoofed sources never create state;
//! - a request the host cannot take is refused (not accepting, incompatible, full), with
//!   nothing allocated;
//! - beyond `max_pending` handshakes under way, a request is left unanswered for now: a
//!   handshake once answered is never dropped to make room, and the requester retries;
//! - otherwise the request gets a pending peer.
//!
//! A request from an address that has a pending handshake of another attempt is not
//! judged until it proves it receives there (echoes a cookie, [`Listener::prove`]): the
//! handshake holds to the attempt it answered against anyone who only puts the address on
//! a datagram, and gives way to the one who can hear there.
//!
//! Invariant: `pending` is the number of peers in the host's table that are incoming
//! connections still in their handshake; the host reports every such peer's creation and
//! every change of its pending status through [`Listener::pending_changed`].

mod cookie;
mod tokens;

use std::net::SocketAddr;
use web_time::Instant;

use cookie::CookieJar;
pub(crate) use tokens::Refused;
use tokens::TokenGate;

use bytes::Bytes;

use crate::config::{HostConfig, PeerConfig};
use crate::peer::{self, Admitted};
use crate::token::VerifiedToken;
use crate::wire::secure::{SecretKey, Use};
use crate::wire::{self, ConnectRequest, Control, Cookie, DecodeError, Key, RefuseReason};

/// A connection request, verified as far as its mode allows: in plain mode its check, in
/// secure mode its token and seal.
#[derive(Debug)]
pub(crate) struct Request<'d> {
    /// The requester's parameters.
    pub(crate) request: ConnectRequest,
    /// Plain mode: the connect data it carries (secure mode: none; the token's user data
    /// stands for it).
    pub(crate) data: &'d [u8],
    /// Secure mode: its verified token.
    pub(crate) token: Option<VerifiedToken>,
}

impl Request<'_> {
    /// How an answer to it is keyed (plain) or sealed (secure), so that only the
    /// requester accepts it.
    pub(crate) fn reply_key(&self) -> ReplyKey {
        match &self.token {
            None => ReplyKey::Plain(self.request.nonce),
            Some(t) => ReplyKey::Sealed(t.keys().1.derive(Use::Reply, self.request.nonce, 0)),
        }
    }
}

/// The key of an answer to a request, before any peer exists.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReplyKey {
    /// Plain mode: keyed with the request's nonce.
    Plain(u32),
    /// Secure mode: sealed with the reply key of the request's token and nonce.
    Sealed(SecretKey),
}

/// What to do with a connection request.
#[derive(Debug)]
// A verdict is matched where it is made, never stored: its size costs a copy at most.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Verdict {
    /// Answer with this (a cookie challenge the requester must echo, or a refusal), with
    /// this key; allocate nothing.
    Answer(Control<'static>, ReplyKey),
    /// Do not answer now: the requester's retry may find room.
    Defer,
    /// Make a pending peer of this request, and answer it.
    Accept(Admitted),
}

/// Counters of the listener (reported in `HostStats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ListenerCounters {
    pub(crate) bad_tokens: u64,
    pub(crate) expired_tokens: u64,
    pub(crate) wrong_server_tokens: u64,
    pub(crate) reused_tokens: u64,
    pub(crate) refused: u64,
    pub(crate) challenged: u64,
    pub(crate) bad_cookies: u64,
    pub(crate) handshakes_deferred: u64,
    pub(crate) accepted: u64,
}

/// The host's handshake admission.
#[derive(Debug)]
pub(crate) struct Listener {
    cookies: CookieJar,
    accept_incoming: bool,
    max_peers: usize,
    max_pending: usize,
    challenge_above: usize,
    pending: usize,
    counters: ListenerCounters,
    /// Secure mode: bytes sealing adds to each datagram (0 in plain mode).
    seal_extra: usize,
    secure: bool,
    /// Secure mode, on a server: the gate requests pass before they are judged.
    gate: Option<TokenGate>,
}

impl Listener {
    /// A listener for `config`, its cookies keyed with `secret`.
    pub(crate) fn new(config: &HostConfig, secret: (u64, u64)) -> Self {
        Self {
            cookies: CookieJar::new(secret),
            accept_incoming: config.accept_incoming,
            max_peers: config.max_peers,
            max_pending: config.max_pending,
            challenge_above: config.challenge_above,
            pending: 0,
            counters: ListenerCounters::default(),
            seal_extra: if config.secure.is_some() { wire::secure::SEAL_EXTRA } else { 0 },
            secure: config.secure.is_some(),
            gate: config.secure.as_ref().and_then(TokenGate::new),
        }
    }

    /// Secure mode, on a server: tokens must name one of `addresses` from now on. False on
    /// a host that takes no tokens.
    pub(crate) fn set_public_addresses(&mut self, addresses: Vec<SocketAddr>) -> bool {
        let Some(gate) = self.gate.as_mut() else { return false };
        gate.set_addresses(addresses);
        true
    }

    /// Opens a connection request from `from` at `now`: in plain mode it must decode
    /// under the protocol's version key; in secure mode its token and seal must verify
    /// (see `tokens`), counted when they do not.
    pub(crate) fn open<'d>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &'d [u8],
    ) -> Result<Request<'d>, Refused> {
        if !self.secure {
            return match Control::decode(datagram, Key::version()) {
                Ok(Control::Request { request, data }) => Ok(Request { request, data, token: None }),
                Ok(_) => Err(Refused::Malformed(DecodeError::UnknownType(wire::peek_type(datagram).unwrap_or(0)))),
                Err(e) => Err(Refused::Malformed(e)),
            };
        }
        // A host without a private key takes no requests.
        let Some(gate) = &self.gate else { return Err(Refused::NotListening) };
        let result = gate.open(now, from, datagram);
        let c = &mut self.counters;
        match result {
            Err(Refused::Bad) => c.bad_tokens += 1,
            Err(Refused::Expired) => c.expired_tokens += 1,
            Err(Refused::WrongServer) => c.wrong_server_tokens += 1,
            Err(Refused::Reused) => c.reused_tokens += 1,
            Err(Refused::Malformed(_) | Refused::NotListening) | Ok(_) => {}
        }
        let (request, token) = result?;
        Ok(Request { request, data: &[], token: Some(token) })
    }

    /// Heap bytes of the record of tokens used.
    pub(crate) fn memory(&self) -> usize {
        self.gate.as_ref().map_or(0, TokenGate::memory)
    }

    /// Judges `request` from `from` at `now`, with `peers` peers in the table, `cfg` this
    /// side's connection settings and `mtu` its datagram size towards `from`. A request it
    /// accepts counts as pending, and in secure mode its token as used from `from`.
    pub(crate) fn judge(
        &mut self,
        now: Instant,
        from: SocketAddr,
        request: Request<'_>,
        peers: usize,
        (cfg, mtu): (&PeerConfig, usize),
    ) -> Verdict {
        let req = &request.request;
        if self.pending >= self.challenge_above {
            // Under load: no state for a request until it proves it can hear us.
            if let Err(cookie) = self.prove(now, from, req) {
                return Verdict::Answer(Control::Challenge(cookie), request.reply_key());
            }
        }
        let verdict = if !self.accept_incoming {
            Err(RefuseReason::NotAccepting)
        } else {
            peer::negotiate(cfg, mtu, req, self.seal_extra)
                .map_err(peer::refusal)
                .and_then(|params| if peers >= self.max_peers { Err(RefuseReason::HostFull) } else { Ok(params) })
        };
        match verdict {
            Err(reason) => {
                self.counters.refused += 1;
                Verdict::Answer(Control::Refuse(reason), request.reply_key())
            }
            Ok(_) if self.pending >= self.max_pending => {
                self.counters.handshakes_deferred += 1;
                Verdict::Defer
            }
            Ok(params) => {
                self.counters.accepted += 1;
                self.pending += 1;
                let Request { request, data, token } = request;
                let data = match (&token, &mut self.gate) {
                    (Some(token), Some(gate)) => {
                        gate.record(token, from);
                        token.user_data.clone()
                    }
                    _ => Bytes::copy_from_slice(data),
                };
                Verdict::Accept(Admitted { request, params, data, token })
            }
        }
    }

    /// Whether `req` proves that its requester receives at `from`: it echoes a cookie
    /// issued for that address and nonce within the cookie's lifetime. If not, the cookie
    /// to challenge it with (counted in `challenged`, and in `bad_cookies` when it echoed
    /// one that does not verify). The host also asks this of a request that would replace
    /// the handshake at its address (`Peer::is_held_against`).
    pub(crate) fn prove(&mut self, now: Instant, from: SocketAddr, req: &ConnectRequest) -> Result<(), Cookie> {
        if req.cookie.is_some_and(|c| self.cookies.verify(now, from, req.nonce, &c)) {
            return Ok(());
        }
        if req.cookie.is_some() {
            self.counters.bad_cookies += 1;
        }
        self.counters.challenged += 1;
        Err(self.cookies.issue(now, from, req.nonce))
    }

    /// A peer accepted by [`Listener::judge`] left its handshake (connected, or ended and
    /// deleted) or never existed after all.
    pub(crate) fn pending_changed(&mut self, was: bool, is: bool) {
        match (was, is) {
            (true, false) => self.pending -= 1,
            (false, true) => self.pending += 1,
            _ => {}
        }
    }

    /// Incoming connections in their handshake now.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    pub(crate) fn counters(&self) -> ListenerCounters {
        self.counters
    }
}
