//! The client handle and its driver task: the core, one WebTransport session, the
//! browser's timers.
//!
//! Invariants: the core and the queues live in one `RefCell`, borrowed only between two
//! awaits (never across one), by the handle's calls and by the driver's rounds. The driver
//! reads the session's datagrams only while fewer than [`RECEIVE_QUEUE`] packets wait for
//! the application; beyond that they wait in the browser's own bounded datagram queue (and
//! reliable data is resent), so memory stays bounded when the application stops reading.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, poll_fn};
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use porous_proto::{Bytes, DisconnectReason, Event, HostConfig, Instant, PeerId, PeerStats, SendError, SendMode};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{ReadableStream, ReadableStreamDefaultReader, WritableStream, WritableStreamDefaultWriter};

/// The address the core knows the server by without a connect token. The session is the
/// connection's only path, so any address would do: one of the discard-only prefix
/// (RFC 6666). With a token, the token's first server address.
const SERVER: SocketAddr = SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1), 443, 0, 0));

/// Packets received and not yet taken by the application, beyond which the driver stops
/// reading the session (see the module docs).
pub(crate) const RECEIVE_QUEUE: usize = 4096;

/// How long the session stays open after the connection ended, for its last datagrams
/// (the acknowledgement of a disconnection).
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// How to connect: the core's configuration, the certificate to accept, connect data.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The core's configuration (channels, timeouts, congestion control); it must match
    /// the server's channels, as for a UDP client.
    pub config: HostConfig,
    /// SHA-256 hashes of certificates to accept without a CA: the browser's
    /// `serverCertificateHashes` (a self-signed certificate of ECDSA P-256, valid for at
    /// most 14 days: `porous_webtransport::Certificate::self_signed`). Empty for a
    /// certificate the browser trusts.
    pub certificate_hashes: Vec<[u8; 32]>,
    /// Up to 256 bytes the server reads with the connection (`Peer::connect_data`).
    /// Ignored with a `token` (the token's user data is the server's connect data).
    pub connect_data: Vec<u8>,
    /// A connect token from the game's backend, for a server in secure mode
    /// (`porous_proto::token`): it authenticates the client, which QUIC does not. A token
    /// that names the server's UDP address serves: the session is the only path. Secure
    /// mode is switched on in `config` if it is not. A token the server refuses (expired,
    /// sealed with another key, naming another server) gets no answer, as nothing the
    /// server could say would be authenticated: [`Client::connect`] fails with
    /// [`Error::Connect`]`(DisconnectReason::Timeout)` after `config.peer.connect_timeout`.
    pub token: Option<Vec<u8>>,
}

/// A packet received.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Packet {
    /// The channel it came on.
    pub channel: usize,
    /// How the server sent it.
    pub mode: SendMode,
    /// Its bytes.
    pub data: Bytes,
}

/// The connection has ended, for this reason; every packet received before was handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disconnected(pub DisconnectReason);

impl fmt::Display for Disconnected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "disconnected: {}", self.0)
    }
}

impl std::error::Error for Disconnected {}

/// Why [`Client::connect`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// This browser (or worker) has no WebTransport.
    Unsupported,
    /// The configuration is invalid.
    Config(String),
    /// The session could not be opened (the server is unreachable, its certificate is
    /// not accepted, the URL is not `https`), or its datagrams are too small for POROUS;
    /// the browser's message.
    Session(String),
    /// The session opened, but the POROUS handshake failed: refused, timed out, or the
    /// session closed.
    Connect(DisconnectReason),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported => f.write_str("this browser has no WebTransport"),
            Self::Config(e) => write!(f, "invalid configuration: {e}"),
            Self::Session(e) => write!(f, "WebTransport session: {e}"),
            Self::Connect(reason) => write!(f, "POROUS handshake failed: {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// What the handle and the driver share.
struct Inner {
    core: porous_proto::Host,
    peer: PeerId,
    /// The address the core knows the server by.
    server: SocketAddr,
    connected: bool,
    ended: Option<DisconnectReason>,
    received: VecDeque<Packet>,
    /// Tasks waiting for a packet, the connection or its end.
    waiting: Vec<Waker>,
    /// The driver, when it waits.
    driver: Option<Waker>,
    /// A handle's call has work for the driver.
    kicked: bool,
    writer: WritableStreamDefaultWriter,
    /// A no-op, the rejection handler of every write (a write fails only when the session
    /// is closing, which the driver learns from `closed`).
    ignore: Closure<dyn FnMut(JsValue)>,
    mtu: usize,
}

impl Inner {
    fn kick(&mut self) {
        self.kicked = true;
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    fn wait(&mut self, cx: &Context<'_>) {
        if !self.waiting.iter().any(|w| w.will_wake(cx.waker())) {
            self.waiting.push(cx.waker().clone());
        }
    }

    /// Steps the core, writes its datagrams to the session, and takes its events.
    fn round(&mut self, now: Instant) {
        self.core.step(now);
        while let Some(t) = self.core.poll_transmit() {
            let chunk = Uint8Array::from(&t.payload[..]);
            let _ = self.writer.write_with_chunk(&chunk).catch(&self.ignore);
        }
        let mut news = false;
        while let Some(event) = self.core.poll_event() {
            news = true;
            match event {
                Event::Connected { .. } => self.connected = true,
                Event::Received { channel, mode, data, .. } => self.received.push_back(Packet { channel, mode, data }),
                Event::Disconnected { reason, .. } => self.ended = Some(reason),
                _ => {}
            }
        }
        if news {
            for w in self.waiting.drain(..) {
                w.wake();
            }
        }
    }
}

/// A POROUS connection to a server over a WebTransport session; see the [crate docs](crate).
pub struct Client {
    inner: Rc<RefCell<Inner>>,
    transport: Object,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.inner.borrow();
        f.debug_struct("Client")
            .field("peer", &inner.peer)
            .field("mtu", &inner.mtu)
            .field("ended", &inner.ended)
            .finish()
    }
}

/// The browser's message for a JavaScript error.
fn describe(e: &JsValue) -> String {
    e.as_string()
        .or_else(|| Reflect::get(e, &"message".into()).ok().and_then(|m| m.as_string()))
        .unwrap_or_else(|| format!("{e:?}"))
}

/// `target[name]`, if it is a function.
fn function(target: &JsValue, name: &str) -> Option<Function> {
    Reflect::get(target, &name.into()).ok()?.dyn_into().ok()
}

/// Calls `transport.close()`: a no-op on a session closed already.
fn close_session(transport: &JsValue) {
    if let Some(close) = function(transport, "close") {
        let _ = close.call0(transport);
    }
}

fn get(target: &JsValue, key: &str) -> Result<JsValue, Error> {
    Reflect::get(target, &key.into()).map_err(|e| Error::Session(describe(&e)))
}

impl Client {
    /// Opens a WebTransport session to `url` (`https://host:port/path`, the server's
    /// WebTransport address) and connects over it; resolves once the connection is
    /// established.
    pub async fn connect(url: &str, options: ClientOptions) -> Result<Self, Error> {
        let mut config = options.config;
        let server = match &options.token {
            Some(token) => {
                let decoded =
                    porous_proto::token::ConnectToken::decode(token).map_err(|e| Error::Config(e.to_string()))?;
                if config.secure.is_none() {
                    config.secure = Some(porous_proto::SecureConfig::client());
                }
                *decoded.server_addresses().first().ok_or_else(|| Error::Config("the token names no server".into()))?
            }
            None => SERVER,
        };
        let mut core = porous_proto::Host::from_entropy(config).map_err(|e| Error::Config(e.to_string()))?;
        let global = js_sys::global();
        let constructor = function(&global, "WebTransport").ok_or(Error::Unsupported)?;
        let settings = Object::new();
        if !options.certificate_hashes.is_empty() {
            let hashes = Array::new();
            for hash in &options.certificate_hashes {
                let entry = Object::new();
                let set = |k: &str, v: &JsValue| Reflect::set(&entry, &k.into(), v);
                set("algorithm", &"sha-256".into()).map_err(|e| Error::Session(describe(&e)))?;
                set("value", &Uint8Array::from(&hash[..]).into()).map_err(|e| Error::Session(describe(&e)))?;
                hashes.push(&entry);
            }
            Reflect::set(&settings, &"serverCertificateHashes".into(), &hashes)
                .map_err(|e| Error::Session(describe(&e)))?;
        }
        let arguments = Array::of2(&url.into(), &settings);
        let transport: Object =
            Reflect::construct(&constructor, &arguments).map_err(|e| Error::Session(describe(&e)))?.unchecked_into();
        let ready: Promise = get(&transport, "ready")?.unchecked_into();
        JsFuture::from(ready).await.map_err(|e| Error::Session(describe(&e)))?;

        let datagrams = get(&transport, "datagrams")?;
        let mtu = get(&datagrams, "maxDatagramSize")?.as_f64().unwrap_or(0.0) as usize;
        let readable: ReadableStream = get(&datagrams, "readable")?.unchecked_into();
        let writable: WritableStream = get(&datagrams, "writable")?.unchecked_into();
        let reader: ReadableStreamDefaultReader = readable.get_reader().unchecked_into();
        let writer = writable.get_writer().map_err(|e| Error::Session(describe(&e)))?;
        let closed: Promise = get(&transport, "closed")?.unchecked_into();

        let close = |e: Error| {
            close_session(&transport);
            e
        };
        core.set_path_mtu(server, mtu).map_err(|e| close(Error::Session(format!("datagrams of {mtu} bytes: {e}"))))?;
        let connected = match &options.token {
            Some(token) => core.connect_with_token(Instant::now(), server, token),
            None => core.connect_with(Instant::now(), server, &options.connect_data),
        };
        let peer = connected.map_err(|e| close(Error::Config(e.to_string())))?;
        let inner = Rc::new(RefCell::new(Inner {
            core,
            peer,
            server,
            connected: false,
            ended: None,
            received: VecDeque::new(),
            waiting: Vec::new(),
            driver: None,
            kicked: false,
            writer,
            ignore: Closure::new(|_: JsValue| {}),
            mtu,
        }));
        wasm_bindgen_futures::spawn_local(drive(Rc::clone(&inner), transport.clone(), reader, closed));
        let client = Self { inner, transport };
        poll_fn(|cx| {
            let mut inner = client.inner.borrow_mut();
            if inner.connected {
                Poll::Ready(Ok(()))
            } else if let Some(reason) = inner.ended {
                Poll::Ready(Err(Error::Connect(reason)))
            } else {
                inner.wait(cx);
                Poll::Pending
            }
        })
        .await?;
        Ok(client)
    }

    /// Queues `data` on `channel` in `mode`; it goes out on the driver's next round (this
    /// call wakes it).
    pub fn send(&self, channel: usize, data: impl Into<Bytes>, mode: SendMode) -> Result<(), SendError> {
        let mut inner = self.inner.borrow_mut();
        let peer = inner.peer;
        inner.core.send(peer, channel, data, mode)?;
        inner.kick();
        Ok(())
    }

    /// The next packet received, if one is waiting; `Err` once the connection has ended
    /// and every packet before the end was taken. For a game loop: call it until `Ok(None)`
    /// each frame.
    pub fn try_recv(&self) -> Result<Option<Packet>, Disconnected> {
        let mut inner = self.inner.borrow_mut();
        let was_full = inner.received.len() >= RECEIVE_QUEUE;
        match inner.received.pop_front() {
            Some(p) => {
                if was_full {
                    // The driver stopped reading the session: it may again.
                    inner.kick();
                }
                Ok(Some(p))
            }
            None => match inner.ended {
                Some(reason) => Err(Disconnected(reason)),
                None => Ok(None),
            },
        }
    }

    /// The next packet received; `Err` once the connection has ended and every packet
    /// before the end was taken.
    pub async fn recv(&self) -> Result<Packet, Disconnected> {
        poll_fn(|cx| match self.try_recv() {
            Ok(Some(p)) => Poll::Ready(Ok(p)),
            Err(e) => Poll::Ready(Err(e)),
            Ok(None) => {
                self.inner.borrow_mut().wait(cx);
                Poll::Pending
            }
        })
        .await
    }

    /// Ends the connection gracefully (what was sent is delivered first) with code 0, and
    /// resolves with how it ended (`Local`, unless it had ended before).
    pub async fn disconnect(&self) -> DisconnectReason {
        self.disconnect_with(0).await
    }

    /// [`Client::disconnect`] with a code the server reads in `DisconnectReason::Remote`.
    pub async fn disconnect_with(&self, code: u32) -> DisconnectReason {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.ended.is_none() {
                let peer = inner.peer;
                inner.core.disconnect_with(Instant::now(), peer, code);
                inner.kick();
            }
        }
        poll_fn(|cx| {
            let mut inner = self.inner.borrow_mut();
            match inner.ended {
                Some(reason) => Poll::Ready(reason),
                None => {
                    inner.wait(cx);
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// Whether the connection has ended, and why.
    pub fn ended(&self) -> Option<DisconnectReason> {
        self.inner.borrow().ended
    }

    /// The connection's counters and path estimates (round trip, loss, datagram size).
    pub fn stats(&self) -> Option<PeerStats> {
        let inner = self.inner.borrow();
        inner.core.peer_stats(inner.peer)
    }

    /// The session's datagram size when it opened (`maxDatagramSize`).
    pub fn session_datagram_size(&self) -> usize {
        self.inner.borrow().mtu
    }

    /// The browser's `WebTransport` object of the session (to read its `getStats()`, for
    /// one).
    pub fn transport(&self) -> &JsValue {
        &self.transport
    }
}

impl Drop for Client {
    /// Disconnects (code 0) if the connection is still up; the driver sends what is left
    /// and closes the session.
    fn drop(&mut self) {
        let mut inner = self.inner.borrow_mut();
        if inner.ended.is_none() {
            let peer = inner.peer;
            inner.core.disconnect(Instant::now(), peer);
            inner.kick();
        }
    }
}

/// A promise that resolves after `ms` milliseconds (`setTimeout`, in a window or a worker).
fn sleep(ms: f64) -> JsFuture {
    let promise = Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        if let Some(set_timeout) = function(&global, "setTimeout") {
            let _ = set_timeout.call2(&global, &resolve, &JsValue::from_f64(ms));
        }
    });
    JsFuture::from(promise)
}

/// What woke the driver.
enum Woke {
    Datagram(Result<JsValue, JsValue>),
    Closed,
    Timer,
    Kicked,
}

/// The driver: rounds of the core until the connection has ended and its last datagrams
/// are out (or the session has closed), then closes the session.
async fn drive(inner: Rc<RefCell<Inner>>, transport: Object, reader: ReadableStreamDefaultReader, closed: Promise) {
    let mut read = Some(JsFuture::from(reader.read()));
    let mut closed = Some(JsFuture::from(closed));
    let mut timer: Option<(Instant, JsFuture)> = None;
    let mut ended_at: Option<Instant> = None;
    let mut buf = Vec::new();
    let server = inner.borrow().server;
    loop {
        let now = Instant::now();
        let (deadline, reading) = {
            let mut i = inner.borrow_mut();
            i.round(now);
            if i.ended.is_some() && ended_at.is_none() {
                ended_at = Some(now);
            }
            let mut deadline = i.core.poll_timeout();
            if let Some(t) = ended_at {
                let close_at = t + CLOSE_GRACE;
                if now >= close_at || closed.is_none() || deadline.is_none() {
                    break;
                }
                deadline = deadline.map(|d| d.min(close_at));
            }
            (deadline, i.received.len() < RECEIVE_QUEUE)
        };
        if let Some(d) = deadline
            && timer.as_ref().is_none_or(|(at, _)| d < *at)
        {
            let ms = d.saturating_duration_since(now).as_secs_f64() * 1000.0;
            timer = Some((d, sleep(ms)));
        }
        let woke = poll_fn(|cx: &mut Context<'_>| {
            {
                let mut i = inner.borrow_mut();
                if i.kicked {
                    i.kicked = false;
                    return Poll::Ready(Woke::Kicked);
                }
                i.driver = Some(cx.waker().clone());
            }
            if reading
                && let Some(r) = read.as_mut()
                && let Poll::Ready(d) = Pin::new(r).poll(cx)
            {
                return Poll::Ready(Woke::Datagram(d));
            }
            if let Some(c) = closed.as_mut()
                && Pin::new(c).poll(cx).is_ready()
            {
                return Poll::Ready(Woke::Closed);
            }
            if let Some((_, t)) = timer.as_mut()
                && Pin::new(t).poll(cx).is_ready()
            {
                return Poll::Ready(Woke::Timer);
            }
            Poll::Pending
        })
        .await;
        let now = Instant::now();
        match woke {
            Woke::Datagram(Ok(result))
                if !Reflect::get(&result, &"done".into()).ok().is_some_and(|d| d.is_truthy()) =>
            {
                if let Ok(value) = Reflect::get(&result, &"value".into()) {
                    let chunk: Uint8Array = value.unchecked_into();
                    buf.resize(chunk.length() as usize, 0);
                    chunk.copy_to(&mut buf);
                    inner.borrow_mut().core.handle_datagram(now, server, &buf);
                }
                read = Some(JsFuture::from(reader.read()));
            }
            // The stream ended or failed: the session is closing; `closed` says when.
            Woke::Datagram(_) => read = None,
            Woke::Closed => {
                closed = None;
                read = None;
                inner.borrow_mut().core.close_path(now, server);
            }
            Woke::Timer => timer = None,
            Woke::Kicked => {}
        }
    }
    // The connection has ended: close the session (a no-op if it is closed already).
    close_session(&transport);
    let mut i = inner.borrow_mut();
    i.round(Instant::now());
    i.driver = None;
    for w in i.waiting.drain(..) {
        w.wake();
    }
}
