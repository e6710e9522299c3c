//! Secure mode's datagrams: ChaCha20-Poly1305 (RFC 8439) in place of the CRC-32 check.
//!
//! A host in secure mode (`HostConfig::secure`) seals every datagram after the connection
//! request with an AEAD under keys that only the holder of a connect token and the server
//! that accepts it know (`crate::token`). This module owns the keys' derivation, the three
//! sealed layouts, and the replay window; `docs/wire-format.md` gives them byte by byte.
//!
//! | layout | datagrams | key | AEAD nonce |
//! |---|---|---|---|
//! | request | `0x80`, client to server | the token's client-to-server key, derived with the client's nonce | the request's counter |
//! | reply | `0x81`..=`0x85`, server to client | the token's server-to-client key, derived with the client's nonce | a salt the reply carries |
//! | connection | data, `0x82` client to server, `0x86`, `0x87` | per direction, derived with both nonces | the sender's datagram counter |
//!
//! Keys: [`SecretKey::derive`] runs HChaCha20 (the subkey step of XChaCha20) on a token
//! key and a 16-byte label holding the wire version, the use and the connection's nonces.
//! So every connection, and every use within it, has keys of its own: a token used twice
//! (a reconnection) never encrypts two datagrams under one key and nonce.
//!
//! Invariants:
//!
//! - a (key, nonce) pair seals at most one datagram: counters only grow, a reply's salt is
//!   fresh randomness or a per-peer counter above one;
//! - nothing is trusted before the tag verifies: a datagram is verified and decrypted in
//!   one pass, its associated data being its clear header alone; whatever fails is
//!   dropped and changes no state;
//! - a data datagram's plaintext ends with the digest of the full values of its truncated
//!   ids where plain mode has its check ([`ID_DIGEST_LEN`]): a truncated id the receiver
//!   expands differently from the sender fails the digest, so as in plain mode an id is
//!   never misread, only dropped.

use bytes::{BufMut, BytesMut};
use chacha20::{R20, hchacha};

use super::aead::Cipher;
use super::codec::Reader;
use super::control::{
    PATH_COOKIE_LEN, T_ACK, T_CHALLENGE, T_DISCONNECT, T_DISCONNECT_ACK, T_MOVED, T_PATH_CHALLENGE, T_PATH_RESPONSE,
    T_REQUEST, T_REQUEST_ACK, read_request,
};
use super::{CHECK_LEN, ConnectRequest, Control, DecodeError, Field, PathCookie, WIRE_VERSION};

/// Length of the authentication tag that replaces the 4-byte check.
pub const TAG_LEN: usize = super::aead::TAG;
/// Length of a connection datagram's counter field (the low 32 bits of the sender's
/// 64-bit datagram counter).
pub const COUNTER_LEN: usize = 4;
/// Length of a reply's salt.
pub const SALT_LEN: usize = 8;
/// Bytes a sealed data datagram takes beyond the same datagram in plain mode: counter and
/// tag (the digest of its ids takes the check's place). A sealed control datagram of the
/// connection takes `SEAL_EXTRA - CHECK_LEN`: it has neither check nor digest.
pub const SEAL_EXTRA: usize = COUNTER_LEN + TAG_LEN + ID_DIGEST_LEN - CHECK_LEN;
/// Type byte and counter: the clear header of a sealed connection datagram.
pub const SEALED_HEADER: usize = 1 + COUNTER_LEN;
/// Every sealed request is padded to at least this many bytes: more than the largest
/// sealed reply (a `0x81` with the longest unordered bitmap, 92 bytes), so no reply is
/// larger than the request it answers. The token alone makes a request longer.
pub const SEALED_REQUEST_SIZE: usize = 128;
/// Most bytes of a sealed request's encrypted body (its fields and padding).
pub const MAX_REQUEST_BODY: usize = 160;
/// Most bytes of a sealed reply's body.
const MAX_REPLY_BODY: usize = 96;
/// Most bytes of a connection-layout control datagram's body (a path challenge's 8).
const MAX_CONTROL_BODY: usize = 8;
/// The type byte of a (sealed) connection request.
pub const REQUEST_TYPE: u8 = T_REQUEST;
/// Datagrams a receiver accepts behind the newest one it accepted (the replay window).
pub const REPLAY_WINDOW: u64 = 1024;

/// A 256-bit secret key: a token's private key, one of its per-direction keys, or a key
/// derived from one. Its `Debug` output hides it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SecretKey([u8; 32]);

impl core::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// What a derived key is for; part of the derivation's label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Use {
    /// Sealed requests (from the client-to-server key).
    Request = b'q',
    /// Sealed replies (from the server-to-client key).
    Reply = b'r',
    /// Connection datagrams, client to server.
    ClientToServer = b'c',
    /// Connection datagrams, server to client.
    ServerToClient = b's',
}

impl SecretKey {
    /// A key from its bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The key's bytes (to store it; keep them secret).
    pub const fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// The key for `what` in the connection attempt of `client_nonce` (and, for
    /// connection keys, `server_nonce`; 0 otherwise): HChaCha20 of this key and the label
    /// `"POR", version, use, client nonce, server nonce, 0, 0, 0`.
    pub fn derive(&self, what: Use, client_nonce: u32, server_nonce: u32) -> Self {
        let mut label = [0u8; 16];
        label[..3].copy_from_slice(b"POR");
        label[3] = WIRE_VERSION;
        label[4] = what as u8;
        label[5..9].copy_from_slice(&client_nonce.to_le_bytes());
        label[9..13].copy_from_slice(&server_nonce.to_le_bytes());
        Self(hchacha::<R20>(&self.0.into(), &label.into()).into())
    }
}

/// The 96-bit AEAD nonce for the 64-bit number `n`: four zero bytes, then `n`.
fn nonce(n: u64) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[4..].copy_from_slice(&n.to_le_bytes());
    out
}

/// Length of the digest that ends a sealed data datagram's plaintext: a CRC-32 (unkeyed)
/// of the full values of its truncated ids, in the place of plain mode's check.
///
/// The receiver expands truncated ids from its own state; the digest carries the full
/// values the sender meant, so a receiver that expands one differently (a datagram
/// delayed past the ids' range) drops the datagram instead of misreading it. The digest
/// guards against that accident only: it is encrypted and authenticated with the rest,
/// so nobody can choose what an id expands to. It travels inside the ciphertext rather
/// than in the associated data so the receiver can verify and decrypt in one pass: the
/// full values are known only once the plaintext is.
pub const ID_DIGEST_LEN: usize = CHECK_LEN;

/// A key ready to seal and open: the secret and the cipher's own form of it (ChaCha20-
/// Poly1305 as RFC 8439 defines it), made once per key. A connection keeps one per
/// direction: building the cipher's 544-byte key object for every datagram cost about a
/// tenth of a short datagram's whole handling. Its `Debug` output hides it.
#[derive(Clone)]
pub struct AeadKey {
    secret: SecretKey,
    cipher: Cipher,
}

impl PartialEq for AeadKey {
    fn eq(&self, other: &Self) -> bool {
        self.secret == other.secret
    }
}

impl Eq for AeadKey {}

impl core::fmt::Debug for AeadKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("AeadKey(..)")
    }
}

impl AeadKey {
    /// The cipher keyed with `secret`.
    pub fn new(secret: SecretKey) -> Self {
        Self { cipher: Cipher::new(&secret.0), secret }
    }

    /// Encrypts `body` in place with nonce `n` and associated data `ad`; returns the tag.
    pub(crate) fn seal(&self, n: u64, ad: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
        self.cipher.seal(nonce(n), ad, body)
    }

    /// Verifies `tag` over `ad` and the ciphertext `body` with nonce `n`, then decrypts
    /// `body` in place. Leaves `body` unusable and returns false if the tag is wrong.
    pub(crate) fn open(&self, n: u64, ad: &[u8], body: &mut [u8], tag: &[u8]) -> bool {
        self.cipher.open(nonce(n), ad, body, tag)
    }

    /// Seals a connection datagram written in the sealed layout up to its tag (type byte,
    /// counter, then the plaintext), counter `n`: encrypts all after the clear header, with
    /// the header as associated data, and returns the tag to append.
    pub(crate) fn seal_datagram(&self, n: u64, datagram: &mut [u8]) -> [u8; TAG_LEN] {
        let (head, body) = datagram.split_at_mut(SEALED_HEADER.min(datagram.len()));
        self.seal(n, head, body)
    }
}

/// Encrypts `body` in place under (`key`, `n`) with associated data `ad`; returns the tag.
/// For one datagram under a key; a connection's datagrams use its [`AeadKey`]s.
pub(crate) fn seal(key: &SecretKey, n: u64, ad: &[u8], body: &mut [u8]) -> [u8; TAG_LEN] {
    AeadKey::new(*key).seal(n, ad, body)
}

/// Verifies `tag` over `ad` and the ciphertext `body`, then decrypts `body` in place.
/// Leaves `body` unusable and returns false if the tag is wrong. For one datagram under a
/// key, as [`seal`].
pub(crate) fn open(key: &SecretKey, n: u64, ad: &[u8], body: &mut [u8], tag: &[u8]) -> bool {
    AeadKey::new(*key).open(n, ad, body, tag)
}

/// Expands a counter's low 32 bits to the 64-bit counter nearest `reference` (the newest
/// counter the receiver accepted, or 0 before any).
pub fn expand_counter(low: u32, reference: u64) -> u64 {
    const SPAN: u64 = 1 << 32;
    let candidate = (reference & !(SPAN - 1)) | u64::from(low);
    if candidate > reference && candidate - reference > SPAN / 2 && candidate >= SPAN {
        candidate - SPAN
    } else if candidate < reference && reference - candidate > SPAN / 2 {
        candidate.checked_add(SPAN).unwrap_or(candidate)
    } else {
        candidate
    }
}

/// The receive side of one direction's counters: the newest accepted and which of the
/// [`REPLAY_WINDOW`] before it were accepted. A counter outside the window, or seen
/// already, is a replay (or too late to tell): dropped before it is even decrypted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReplayWindow {
    newest: Option<u64>,
    seen: [u64; (REPLAY_WINDOW / 64) as usize],
}

impl ReplayWindow {
    /// What truncated counters are expanded against.
    pub(crate) fn reference(&self) -> u64 {
        self.newest.unwrap_or(0)
    }

    fn bit(n: u64) -> (usize, u64) {
        let i = n % REPLAY_WINDOW;
        ((i / 64) as usize, 1 << (i % 64))
    }

    /// Whether a datagram with counter `n` may be new.
    pub(crate) fn check(&self, n: u64) -> Result<(), DecodeError> {
        let Some(newest) = self.newest else { return Ok(()) };
        if n > newest {
            return Ok(());
        }
        if newest - n >= REPLAY_WINDOW {
            return Err(DecodeError::Replayed);
        }
        let (word, mask) = Self::bit(n);
        if self.seen.get(word).is_some_and(|w| w & mask != 0) { Err(DecodeError::Replayed) } else { Ok(()) }
    }

    /// Records `n` as accepted (after its tag verified and [`ReplayWindow::check`] passed).
    pub(crate) fn mark(&mut self, n: u64) {
        match self.newest {
            Some(newest) if n > newest => {
                if n - newest >= REPLAY_WINDOW {
                    self.seen = [0; (REPLAY_WINDOW / 64) as usize];
                } else {
                    for m in newest + 1..n {
                        let (word, mask) = Self::bit(m);
                        if let Some(w) = self.seen.get_mut(word) {
                            *w &= !mask;
                        }
                    }
                }
                self.newest = Some(n);
            }
            None => self.newest = Some(n),
            Some(_) => {}
        }
        let (word, mask) = Self::bit(n);
        if let Some(w) = self.seen.get_mut(word) {
            *w |= mask;
        }
    }
}

// ---- connection layout -----------------------------------------------------------------

/// A sealed connection datagram split into its parts; nothing verified yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedParts<'a> {
    /// The type byte.
    pub ty: u8,
    /// The counter's low 32 bits.
    pub counter: u32,
    /// The encrypted body.
    pub ciphertext: &'a [u8],
    /// The tag.
    pub tag: &'a [u8],
}

impl<'a> SealedParts<'a> {
    /// Splits a connection-layout datagram (type, counter, ciphertext, tag), checking its
    /// type byte as plain mode does.
    pub fn split(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        if datagram.len() < SEALED_HEADER + TAG_LEN {
            return Err(DecodeError::TooShort { len: datagram.len() });
        }
        let ty = super::peek_type(datagram)?;
        let (head, rest) = datagram.split_at(SEALED_HEADER);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        let counter = Reader::new(head.get(1..).unwrap_or_default()).u32(Field::Counter)?;
        Ok(Self { ty, counter, ciphertext, tag })
    }

    /// The associated data of a sealed control datagram (and the start of a data
    /// datagram's): the type byte and the counter as sent.
    fn header(&self) -> [u8; SEALED_HEADER] {
        let mut h = [0; SEALED_HEADER];
        h[0] = self.ty;
        h[1..].copy_from_slice(&self.counter.to_le_bytes());
        h
    }

    /// Verifies and decrypts this datagram under `key` with its full counter `n` into
    /// `plain`: the type byte, then the decrypted body (for a data datagram, its fields
    /// and the digest of its ids, to decode with [`Key::opened`](super::Key::opened)).
    /// Nothing is written and false returned if the tag is wrong.
    pub fn open_into(&self, key: &AeadKey, n: u64, plain: &mut BytesMut) -> bool {
        let start = plain.len();
        plain.extend_from_slice(&[self.ty]);
        plain.extend_from_slice(self.ciphertext);
        let opened = plain.get_mut(start + 1..).is_some_and(|body| key.open(n, &self.header(), body, self.tag));
        if !opened {
            plain.truncate(start);
        }
        opened
    }
}

/// Seals a control datagram of the connection (`Ack` from the client, `Disconnect`,
/// `DisconnectAck`) under `key` with counter `n`; appends it to `out` and returns its
/// length.
pub(crate) fn encode_sealed_control<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
    out: &mut B,
    c: &Control<'_>,
    key: &AeadKey,
    n: u64,
) -> usize {
    let start = out.as_ref().len();
    if let Control::Moved { id, cookie } = c {
        // The id and the cookie stay in the clear, before the counter, so the receiving
        // host finds the connection and checks the cookie before any key work; everything
        // is associated data, and nothing is encrypted.
        out.put_u8(T_MOVED);
        out.put_u32_le(*id);
        out.put_slice(&cookie.0);
        out.put_u32_le(n as u32);
        let tag = key.seal(n, out.as_ref().get(start..).unwrap_or_default(), &mut []);
        out.put_slice(&tag);
        return out.as_ref().len() - start;
    }
    out.put_u8(c.type_byte());
    out.put_u32_le(n as u32);
    c.put_body(out, None);
    let tag = key.seal_datagram(n, out.as_mut().get_mut(start..).unwrap_or_default());
    out.put_slice(&tag);
    out.as_ref().len() - start
}

/// Length of a sealed moved datagram's clear part: type, id, cookie, counter.
const MOVED_CLEAR: usize = 1 + 4 + PATH_COOKIE_LEN + COUNTER_LEN;

/// A sealed moved datagram (`0x8B`), split: `type, id u32, cookie, counter u32, tag`, all
/// but the tag associated data.
#[derive(Clone, Copy, Debug)]
pub struct SealedMoved<'a> {
    /// The receiver's id for the connection.
    pub id: u32,
    /// The receiver's path cookie, echoed.
    pub cookie: PathCookie,
    /// The counter's low 32 bits.
    pub counter: u32,
    clear: &'a [u8],
    tag: &'a [u8],
}

impl<'a> SealedMoved<'a> {
    /// Splits a sealed moved datagram; anything but exactly that layout is an error.
    pub fn split(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        if datagram.first() != Some(&T_MOVED) {
            return Err(datagram.first().map_or(DecodeError::Empty, |&t| DecodeError::UnknownType(t)));
        }
        if datagram.len() < MOVED_CLEAR + TAG_LEN {
            return Err(DecodeError::TooShort { len: datagram.len() });
        }
        if datagram.len() > MOVED_CLEAR + TAG_LEN {
            return Err(DecodeError::TrailingBytes);
        }
        let (clear, tag) = datagram.split_at(MOVED_CLEAR);
        let mut r = Reader::new(clear.get(1..).unwrap_or_default());
        let id = r.u32(Field::Nonce)?;
        let mut cookie = [0; PATH_COOKIE_LEN];
        cookie.copy_from_slice(r.bytes(PATH_COOKIE_LEN, Field::Cookie)?);
        let counter = r.u32(Field::Counter)?;
        Ok(Self { id, cookie: PathCookie(cookie), counter, clear, tag })
    }

    /// Whether the tag verifies under `key` with the full counter `n`.
    pub fn verify(&self, key: &AeadKey, n: u64) -> bool {
        key.open(n, self.clear, &mut [], self.tag)
    }
}

/// Seals what `out` holds from `start` (associated data up to `body_from`, then the body)
/// and appends the tag; returns the datagram's length.
fn seal_from<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
    out: &mut B,
    start: usize,
    body_from: usize,
    key: &SecretKey,
    n: u64,
) -> usize {
    let (head, body) = out.as_mut().split_at_mut(body_from);
    let tag = seal(key, n, head.get(start..).unwrap_or_default(), body);
    out.put_slice(&tag);
    out.as_ref().len() - start
}

/// Opens a connection-layout control datagram whose full counter is `n`.
pub(crate) fn open_sealed_control(
    parts: &SealedParts<'_>,
    key: &AeadKey,
    n: u64,
) -> Result<Control<'static>, DecodeError> {
    if !matches!(parts.ty, T_ACK | T_DISCONNECT | T_DISCONNECT_ACK | T_PATH_CHALLENGE | T_PATH_RESPONSE) {
        return Err(DecodeError::UnknownType(parts.ty));
    }
    let mut buf = [0u8; MAX_CONTROL_BODY];
    let body = buf.get_mut(..parts.ciphertext.len()).ok_or(DecodeError::TrailingBytes)?;
    body.copy_from_slice(parts.ciphertext);
    if !key.open(n, &parts.header(), body, parts.tag) {
        return Err(DecodeError::BadChecksum);
    }
    Control::read_body(parts.ty, &mut Reader::new(body)).and_then(owned)
}

/// A decoded control datagram that borrows nothing (every type but a request).
fn owned(c: Control<'_>) -> Result<Control<'static>, DecodeError> {
    match c {
        Control::Request { .. } => Err(DecodeError::UnknownType(T_REQUEST)),
        c => Ok(c.without_data()),
    }
}

// ---- reply layout ----------------------------------------------------------------------

/// Seals a reply to a request (`RequestAck`, `Ack`, `AckOther`, `Refuse`, `Challenge`)
/// under the reply key `key` with `salt`: `type, salt u64, body, tag`. Appends it to
/// `out` and returns its length.
pub fn encode_reply<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
    out: &mut B,
    c: &Control<'_>,
    key: &SecretKey,
    salt: u64,
) -> usize {
    let start = out.as_ref().len();
    out.put_u8(c.type_byte());
    out.put_u64_le(salt);
    c.put_body(out, None);
    seal_from(out, start, start + 1 + SALT_LEN, key, salt)
}

/// Opens a sealed reply with the reply key of this side's attempt.
pub fn open_reply(datagram: &[u8], key: &SecretKey) -> Result<Control<'static>, DecodeError> {
    let head_len = 1 + SALT_LEN;
    if datagram.len() < head_len + TAG_LEN {
        return Err(DecodeError::TooShort { len: datagram.len() });
    }
    let ty = super::peek_type(datagram)?;
    if !(T_REQUEST_ACK..=T_CHALLENGE).contains(&ty) {
        return Err(DecodeError::UnknownType(ty));
    }
    let (head, rest) = datagram.split_at(head_len);
    let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
    let salt = u64::from_le_bytes(head.get(1..).and_then(|s| s.try_into().ok()).unwrap_or_default());
    let mut buf = [0u8; MAX_REPLY_BODY];
    let body = buf.get_mut(..ciphertext.len()).ok_or(DecodeError::TrailingBytes)?;
    body.copy_from_slice(ciphertext);
    if !open(key, salt, head, body, tag) {
        return Err(DecodeError::BadChecksum);
    }
    Control::read_body(ty, &mut Reader::new(body)).and_then(owned)
}

// ---- request layout --------------------------------------------------------------------

/// A sealed connection request split into its parts; nothing verified yet.
///
/// ```text
/// 0x80 | token_len u16 | token (token_len bytes) | nonce u32 | counter u32
///      | body (encrypted: the request's fields, zero padding) | tag 16
/// ```
///
/// The associated data is everything before the body, so the request is bound to its
/// token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedRequest<'a> {
    /// The token's part for the server (see `crate::token`), opaque here.
    pub token: &'a [u8],
    /// The requester's nonce (repeated inside the body).
    pub nonce: u32,
    /// How many requests this attempt sent before this one.
    pub counter: u32,
    head: &'a [u8],
    ciphertext: &'a [u8],
    tag: &'a [u8],
}

impl<'a> SealedRequest<'a> {
    /// Splits a sealed request. Checks lengths and the type only.
    pub fn split(datagram: &'a [u8]) -> Result<Self, DecodeError> {
        if datagram.len() < SEALED_REQUEST_SIZE {
            return Err(DecodeError::Unpadded { len: datagram.len() });
        }
        let mut r = Reader::new(datagram);
        if r.u8(Field::Type)? != T_REQUEST {
            return Err(DecodeError::UnknownType(datagram.first().copied().unwrap_or(0)));
        }
        let token_len = r.uint(2, Field::Token)? as usize;
        let token = r.bytes(token_len, Field::Token)?;
        let nonce = r.u32(Field::Nonce)?;
        let counter = r.u32(Field::Counter)?;
        let head = datagram.get(..r.position()).unwrap_or_default();
        let rest = r.rest();
        if rest.len() < TAG_LEN {
            return Err(DecodeError::Truncated(Field::Payload));
        }
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        if ciphertext.len() > MAX_REQUEST_BODY {
            return Err(DecodeError::OutOfRange(Field::Payload));
        }
        Ok(Self { token, nonce, counter, head, ciphertext, tag })
    }

    /// Verifies the request with the token's client-to-server key and decodes its fields.
    pub fn open(&self, client_to_server: &SecretKey) -> Result<ConnectRequest, DecodeError> {
        let key = client_to_server.derive(Use::Request, self.nonce, 0);
        let mut buf = [0u8; MAX_REQUEST_BODY];
        let body = buf.get_mut(..self.ciphertext.len()).ok_or(DecodeError::OutOfRange(Field::Payload))?;
        body.copy_from_slice(self.ciphertext);
        if !open(&key, u64::from(self.counter), self.head, body, self.tag) {
            return Err(DecodeError::BadChecksum);
        }
        let mut r = Reader::new(body);
        let (request, _) = read_request(&mut r, false)?;
        if request.nonce != self.nonce {
            return Err(DecodeError::OutOfRange(Field::Nonce));
        }
        if r.rest().iter().any(|&b| b != 0) {
            return Err(DecodeError::NonZeroPadding);
        }
        Ok(request)
    }
}

/// Seals a request carrying `token` (the server's part of a connect token): appends it to
/// `out` and returns its length. `counter` numbers the attempt's requests from 0.
pub fn encode_request<B: BufMut + AsRef<[u8]> + AsMut<[u8]>>(
    out: &mut B,
    token: &[u8],
    request: &ConnectRequest,
    counter: u32,
    client_to_server: &SecretKey,
) -> usize {
    let start = out.as_ref().len();
    out.put_u8(T_REQUEST);
    out.put_u16_le(token.len().min(usize::from(u16::MAX)) as u16);
    out.put_slice(token);
    out.put_u32_le(request.nonce);
    out.put_u32_le(counter);
    let head_end = out.as_ref().len();
    Control::request(*request).put_body(out, None);
    let unpadded = out.as_ref().len() - start + TAG_LEN;
    out.put_bytes(0, SEALED_REQUEST_SIZE.saturating_sub(unpadded));
    let key = client_to_server.derive(Use::Request, request.nonce, 0);
    seal_from(out, start, head_end, &key, u64::from(counter))
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use chacha20poly1305::aead::AeadInOut;
    use chacha20poly1305::{ChaCha20Poly1305, KeyInit as _};

    use super::*;
    use crate::wire::{ChannelSet, Cookie, RefuseReason};

    const KEY: SecretKey = SecretKey([7; 32]);

    #[test]
    fn sealing_is_rfc_8439_chacha20_poly1305() {
        // RFC 8439 section 2.8.2's test vector.
        let key: [u8; 32] = core::array::from_fn(|i| 0x80 + i as u8);
        let nonce = [0x07, 0, 0, 0, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47];
        let ad = [0x50, 0x51, 0x52, 0x53, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7];
        let plaintext = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let aead = ChaCha20Poly1305::new(&key.into());
        let mut expected = plaintext.to_vec();
        let expected_tag = aead.encrypt_inout_detached(&nonce.into(), &ad, (&mut expected[..]).into()).unwrap();
        let expected_tag: [u8; 16] = expected_tag.into();
        assert_eq!(
            expected_tag,
            [0x1a, 0xe1, 0x0b, 0x59, 0x4f, 0x09, 0xe2, 0x6a, 0x7e, 0x90, 0x2e, 0xcb, 0xd0, 0x60, 0x06, 0x91]
        );
        // Our nonce is four zero bytes and a u64: compare with the crate on such nonces.
        for n in [0u64, 1, 0x4746_4544_4342_4140, u64::MAX] {
            let mut theirs = plaintext.to_vec();
            let their_tag: [u8; 16] =
                aead.encrypt_inout_detached(&nonce_of(n), &ad, (&mut theirs[..]).into()).unwrap().into();
            let k = SecretKey(key);
            let mut ours = plaintext.to_vec();
            assert_eq!(seal(&k, n, &ad, &mut ours), their_tag);
            assert_eq!(ours, theirs);
            assert!(open(&k, n, &ad, &mut ours, &their_tag));
            assert_eq!(ours, plaintext);
        }
    }

    fn nonce_of(n: u64) -> chacha20poly1305::Nonce {
        nonce(n).into()
    }

    #[test]
    fn derived_keys_separate_uses_attempts_and_versions() {
        let keys = [
            KEY.derive(Use::Request, 1, 0),
            KEY.derive(Use::Reply, 1, 0),
            KEY.derive(Use::ClientToServer, 1, 2),
            KEY.derive(Use::ServerToClient, 1, 2),
            KEY.derive(Use::ClientToServer, 1, 3),
            KEY.derive(Use::ClientToServer, 2, 2),
            SecretKey([8; 32]).derive(Use::ClientToServer, 1, 2),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(format!("{KEY:?}"), "SecretKey(..)");
    }

    #[test]
    fn a_flipped_bit_anywhere_fails_the_tag() {
        let mut body = b"hello, sealed world".to_vec();
        let tag = seal(&KEY, 9, b"head", &mut body);
        for i in 0..body.len() * 8 {
            let mut b = body.clone();
            b[i / 8] ^= 1 << (i % 8);
            assert!(!open(&KEY, 9, b"head", &mut b, &tag));
        }
        // A failed open leaves the body unusable: each attempt takes a fresh copy.
        assert!(!open(&KEY, 10, b"head", &mut body.clone(), &tag), "another nonce");
        assert!(!open(&KEY, 9, b"hea", &mut body.clone(), &tag), "other associated data");
        assert!(!open(&KEY, 9, b"head", &mut body.clone(), &tag[..15]), "a short tag");
        let mut b = body.clone();
        assert!(open(&KEY, 9, b"head", &mut b, &tag));
        assert_eq!(b, b"hello, sealed world");
    }

    #[test]
    fn counters_expand_to_the_nearest_and_never_wrap_below_zero() {
        assert_eq!(expand_counter(5, 0), 5);
        assert_eq!(expand_counter(u32::MAX, 0), u64::from(u32::MAX), "no counter below zero");
        assert_eq!(expand_counter(3, (1 << 32) - 2), (1 << 32) + 3);
        assert_eq!(expand_counter(u32::MAX - 1, (1 << 32) + 2), (1 << 32) - 2);
        assert_eq!(expand_counter(7, (5 << 32) + 9), (5 << 32) + 7);
        assert_eq!(expand_counter(0, u64::MAX), u64::MAX - u64::from(u32::MAX), "no counter above the top");
    }

    #[test]
    fn the_replay_window_takes_each_counter_once_and_nothing_too_old() {
        let mut w = ReplayWindow::default();
        assert_eq!(w.check(5), Ok(()));
        w.mark(5);
        assert_eq!(w.check(5), Err(DecodeError::Replayed));
        assert_eq!(w.check(4), Ok(()), "reordered, not yet seen");
        w.mark(4);
        assert_eq!(w.check(4), Err(DecodeError::Replayed));
        w.mark(5 + REPLAY_WINDOW);
        assert_eq!(w.check(5), Err(DecodeError::Replayed), "out of the window");
        assert_eq!(w.check(6), Ok(()));
        w.mark(6);
        assert_eq!(w.check(6), Err(DecodeError::Replayed));
        // A jump beyond the window forgets the old bits; the bits it passes over are clear.
        w.mark(10 * REPLAY_WINDOW);
        for n in 9 * REPLAY_WINDOW + 1..10 * REPLAY_WINDOW {
            assert_eq!(w.check(n), Ok(()));
        }
        assert_eq!(w.reference(), 10 * REPLAY_WINDOW);
    }

    fn request() -> ConnectRequest {
        ConnectRequest {
            nonce: 0xABCD_0001,
            frame_base: 9,
            packet_base: 10,
            app_version: 3,
            channels: 255,
            mtu: 1200,
            max_packet: 1 << 20,
            bandwidth_in: u32::MAX,
            bandwidth_out: u32::MAX,
            cookie: None,
            unordered: (0..255).collect(),
        }
    }

    #[test]
    fn requests_and_replies_roundtrip_and_no_reply_outgrows_the_smallest_request() {
        let token = [0x55; 40];
        let mut req = Vec::new();
        let n = encode_request(&mut req, &token, &request(), 3, &KEY);
        assert_eq!(n, req.len());
        assert!(n >= SEALED_REQUEST_SIZE);
        let split = SealedRequest::split(&req).unwrap();
        assert_eq!((split.token, split.nonce, split.counter), (&token[..], request().nonce, 3));
        assert_eq!(split.open(&KEY), Ok(request()));
        assert_eq!(split.open(&SecretKey([1; 32])), Err(DecodeError::BadChecksum));
        let with_cookie = ConnectRequest { cookie: Some(Cookie([1; 16])), unordered: ChannelSet::EMPTY, ..request() };
        let mut req2 = Vec::new();
        encode_request(&mut req2, &[], &with_cookie, 0, &KEY);
        assert_eq!(req2.len(), SEALED_REQUEST_SIZE, "padded");
        assert_eq!(SealedRequest::split(&req2).unwrap().open(&KEY), Ok(with_cookie));

        let reply_key = KEY.derive(Use::Reply, 1, 0);
        for c in [
            Control::RequestAck(request()),
            Control::Ack,
            Control::AckOther { acked: 77 },
            Control::Refuse(RefuseReason::Rejected(u32::MAX)),
            Control::Challenge(Cookie([9; 16])),
        ] {
            let mut out = Vec::new();
            let n = encode_reply(&mut out, &c, &reply_key, 0xFEED);
            assert!(n <= SEALED_REQUEST_SIZE, "{c:?} is {n} bytes");
            assert_eq!(open_reply(&out, &reply_key), Ok(c));
            assert_eq!(open_reply(&out, &KEY), Err(DecodeError::BadChecksum));
            let mut bad = out.clone();
            bad[1] ^= 1; // the salt is authenticated too
            assert_eq!(open_reply(&bad, &reply_key), Err(DecodeError::BadChecksum));
        }
        for c in [
            Control::Ack,
            Control::Disconnect { code: u32::MAX },
            Control::DisconnectAck,
            Control::PathChallenge { data: u64::MAX - 1 },
            Control::PathResponse { data: 3 },
        ] {
            let mut out = Vec::new();
            encode_sealed_control(&mut out, &c, &AeadKey::new(KEY), (1 << 32) + 5);
            let parts = SealedParts::split(&out).unwrap();
            assert_eq!(parts.counter, 5);
            assert_eq!(open_sealed_control(&parts, &AeadKey::new(KEY), (1 << 32) + 5), Ok(c));
            assert_eq!(
                open_sealed_control(&parts, &AeadKey::new(KEY), 5),
                Err(DecodeError::BadChecksum),
                "misexpanded counter"
            );
        }
    }

    /// A sealed moved keeps its id and cookie in the clear where a plain one has them (the
    /// host reads them before any key work), and its tag covers them: changing either, or
    /// the counter, fails it.
    #[test]
    fn a_sealed_moved_is_clear_where_a_host_reads_it_and_authentic() {
        let key = AeadKey::new(KEY);
        let cookie = PathCookie([7; PATH_COOKIE_LEN]);
        let mut out = Vec::new();
        let n = encode_sealed_control(&mut out, &Control::Moved { id: 0x0102_0304, cookie }, &key, 41);
        assert_eq!(n, out.len());
        assert_eq!(n, super::super::MOVED_DATAGRAM + TAG_LEN);
        assert_eq!(super::super::peek_moved(&out), Some((0x0102_0304, cookie)));
        let m = SealedMoved::split(&out).unwrap();
        assert_eq!((m.id, m.cookie, m.counter), (0x0102_0304, cookie, 41));
        assert!(m.verify(&key, 41));
        assert!(!m.verify(&key, 41 + (1 << 32)), "another full counter");
        assert!(!m.verify(&AeadKey::new(SecretKey([9; 32])), 41), "another key");
        for i in 1..17 {
            let mut forged = out.clone();
            forged[i] ^= 1;
            let m = SealedMoved::split(&forged).unwrap();
            assert!(!m.verify(&key, u64::from(m.counter)), "byte {i} is authenticated");
        }
        assert_eq!(SealedMoved::split(&out[..out.len() - 1]).unwrap_err(), DecodeError::TooShort { len: n - 1 });
        let mut long = out.clone();
        long.push(0);
        assert_eq!(SealedMoved::split(&long).unwrap_err(), DecodeError::TrailingBytes);
        assert_eq!(SealedMoved::split(&[0x88; 40]).unwrap_err(), DecodeError::UnknownType(0x88));
    }

    #[test]
    fn malformed_sealed_datagrams_give_precise_errors() {
        assert_eq!(SealedRequest::split(&[0x80; 10]).unwrap_err(), DecodeError::Unpadded { len: 10 });
        let mut req = Vec::new();
        encode_request(&mut req, &[1; 20], &request(), 0, &KEY);
        req[0] = 0x81;
        assert_eq!(SealedRequest::split(&req).unwrap_err(), DecodeError::UnknownType(0x81));
        req[0] = 0x80;
        req[1] = 0xFF;
        req[2] = 0xFF;
        assert_eq!(SealedRequest::split(&req).unwrap_err(), DecodeError::Truncated(Field::Token));
        let mut long = Vec::new();
        encode_request(&mut long, &[], &request(), 0, &KEY);
        long.splice(15..15, [0; MAX_REQUEST_BODY]);
        assert_eq!(SealedRequest::split(&long).unwrap_err(), DecodeError::OutOfRange(Field::Payload));
        assert_eq!(SealedParts::split(&[0x40; 20]).unwrap_err(), DecodeError::TooShort { len: 20 });
        assert_eq!(open_reply(&[0x86; 30], &KEY), Err(DecodeError::UnknownType(0x86)));
        let mut out = Vec::new();
        encode_sealed_control(&mut out, &Control::DisconnectAck, &AeadKey::new(KEY), 1);
        let parts = SealedParts { ty: T_REQUEST_ACK, ..SealedParts::split(&out).unwrap() };
        assert_eq!(open_sealed_control(&parts, &AeadKey::new(KEY), 1), Err(DecodeError::UnknownType(T_REQUEST_ACK)));
    }
}
