//! Secure mode's gate in front of the listener: a connection request is judged only once
//! its connect token and its own seal verify, and the host remembers which address used
//! each token.
//!
//! Order of the checks, cheapest first, so a flood costs at most one token opening (one
//! XChaCha20-Poly1305 over at most `token::MAX_SERVER_PART` bytes) and one request opening
//! per datagram, and allocates nothing for a request that fails: lengths, expiry (in the
//! clear, authenticated by the seal), the token's seal, this server among its addresses,
//! the request's seal (with the token's client-to-server key), then the record of tokens
//! used.
//!
//! Invariant: the record holds at most `token_memory` tokens; when full, the oldest
//! recorded is forgotten first.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use web_time::Instant;

use crate::config::SecureConfig;
use crate::token::{PrivateKey, TOKEN_TAG_LEN, TokenError, VerifiedToken};
use crate::wire::secure::SealedRequest;
use crate::wire::{ConnectRequest, DecodeError};

/// Why a request was dropped unanswered (each has its own counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A secure host without the private key: it takes no requests.
    NotListening,
    /// Not a request at all (or not a sealed one, in secure mode).
    Malformed(DecodeError),
    /// The token or the request's seal does not verify.
    Bad,
    /// The token has expired.
    Expired,
    /// The token names other servers.
    WrongServer,
    /// The token was used from another address.
    Reused,
}

/// The server side of secure mode: the private key, this server's addresses, the clock
/// anchor, and the record of tokens used.
#[derive(Debug)]
pub(crate) struct TokenGate {
    key: PrivateKey,
    addresses: Vec<SocketAddr>,
    anchor: (Instant, u64),
    used: BTreeMap<[u8; TOKEN_TAG_LEN], (SocketAddr, u64)>,
    order: VecDeque<[u8; TOKEN_TAG_LEN]>,
    capacity: usize,
}

impl TokenGate {
    /// The gate of a secure server; `None` for a host without a private key.
    pub(crate) fn new(cfg: &SecureConfig) -> Option<Self> {
        Some(Self {
            key: cfg.private_key.clone()?,
            addresses: cfg.public_addresses.clone(),
            anchor: cfg.unix_time?,
            used: BTreeMap::new(),
            order: VecDeque::new(),
            capacity: cfg.token_memory,
        })
    }

    /// The Unix time (seconds) at `now`, from the anchor.
    fn unix(&self, now: Instant) -> u64 {
        let (at, unix) = self.anchor;
        if now >= at {
            unix.saturating_add(now.duration_since(at).as_secs())
        } else {
            unix.saturating_sub(at.duration_since(now).as_secs())
        }
    }

    /// Tokens must name one of `addresses` from now on.
    pub(crate) fn set_addresses(&mut self, addresses: Vec<SocketAddr>) {
        self.addresses = addresses;
    }

    /// Verifies a sealed request from `from` at `now`: its parameters and its token.
    pub(crate) fn open(
        &self,
        now: Instant,
        from: SocketAddr,
        datagram: &[u8],
    ) -> Result<(ConnectRequest, VerifiedToken), Refused> {
        let sealed = SealedRequest::split(datagram).map_err(Refused::Malformed)?;
        let unix = self.unix(now);
        let token = VerifiedToken::open(&self.key, sealed.token, unix).map_err(|e| match e {
            TokenError::Expired => Refused::Expired,
            _ => Refused::Bad,
        })?;
        if !self.addresses.iter().any(|&a| token.names(a)) {
            return Err(Refused::WrongServer);
        }
        let request = sealed.open(&token.keys().0).map_err(|_| Refused::Bad)?;
        if self.used.get(&token.id()).is_some_and(|&(addr, expires)| addr != from && expires > unix) {
            return Err(Refused::Reused);
        }
        Ok((request, token))
    }

    /// Records that `from` uses `token` (called when a request makes a peer).
    pub(crate) fn record(&mut self, token: &VerifiedToken, from: SocketAddr) {
        let id = token.id();
        if let Some(entry) = self.used.get_mut(&id) {
            *entry = (from, token.expires);
            return;
        }
        while self.used.len() >= self.capacity {
            let Some(old) = self.order.pop_front() else { break };
            self.used.remove(&old);
        }
        self.used.insert(id, (from, token.expires));
        self.order.push_back(id);
    }

    /// Heap bytes the record holds (a map node holds its entry and pointers: about twice).
    pub(crate) fn memory(&self) -> usize {
        self.used.len() * 2 * size_of::<([u8; TOKEN_TAG_LEN], (SocketAddr, u64))>()
            + self.order.capacity() * TOKEN_TAG_LEN
            + self.addresses.capacity() * size_of::<SocketAddr>()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use std::time::Duration;

    use super::*;
    use crate::token::{self, ConnectToken, TokenParams};
    use crate::wire::secure::encode_request;
    use crate::wire::{ChannelSet, ConnectRequest};

    fn request(nonce: u32) -> ConnectRequest {
        ConnectRequest {
            nonce,
            frame_base: 1,
            packet_base: 2,
            app_version: 0,
            channels: 4,
            mtu: 1200,
            max_packet: 1 << 20,
            bandwidth_in: 0,
            bandwidth_out: 0,
            cookie: None,
            unordered: ChannelSet::EMPTY,
        }
    }

    #[test]
    fn the_gate_checks_expiry_seal_address_and_reuse() {
        let mut rng = rand_pcg::Pcg64Mcg::new(1);
        let key = PrivateKey::generate(&mut rng);
        let server: SocketAddr = "10.0.0.2:9000".parse().unwrap();
        let t0 = Instant::now();
        let mut cfg = SecureConfig::server(key.clone(), vec![server], t0, 1_000);
        cfg.token_memory = 2;
        let mut gate = TokenGate::new(&cfg).unwrap();
        let make = |rng: &mut rand_pcg::Pcg64Mcg, addr: SocketAddr| {
            let params = TokenParams::new(5, vec![addr], 1_000, Duration::from_secs(30));
            ConnectToken::decode(&token::generate(&key, &params, rng).unwrap()).unwrap()
        };
        let seal = |t: &ConnectToken, nonce| {
            let mut out = Vec::new();
            encode_request(&mut out, t.server_part(), &request(nonce), 0, &t.keys().0);
            out
        };
        let (a, b): (SocketAddr, SocketAddr) = ("10.0.0.1:1".parse().unwrap(), "10.0.0.3:1".parse().unwrap());
        let t = make(&mut rng, server);
        let d = seal(&t, 7);
        let (ok_request, ok_token) = gate.open(t0, a, &d).unwrap();
        assert_eq!((ok_request, ok_token.client_id), (request(7), 5));
        assert_eq!(gate.open(t0 + Duration::from_secs(30), a, &d).unwrap_err(), Refused::Expired);
        // Used by a, then from b: refused; from a again: fine.
        gate.record(&ok_token, a);
        assert_eq!(gate.open(t0, b, &d).unwrap_err(), Refused::Reused);
        assert!(gate.open(t0, a, &d).is_ok());
        // A token for another server; a request sealed with the wrong key; garbage.
        let other = make(&mut rng, "10.0.0.9:9000".parse().unwrap());
        assert_eq!(gate.open(t0, a, &seal(&other, 1)).unwrap_err(), Refused::WrongServer);
        let mut forged = Vec::new();
        encode_request(
            &mut forged,
            t.server_part(),
            &request(7),
            1,
            &crate::wire::secure::SecretKey::from_bytes([0; 32]),
        );
        assert_eq!(gate.open(t0, a, &forged).unwrap_err(), Refused::Bad);
        assert!(matches!(gate.open(t0, a, &[0x80; 20]).unwrap_err(), Refused::Malformed(_)));
        // The record is bounded: two newer tokens push the first out.
        for _ in 0..2 {
            let t = make(&mut rng, server);
            let (_, token) = gate.open(t0, a, &seal(&t, 1)).unwrap();
            gate.record(&token, a);
        }
        assert_eq!(gate.used.len(), 2);
        assert!(gate.open(t0, b, &d).is_ok(), "forgotten: only token_memory tokens are kept");
    }
}
