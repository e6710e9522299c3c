//! A peer's secure mode (`wire::secure`), in two parts:
//!
//! - [`SecureState`], for the peer's whole life: which side of the token it is and the
//!   token's two keys, which seal and open the handshake's requests and replies;
//! - [`Sealed`], once both nonces are known: the connection's two ciphers derived from the
//!   token's keys and both nonces, the counter of the datagrams this side seals, and the
//!   replay window of those it opens. The connection's states hold it (`keys::Connection`).
//!
//! Invariants: a server's state belongs to one token for its whole life (its keys, client
//! id and timeout are that token's; nothing replaces them); the send counter only grows
//! (one datagram per value, so no key and nonce seal two datagrams); a counter is marked in
//! the replay window only after its datagram verified; nothing of the connection opens
//! before both nonces are known (there is no [`Sealed`] to open it with).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;

use super::output::Outputs;
use crate::arena::Arena;
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

/// A secure peer's token: its side and keys, for the peer's whole life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SecureState {
    pub(crate) role: Role,
    client_to_server: SecretKey,
    server_to_client: SecretKey,
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

    /// Both nonces are known: the connection's ciphers, a fresh counter and replay window.
    pub(crate) fn connect(&self, local_nonce: u32, remote_nonce: u32) -> Sealed {
        let (client, server) = if self.is_client() { (local_nonce, remote_nonce) } else { (remote_nonce, local_nonce) };
        let c2s = self.client_to_server.derive(Use::ClientToServer, client, server);
        let s2c = self.server_to_client.derive(Use::ServerToClient, client, server);
        let (send, recv) = if self.is_client() { (c2s, s2c) } else { (s2c, c2s) };
        Sealed { send: AeadKey::new(send), recv: AeadKey::new(recv), sent: 0, replay: ReplayWindow::default() }
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

    /// Opens a reply to this side's attempt `local_nonce` (a client's).
    pub(crate) fn open_reply(&self, datagram: &[u8], local_nonce: u32) -> Result<Control<'static>, DecodeError> {
        secure::open_reply(datagram, &self.reply_key(local_nonce))
    }

    /// Heap bytes held besides the struct: the token's server part.
    pub(crate) fn memory(&self) -> usize {
        match &self.role {
            Role::Client { server_part, .. } => server_part.len(),
            Role::Server { .. } => 0,
        }
    }
}

/// A secure connection's sealing state, once both nonces are known: its ciphers (made once,
/// not per datagram), the counter of the next datagram this side seals, and the replay
/// window of what it opened.
#[derive(Debug)]
pub(crate) struct Sealed {
    send: AeadKey,
    recv: AeadKey,
    sent: u64,
    replay: ReplayWindow,
}

impl Sealed {
    /// Sends a control datagram of the connection (`Ack` from the client, `Disconnect`,
    /// `DisconnectAck`).
    pub(crate) fn send_control(&mut self, out: &mut Outputs, remote: SocketAddr, c: &Control<'_>) {
        let n = self.sent;
        self.sent += 1;
        out.encode(remote, |buf| secure::encode_sealed_control(buf, c, &self.send, n));
    }

    /// The cipher and counter connection datagrams are sealed with.
    pub(crate) fn sealing(&mut self) -> (&AeadKey, &mut u64) {
        (&self.send, &mut self.sent)
    }

    /// Splits a connection datagram and checks its counter against the replay window:
    /// the parts and the full counter, or why not.
    fn receiving<'d>(&self, datagram: &'d [u8]) -> Result<(SealedParts<'d>, u64), DecodeError> {
        let parts = SealedParts::split(datagram)?;
        let n = secure::expand_counter(parts.counter, self.replay.reference());
        self.replay.check(n)?;
        Ok((parts, n))
    }

    /// Opens a control datagram of the connection.
    pub(crate) fn open_control(&mut self, datagram: &[u8]) -> Result<Control<'static>, DecodeError> {
        let (parts, n) = self.receiving(datagram)?;
        let control = secure::open_sealed_control(&parts, &self.recv, n)?;
        self.replay.mark(n);
        Ok(control)
    }

    /// Opens a moved datagram (`0x8B`): its counter checked against the replay window,
    /// then its tag; its counter marked once it verified.
    pub(crate) fn open_moved(&mut self, datagram: &[u8]) -> Result<Control<'static>, DecodeError> {
        let moved = secure::SealedMoved::split(datagram)?;
        let n = secure::expand_counter(moved.counter, self.replay.reference());
        self.replay.check(n)?;
        if !moved.verify(&self.recv, n) {
            return Err(DecodeError::BadChecksum);
        }
        self.replay.mark(n);
        Ok(Control::Moved { id: moved.id, cookie: moved.cookie })
    }

    /// Opens a data datagram: checked against the replay window, verified and decrypted in
    /// one pass into `arena` (delivered packets are slices of the plaintext), its counter
    /// then marked as received. Authentic from there on: the counter is spent even if the
    /// plaintext does not decode (an id the receiver expanded otherwise), so a replay of it
    /// is not decrypted again.
    pub(crate) fn open_data(&mut self, datagram: &[u8], arena: &mut Arena) -> Result<Bytes, DecodeError> {
        let (parts, n) = self.receiving(datagram)?;
        let buf = arena.room(1 + parts.ciphertext.len());
        if !parts.open_into(&self.recv, n, buf) {
            return Err(DecodeError::BadChecksum);
        }
        self.replay.mark(n);
        Ok(buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn the_documented_sizes_of_a_peers_secure_state_hold() {
        // docs/security.md, Memory bounds: the token's part is one allocation of at most
        // 128 bytes; once both nonces are known the connection's ciphers, counter and
        // replay window are one more, of 1,312 bytes (ring's key objects; 280 on the web,
        // where RustCrypto keeps only the keys).
        assert!(size_of::<SecureState>() <= 128, "{}", size_of::<SecureState>());
        let sealed = if cfg!(target_family = "wasm") { 280 } else { 1_312 };
        assert_eq!(size_of::<Sealed>(), sealed);
    }
}
