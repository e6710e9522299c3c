//! Stateless handshake cookies: how a host under a flood of connection requests answers
//! without keeping anything.
//!
//! A cookie is a 128-bit SipHash-2-4 MAC, keyed with a secret drawn from the host's random
//! generator, over the requester's address, its request nonce and the current time bucket
//! (8 s). The host sends it in a challenge (smaller than the request, so nothing
//! amplifies) and creates a peer only for a request that echoes a cookie valid for its
//! address and nonce in the current or the previous bucket. A spoofed source never sees
//! the challenge, so it never gets past it, and a cookie seen on the path is useless from
//! another address or for another nonce, and expires within 16 s.

use std::hash::Hasher as _;
use std::net::SocketAddr;
use std::time::Duration;
use web_time::Instant;

use siphasher::sip128::{Hasher128 as _, SipHasher24};

use crate::wire::{COOKIE_LEN, Cookie};

/// How long a time bucket lasts; a cookie is valid in its bucket and the next.
const BUCKET: Duration = Duration::from_secs(8);

/// The host's cookie secret and clock origin.
#[derive(Clone)]
pub(crate) struct CookieJar {
    keys: (u64, u64),
    epoch: Option<Instant>,
}

impl core::fmt::Debug for CookieJar {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("CookieJar(..)")
    }
}

impl CookieJar {
    pub(crate) fn new(keys: (u64, u64)) -> Self {
        Self { keys, epoch: None }
    }

    fn bucket(&mut self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(now);
        (now.saturating_duration_since(epoch).as_secs() / BUCKET.as_secs()) + 1
    }

    fn mac(&self, addr: SocketAddr, nonce: u32, bucket: u64) -> Cookie {
        let mut h = SipHasher24::new_with_keys(self.keys.0, self.keys.1);
        match addr {
            SocketAddr::V4(a) => h.write(&a.ip().octets()),
            SocketAddr::V6(a) => h.write(&a.ip().octets()),
        }
        h.write_u16(addr.port());
        h.write_u32(nonce);
        h.write_u64(bucket);
        let out = h.finish128();
        let mut c = [0; COOKIE_LEN];
        for (d, s) in c.iter_mut().zip(out.h1.to_le_bytes().into_iter().chain(out.h2.to_le_bytes())) {
            *d = s;
        }
        Cookie(c)
    }

    /// The cookie for a request from `addr` with `nonce`, now.
    pub(crate) fn issue(&mut self, now: Instant, addr: SocketAddr, nonce: u32) -> Cookie {
        let b = self.bucket(now);
        self.mac(addr, nonce, b)
    }

    /// Whether `cookie` was issued to `addr` for `nonce` in this bucket or the last.
    pub(crate) fn verify(&mut self, now: Instant, addr: SocketAddr, nonce: u32, cookie: &Cookie) -> bool {
        let b = self.bucket(now);
        // Compare every candidate in full, without branching on secret bytes.
        let diff = |c: Cookie| c.0.iter().zip(cookie.0.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
        let current = diff(self.mac(addr, nonce, b));
        let previous = diff(self.mac(addr, nonce, b.saturating_sub(1)));
        current == 0 || previous == 0
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn cookies_bind_address_nonce_and_time() {
        let t = Instant::now();
        let mut jar = CookieJar::new((1, 2));
        let a: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let c = jar.issue(t, a, 7);
        assert!(jar.verify(t + Duration::from_secs(3), a, 7, &c));
        assert!(jar.verify(t + Duration::from_secs(9), a, 7, &c), "valid in the next bucket");
        assert!(!jar.verify(t + Duration::from_secs(17), a, 7, &c), "expired after two buckets");
        assert!(!jar.verify(t, "10.0.0.1:5001".parse().unwrap(), 7, &c), "another port");
        assert!(!jar.verify(t, "10.0.0.2:5000".parse().unwrap(), 7, &c), "another address");
        assert!(!jar.verify(t, a, 8, &c), "another nonce");
        assert!(!CookieJar::new((3, 4)).verify(t, a, 7, &c), "another host's secret");
        let mut forged = c;
        forged.0[15] ^= 1;
        assert!(!jar.verify(t, a, 7, &forged));
    }
}
