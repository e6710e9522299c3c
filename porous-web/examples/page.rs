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
//!
//! With `?token=` (and `expired=`, `wrong_key=`: connect tokens in hexadecimal, the page's
//! URL carrying them as a game's backend would hand them over) the page runs
//! [`run_token`] instead, against a server in secure mode:
//!
//! 1. it connects with `token` (`ClientOptions::token`), runs connection 1's traffic above
//!    and sends its findings on channel 3;
//! 2. meanwhile connected, it tries `expired` and `wrong_key` at once: a server drops such
//!    requests unanswered (nothing it could say is authenticated), so each attempt ends at
//!    the client's connect timeout, [`REFUSAL_TIMEOUT`] here, and the page reports how;
//! 3. it sends `report ...` on channel 3 over the token's connection and disconnects with
//!    code 7.
#![cfg(target_family = "wasm")]
#![allow(missing_docs)] // an example program

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use porous_web::{Client, ClientOptions, DisconnectReason, Error, Packet, SendMode};
use wasm_bindgen::prelude::*;

/// The connect timeout of the attempts with a bad token: the handshake on 127.0.0.1
/// takes milliseconds, so 2 s leaves a loaded machine plenty, and the test waits seconds,
/// not the default's 5.
pub const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);

fn options(hash: &[u8; 32], data: &[u8]) -> ClientOptions {
    let mut o = ClientOptions::default();
    o.certificate_hashes.push(*hash);
    o.connect_data = data.to_vec();
    o
}

fn token_options(hash: &[u8; 32], token: Vec<u8>) -> ClientOptions {
    let mut o = options(hash, b"");
    o.token = Some(token);
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

/// `what`'s bytes from hexadecimal digits (the URL's parameters).
fn parse_hex(what: &str, hex: &str) -> Result<Vec<u8>, JsValue> {
    let bad = || JsValue::from(format!("{what} must be hexadecimal digits, two per byte"));
    if !hex.len().is_multiple_of(2) {
        return Err(bad());
    }
    hex.as_bytes()
        .chunks(2)
        .map(|pair| std::str::from_utf8(pair).ok().and_then(|d| u8::from_str_radix(d, 16).ok()).ok_or_else(bad))
        .collect()
}

fn parse_hash(hex: &str) -> Result<[u8; 32], JsValue> {
    parse_hex("the certificate hash", hex)?
        .try_into()
        .map_err(|_| "the certificate hash must be 64 hexadecimal digits".into())
}

/// Connection 1's traffic on `a` (see the module docs): returns the findings it sent.
async fn exchange(a: &Client, n: u32) -> Result<String, JsValue> {
    let err = |e: &dyn std::fmt::Display| JsValue::from(e.to_string());
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
    a.send(3, format!("findings {findings}").into_bytes(), SendMode::Reliable).map_err(|e| err(&e))?;
    Ok(findings)
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
    let findings = exchange(&a, n).await?;
    let stats = a.stats();
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

/// How an attempt with a token the server must refuse ended, for the report: `refused:`
/// and the reason the handshake failed, or what else happened.
async fn refused(url: &str, hash: &[u8; 32], token: Vec<u8>) -> String {
    let mut o = token_options(hash, token);
    o.config.peer.connect_timeout = REFUSAL_TIMEOUT;
    match Client::connect(url, o).await {
        Err(Error::Connect(r)) => format!("refused:{}", reason(r)),
        Err(e) => format!("error:{}", e.to_string().replace(' ', "_")),
        Ok(c) => {
            c.disconnect().await;
            "connected".into()
        }
    }
}

/// Both futures to their ends, side by side (the attempts with bad tokens wait out their
/// timeouts at once).
async fn join<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    poll_fn(|cx| {
        if ra.is_none()
            && let Poll::Ready(r) = a.as_mut().poll(cx)
        {
            ra = Some(r);
        }
        if rb.is_none()
            && let Poll::Ready(r) = b.as_mut().poll(cx)
        {
            rb = Some(r);
        }
        match (ra.take(), rb.take()) {
            (Some(x), Some(y)) => Poll::Ready((x, y)),
            (x, y) => {
                (ra, rb) = (x, y);
                Poll::Pending
            }
        }
    })
    .await
}

/// Secure mode (see the module docs): connects to `url` with `token_hex`, exchanges
/// traffic, tries the tokens `expired_hex` and `wrong_key_hex`, and returns the report it
/// sent over the first connection.
#[wasm_bindgen]
pub async fn run_token(
    url: String,
    hash_hex: String,
    n: u32,
    token_hex: String,
    expired_hex: String,
    wrong_key_hex: String,
) -> Result<String, JsValue> {
    let hash = parse_hash(&hash_hex)?;
    let token = parse_hex("token", &token_hex)?;
    let expired = parse_hex("expired", &expired_hex)?;
    let wrong_key = parse_hex("wrong_key", &wrong_key_hex)?;
    let err = |e: &dyn std::fmt::Display| JsValue::from(e.to_string());

    // 1. The token's connection, and traffic both ways.
    let t = Client::connect(&url, token_options(&hash, token)).await.map_err(|e| err(&e))?;
    show(&format!("connected with a token (datagrams of {} bytes)", t.session_datagram_size()));
    let findings = exchange(&t, n).await?;

    // 2. The bad tokens, while the good connection stays up.
    let started = js_sys::Date::now();
    let (expired, wrong_key) = join(refused(&url, &hash, expired), refused(&url, &hash, wrong_key)).await;
    let waited_ms = js_sys::Date::now() - started;
    show(&format!("expired token: {expired}; token of another key: {wrong_key} (after {waited_ms} ms)"));

    // 3. The report, over the token's connection.
    let report = format!("report {findings} expired={expired} wrong_key={wrong_key} waited_ms={waited_ms}");
    t.send(3, report.clone().into_bytes(), SendMode::Reliable).map_err(|e| err(&e))?;
    let end = t.disconnect_with(7).await;
    show(&format!("disconnected: {end:?}"));
    show(&report);
    Ok(report)
}
