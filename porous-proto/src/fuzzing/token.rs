//! The `decode_token` target: arbitrary bytes into every connect-token decoder.
//!
//! - As a whole token, the client's `ConnectToken::decode`: no panic, and what decodes
//!   holds to the format's rules (expiry after creation, 1 to 32 addresses, a timeout).
//! - As a server part, the server's `VerifiedToken::open`: no panic (a part opens only if
//!   the backend made it with the key: then it agrees with the token's clear part).
//! - Sealed as a server part's plaintext under the private key, so the decoder the seal
//!   guards is reached too: no panic, and what opens re-generates to a token that opens
//!   to the same values.

use std::time::Duration;

use chacha20poly1305::aead::AeadInOut;

use crate::token::{
    self, ConnectToken, MAX_SERVER_ADDRESSES, MAX_USER_DATA, PRIVATE_MAX, PrivateKey, TOKEN_NONCE_LEN, TokenError,
    TokenParams, VerifiedToken, private_ad,
};

const KEY: PrivateKey = PrivateKey::from_bytes([0x42; 32]);

/// Runs the input through every decoder; returns how many accepted it, so replays can
/// tell they reach past the checks.
pub fn decode_token(data: &[u8]) -> usize {
    let mut decoded = 0;
    if let Ok(t) = ConnectToken::decode(data) {
        assert!(t.expires() > t.created(), "{t:?}");
        assert!((1..=MAX_SERVER_ADDRESSES).contains(&t.server_addresses().len()), "{t:?}");
        assert!(t.timeout() >= Duration::from_secs(1), "{t:?}");
        // Only a part the backend made with this key opens. (The clear part is not
        // authenticated: a client that alters it only misleads itself.)
        if let Ok(v) = VerifiedToken::open(&KEY, t.server_part(), t.created()) {
            check_round_trip(&v);
            decoded += 1;
        }
        decoded += 1;
    }
    let now = data.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
    if let Ok(v) = VerifiedToken::open(&KEY, data, now) {
        check_round_trip(&v);
        decoded += 1;
    }

    let plain = data.get(..PRIVATE_MAX).unwrap_or(data);
    match VerifiedToken::open(&KEY, &seal(plain), 0) {
        Ok(v) => {
            check_round_trip(&v);
            decoded += 1;
        }
        Err(e) => assert!(
            matches!(
                e,
                TokenError::Length
                    | TokenError::NoAddresses
                    | TokenError::TooManyAddresses
                    | TokenError::Address
                    | TokenError::UserDataTooLong
            ),
            "{e:?} for a well-sealed part"
        ),
    }
    decoded
}

/// `plain` sealed as a server part that expires last: what only the backend can make.
fn seal(plain: &[u8]) -> Vec<u8> {
    let expires = u64::MAX;
    let nonce = [7u8; TOKEN_NONCE_LEN];
    let mut body = plain.to_vec();
    let tag = KEY
        .aead()
        .encrypt_inout_detached(&nonce.into(), &private_ad(expires), (&mut body[..]).into())
        .expect("a part within the size limit"); // ok: the input is capped at PRIVATE_MAX
    let mut part = Vec::with_capacity(8 + nonce.len() + body.len() + tag.len());
    part.extend_from_slice(&expires.to_le_bytes());
    part.extend_from_slice(&nonce);
    part.extend_from_slice(&body);
    part.extend_from_slice(&tag);
    part
}

/// What opened holds to the format's rules, and the backend's generator makes from the
/// same values a token that the client decodes and the server opens to them again.
fn check_round_trip(v: &VerifiedToken) {
    assert!((1..=MAX_SERVER_ADDRESSES).contains(&v.server_addresses().len()), "{v:?}");
    assert!(v.user_data.len() <= MAX_USER_DATA, "{v:?}");
    assert!(v.timeout >= Duration::from_secs(1), "{v:?}");
    let mut params = TokenParams::new(v.client_id, v.server_addresses().to_vec(), 0, Duration::from_secs(60));
    params.timeout = v.timeout;
    params.user_data = v.user_data.to_vec();
    let bytes = token::generate(&KEY, &params, &mut crate::sim::seeded_rng(1)).expect("valid values re-generate"); // ok: a finding
    let client = ConnectToken::decode(&bytes).expect("a generated token decodes"); // ok: a finding
    assert_eq!((client.server_addresses(), client.timeout()), (v.server_addresses(), v.timeout));
    let again = VerifiedToken::open(&KEY, client.server_part(), 0).expect("a generated token opens"); // ok: a finding
    assert_eq!(
        (again.client_id, again.timeout, &again.user_data, again.server_addresses()),
        (v.client_id, v.timeout, &v.user_data, v.server_addresses())
    );
    assert_eq!(again.keys(), client.keys(), "the client and the server hold the same keys");
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::sim::SplitMix64;

    /// A real token, and the plaintext of a real server part, each mutated by a seeded
    /// stream: `cargo test` covers the target's accepting paths as well as its refusals.
    #[test]
    fn replay_decode_token() {
        let mut params = TokenParams::new(
            77,
            vec!["10.0.0.2:9000".parse().unwrap(), "[2001:db8::1]:9000".parse().unwrap()],
            1_000,
            Duration::from_secs(30),
        );
        params.user_data = b"map=dust".to_vec();
        let real = token::generate(&KEY, &params, &mut crate::sim::seeded_rng(3)).unwrap();
        let mut plain = Vec::new();
        plain.extend_from_slice(&77u64.to_le_bytes());
        plain.extend_from_slice(&10u32.to_le_bytes());
        plain.extend_from_slice(&[1, 4, 10, 0, 0, 2, 0x28, 0x23]);
        plain.extend_from_slice(&[9; 64]);
        plain.extend_from_slice(&3u16.to_le_bytes());
        plain.extend_from_slice(b"abc");
        assert_eq!(decode_token(&real), 2, "a real token decodes and opens");
        assert_eq!(decode_token(&plain), 1, "a real server part opens");

        let mut s = SplitMix64::new(0x70c3);
        let (mut accepted, mut buf) = (0, Vec::new());
        for i in 0..4000 {
            let mut input = if i % 2 == 0 { real.clone() } else { plain.clone() };
            // A few bytes changed, or cut short, or random bytes altogether.
            match s.next_u64() % 4 {
                0 | 1 => {
                    for _ in 0..=s.next_u64() % 3 {
                        let at = (s.next_u64() as usize) % input.len();
                        input[at] ^= s.next_u64() as u8 | 1;
                    }
                }
                2 => {
                    let len = (s.next_u64() as usize) % input.len();
                    input.truncate(len);
                }
                _ => {
                    let len = (s.next_u64() as usize) % 1200;
                    s.fill(&mut buf, len);
                    input.clone_from(&buf);
                }
            }
            accepted += decode_token(&input);
        }
        assert!(accepted > 100, "only {accepted} mutated inputs accepted");
    }
}
