//! A peer's secure mode (`wire::secure`): which side of the token it is, the token's two
//! keys, the connection keys derived from them once both nonces are known, the counter of
//! the connection datagrams it sends and the replay window of those it receives.
//!
//! Invariants: a server's state belongs to one token for its whole life (its keys, client
//! id and timeout are that token's; nothing replaces them); the send counter only grows (one datagram per value, so no key and nonce
//! seal two datagrams); a counter is marked in the replay window only after its datagram
//! verified; a peer without connection keys opens nothing of the connection.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::output::Outputs;
use crate::token::{ConnectToken, TOKEN_TAG_LEN, VerifiedToken};
use crate::wire::secure::{self, AeadKey, ReplayWindow, SealedParts, SecretKey, Use};
use crate::wire::{ConnectRequest, Control, DecodeError};

/// Which side of the token this peer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// This side connected with a token: every request carries its server part.
    Client {
        /// The token's server part, sealed by the backend.
        server_part: Bytes,
        /// Requests sent in this attempt (the nonce of the next).
        requests: u32,
    },
    /// This side accepted a token.
    Server {
        /// The token's identity (its seal's tag, public): a request under any other token
        /// is not this connection's.
        token: [u8; TOKEN_TAG_LEN],
        /// The client's id, from the token.
        client_id: u64,
        /// The salt of the next reply: random at first, then counting.
        salt: u64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SecureState {
    pub(crate) role: Role,
    client_to_server: SecretKey,
    server_to_client: SecretKey,
    /// The connection's ciphers (send, receive), once both nonces are known.
    connection: Option<Box<(AeadKey, AeadKey)>>,
    /// The counter of the next connection datagram this side sends.
    pub(crate) sent: u64,
    replay: ReplayWindow,
    /// The connection's timeout, from the token.
    pub(crate) timeout: Duration,
}

impl SecureState {
    /// The client's state for `token`.
    pub(crate) fn client(token: &ConnectToken) -> Self {
        let (client_to_server, server_to_client) = token.keys();
        Self {
            role: Role::Client { server_part: Bytes::copy_from_slice(token.server_part()), requests: 0 },
            client_to_server,
            server_to_client,
            connection: None,
            sent: 0,
            replay: ReplayWindow::default(),
            timeout: token.timeout(),
        }
    }

    /// The server's state for a verified token; `salt`: fresh randomness for its replies.
    pub(crate) fn server(token: &VerifiedToken, salt: u64) -> Self {
        let (client_to_server, server_to_client) = token.keys();
        Self {
            role: Role::Server { token: token.id(), client_id: token.client_id, salt },
            client_to_server,
            server_to_client,
            connection: None,
            sent: 0,
            replay: ReplayWindow::default(),
            timeout: token.timeout,
        }
    }

    pub(crate) fn is_client(&self) -> bool {
        matches!(self.role, Role::Client { .. })
    }

    /// The client id, on the server.
    pub(crate) fn client_id(&self) -> Option<u64> {
        match self.role {
            Role::Server { client_id, .. } => Some(client_id),
            Role::Client { .. } => None,
        }
    }

    /// Whether `token` is the one this side accepted (a server's): the token of every
    /// request that may act on this connection.
    pub(crate) fn is_token(&self, token: &VerifiedToken) -> bool {
        matches!(self.role, Role::Server { token: id, .. } if id == token.id())
    }

    /// Both nonces are known: derives the connection keys.
    pub(crate) fn connect(&mut self, local_nonce: u32, remote_nonce: u32) {
        let (client, server) = if self.is_client() { (local_nonce, remote_nonce) } else { (remote_nonce, local_nonce) };
        let c2s = self.client_to_server.derive(Use::ClientToServer, client, server);
        let s2c = self.server_to_client.derive(Use::ServerToClient, client, server);
        let (send, recv) = if self.is_client() { (c2s, s2c) } else { (s2c, c2s) };
        self.connection = Some(Box::new((AeadKey::new(send), AeadKey::new(recv))));
        self.replay = ReplayWindow::default();
    }

    /// The key replies to the attempt `client_nonce` are sealed with, under this token.
    pub(crate) fn reply_key(&self, client_nonce: u32) -> SecretKey {
        self.server_to_client.derive(Use::Reply, client_nonce, 0)
    }

    /// Sends this side's request (a client's), with the token's server part.
    pub(crate) fn send_request(&mut self, out: &mut Outputs, remote: SocketAddr, local: &ConnectRequest) {
        let Role::Client { server_part, requests } = &mut self.role else { return };
        let (token, n, key) = (server_part.clone(), *requests, self.client_to_server);
        *requests = requests.wrapping_add(1);
        out.encode(remote, |buf| secure::encode_request(buf, &token, local, n, &key));
    }

    /// Sends a reply (a server's) sealed with `key`, the reply key of the request answered.
    pub(crate) fn send_reply(&mut self, out: &mut Outputs, remote: SocketAddr, c: &Control<'_>, key: &SecretKey) {
        let Role::Server { salt, .. } = &mut self.role else { return };
        let s = *salt;
        *salt = salt.wrapping_add(1);
        out.encode(remote, |buf| secure::encode_reply(buf, c, key, s));
    }

    /// Sends a control datagram of the connection (`Ack` from the client, `Disconnect`,
    /// `DisconnectAck`); nothing before the connection keys exist.
    pub(crate) fn send_control(&mut self, out: &mut Outputs, remote: SocketAddr, c: &Control<'_>) {
        let Some(keys) = &self.connection else { return };
        let n = self.sent;
        self.sent += 1;
        out.encode(remote, |buf| secure::encode_sealed_control(buf, c, &keys.0, n));
    }

    /// The cipher and counter connection datagrams are sealed with, once the keys exist.
    pub(crate) fn sealing(&mut self) -> Option<(&AeadKey, &mut u64)> {
        let keys = self.connection.as_deref()?;
        Some((&keys.0, &mut self.sent))
    }

    /// Opens a reply to this side's attempt `local_nonce` (a client's).
    pub(crate) fn open_reply(&self, datagram: &[u8], local_nonce: u32) -> Result<Control<'static>, DecodeError> {
        secure::open_reply(datagram, &self.reply_key(local_nonce))
    }

    /// Splits a connection datagram and checks its counter against the replay window:
    /// the receive cipher, the parts and the full counter, or why not.
    pub(crate) fn receiving<'d>(&self, datagram: &'d [u8]) -> Result<(&AeadKey, SealedParts<'d>, u64), DecodeError> {
        let Some(keys) = self.connection.as_deref() else { return Err(DecodeError::BadChecksum) };
        let recv = &keys.1;
        let parts = SealedParts::split(datagram)?;
        let n = secure::expand_counter(parts.counter, self.replay.reference());
        self.replay.check(n)?;
        Ok((recv, parts, n))
    }

    /// A connection datagram with counter `n` verified: it may not come again.
    pub(crate) fn received(&mut self, n: u64) {
        self.replay.mark(n);
    }

    /// Opens a control datagram of the connection.
    pub(crate) fn open_control(&mut self, datagram: &[u8]) -> Result<Control<'static>, DecodeError> {
        let (recv, parts, n) = self.receiving(datagram)?;
        let control = secure::open_sealed_control(&parts, recv, n)?;
        self.received(n);
        Ok(control)
    }

    /// Heap bytes held besides the struct: the token's server part, the connection's
    /// ciphers.
    pub(crate) fn memory(&self) -> usize {
        let ciphers = if self.connection.is_some() { size_of::<(AeadKey, AeadKey)>() } else { 0 };
        ciphers
            + match &self.role {
                Role::Client { server_part, .. } => server_part.len(),
                Role::Server { .. } => 0,
            }
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn the_documented_size_of_a_peers_secure_state_holds() {
        // docs/security.md, Memory bounds: one allocation of at most 360 bytes, and once
        // connected one of 1,152 for the ciphers (ring's key objects; 128 on the web,
        // where RustCrypto keeps only the keys), which `memory` counts.
        assert!(size_of::<SecureState>() <= 360, "{}", size_of::<SecureState>());
        let ciphers = if cfg!(target_family = "wasm") { 128 } else { 1_152 };
        assert_eq!(size_of::<(AeadKey, AeadKey)>(), ciphers);
    }
}
