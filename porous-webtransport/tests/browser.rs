//! A real browser: headless Chromium runs porous-web's example page against a server of
//! this crate, while a native UDP client talks to the same host.
//!
//! The test builds the page (`cargo build -p porous-web --example page --target
//! wasm32-unknown-unknown` into a target directory of its own, then `wasm-bindgen --target
//! web`), serves it over HTTP on 127.0.0.1, and opens it in `chromium --headless=new`. The
//! page (`porous-web/examples/page.rs`) makes three connections; the server plays the
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
//! Needs Chromium (`chromium`, or the path in `CHROMIUM`), `wasm-bindgen` (wasm-bindgen-cli
//! at the version of the `wasm-bindgen` crate in Cargo.lock) and the
//! `wasm32-unknown-unknown` target; without them it fails. Behind this crate's `browser`
//! feature: `cargo test -p porous-webtransport --features browser --test browser`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use porous_tokio::proto::DisconnectReason;
use porous_tokio::{Host, HostConfig, Peer, SendMode};
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

/// Kills the browser when the test ends, however it ends.
struct Browser(std::process::Child);

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_and_a_udp_client_on_one_server() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-site");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("site directory");
    tokio::task::block_in_place(|| build_page(&dir));

    let host = Host::bind("127.0.0.1:0", HostConfig::default()).await.expect("bind");
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

    let http = TcpListener::bind("127.0.0.1:0").await.expect("http");
    let page = format!(
        "http://127.0.0.1:{}/?url=https://127.0.0.1:{}/&hash={hash}&n={N}",
        http.local_addr().expect("address").port(),
        web.local_addr().port()
    );
    tokio::spawn(serve_files(http, dir.clone()));
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let browser = Command::new(&chromium)
        .args(["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(&page)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("chromium.log")).expect("log file")))
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start the browser `{chromium}` (Debian's chromium package; or set CHROMIUM): {e}")
        });
    let _browser = Browser(browser);

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
            _ => panic!(
                "the page did not finish in time; seen {seen:?}; server {:?}; browser log in {}:\n{}",
                web.stats(),
                dir.join("chromium.log").display(),
                std::fs::read_to_string(dir.join("chromium.log")).unwrap_or_default()
            ),
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
    let field = |k: &str| {
        report.split_whitespace().find_map(|f| f.strip_prefix(k)).unwrap_or_else(|| panic!("{k} in {report}"))
    };
    assert_eq!(field("ch0="), "ok", "{report}");
    assert_eq!(field("ch1="), "ok", "{report}");
    assert_eq!(field("ch2order="), "ok", "{report}");
    assert!(field("ch2=").parse::<u32>().is_ok_and(|n| n > 0), "{report}");
    assert_eq!(field("end_a="), "local", "{report}");
    assert_eq!(field("end_b="), "remote:9", "{report}");
    assert_eq!(c.end, Some(DisconnectReason::remote(0)));
    eprintln!("browser: {report}; server {:?}", web.stats());
}
