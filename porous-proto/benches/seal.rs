//! What secure mode's sealing costs per datagram: ChaCha20-Poly1305 (RFC 8439) sealing a
//! 40-byte datagram (a game's small message) and a 1,200-byte one, with the
//! implementation each target uses (`wire/aead.rs`). Natively both, ring (what native
//! builds seal with) and RustCrypto (what the web uses, and what native builds used
//! first); on wasm32, RustCrypto alone, in the browser that runs it.
//!
//! ```sh
//! cargo bench -p porous-proto --bench seal
//! # in headless Chromium (wasm-bindgen-cli at Cargo.lock's wasm-bindgen version):
//! CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner WASM_BINDGEN_USE_DEDICATED_WORKER=1 \
//!   WASM_BINDGEN_TEST_TIMEOUT=900 CHROMEDRIVER=/usr/bin/chromedriver \
//!   cargo bench -p porous-proto --bench seal --target wasm32-unknown-unknown
//! ```
#![allow(missing_docs)]

use std::hint::black_box;

use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit as _};

const SIZES: [usize; 2] = [40, 1200];
const KEY: [u8; 32] = [7; 32];
const AD: [u8; 5] = [0, 1, 2, 3, 4];

/// Seals `body` in place with RustCrypto under a new nonce each time.
fn rustcrypto(cipher: &ChaCha20Poly1305, n: &mut u64, body: &mut [u8]) -> [u8; 16] {
    *n += 1;
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&n.to_le_bytes());
    cipher.encrypt_inout_detached(&nonce.into(), &AD, body.into()).map(Into::into).unwrap_or([0; 16])
}

#[cfg(not(target_family = "wasm"))]
fn main() {
    use criterion::{BenchmarkId, Criterion, Throughput};
    use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};

    let mut c = Criterion::default().configure_from_args();
    let mut g = c.benchmark_group("seal");
    let ring_key = LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &KEY).unwrap());
    let rc = ChaCha20Poly1305::new(&KEY.into());
    for size in SIZES {
        let mut body = vec![0x5A; size];
        let mut n = 0u64;
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("ring", size), &size, |b, _| {
            b.iter(|| {
                n += 1;
                let mut nonce = [0u8; 12];
                nonce[4..].copy_from_slice(&n.to_le_bytes());
                let nonce = Nonce::assume_unique_for_key(nonce);
                let _tag = black_box(ring_key.seal_in_place_separate_tag(nonce, Aad::from(&AD), &mut body).unwrap());
            });
        });
        g.bench_with_input(BenchmarkId::new("rustcrypto", size), &size, |b, _| {
            b.iter(|| black_box(rustcrypto(&rc, &mut n, &mut body)));
        });
    }
    g.finish();
    c.final_summary();
}

#[cfg(target_family = "wasm")]
fn main() {}

#[cfg(target_family = "wasm")]
mod web {
    use wasm_bindgen_test::{Criterion, wasm_bindgen_bench};

    use super::*;

    #[wasm_bindgen_bench]
    fn seal(c: &mut Criterion) {
        let rc = ChaCha20Poly1305::new(&KEY.into());
        for size in SIZES {
            let mut body = vec![0x5A; size];
            let mut n = 0u64;
            c.bench_function(&format!("seal/rustcrypto/{size}"), |b| {
                b.iter(|| black_box(rustcrypto(&rc, &mut n, &mut body)));
            });
        }
    }
}
