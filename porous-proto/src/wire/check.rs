//! The integrity check every datagram ends with.
//!
//! The check is a CRC-32 (IEEE) over a *key* followed by the datagram's logical content.
//! The key is never sent; it is key material hashed into the CRC's starting state:
//!
//! | key | material | used by |
//! |---|---|---|
//! | [`Key::version`] | `"POROUS"`, wire version, `'V'` | connection requests |
//! | [`Key::reply`] | ... `'R'`, the requester's nonce | every reply to a request |
//! | [`Key::connection`] | ... `'C'`, sender's nonce, receiver's nonce | everything once connected |
//!
//! So a datagram of another protocol version, a reply to a request its receiver never
//! made, and a frame of another connection (or reflected back at its own sender) all fail
//! the check, before any state changes, without spending a byte on ids.
//!
//! The logical content is the datagram up to the check, with the full value of every
//! truncated field (see [`super::data`]) inserted right after that field as a 4-byte
//! little-endian integer. A receiver that expands a truncated id wrongly therefore computes
//! a different check and drops the datagram, instead of misreading the id.
//!
//! This is integrity against corruption and blind (off-path) forgery: guessing a key
//! succeeds with probability 2^-32 per datagram. It is not cryptographic authentication
//! against an on-path attacker who can read the handshake.

use super::WIRE_VERSION;
use super::secure::{SEAL_EXTRA, SecretKey};

/// How a datagram is checked: in plain mode a precomputed checksum key (the CRC state after
/// the key material); in secure mode a connection key and the datagram's counter, which
/// seal a connection datagram with ChaCha20-Poly1305 instead (`wire::secure`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key(Inner);

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Inner {
    Crc(u32),
    Sealed { key: SecretKey, counter: u64 },
    Unsealed { counter: u64 },
    Opened,
}

impl core::fmt::Debug for Key {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Keys are secrets against blind spoofing; keep them out of logs.
        f.write_str("Key(..)")
    }
}

const MATERIAL: [u8; 7] = [b'P', b'O', b'R', b'O', b'U', b'S', WIRE_VERSION];

/// The plain key derived from `class` and `nonces`.
fn crc_material(class: u8, nonces: &[u32]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&MATERIAL);
    h.update(&[class]);
    for n in nonces {
        h.update(&n.to_le_bytes());
    }
    h.finalize()
}

/// A plain connection key in its four bytes, as a connection keeps it: a [`Key`] has room
/// for a sealing key (48 bytes), and a peer keeps three plain ones for its whole life.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlainKey(u32);

impl PlainKey {
    /// [`Key::connection`], kept small.
    pub(crate) fn connection(sender_nonce: u32, receiver_nonce: u32) -> Self {
        Self(crc_material(b'C', &[sender_nonce, receiver_nonce]))
    }

    pub(crate) fn key(self) -> Key {
        Key(Inner::Crc(self.0))
    }
}

impl core::fmt::Debug for PlainKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("PlainKey(..)")
    }
}

impl Key {
    fn from_material(class: u8, nonces: &[u32]) -> Self {
        Self(Inner::Crc(crc_material(class, nonces)))
    }

    /// Secure mode: a connection datagram sealed with `key` as the sender's datagram number
    /// `counter` (each counter seals one datagram only). Only [`DataWriter`] takes such a
    /// key; control datagrams have their own sealed layouts in `wire::secure`.
    ///
    /// [`DataWriter`]: super::DataWriter
    pub fn sealed(key: SecretKey, counter: u64) -> Self {
        Self(Inner::Sealed { key, counter })
    }

    /// Secure mode, sending: [`Key::sealed`]'s layout without the tag; the caller seals
    /// the datagram with its connection's cipher ([`AeadKey::seal_datagram`]), made once
    /// for all its datagrams.
    ///
    /// [`AeadKey::seal_datagram`]: super::secure::AeadKey::seal_datagram
    pub(crate) fn unsealed(counter: u64) -> Self {
        Self(Inner::Unsealed { counter })
    }

    /// The counter a sealed datagram carries after its type byte.
    pub(crate) fn counter(&self) -> Option<u64> {
        match self.0 {
            Inner::Sealed { counter, .. } | Inner::Unsealed { counter } => Some(counter),
            Inner::Crc(_) | Inner::Opened => None,
        }
    }

    /// Secure mode, receiving: the plaintext of a sealed data datagram whose tag verified
    /// ([`SealedParts::open_into`]), which ends with the digest of its full ids instead of
    /// a check. [`Data::decode`] takes it; what it verifies is only that every truncated
    /// id expanded as the sender meant (the tag already authenticated the rest).
    ///
    /// [`SealedParts::open_into`]: super::secure::SealedParts::open_into
    /// [`Data::decode`]: super::Data::decode
    pub fn opened() -> Self {
        Self(Inner::Opened)
    }

    /// Bytes a datagram checked with this key takes beyond the same datagram in plain mode:
    /// 0, or [`SEAL_EXTRA`] for a sealed one.
    pub fn extra_len(&self) -> usize {
        match self.0 {
            Inner::Crc(_) | Inner::Opened => 0,
            Inner::Sealed { .. } | Inner::Unsealed { .. } => SEAL_EXTRA,
        }
    }

    /// The sealing key and counter, in secure mode.
    pub(crate) fn sealing(&self) -> Option<(SecretKey, u64)> {
        match self.0 {
            Inner::Crc(_) | Inner::Unsealed { .. } | Inner::Opened => None,
            Inner::Sealed { key, counter } => Some((key, counter)),
        }
    }

    /// The key of connection requests: the protocol and its wire version only.
    pub fn version() -> Self {
        Self::from_material(b'V', &[])
    }

    /// The key of every reply to a connection request carrying `requester_nonce`.
    pub fn reply(requester_nonce: u32) -> Self {
        Self::from_material(b'R', &[requester_nonce])
    }

    /// The key of datagrams sent by the side whose nonce is `sender_nonce` to the side whose
    /// nonce is `receiver_nonce`. The two directions of a connection use different keys.
    pub fn connection(sender_nonce: u32, receiver_nonce: u32) -> Self {
        Self::from_material(b'C', &[sender_nonce, receiver_nonce])
    }
}

/// A running check over a datagram's logical content: a keyed CRC in plain mode; in secure
/// mode a CRC-32 of the full values of truncated fields alone, the digest that ends a
/// sealed datagram's plaintext (the AEAD authenticates the bytes themselves;
/// `wire::secure::ID_DIGEST_LEN` says why the digest is enough).
#[derive(Debug)]
pub(crate) enum Check {
    Crc(crc32fast::Hasher),
    Sealed(crc32fast::Hasher),
}

impl Check {
    pub(crate) fn new(key: Key) -> Self {
        match key.0 {
            Inner::Crc(k) => Self::Crc(crc32fast::Hasher::new_with_initial(k)),
            Inner::Sealed { .. } | Inner::Unsealed { .. } | Inner::Opened => Self::Sealed(crc32fast::Hasher::new()),
        }
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        match self {
            Self::Crc(h) => h.update(bytes),
            Self::Sealed(_) => {}
        }
    }

    /// Folds in the full value of a truncated field.
    pub(crate) fn full_id(&mut self, full: u32) {
        match self {
            Self::Crc(h) => h.update(&full.to_le_bytes()),
            Self::Sealed(h) => h.update(&full.to_le_bytes()),
        }
    }

    /// The CRC: the check itself in plain mode, the digest of the full ids in secure mode.
    pub(crate) fn finish(self) -> u32 {
        match self {
            Self::Crc(h) | Self::Sealed(h) => h.finalize(),
        }
    }
}

/// Computes the check of a datagram with no truncated fields and compares it with the last
/// four bytes.
pub(crate) fn verify_plain(datagram: &[u8], key: Key) -> bool {
    if !matches!(key.0, Inner::Crc(_)) {
        // A sealed key has no CRC: nothing verifies against it here.
        return false;
    }
    let (body, check) = datagram.split_at(datagram.len() - super::CHECK_LEN);
    let mut c = Check::new(key);
    c.bytes(body);
    c.finish().to_le_bytes() == check
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_separate_classes_directions_and_nonces() {
        let keys = [
            Key::version(),
            Key::reply(1),
            Key::reply(2),
            Key::connection(1, 2),
            Key::connection(2, 1),
            Key::connection(1, 3),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn keyed_check_differs_from_unkeyed_and_detects_implicit_values() {
        let mut a = Check::new(Key::version());
        a.bytes(b"abc");
        a.full_id(7);
        let mut b = Check::new(Key::version());
        b.bytes(b"abc");
        b.full_id(8);
        assert_ne!(a.finish(), b.finish());
        assert_ne!(crc32fast::hash(b"abc"), {
            let mut c = Check::new(Key::version());
            c.bytes(b"abc");
            c.finish()
        });
    }

    #[test]
    fn key_debug_hides_the_secret() {
        assert_eq!(format!("{:?}", Key::connection(5, 6)), "Key(..)");
        assert_eq!(format!("{:?}", Key::sealed(SecretKey::from_bytes([1; 32]), 2)), "Key(..)");
    }
}
