//! The example page's program (`examples/page/index.html` loads it): connects to a POROUS
//! server over WebTransport, sends reliable and unreliable traffic on several channels,
//! and shows what arrived. `porous-webtransport`'s `browser` test runs it in headless
//! Chromium against a server that plays the other side (see there), and reads the page's
//! findings from the connection itself.
//!
//! Build it (the page expects `pkg/page.js` beside it):
//!
//! ```sh
//! cargo build -p porous-web --example page --target wasm32-unknown-unknown
//! wasm-bindgen --target web --out-dir porous-web/examples/page/pkg \
//!     target/wasm32-unknown-unknown/debug/examples/page.wasm
//! ```
//!
//! Three connections in turn, told apart by their connect data:
//!
//! 1. `a`: `n` reliable messages on channels 0 and 1 and `n` unreliable ones on channel 2
//!    (one every 2 ms) each way, each a little-endian `u32` count; the server says `done`
//!    on channel 3 once it has all the reliable ones. The page checks that each reliable
//!    channel brought `0..n` exactly once in order and that channel 2 never brought a
//!    count twice or out of order, sends its findings on channel 3, and disconnects with
//!    code 7.
//! 2. `b`: the server disconnects with code 9; the page waits to see it.
//! 3. `c`: the page sends what it saw of 1 and 2 on channel 3 (`report ...`) and
//!    disconnects.
#![cfg(target_family = "wasm")]
#![allow(missing_docs)] // an example program

use porous_web::{Client, ClientOptions, DisconnectReason, Packet, SendMode};
use wasm_bindgen::prelude::*;

fn options(hash: &[u8; 32], data: &[u8]) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.certificate_hashes.push(*hash);
    o.connect_data = data.to_vec();
    o
}

fn count(p: &Packet) -> Option<u32> {
    Some(u32::from_le_bytes(p.data.get(..4)?.try_into().ok()?))
}

async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

fn show(line: &str) {
    web_sys::console::log_1(&line.into());
    if let Some(out) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("log")) {
        out.set_text_content(Some(&format!("{}{line}\n", out.text_content().unwrap_or_default())));
    }
}

fn reason(r: DisconnectReason) -> String {
    match r.code() {
        Some(code) if matches!(r, DisconnectReason::Remote { .. }) => format!("remote:{code}"),
        _ => format!("{r:?}").to_lowercase(),
    }
}

fn parse_hash(hex: &str) -> Result<[u8; 32], JsValue> {
    let mut hash = [0; 32];
    if hex.len() != 64 {
        return Err("the certificate hash must be 64 hexadecimal digits".into());
    }
    for (i, b) in hash.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| JsValue::from(e.to_string()))?;
    }
    Ok(hash)
}

/// Runs the three connections against `url`, whose certificate hashes to `hash_hex`, and
/// returns the report it sent.
#[wasm_bindgen]
pub async fn run(url: String, hash_hex: String, n: u32) -> Result<String, JsValue> {
    let hash = parse_hash(&hash_hex)?;
    let err = |e: &dyn std::fmt::Display| JsValue::from(e.to_string());

    // 1. Traffic both ways, then a disconnect from this side.
    let a = Client::connect(&url, options(&hash, b"a")).await.map_err(|e| err(&e))?;
    show(&format!("connected (datagrams of {} bytes)", a.session_datagram_size()));
    for i in 0..n {
        for channel in [0, 1] {
            a.send(channel, i.to_le_bytes().to_vec(), SendMode::Reliable).map_err(|e| err(&e))?;
        }
    }
    let mut reliable = [Vec::new(), Vec::new()];
    let mut unreliable = Vec::new();
    let mut done = false;
    let mut sent_unreliable = 0;
    while !(done && reliable.iter().all(|r| r.len() >= n as usize)) {
        if sent_unreliable < n {
            a.send(2, sent_unreliable.to_le_bytes().to_vec(), SendMode::Unreliable).map_err(|e| err(&e))?;
            sent_unreliable += 1;
        }
        while let Some(p) = a.try_recv().map_err(|e| err(&e))? {
            match (p.channel, count(&p)) {
                (0 | 1, Some(i)) => reliable[p.channel].push(i),
                (2, Some(i)) => unreliable.push(i),
                (3, _) if &p.data[..] == b"done" => done = true,
                _ => {}
            }
        }
        sleep_ms(2).await;
    }
    let want: Vec<u32> = (0..n).collect();
    let in_order = |r: &Vec<u32>| if *r == want { "ok".to_string() } else { format!("bad:{}", r.len()) };
    let increasing = unreliable.windows(2).all(|w| w[0] < w[1]);
    let findings = format!(
        "ch0={} ch1={} ch2={} ch2order={}",
        in_order(&reliable[0]),
        in_order(&reliable[1]),
        unreliable.len(),
        if increasing { "ok" } else { "bad" }
    );
    show(&format!("received: {findings}"));
    let stats = a.stats();
    a.send(3, format!("findings {findings}").into_bytes(), SendMode::Reliable).map_err(|e| err(&e))?;
    let end_a = a.disconnect_with(7).await;
    show(&format!("disconnected: {end_a:?}"));
    drop(a);

    // 2. The server disconnects.
    let b = Client::connect(&url, options(&hash, b"b")).await.map_err(|e| err(&e))?;
    let end_b = loop {
        match b.recv().await {
            Ok(_) => {}
            Err(e) => break e.0,
        }
    };
    show(&format!("the server disconnected: {end_b:?}"));
    drop(b);

    // 3. The report.
    let report = format!(
        "report {findings} end_a={} end_b={} rtt_ms={}",
        reason(end_a),
        reason(end_b),
        stats.map_or(0, |s| s.rtt.as_millis())
    );
    let c = Client::connect(&url, options(&hash, b"c")).await.map_err(|e| err(&e))?;
    c.send(3, report.clone().into_bytes(), SendMode::Reliable).map_err(|e| err(&e))?;
    c.disconnect().await;
    show(&report);
    Ok(report)
}
