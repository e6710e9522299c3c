//! A peer's keys, in both modes: what opens the datagrams that arrive from its address
//! before the state machine sees them, and what seals what it sends.
//!
//! - [`Keys`], for the peer's whole life: this side's nonce (the key of the replies it
//!   receives) and, in secure mode, its token ([`SecureState`]);
//! - [`Connection`], once the remote's nonce is known: the connection's keys (plain: the
//!   two keyed checks; secure: [`Sealed`]). The states that have a connection hold it.
//!
//! Opening ([`Keys::open`]) turns a datagram into an [`Input`] the state machine acts on:
//! a control datagram decoded and verified (plain: its keyed check; secure: its seal and
//! the replay window), or a data datagram ready to decode (plain: as received, with the key
//! its check verifies under; secure: its verified plaintext). Requests are opened by the
//! host's listener (its gate in secure mode) and come as [`Input::Request`].
//!
//! Invariants: a connection's keys are derived once, from both nonces, when the remote's
//! request is known; nothing of a connection opens without them.

use std::net::SocketAddr;

use bytes::Bytes;

use super::output::Outputs;
use super::secure::{Sealed, SecureState};
use crate::arena::Arena;
use crate::token::VerifiedToken;
use crate::wire::secure::{AeadKey, SecretKey};
use crate::wire::{self, ConnectRequest, Control, DecodeError, Key, KeyClass, PlainKey};

/// A datagram from the peer's address, opened: what the state machine acts on.
#[derive(Debug)]
pub(crate) enum Input<'d> {
    /// A control datagram of the handshake or the connection, verified.
    Control(Control<'d>),
    /// A data datagram: as received, verified when decoded with `key` (plain mode), or
    /// its plaintext, verified already (secure mode: `key` is `Key::opened()`).
    Data {
        /// The datagram, copied into the receive arena.
        datagram: Bytes,
        /// The key it decodes with.
        key: Key,
    },
    /// A connection request, verified by the host as far as its mode allows: its check in
    /// plain mode (with its connect data), its token and seal in secure mode (`token`).
    Request {
        /// The requester's parameters.
        request: ConnectRequest,
        /// Plain mode: the connect data it carries.
        data: &'d [u8],
        /// Secure mode: its verified token.
        token: Option<&'d VerifiedToken>,
    },
}

/// A peer's mode and this side's nonce, for its whole life.
#[derive(Debug)]
pub(crate) struct Keys {
    /// This side's nonce: replies to its request are keyed with it.
    local_nonce: u32,
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    Plain,
    /// Boxed, so a plain peer carries only the tag.
    Secure(Box<SecureState>),
}

/// A connection's keys, once both nonces are known.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The remote's nonce: the id of the attempt this connection answers.
    pub(crate) remote_nonce: u32,
    keys: ConnectionKeys,
}

#[derive(Debug)]
enum ConnectionKeys {
    /// The keyed checks of what this side sends and what it receives.
    Plain { send: PlainKey, recv: PlainKey },
    /// Boxed: its ciphers are 1.2 KB.
    Sealed(Box<Sealed>),
}

impl Keys {
    pub(crate) fn new(local_nonce: u32, secure: Option<SecureState>) -> Self {
        Self { local_nonce, mode: secure.map_or(Mode::Plain, |s| Mode::Secure(Box::new(s))) }
    }

    /// This side's nonce.
    pub(crate) fn local_nonce(&self) -> u32 {
        self.local_nonce
    }

    /// Secure mode's token state.
    pub(crate) fn secure(&self) -> Option<&SecureState> {
        match &self.mode {
            Mode::Plain => None,
            Mode::Secure(s) => Some(s),
        }
    }

    /// Whether this side holds a token to connect with (it takes no requests).
    pub(crate) fn is_client(&self) -> bool {
        self.secure().is_some_and(SecureState::is_client)
    }

    /// The connection's keys once the remote's nonce is known.
    pub(crate) fn connect(&self, remote_nonce: u32) -> Connection {
        let keys = match &self.mode {
            Mode::Plain => ConnectionKeys::Plain {
                send: PlainKey::connection(self.local_nonce, remote_nonce),
                recv: PlainKey::connection(remote_nonce, self.local_nonce),
            },
            Mode::Secure(s) => ConnectionKeys::Sealed(Box::new(s.connect(self.local_nonce, remote_nonce))),
        };
        Connection { remote_nonce, keys }
    }

    /// Opens a datagram of type `ty` (peeked already; not a request) from the peer's
    /// address, with the connection's keys `conn` when it has them; a data datagram only
    /// while `data` (the state takes data), and never when this returns `Ok(None)`. Data
    /// datagrams are copied, or decrypted, into `arena`.
    ///
    /// Inline: a data datagram's way is a few instructions, and its `Input` is then made
    /// where the peer acts on it rather than copied out.
    #[inline]
    pub(crate) fn open<'d>(
        &self,
        ty: u8,
        datagram: &'d [u8],
        conn: Option<&mut Connection>,
        data: bool,
        arena: &mut Arena,
    ) -> Result<Option<Input<'d>>, DecodeError> {
        if ty & 0x80 != 0 {
            return self.open_control(ty, datagram, conn).map(|c| Some(Input::Control(c)));
        }
        let Some(conn) = conn.filter(|_| data) else { return Ok(None) };
        let (datagram, key) = match &mut conn.keys {
            ConnectionKeys::Plain { recv, .. } => {
                let buf = arena.room(datagram.len());
                buf.extend_from_slice(datagram);
                (buf.split().freeze(), recv.key())
            }
            ConnectionKeys::Sealed(s) => (s.open_data(datagram, arena)?, Key::opened()),
        };
        Ok(Some(Input::Data { datagram, key }))
    }

    /// Opens a control datagram (see [`Keys::open`]).
    fn open_control<'d>(
        &self,
        ty: u8,
        datagram: &'d [u8],
        conn: Option<&mut Connection>,
    ) -> Result<Control<'d>, DecodeError> {
        match &self.mode {
            Mode::Plain => {
                let key = match (wire::key_class(ty), conn.as_deref()) {
                    // Requests go through the host (`Input::Request`).
                    (KeyClass::Version, _) => return Err(DecodeError::UnknownType(ty)),
                    (KeyClass::Reply, _) => Key::reply(self.local_nonce),
                    (KeyClass::Connection, Some(Connection { keys: ConnectionKeys::Plain { recv, .. }, .. })) => {
                        recv.key()
                    }
                    // No connection key yet: nothing can verify it.
                    (KeyClass::Connection, _) => Key::version(),
                };
                Control::decode(datagram, key)
            }
            // A client opens replies with its attempt's reply key; either side opens the
            // connection's own control datagrams with the connection's key.
            Mode::Secure(s) => match (ty, s.is_client(), conn.map(|c| &mut c.keys)) {
                (0x81..=0x85, true, _) => s.open_reply(datagram, self.local_nonce),
                (0x82 | 0x86..=0x89, _, Some(ConnectionKeys::Sealed(c))) => c.open_control(datagram),
                (0x8B, _, Some(ConnectionKeys::Sealed(c))) => c.open_moved(datagram),
                (0x82 | 0x86..=0x89 | 0x8B, _, _) => Err(DecodeError::BadChecksum),
                _ => Err(DecodeError::UnknownType(ty)),
            },
        }
    }

    /// Sends this side's request: plain, with `data` as its connect data; secure, sealed
    /// with the token's server part.
    pub(crate) fn send_request(&mut self, out: &mut Outputs, remote: SocketAddr, local: &ConnectRequest, data: &[u8]) {
        match &mut self.mode {
            Mode::Plain => out.control(remote, &Control::Request { request: *local, data }, Key::version()),
            Mode::Secure(s) => s.send_request(out, remote, local),
        }
    }

    /// Sends `c` in answer to the request of nonce `to` (a client's answers are
    /// connection datagrams instead: [`send_connection`]). Plain: keyed with that nonce.
    /// Secure: sealed with `key` (the reply key of a request under another token) or the
    /// token's reply key for `to`.
    pub(crate) fn reply(
        &mut self,
        out: &mut Outputs,
        remote: SocketAddr,
        c: &Control<'_>,
        to: u32,
        key: Option<SecretKey>,
    ) {
        match &mut self.mode {
            Mode::Plain => out.control(remote, c, Key::reply(to)),
            Mode::Secure(s) => {
                let key = key.unwrap_or_else(|| s.reply_key(to));
                s.send_reply(out, remote, c, &key);
            }
        }
    }

    /// Heap bytes held: secure mode's token state.
    pub(crate) fn memory(&self) -> usize {
        self.secure().map_or(0, |s| size_of::<SecureState>() + s.memory())
    }
}

/// Sends a control datagram of the connection (`Disconnect`, `DisconnectAck`, a client's
/// `Ack`, path challenges and responses), if it has its keys.
pub(crate) fn send_connection(out: &mut Outputs, remote: SocketAddr, c: &Control<'_>, conn: Option<&mut Connection>) {
    match conn.map(|c| &mut c.keys) {
        Some(ConnectionKeys::Plain { send, .. }) => out.control(remote, c, send.key()),
        Some(ConnectionKeys::Sealed(s)) => s.send_control(out, remote, c),
        None => {}
    }
}

impl Connection {
    /// The cipher and counter data datagrams are sealed with, in secure mode.
    pub(crate) fn sealing(&mut self) -> Option<(&AeadKey, &mut u64)> {
        match &mut self.keys {
            ConnectionKeys::Plain { .. } => None,
            ConnectionKeys::Sealed(s) => Some(s.sealing()),
        }
    }

    /// Heap bytes held: a secure connection's ciphers, counter and replay window.
    pub(crate) fn memory(&self) -> usize {
        match self.keys {
            ConnectionKeys::Plain { .. } => 0,
            ConnectionKeys::Sealed(_) => size_of::<Sealed>(),
        }
    }
}
