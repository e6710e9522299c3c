//! The listener: the host's side of incoming connection requests. It decides, for each
//! request from an address with no peer, whether to answer it with a cookie challenge, a
//! refusal, nothing for now, or a new pending peer, and keeps the count of pending
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
pub(crate) use tokens::{Admitted, Refused, TokenGate};

use crate::config::{HostConfig, PeerConfig};
use crate::peer::{self, Params};
use crate::token::VerifiedToken;
use crate::wire::{ConnectRequest, Cookie, RefuseReason};

/// What to do with a connection request.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Answer with this cookie; the requester must echo it.
    Challenge(Cookie),
    /// Answer with a refusal; allocate nothing.
    Refuse(RefuseReason),
    /// Do not answer now: the requester's retry may find room.
    Defer,
    /// Make a pending peer with these parameters and answer the request.
    Accept(Params),
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
            seal_extra: if config.secure.is_some() { crate::wire::secure::SEAL_EXTRA } else { 0 },
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

    /// Secure mode: verifies a sealed request's token and seal (see `tokens`), counting
    /// what fails. `None` on a host that takes no requests (no private key).
    pub(crate) fn open_sealed(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Option<Result<Admitted, Refused>> {
        let result = self.gate.as_ref()?.open(now, from, datagram);
        let c = &mut self.counters;
        match result {
            Err(Refused::Bad) => c.bad_tokens += 1,
            Err(Refused::Expired) => c.expired_tokens += 1,
            Err(Refused::WrongServer) => c.wrong_server_tokens += 1,
            Err(Refused::Reused) => c.reused_tokens += 1,
            Err(Refused::Malformed(_)) | Ok(_) => {}
        }
        Some(result)
    }

    /// Secure mode: `from` now uses `token` (its request made a peer).
    pub(crate) fn record_token(&mut self, token: &VerifiedToken, from: SocketAddr) {
        if let Some(g) = &mut self.gate {
            g.record(token, from);
        }
    }

    /// Heap bytes of the record of tokens used.
    pub(crate) fn memory(&self) -> usize {
        self.gate.as_ref().map_or(0, TokenGate::memory)
    }

    /// Judges `req` from `from` at `now`, with `peers` peers in the table, `cfg` this
    /// side's connection settings and `mtu` its datagram size towards `from`.
    pub(crate) fn judge(
        &mut self,
        now: Instant,
        from: SocketAddr,
        req: &ConnectRequest,
        peers: usize,
        (cfg, mtu): (&PeerConfig, usize),
    ) -> Verdict {
        if self.pending >= self.challenge_above {
            // Under load: no state for a request until it proves it can hear us.
            if let Err(cookie) = self.prove(now, from, req) {
                return Verdict::Challenge(cookie);
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
                Verdict::Refuse(reason)
            }
            Ok(_) if self.pending >= self.max_pending => {
                self.counters.handshakes_deferred += 1;
                Verdict::Defer
            }
            Ok(params) => {
                self.counters.accepted += 1;
                self.pending += 1;
                Verdict::Accept(params)
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
