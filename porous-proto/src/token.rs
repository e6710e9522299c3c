//! Connect tokens: how a game's backend vouches for a client to its servers (secure mode).
//!
//! The backend (a matchmaker, a login service: the application's own program) shares a
//! [`PrivateKey`] with its game servers. For each client it admits it calls [`generate`]
//! (or [`generate_from_entropy`]) with [`TokenParams`]: the client's id, the servers the
//! token is valid for, when it was made and when it expires, the connection's timeout,
//! and up to [`MAX_USER_DATA`] bytes of its own. The result is plain bytes, carried to
//! the client however the game likes (HTTPS, a launcher); the client hands them to
//! [`Host::connect_with_token`](crate::Host::connect_with_token).
//!
//! A token has two parts:
//!
//! - the **client's**, in the clear: the times, the timeout, the server addresses, and two
//!   fresh random keys, one per direction, with which the client seals everything it sends
//!   and opens everything it receives;
//! - the **server's**, sealed with the private key (XChaCha20-Poly1305, a fresh 24-byte
//!   random nonce per token, the expiry time as associated data): the client id, the
//!   timeout, the addresses, the same two keys, and the user data. The client cannot read
//!   or change it; it sends it in its connection request, and a server holding the
//!   private key opens it, checks the expiry against the time it is given and its own
//!   address against the list, and so learns the keys without any exchange.
//!
//! `docs/wire-format.md` gives both layouts byte by byte; `docs/security.md` what a token
//! protects and what it does not. Decoding never panics and allocates only after the
//! sealed part has verified; every failure is a precise [`TokenError`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};

use crate::wire::WIRE_VERSION;
use crate::wire::codec::Reader;
use crate::wire::secure::SecretKey;
use crate::wire::{DecodeError, Field};

pub use crate::config::{MAX_SERVER_ADDRESSES, PrivateKey};
pub use crate::event::TokenError;

/// Most bytes of user data a token may carry.
pub const MAX_USER_DATA: usize = 256;
/// Length of the 24-byte XChaCha20-Poly1305 nonce of a token's sealed part.
pub const TOKEN_NONCE_LEN: usize = 24;
/// Length of the tag that seals a token's server part.
pub const TOKEN_TAG_LEN: usize = 16;
/// Longest plaintext of a server part: id, timeout, the most addresses (IPv6), both keys,
/// the most user data.
pub(crate) const PRIVATE_MAX: usize = 8 + 4 + 1 + MAX_SERVER_ADDRESSES * ADDRESS_MAX + 64 + 2 + MAX_USER_DATA;
/// Longest encoded address: kind, IPv6, port.
const ADDRESS_MAX: usize = 1 + 16 + 2;
/// Longest server part: expiry, nonce, the sealed plaintext and its tag.
pub const MAX_SERVER_PART: usize = 8 + TOKEN_NONCE_LEN + PRIVATE_MAX + TOKEN_TAG_LEN;
/// The first bytes of every token: the protocol, its wire version, `'T'`.
const MAGIC: [u8; 8] = [b'P', b'O', b'R', b'O', b'U', b'S', WIRE_VERSION, b'T'];

impl PrivateKey {
    pub(crate) fn aead(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.to_bytes().into())
    }
}

/// What a backend vouches for in one token.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenParams {
    /// The application's id of the client (an account, a session): reaches the server's
    /// application with the connection.
    pub client_id: u64,
    /// The servers the token is valid for, 1 to [`MAX_SERVER_ADDRESSES`], as each server
    /// knows itself ([`SecureConfig::public_addresses`](crate::SecureConfig)).
    pub server_addresses: Vec<SocketAddr>,
    /// When the token was made, in seconds since the Unix epoch.
    pub created: u64,
    /// When the token stops being accepted, in seconds since the Unix epoch; after
    /// `created`. A connection made before then lasts as long as it is alive. Keep it
    /// short (tens of seconds): a token is a ticket to connect, not a session.
    pub expires: u64,
    /// The connection's timeout on both sides: nothing heard for this long ends it. Whole
    /// seconds, at least 1 (a server keeps it above twice its keepalive interval).
    pub timeout: Duration,
    /// The backend's bytes for the server's application (at most [`MAX_USER_DATA`]): a
    /// player's name, a match id, rights. Encrypted; only the servers can read it.
    pub user_data: Vec<u8>,
}

impl TokenParams {
    /// A token for `client_id` at `server_addresses`, made at `now` (Unix seconds) and
    /// valid for `valid_for`, with a 10 s connection timeout and no user data.
    pub fn new(client_id: u64, server_addresses: Vec<SocketAddr>, now: u64, valid_for: Duration) -> Self {
        Self {
            client_id,
            server_addresses,
            created: now,
            expires: now.saturating_add(valid_for.as_secs()),
            timeout: Duration::from_secs(10),
            user_data: Vec::new(),
        }
    }

    fn validate(&self) -> Result<u32, TokenError> {
        if self.server_addresses.is_empty() {
            return Err(TokenError::NoAddresses);
        }
        if self.server_addresses.len() > MAX_SERVER_ADDRESSES {
            return Err(TokenError::TooManyAddresses);
        }
        if self.user_data.len() > MAX_USER_DATA {
            return Err(TokenError::UserDataTooLong);
        }
        if self.expires <= self.created {
            return Err(TokenError::Times);
        }
        match u32::try_from(self.timeout.as_secs()) {
            Ok(t) if t >= 1 => Ok(t),
            _ => Err(TokenError::Timeout),
        }
    }
}

/// Length and other decoding failures of a token's fields are [`TokenError::Length`].
impl From<DecodeError> for TokenError {
    fn from(_: DecodeError) -> Self {
        Self::Length
    }
}

/// Generates a token with keys and nonce from `rng`. For production use
/// [`generate_from_entropy`]; a seeded generator makes tests repeatable.
///
/// ```
/// use std::time::Duration;
/// use porous_proto::token::{self, ConnectToken, PrivateKey, TokenParams};
///
/// let mut rng = rand_pcg::Pcg64Mcg::new(7);
/// let key = PrivateKey::generate(&mut rng);
/// let mut params = TokenParams::new(42, vec!["203.0.113.5:7777".parse()?], 1_700_000_000, Duration::from_secs(30));
/// params.user_data = b"name=ada".to_vec();
/// let bytes = token::generate(&key, &params, &mut rng)?;
/// // The client reads its part; the user data stays sealed for the server.
/// let token = ConnectToken::decode(&bytes)?;
/// assert_eq!(token.expires(), 1_700_000_030);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn generate(key: &PrivateKey, params: &TokenParams, rng: &mut impl rand_core::Rng) -> Result<Vec<u8>, TokenError> {
    let timeout = params.validate()?;
    let mut c2s = [0u8; 32];
    let mut s2c = [0u8; 32];
    let mut nonce = [0u8; TOKEN_NONCE_LEN];
    rng.fill_bytes(&mut c2s);
    rng.fill_bytes(&mut s2c);
    rng.fill_bytes(&mut nonce);

    let mut private = Vec::with_capacity(PRIVATE_MAX);
    private.extend_from_slice(&params.client_id.to_le_bytes());
    private.extend_from_slice(&timeout.to_le_bytes());
    put_addresses(&mut private, &params.server_addresses);
    private.extend_from_slice(&c2s);
    private.extend_from_slice(&s2c);
    private.extend_from_slice(&(params.user_data.len() as u16).to_le_bytes());
    private.extend_from_slice(&params.user_data);
    let tag = key
        .aead()
        .encrypt_inout_detached(&nonce.into(), &private_ad(params.expires), (&mut private[..]).into())
        .map_err(|_| TokenError::Length)?;

    let mut out = Vec::with_capacity(64 + MAX_SERVER_ADDRESSES * ADDRESS_MAX + MAX_SERVER_PART);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&params.created.to_le_bytes());
    out.extend_from_slice(&params.expires.to_le_bytes());
    out.extend_from_slice(&timeout.to_le_bytes());
    put_addresses(&mut out, &params.server_addresses);
    out.extend_from_slice(&c2s);
    out.extend_from_slice(&s2c);
    let server_len = 8 + TOKEN_NONCE_LEN + private.len() + TOKEN_TAG_LEN;
    out.extend_from_slice(&(server_len as u16).to_le_bytes());
    out.extend_from_slice(&params.expires.to_le_bytes());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&private);
    out.extend_from_slice(&tag);
    Ok(out)
}

/// [`generate`] with keys and nonce from the operating system's generator: what a backend
/// calls.
///
/// # Panics
///
/// If the operating system's generator fails (see [`Host::from_entropy`](crate::Host::from_entropy)).
#[cfg(feature = "os-random")]
#[cfg_attr(docsrs, doc(cfg(feature = "os-random")))]
pub fn generate_from_entropy(key: &PrivateKey, params: &TokenParams) -> Result<Vec<u8>, TokenError> {
    generate(key, params, &mut rand_core::UnwrapErr(getrandom::SysRng))
}

/// The associated data of a token's sealed part: the format and its expiry.
pub(crate) fn private_ad(expires: u64) -> [u8; 16] {
    let mut ad = [0u8; 16];
    ad[..8].copy_from_slice(&MAGIC);
    ad[8..].copy_from_slice(&expires.to_le_bytes());
    ad
}

fn put_addresses(out: &mut Vec<u8>, addresses: &[SocketAddr]) {
    out.push(addresses.len() as u8);
    for a in addresses {
        match a.ip() {
            IpAddr::V4(ip) => {
                out.push(4);
                out.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                out.push(6);
                out.extend_from_slice(&ip.octets());
            }
        }
        out.extend_from_slice(&a.port().to_le_bytes());
    }
}

/// Reads a count and that many addresses, calling `each` with each.
fn read_addresses(r: &mut Reader<'_>, mut each: impl FnMut(SocketAddr)) -> Result<(), TokenError> {
    let count = usize::from(r.u8(Field::Token)?);
    if count == 0 {
        return Err(TokenError::NoAddresses);
    }
    if count > MAX_SERVER_ADDRESSES {
        return Err(TokenError::TooManyAddresses);
    }
    for _ in 0..count {
        let ip = match r.u8(Field::Token)? {
            4 => {
                let o: [u8; 4] = r.bytes(4, Field::Token)?.try_into().map_err(|_| TokenError::Length)?;
                IpAddr::V4(Ipv4Addr::from(o))
            }
            6 => {
                let o: [u8; 16] = r.bytes(16, Field::Token)?.try_into().map_err(|_| TokenError::Length)?;
                IpAddr::V6(Ipv6Addr::from(o))
            }
            _ => return Err(TokenError::Address),
        };
        let port = r.uint(2, Field::Token)? as u16;
        each(SocketAddr::new(ip, port));
    }
    Ok(())
}

fn read_key(r: &mut Reader<'_>) -> Result<SecretKey, TokenError> {
    let bytes: [u8; 32] = r.bytes(32, Field::Token)?.try_into().map_err(|_| TokenError::Length)?;
    Ok(SecretKey::from_bytes(bytes))
}

fn read_u64(r: &mut Reader<'_>) -> Result<u64, TokenError> {
    let lo = r.u32(Field::Token)?;
    let hi = r.u32(Field::Token)?;
    Ok(u64::from(lo) | u64::from(hi) << 32)
}

/// A token as its client sees it: the clear part and the sealed server part it forwards.
/// Its `Debug` output hides the keys.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectToken {
    created: u64,
    expires: u64,
    timeout: u32,
    server_addresses: Vec<SocketAddr>,
    client_to_server: SecretKey,
    server_to_client: SecretKey,
    server_part: Vec<u8>,
}

impl core::fmt::Debug for ConnectToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ConnectToken")
            .field("created", &self.created)
            .field("expires", &self.expires)
            .field("timeout", &self.timeout)
            .field("server_addresses", &self.server_addresses)
            .finish_non_exhaustive()
    }
}

impl ConnectToken {
    /// Decodes a token's bytes (as [`generate`] made them). Checks the format, every
    /// length and the clear fields; the sealed part only a server can check.
    pub fn decode(bytes: &[u8]) -> Result<Self, TokenError> {
        let mut r = Reader::new(bytes);
        if r.bytes(MAGIC.len(), Field::Token).map_err(|_| TokenError::Format)? != MAGIC {
            return Err(TokenError::Format);
        }
        let created = read_u64(&mut r)?;
        let expires = read_u64(&mut r)?;
        if expires <= created {
            return Err(TokenError::Times);
        }
        let timeout = r.u32(Field::Token)?;
        if timeout == 0 {
            return Err(TokenError::Timeout);
        }
        let mut server_addresses = Vec::new();
        read_addresses(&mut r, |a| server_addresses.push(a))?;
        let client_to_server = read_key(&mut r)?;
        let server_to_client = read_key(&mut r)?;
        let server_len = r.uint(2, Field::Token)? as usize;
        if !(8 + TOKEN_NONCE_LEN + TOKEN_TAG_LEN..=MAX_SERVER_PART).contains(&server_len) {
            return Err(TokenError::Length);
        }
        let server_part = r.bytes(server_len, Field::Token)?;
        if !r.is_empty() {
            return Err(TokenError::Length);
        }
        // The server part repeats the expiry in the clear (its associated data).
        if read_u64(&mut Reader::new(server_part))? != expires {
            return Err(TokenError::Format);
        }
        Ok(Self {
            created,
            expires,
            timeout,
            server_addresses,
            client_to_server,
            server_to_client,
            server_part: server_part.to_vec(),
        })
    }

    /// When the token was made, in seconds since the Unix epoch.
    pub fn created(&self) -> u64 {
        self.created
    }

    /// When servers stop accepting it, in seconds since the Unix epoch.
    pub fn expires(&self) -> u64 {
        self.expires
    }

    /// The connection's timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.timeout))
    }

    /// The servers it is valid for.
    pub fn server_addresses(&self) -> &[SocketAddr] {
        &self.server_addresses
    }

    /// The sealed part the client forwards in its request.
    pub(crate) fn server_part(&self) -> &[u8] {
        &self.server_part
    }

    /// The keys: client to server, server to client.
    pub(crate) fn keys(&self) -> (SecretKey, SecretKey) {
        (self.client_to_server, self.server_to_client)
    }
}

/// What a server learns from a token's server part once it verifies.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    /// The client's id, as the backend gave it.
    pub client_id: u64,
    /// When the token expires, in seconds since the Unix epoch.
    pub expires: u64,
    /// The connection's timeout.
    pub timeout: Duration,
    /// The backend's user data.
    pub user_data: bytes::Bytes,
    addresses: smallvec::SmallVec<[SocketAddr; 2]>,
    client_to_server: SecretKey,
    server_to_client: SecretKey,
    id: [u8; TOKEN_TAG_LEN],
}

impl core::fmt::Debug for VerifiedToken {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("VerifiedToken")
            .field("client_id", &self.client_id)
            .field("expires", &self.expires)
            .field("timeout", &self.timeout)
            .field("user_data", &self.user_data.len())
            .field("addresses", &self.addresses)
            .finish_non_exhaustive()
    }
}

impl VerifiedToken {
    /// Opens a token's server part with the private key, at `now` (seconds since the Unix
    /// epoch): its expiry is checked first, then its seal; nothing is allocated for a part
    /// that fails either. Costs one XChaCha20-Poly1305 over at most
    /// [`MAX_SERVER_PART`] bytes.
    pub fn open(key: &PrivateKey, server_part: &[u8], now: u64) -> Result<Self, TokenError> {
        if !(8 + TOKEN_NONCE_LEN + TOKEN_TAG_LEN..=MAX_SERVER_PART).contains(&server_part.len()) {
            return Err(TokenError::Length);
        }
        let mut r = Reader::new(server_part);
        let expires = read_u64(&mut r)?;
        if expires <= now {
            return Err(TokenError::Expired);
        }
        let nonce: [u8; TOKEN_NONCE_LEN] =
            r.bytes(TOKEN_NONCE_LEN, Field::Token)?.try_into().map_err(|_| TokenError::Length)?;
        let sealed = r.rest();
        let (ciphertext, tag) = sealed.split_at(sealed.len() - TOKEN_TAG_LEN);
        let mut buf = [0u8; PRIVATE_MAX];
        let plain = buf.get_mut(..ciphertext.len()).ok_or(TokenError::Length)?;
        plain.copy_from_slice(ciphertext);
        let tag: [u8; TOKEN_TAG_LEN] = tag.try_into().map_err(|_| TokenError::Length)?;
        key.aead()
            .decrypt_inout_detached(&nonce.into(), &private_ad(expires), plain.into(), &tag.into())
            .map_err(|_| TokenError::Forged)?;
        // Authentic from here: only the backend can have made it.
        let mut r = Reader::new(plain);
        let client_id = read_u64(&mut r)?;
        let timeout = r.u32(Field::Token)?;
        let mut addresses = smallvec::SmallVec::new();
        read_addresses(&mut r, |a| addresses.push(a))?;
        let client_to_server = read_key(&mut r)?;
        let server_to_client = read_key(&mut r)?;
        let len = r.uint(2, Field::Token)? as usize;
        if len > MAX_USER_DATA {
            return Err(TokenError::UserDataTooLong);
        }
        let user_data = bytes::Bytes::copy_from_slice(r.bytes(len, Field::Token)?);
        if !r.is_empty() || timeout == 0 {
            return Err(TokenError::Length);
        }
        Ok(Self {
            client_id,
            expires,
            timeout: Duration::from_secs(u64::from(timeout)),
            user_data,
            addresses,
            client_to_server,
            server_to_client,
            id: tag,
        })
    }

    /// Whether the token names `address` among its servers.
    pub fn names(&self, address: SocketAddr) -> bool {
        self.addresses.contains(&address)
    }

    /// The servers it names.
    pub fn server_addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The keys: client to server, server to client.
    pub(crate) fn keys(&self) -> (SecretKey, SecretKey) {
        (self.client_to_server, self.server_to_client)
    }

    /// An identity unique to this token (its seal's tag): what the server remembers to
    /// refuse the token from a second address.
    pub(crate) fn id(&self) -> [u8; TOKEN_TAG_LEN] {
        self.id
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    fn rng() -> rand_pcg::Pcg64Mcg {
        rand_pcg::Pcg64Mcg::new(0x5eed)
    }

    fn params() -> TokenParams {
        let mut p = TokenParams::new(
            0xC0FFEE,
            vec!["10.0.0.2:9000".parse().unwrap(), "[2001:db8::1]:9000".parse().unwrap()],
            1_000,
            Duration::from_secs(30),
        );
        p.user_data = b"player=ada".to_vec();
        p
    }

    #[test]
    fn a_token_roundtrips_to_its_client_and_its_server() {
        let mut rng = rng();
        let key = PrivateKey::generate(&mut rng);
        let bytes = generate(&key, &params(), &mut rng).unwrap();
        let client = ConnectToken::decode(&bytes).unwrap();
        assert_eq!((client.created(), client.expires(), client.timeout()), (1_000, 1_030, Duration::from_secs(10)));
        assert_eq!(client.server_addresses(), &params().server_addresses[..]);
        let server = VerifiedToken::open(&key, client.server_part(), 1_029).unwrap();
        assert_eq!(server.client_id, 0xC0FFEE);
        assert_eq!(&server.user_data[..], b"player=ada");
        assert_eq!(server.keys(), client.keys());
        assert!(server.names("10.0.0.2:9000".parse().unwrap()));
        assert!(!server.names("10.0.0.3:9000".parse().unwrap()));
        // Fresh keys and nonce per token.
        let other = ConnectToken::decode(&generate(&key, &params(), &mut rng).unwrap()).unwrap();
        assert_ne!(other.keys(), client.keys());
        assert_ne!(other.server_part(), client.server_part());
        assert!(!format!("{client:?}{server:?}{key:?}").contains("SecretKey"));
    }

    #[test]
    fn expired_forged_and_tampered_tokens_are_refused() {
        let mut rng = rng();
        let key = PrivateKey::generate(&mut rng);
        let token = ConnectToken::decode(&generate(&key, &params(), &mut rng).unwrap()).unwrap();
        let part = token.server_part();
        assert_eq!(VerifiedToken::open(&key, part, 1_030).unwrap_err(), TokenError::Expired);
        let other = PrivateKey::generate(&mut rng);
        assert_eq!(VerifiedToken::open(&other, part, 0).unwrap_err(), TokenError::Forged);
        for i in 0..part.len() {
            let mut p = part.to_vec();
            p[i] ^= 0x10;
            let e = VerifiedToken::open(&key, &p, 0).unwrap_err();
            // A later expiry in the clear is caught by the seal, an earlier one may expire.
            assert!(matches!(e, TokenError::Forged | TokenError::Expired), "byte {i}: {e:?}");
        }
        assert_eq!(VerifiedToken::open(&key, &part[..40], 0).unwrap_err(), TokenError::Length);
        assert_eq!(VerifiedToken::open(&key, &[0; MAX_SERVER_PART + 1], 0).unwrap_err(), TokenError::Length);
    }

    #[test]
    fn bad_params_and_bad_bytes_give_precise_errors() {
        let mut rng = rng();
        let key = PrivateKey::generate(&mut rng);
        let mut p = params();
        p.server_addresses.clear();
        assert_eq!(generate(&key, &p, &mut rng), Err(TokenError::NoAddresses));
        p.server_addresses = vec!["10.0.0.1:1".parse().unwrap(); MAX_SERVER_ADDRESSES + 1];
        assert_eq!(generate(&key, &p, &mut rng), Err(TokenError::TooManyAddresses));
        let mut p = params();
        p.user_data = vec![0; MAX_USER_DATA + 1];
        assert_eq!(generate(&key, &p, &mut rng), Err(TokenError::UserDataTooLong));
        let mut p = params();
        p.expires = p.created;
        assert_eq!(generate(&key, &p, &mut rng), Err(TokenError::Times));
        let mut p = params();
        p.timeout = Duration::from_millis(500);
        assert_eq!(generate(&key, &p, &mut rng), Err(TokenError::Timeout));

        // The largest token: every address IPv6, all the user data.
        let mut p = params();
        p.server_addresses = vec!["[2001:db8::1]:1".parse().unwrap(); MAX_SERVER_ADDRESSES];
        p.user_data = vec![1; MAX_USER_DATA];
        let big = generate(&key, &p, &mut rng).unwrap();
        let t = ConnectToken::decode(&big).unwrap();
        assert_eq!(t.server_part().len(), MAX_SERVER_PART);
        assert_eq!(VerifiedToken::open(&key, t.server_part(), 0).unwrap().user_data.len(), MAX_USER_DATA);

        let good = generate(&key, &params(), &mut rng).unwrap();
        assert_eq!(ConnectToken::decode(&good[..5]), Err(TokenError::Format));
        let mut b = good.clone();
        b[6] ^= 1; // another wire version
        assert_eq!(ConnectToken::decode(&b), Err(TokenError::Format));
        for cut in 8..good.len() {
            assert!(ConnectToken::decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut b = good.clone();
        b.push(0);
        assert_eq!(ConnectToken::decode(&b), Err(TokenError::Length));
        let mut b = good.clone();
        b[28] = 0; // no address
        assert_eq!(ConnectToken::decode(&b), Err(TokenError::NoAddresses));
        let mut b = good;
        b[29] = 5; // an address of no kind
        assert_eq!(ConnectToken::decode(&b), Err(TokenError::Address));
    }
}
