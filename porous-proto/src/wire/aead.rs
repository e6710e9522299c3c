//! The ChaCha20-Poly1305 primitive (RFC 8439) that seals secure mode's datagrams, from ring
//! on native targets and from RustCrypto on wasm32.
//!
//! Two implementations of one algorithm, chosen by target, behind one type: [`Cipher`]
//! seals and opens in place with a separate tag, nothing more. ring (BoringSSL's assembly)
//! is the faster by far on native targets (a 40-byte datagram sealed in 0.59 us against
//! 5.2 us with RustCrypto, whose AVX2 Poly1305 precomputes a table for every one-time key);
//! on wasm32 ring's C code needs clang to compile, which a game's web build should not have
//! to install, so there RustCrypto's pure Rust does the work: 1.4 us for a 40-byte
//! datagram in Chromium (`docs/performance.md`, Sealing in a browser). Both give the same
//! bytes: the unit tests hold the native one to RFC 8439's vector and to RustCrypto, and
//! run on wasm32 too.

/// Length of the tag.
pub(crate) const TAG: usize = 16;

#[cfg(not(target_family = "wasm"))]
mod imp {
    use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

    /// A key, in the form ring seals with (a 544-byte key object, built once per key).
    #[derive(Clone)]
    pub(crate) struct Cipher(LessSafeKey);

    impl Cipher {
        pub(crate) fn new(key: &[u8; 32]) -> Self {
            // The algorithm takes any 32-byte key.
            match UnboundKey::new(&CHACHA20_POLY1305, key) {
                Ok(k) => Self(LessSafeKey::new(k)),
                Err(_) => unreachable!("ChaCha20-Poly1305 keys are 32 bytes"),
            }
        }

        pub(crate) fn seal(&self, nonce: [u8; 12], ad: &[u8], body: &mut [u8]) -> [u8; super::TAG] {
            let nonce = Nonce::assume_unique_for_key(nonce);
            match self.0.seal_in_place_separate_tag(nonce, Aad::from(ad), body) {
                Ok(tag) => {
                    let mut out = [0u8; super::TAG];
                    out.copy_from_slice(tag.as_ref());
                    out
                }
                // Only a body over 256 GiB fails: no datagram is.
                Err(_) => unreachable!("a datagram is far below ChaCha20-Poly1305's length limit"),
            }
        }

        pub(crate) fn open(&self, nonce: [u8; 12], ad: &[u8], body: &mut [u8], tag: &[u8]) -> bool {
            let Ok(tag) = Tag::try_from(tag) else { return false };
            let nonce = Nonce::assume_unique_for_key(nonce);
            self.0.open_in_place_separate_tag(nonce, Aad::from(ad), tag, body, 0..).is_ok()
        }
    }
}

#[cfg(target_family = "wasm")]
mod imp {
    use chacha20poly1305::aead::AeadInOut;
    use chacha20poly1305::{ChaCha20Poly1305, KeyInit as _};

    /// A key, in the form RustCrypto seals with.
    #[derive(Clone)]
    pub(crate) struct Cipher(ChaCha20Poly1305);

    impl Cipher {
        pub(crate) fn new(key: &[u8; 32]) -> Self {
            Self(ChaCha20Poly1305::new(key.into()))
        }

        pub(crate) fn seal(&self, nonce: [u8; 12], ad: &[u8], body: &mut [u8]) -> [u8; super::TAG] {
            match self.0.encrypt_inout_detached(&nonce.into(), ad, body.into()) {
                Ok(tag) => tag.into(),
                // Only a body over 256 GiB fails: no datagram is.
                Err(_) => unreachable!("a datagram is far below ChaCha20-Poly1305's length limit"),
            }
        }

        pub(crate) fn open(&self, nonce: [u8; 12], ad: &[u8], body: &mut [u8], tag: &[u8]) -> bool {
            let Ok(tag) = <[u8; super::TAG]>::try_from(tag) else { return false };
            self.0.decrypt_inout_detached(&nonce.into(), ad, body.into(), &tag.into()).is_ok()
        }
    }
}

pub(crate) use imp::Cipher;
