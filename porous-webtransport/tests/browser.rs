//! A real browser: headless Chromium runs porous-web's example page against a server of
//! this crate, while a native UDP client talks to the same host; and again against a
//! server in secure mode, with connect tokens.
//!
//! The page is built once for both tests (`cargo build -p porous-web --example page
//! --target wasm32-unknown-unknown` into a target directory of its own, then `wasm-bindgen
//! --target web`); each test serves it over HTTP on 127.0.0.1 and opens it in
//! `chromium --headless=new`, the two side by side. In the first, the page
//! (`porous-web/examples/page.rs`, `run`) makes three connections; the server plays the
//! other side of each and checks what it got, and the page's findings come back on the
//! third connection:
//!
//! - the browser connects; reliable messages on channels 0 and 1 arrive exactly once and
//!   in order both ways; unreliable ones on channel 2 are never duplicated or reordered,
//!   both ways;
//! - a disconnect from the browser (code 7) is seen by the server, and one from the server
//!   (code 9) by the browser;
//! - a UDP client of the same host delivers both ways meanwhile.
//!
//! In the second (`run_token`), the server is in secure mode and makes three tokens, which
//! reach the page in its URL: with a good one the page connects, the server's connection
//! carries the token's client id and user data (in `accept()`'s peer and in the host's
//! `Connected` event), and reliable messages on channels 0 and 1 arrive exactly once and in
//! order both ways; an expired token and one sealed with another key are refused (the host
//! counts each, no connection is made), and the page reports both attempts as timed out,
//! after its 2 s connect timeout, over the good connection.
//!
//! Needs Chromium (`chromium`, or the path in `CHROMIUM`), `wasm-bindgen` (wasm-bindgen-cli
//! at the version of the `wasm-bindgen` crate in Cargo.lock) and the
//! `wasm32-unknown-unknown` target; without them it fails. Behind this crate's `browser`
//! feature: `cargo test -p porous-webtransport --features browser --test browser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use porous_tokio::proto::token::{self, PrivateKey, TokenParams};
use porous_tokio::proto::{DisconnectReason, SecureConfig};
use porous_tokio::{Host, HostConfig, HostEvent, Peer, SendMode};
use porous_webtransport::{Certificate, WebTransport, WebTransportConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const N: u32 = 100;

fn count(data: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(..4)?.try_into().ok()?))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace").to_path_buf()
}

fn run(command: &mut Command, what: &str) {
    let status = command.status().unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(status.success(), "{what}: {command:?} failed ({status})");
}

/// The example page, built on first use by whichever test comes first (the other waits):
/// the directory with `index.html` and `pkg/`.
fn site() -> &'static Path {
    static SITE: OnceLock<PathBuf> = OnceLock::new();
    SITE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-site");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("site directory");
        build_page(&dir);
        dir
    })
}

/// Builds the example page into `dir`: `index.html` and `pkg/`.
fn build_page(dir: &Path) {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-page");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(
        Command::new(cargo)
            .current_dir(workspace())
            .args(["build", "-p", "porous-web", "--example", "page", "--target", "wasm32-unknown-unknown"])
            .env("CARGO_TARGET_DIR", &target),
        "building the page (needs `rustup target add wasm32-unknown-unknown`)",
    );
    let wasm = target.join("wasm32-unknown-unknown/debug/examples/page.wasm");
    run(
        Command::new("wasm-bindgen")
            .args(["--target", "web", "--no-typescript", "--out-dir"])
            .arg(dir.join("pkg"))
            .arg(&wasm),
        "wasm-bindgen (needs wasm-bindgen-cli at the wasm-bindgen crate's version: see .ci/run)",
    );
    std::fs::copy(workspace().join("porous-web/examples/page/index.html"), dir.join("index.html"))
        .expect("copy the page");
}

/// Serves the files of `dir` over HTTP/1.0, one request per connection.
async fn serve_files(listener: TcpListener, dir: PathBuf) {
    while let Ok((mut stream, _)) = listener.accept().await {
        let dir = dir.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let line = String::from_utf8_lossy(&request);
            let path = line.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_string();
            let file = if path == "/" { "index.html".to_string() } else { path.trim_start_matches('/').to_string() };
            let response = match (file.contains(".."), std::fs::read(dir.join(&file))) {
                (false, Ok(body)) => {
                    let kind = match file.rsplit('.').next() {
                        Some("html") => "text/html",
                        Some("js") => "text/javascript",
                        Some("wasm") => "application/wasm",
                        _ => "application/octet-stream",
                    };
                    let mut r =
                        format!("HTTP/1.0 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n", body.len())
                            .into_bytes();
                    r.extend_from_slice(&body);
                    r
                }
                _ => b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_vec(),
            };
            let _ = stream.write_all(&response).await;
        });
    }
}

/// What the server saw of one browser connection.
#[derive(Debug, Default)]
struct Seen {
    data: Vec<u8>,
    reliable: [Vec<u32>; 2],
    unreliable: Vec<u32>,
    /// The messages on channel 3.
    notes: Vec<String>,
    end: Option<DisconnectReason>,
}

/// Plays the server's side of connection `a`: traffic both ways, `done` once both reliable
/// channels are complete.
async fn play_a(peer: &Peer, seen: &mut Seen) {
    for i in 0..N {
        for channel in [0, 1] {
            peer.send(channel, i.to_le_bytes().to_vec(), SendMode::Reliable).expect("send");
        }
    }
    let mut sent_unreliable = 0;
    let mut said_done = false;
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if sent_unreliable < N {
                    let _ = peer.send(2, sent_unreliable.to_le_bytes().to_vec(), SendMode::Unreliable);
                    sent_unreliable += 1;
                }
            }
            p = peer.recv() => match p {
                Ok(p) => {
                    match (p.channel, count(&p.data)) {
                        (0 | 1, Some(i)) => seen.reliable[p.channel].push(i),
                        (2, Some(i)) => seen.unreliable.push(i),
                        (3, _) => seen.notes.push(String::from_utf8_lossy(&p.data).into_owned()),
                        _ => {}
                    }
                    if !said_done && seen.reliable.iter().all(|r| r.len() >= N as usize) && sent_unreliable == N {
                        said_done = true;
                        peer.send(3, &b"done"[..], SendMode::Reliable).expect("send");
                    }
                }
                Err(e) => {
                    seen.end = Some(e.0);
                    return;
                }
            }
        }
    }
}

async fn play(peer: Peer) -> Seen {
    let mut seen = Seen { data: peer.connect_data().to_vec(), ..Seen::default() };
    match &seen.data[..] {
        b"a" => play_a(&peer, &mut seen).await,
        b"b" => seen.end = Some(peer.disconnect_with(9).await),
        _ => loop {
            match peer.recv().await {
                Ok(p) if p.channel == 3 => seen.notes.push(String::from_utf8_lossy(&p.data).into_owned()),
                Ok(_) => {}
                Err(e) => {
                    seen.end = Some(e.0);
                    break;
                }
            }
        },
    }
    seen
}

/// Headless Chromium on the page, killed when the test ends, however it ends.
struct Browser {
    child: std::process::Child,
    /// Its profile and its log (`chromium.log`, with the page's console).
    dir: PathBuf,
}

impl Browser {
    /// Serves the page on 127.0.0.1 and opens it with `query` in a browser of its own,
    /// whose files go to a directory named `name`.
    async fn open(name: &str, query: &str) -> Self {
        let site = tokio::task::block_in_place(site);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("browser directory");
        let http = TcpListener::bind("127.0.0.1:0").await.expect("http");
        let page = format!("http://127.0.0.1:{}/?{query}", http.local_addr().expect("address").port());
        tokio::spawn(serve_files(http, site.to_path_buf()));
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
        let child = Command::new(&chromium)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", dir.join("profile").display()))
            .arg(&page)
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join("chromium.log")).expect("log file")))
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start the browser `{chromium}` (Debian's chromium package; or set CHROMIUM): {e}")
            });
        Self { child, dir }
    }

    /// Where its log is, and what it says: for a failure's message.
    fn log(&self) -> String {
        let path = self.dir.join("chromium.log");
        format!("browser log in {}:\n{}", path.display(), std::fs::read_to_string(&path).unwrap_or_default())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The field `key` (`key=value`) of the page's report.
fn field<'r>(report: &'r str, key: &str) -> &'r str {
    report
        .split_whitespace()
        .find_map(|f| f.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("{key} in {report}"))
}

/// WebTransport for `host` on 127.0.0.1 with a self-signed certificate, and the hash of
/// the certificate that the page pins (`serverCertificateHashes`).
async fn serve_web(host: &Host) -> (WebTransport, String) {
    let certificate = Certificate::self_signed(["localhost", "127.0.0.1"]).expect("certificate");
    let hash = certificate.hashes_hex().remove(0);
    let web = WebTransport::serve(
        host.as_async(),
        "127.0.0.1:0".parse().expect("address"),
        certificate,
        WebTransportConfig::default(),
    )
    .await
    .expect("serve WebTransport");
    (web, hash)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_and_a_udp_client_on_one_server() {
    let host = Host::bind("127.0.0.1:0", HostConfig::default()).await.expect("bind");
    let (web, hash) = serve_web(&host).await;

    // The server: each browser connection played out and reported; the UDP client echoed.
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel();
    {
        let (host, web) = (host.clone(), web.clone());
        tokio::spawn(async move {
            while let Ok(peer) = host.accept().await {
                if web.owns(peer.remote()) {
                    let seen_tx = seen_tx.clone();
                    tokio::spawn(async move {
                        let _ = seen_tx.send(play(peer).await);
                    });
                } else {
                    tokio::spawn(async move {
                        while let Ok(p) = peer.recv().await {
                            let _ = peer.send(p.channel, p.data, p.mode);
                        }
                    });
                }
            }
        });
    }

    let query = format!("url=https://127.0.0.1:{}/&hash={hash}&n={N}", web.local_addr().port());
    let browser = Browser::open("browser-plain", &query).await;

    // Meanwhile, a native UDP client on the same host.
    let udp = Host::bind("127.0.0.1:0", HostConfig::default()).await.expect("bind");
    let to_server = udp.connect(host.local_addr()).await.expect("UDP connect");
    for i in 0..N {
        to_server.send(0, i.to_le_bytes().to_vec(), SendMode::Reliable).expect("send");
    }

    // The three browser connections, in the order they end.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < 3 {
        match tokio::time::timeout_at(deadline, seen_rx.recv()).await {
            Ok(Some(s)) => seen.push(s),
            _ => panic!("the page did not finish in time; seen {seen:?}; server {:?}; {}", web.stats(), browser.log()),
        }
    }
    let mut udp_got = Vec::new();
    while udp_got.len() < N as usize {
        let p = tokio::time::timeout(Duration::from_secs(10), to_server.recv()).await.expect("UDP echo").expect("UDP");
        udp_got.push(count(&p.data).expect("a count"));
    }
    assert_eq!(udp_got, (0..N).collect::<Vec<_>>(), "the UDP client's messages, echoed");

    seen.sort_by(|x, y| x.data.cmp(&y.data));
    let [a, b, c] = &seen[..] else { panic!("{seen:?}") };
    let want: Vec<u32> = (0..N).collect();
    // Browser to server.
    assert_eq!(a.reliable, [want.clone(), want], "reliable, browser to server");
    assert!(a.unreliable.windows(2).all(|w| w[0] < w[1]), "unreliable, browser to server: {:?}", a.unreliable);
    assert!(!a.unreliable.is_empty(), "no unreliable message arrived");
    assert_eq!(a.end, Some(DisconnectReason::remote(7)), "the browser's disconnect");
    assert_eq!(a.notes.len(), 1, "{:?}", a.notes);
    assert_eq!(b.end, Some(DisconnectReason::Local));
    // Server to browser, as the page saw it.
    let report = c.notes.iter().find(|n| n.starts_with("report ")).unwrap_or_else(|| panic!("no report: {c:?}"));
    assert_eq!(field(report, "ch0"), "ok", "{report}");
    assert_eq!(field(report, "ch1"), "ok", "{report}");
    assert_eq!(field(report, "ch2order"), "ok", "{report}");
    assert!(field(report, "ch2").parse::<u32>().is_ok_and(|n| n > 0), "{report}");
    assert_eq!(field(report, "end_a"), "local", "{report}");
    assert_eq!(field(report, "end_b"), "remote:9", "{report}");
    assert_eq!(c.end, Some(DisconnectReason::remote(0)));
    eprintln!("browser: {report}; server {:?}", web.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_with_a_connect_token_on_a_secure_server() {
    // The page first: its tokens' lifetimes start after a cold build of it.
    tokio::task::block_in_place(site);

    // The backend's side: a private key shared with the server, and the server's clock.
    let key = PrivateKey::from_entropy();
    let unix = SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_secs();
    let mut config = HostConfig::default();
    config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), std::time::Instant::now(), unix));
    // Bound to a specific address, the host is known by it: the address tokens name.
    let host = Host::bind("127.0.0.1:0", config).await.expect("bind");
    let mut events = host.events();
    let (web, hash) = serve_web(&host).await;

    // Valid for a minute (a browser on a loaded machine starts in seconds); the expired
    // one is sealed with the right key, the other is valid but sealed with another key.
    let mut good = TokenParams::new(42, vec![host.local_addr()], unix, Duration::from_secs(60));
    good.user_data = b"player 42".to_vec();
    let mut expired = TokenParams::new(43, vec![host.local_addr()], unix - 120, Duration::from_secs(60));
    expired.user_data = b"player 43".to_vec();
    let mut other_key = TokenParams::new(44, vec![host.local_addr()], unix, Duration::from_secs(60));
    other_key.user_data = b"player 44".to_vec();
    let query = format!(
        "url=https://127.0.0.1:{}/&hash={hash}&n={N}&token={}&expired={}&wrong_key={}",
        web.local_addr().port(),
        hex(&token::generate_from_entropy(&key, &good).expect("token")),
        hex(&token::generate_from_entropy(&key, &expired).expect("token")),
        hex(&token::generate_from_entropy(&PrivateKey::from_entropy(), &other_key).expect("token")),
    );
    let browser = Browser::open("browser-token", &query).await;

    // The one connection: the token's, played out as the first test's connection `a`.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let context = || format!("host {:?}; server {:?}; {}", host.stats(), web.stats(), browser.log());
    let Ok(Ok(peer)) = tokio::time::timeout_at(deadline, host.accept()).await else {
        panic!("the page did not connect in time; {}", context())
    };
    assert!(web.owns(peer.remote()), "a browser's connection");
    assert_eq!(peer.client_id(), Some(42), "the token's client id");
    assert_eq!(&peer.connect_data()[..], b"player 42", "the token's user data");
    let mut seen = Seen::default();
    if tokio::time::timeout_at(deadline, play_a(&peer, &mut seen)).await.is_err() {
        panic!("the page did not finish in time; seen {seen:?}; {}", context());
    }

    // The host's events: that connection alone, with the token's identity; the bad tokens
    // made none.
    let mut connected = Vec::new();
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(10), events.next()).await {
            Ok(Some(HostEvent::Connected { peer, .. })) => connected.push(peer),
            Ok(Some(HostEvent::Disconnected { peer: p, reason, .. })) if p.id == peer.id() => break reason,
            Ok(Some(e)) => panic!("an unexpected event: {e:?}"),
            Ok(None) | Err(_) => panic!("no Disconnected event; connected {connected:?}"),
        }
    };
    let [info] = &connected[..] else { panic!("one Connected event, not {connected:?}") };
    assert_eq!((info.id, info.client_id, &info.data[..]), (peer.id(), Some(42), &b"player 42"[..]));
    assert_eq!(end, DisconnectReason::remote(7));

    // Browser to server, then server to browser as the page saw it.
    let want: Vec<u32> = (0..N).collect();
    assert_eq!(seen.reliable, [want.clone(), want], "reliable, browser to server");
    assert!(seen.unreliable.windows(2).all(|w| w[0] < w[1]), "unreliable, browser to server: {:?}", seen.unreliable);
    assert_eq!(seen.end, Some(DisconnectReason::remote(7)), "the browser's disconnect");
    let report = seen.notes.iter().find(|n| n.starts_with("report ")).unwrap_or_else(|| panic!("no report: {seen:?}"));
    assert_eq!(field(report, "ch0"), "ok", "{report}");
    assert_eq!(field(report, "ch1"), "ok", "{report}");
    assert_eq!(field(report, "ch2order"), "ok", "{report}");
    // Bad tokens are dropped unanswered (an answer could not be authenticated): the page
    // learns of the refusal from its connect timeout, and says so.
    assert_eq!(field(report, "expired"), "refused:timeout", "{report}");
    assert_eq!(field(report, "wrong_key"), "refused:timeout", "{report}");
    let stats = host.stats();
    assert!(stats.expired_tokens > 0, "the expired token reached the host: {stats:?}");
    assert!(stats.bad_tokens > 0, "the token of another key reached the host: {stats:?}");
    assert_eq!(web.stats().sessions_accepted, 3, "{:?}", web.stats());
    eprintln!("browser: {report}; host {stats:?}; server {:?}", web.stats());
}
