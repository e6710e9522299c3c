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

/// The CRC-32 (IEEE) tables for four bytes at a time: `TABLES[0]` is the byte-wise table,
/// `TABLES[k]` advances a byte's contribution by `k` more bytes of zeros.
const TABLES: [[u32; 256]; 4] = crc_tables();

// Evaluated at compile time only: an index out of bounds would fail the build.
#[allow(clippy::indexing_slicing)]
const fn crc_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// Pieces at least this long go to `crc32fast`: its folding wins over four bytes at a
/// time once a piece is long, and below this its per-call dispatch costs more than the
/// bytes (callgrind, `hosts` game and `active` bench: 16 and 64 both did worse).
const LONG_PIECE: usize = 32;

/// A CRC-32 (IEEE) fed in pieces, as `crc32fast::Hasher` computes it, byte for byte.
///
/// A datagram's check is fed many short pieces: the bytes between truncated ids (often
/// a few), and each id's full value (four). `crc32fast` spent about 40 instructions a
/// call on those, 20 calls per datagram pair of a 60 Hz game; four bytes at a time
/// through the tables is a dozen, and long pieces still go to `crc32fast`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Crc(u32);

impl Crc {
    /// `table`'s entry for the low byte of `x` (masked, so it is always there: the lookup
    /// compiles without a bounds check).
    #[inline]
    fn entry(table: &[u32; 256], x: u32) -> u32 {
        table.get((x & 0xff) as usize).copied().unwrap_or(0)
    }

    /// One step of four bytes, `word` little-endian, on the inverted register `crc`.
    #[inline]
    fn step(crc: u32, word: u32) -> u32 {
        let [t0, t1, t2, t3] = &TABLES;
        let x = crc ^ word;
        Self::entry(t3, x) ^ Self::entry(t2, x >> 8) ^ Self::entry(t1, x >> 16) ^ Self::entry(t0, x >> 24)
    }

    fn update(&mut self, bytes: &[u8]) {
        if bytes.len() >= LONG_PIECE {
            let mut h = crc32fast::Hasher::new_with_initial(self.0);
            h.update(bytes);
            self.0 = h.finalize();
            return;
        }
        let mut crc = !self.0;
        let mut words = bytes.chunks_exact(4);
        for w in &mut words {
            if let Ok(w) = <[u8; 4]>::try_from(w) {
                crc = Self::step(crc, u32::from_le_bytes(w));
            }
        }
        for &b in words.remainder() {
            crc = Self::entry(&TABLES[0], crc ^ u32::from(b)) ^ (crc >> 8);
        }
        self.0 = !crc;
    }

    #[inline]
    fn word(&mut self, word: u32) {
        self.0 = !Self::step(!self.0, word);
    }
}

/// A running check over a datagram's logical content: a keyed CRC in plain mode; in secure
/// mode a CRC-32 of the full values of truncated fields alone, the digest that ends a
/// sealed datagram's plaintext (the AEAD authenticates the bytes themselves;
/// `wire::secure::ID_DIGEST_LEN` says why the digest is enough).
#[derive(Debug)]
pub(crate) enum Check {
    Plain(Crc),
    Sealed(Crc),
}

impl Check {
    pub(crate) fn new(key: Key) -> Self {
        match key.0 {
            Inner::Crc(k) => Self::Plain(Crc(k)),
            Inner::Sealed { .. } | Inner::Unsealed { .. } | Inner::Opened => Self::Sealed(Crc(0)),
        }
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        match self {
            Self::Plain(c) => c.update(bytes),
            Self::Sealed(_) => {}
        }
    }

    /// Folds in the full value of a truncated field.
    pub(crate) fn full_id(&mut self, full: u32) {
        match self {
            Self::Plain(c) | Self::Sealed(c) => c.word(full),
        }
    }

    /// The CRC: the check itself in plain mode, the digest of the full ids in secure mode.
    pub(crate) fn finish(self) -> u32 {
        match self {
            Self::Plain(c) | Self::Sealed(c) => c.0,
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
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

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

    quickcheck::quickcheck! {
        /// Fed in any pieces, from any starting value, the tables compute what `crc32fast`
        /// does.
        fn pieces_compute_what_crc32fast_does(start: u32, data: Vec<u8>, cuts: Vec<u8>, words: Vec<u32>) -> bool {
            let mut ours = Crc(start);
            let mut theirs = crc32fast::Hasher::new_with_initial(start);
            let mut rest = &data[..];
            let mut words = words.into_iter();
            // Long pieces too (up to 4 x 255 bytes), across the hand-over to crc32fast.
            for cut in cuts {
                let (piece, tail) = rest.split_at((usize::from(cut) * 4 % 300).min(rest.len()));
                ours.update(piece);
                theirs.update(piece);
                if let Some(w) = words.next() {
                    ours.word(w);
                    theirs.update(&w.to_le_bytes());
                }
                rest = tail;
            }
            ours.update(rest);
            theirs.update(rest);
            ours.0 == theirs.finalize()
        }
    }

    #[test]
    fn the_tables_give_the_standard_check_value() {
        // CRC-32's check value: the CRC of the nine ASCII digits.
        let mut c = Crc(0);
        c.update(b"123456789");
        assert_eq!(c.0, 0xCBF4_3926);
        let mut long = Crc(0);
        long.update(&[0xA5; 200]);
        assert_eq!(long.0, crc32fast::hash(&[0xA5; 200]));
    }

    #[test]
    fn key_debug_hides_the_secret() {
        assert_eq!(format!("{:?}", Key::connection(5, 6)), "Key(..)");
        assert_eq!(format!("{:?}", Key::sealed(SecretKey::from_bytes([1; 32]), 2)), "Key(..)");
    }
}
