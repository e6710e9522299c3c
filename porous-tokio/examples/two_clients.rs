//! A server and two clients in one tokio program, over UDP on loopback, each side sending
//! the other a 60 Hz stream of small reliable messages (a game's inputs one way, its
//! updates the other), as a new user's first program would; at the end, per client and
//! direction, what the connection counted (frames sent, declared lost, found spurious,
//! resent, congestion reactions undone) and whether every message arrived exactly once and
//! in order.
//!
//! Loopback loses nothing, so every frame a side declares lost is spurious: its
//! acknowledgement was only late, because a loop ran late (a busy machine, a scheduler
//! that preferred another task). Issue 32 found such a program, on a busy 2-core machine,
//! declaring 69 of 528 and 128 of 467 frames lost; docs/performance.md ("Over a lossy
//! path") has the figures before and after its fix, measured with this program.
//!
//! ```sh
//! cargo run --release -p porous-tokio --example two_clients [-- --secs 10]
//! ```
//!
//! Exit status: 0 when every message arrived exactly once and in order; 1 otherwise; 2 for
//! a usage error.

use std::error::Error;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

// The self-checking messages and the record of a stream of them (sequence numbers, a
// pattern that catches corruption, what was delivered and in which order) are the ones the
// loopback demo and benches use.
use porous_loopback::stream::Stream;
use porous_tokio::{Host, HostConfig, Peer, PeerStats, SendMode};

/// A game's tick: 60 Hz.
const TICK: Duration = Duration::from_micros(16_667);
/// Bytes per message, an input or a small update.
const MESSAGE: usize = 64;
/// The one channel of both streams.
const CHANNEL: usize = 0;
/// How long, after the last message, the program waits for the streams to be delivered.
const DRAIN: Duration = Duration::from_secs(5);

const USAGE: &str = "usage: two_clients [--secs S]   (seconds of traffic, 10 by default)";

/// One direction's stream, written by its sending task and read by its receiving one.
type Shared = Arc<Mutex<Stream>>;

fn shared() -> Shared {
    Arc::new(Mutex::new(Stream::new(SendMode::Reliable)))
}

/// A poisoned lock only means another task panicked, which ends the program anyway.
fn lock(stream: &Shared) -> std::sync::MutexGuard<'_, Stream> {
    stream.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends one message a tick until `until`.
async fn send_ticks(peer: Peer, stream: Shared, epoch: Instant, until: Instant) {
    let mut tick = tokio::time::interval(TICK);
    while Instant::now() < until {
        tick.tick().await;
        let mut s = lock(&stream);
        let message = s.next_packet(epoch.elapsed(), MESSAGE);
        match peer.send(CHANNEL, message, SendMode::Reliable) {
            Ok(()) => s.on_sent(),
            Err(e) => {
                s.refused += 1;
                eprintln!("cannot send to {}: {e}", peer.remote());
            }
        }
    }
}

/// Records every message `peer` delivers, until it disconnects.
async fn receive(peer: Peer, stream: Shared, epoch: Instant) {
    while let Ok(packet) = peer.recv().await {
        lock(&stream).receive(&packet.data, epoch.elapsed());
    }
}

/// One direction's line of the table; `true` when its messages arrived exactly once and in
/// order.
fn row(name: &str, stats: Option<PeerStats>, stream: &Stream) -> bool {
    let once_in_order = stream.held() && stream.missing() == 0 && stream.refused == 0;
    let Some(stats) = stats else {
        println!("{name:<20} (the connection is gone: no counters)");
        return once_in_order;
    };
    let t = stats.transfer;
    let share = |n: u64| if t.frames_sent == 0 { 0.0 } else { 100.0 * n as f64 / t.frames_sent as f64 };
    println!(
        "{name:<20} {:>6} {:>6} {:>5.1}% {:>6} {:>5.1}% {:>6} {:>5.1}% {:>5}   {} of {}{}",
        t.frames_sent,
        t.frames_lost,
        share(t.frames_lost),
        t.losses_spurious,
        share(t.losses_spurious),
        t.frames_resent,
        share(t.frames_resent),
        t.congestion_undos,
        stream.delivered,
        stream.sent,
        if once_in_order { "" } else { "  NOT exactly once and in order" },
    );
    once_in_order
}

fn secs() -> Option<f64> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Some(10.0),
        [flag, s] if flag == "--secs" => s.parse().ok().filter(|s: &f64| s.is_finite() && *s > 0.0),
        _ => None,
    }
}

#[tokio::main]
async fn main() -> Result<ExitCode, Box<dyn Error>> {
    let Some(secs) = secs() else {
        eprintln!("{USAGE}");
        return Ok(ExitCode::from(2));
    };

    let server = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
    let accepting = tokio::spawn({
        let server = server.clone();
        async move { Ok::<_, porous_tokio::Error>([server.accept().await?, server.accept().await?]) }
    });
    let mut clients = Vec::new();
    for _ in 0..2 {
        let host = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
        let peer = host.connect(server.local_addr()).await?;
        clients.push((host, peer));
    }
    // The server's peer of each client, found by the client's address.
    let accepted = accepting.await??;
    let of = |client: SocketAddr| accepted.iter().find(|p| p.remote() == client).cloned();
    let mut pairs = Vec::new();
    for (host, to_server) in &clients {
        let to_client = of(host.local_addr()).ok_or("the server accepted another address than a client's")?;
        pairs.push((to_server.clone(), to_client));
    }
    println!(
        "server on {}; clients on {} and {}; {secs} s of {MESSAGE}-byte reliable messages at 60 Hz each way",
        server.local_addr(),
        clients[0].0.local_addr(),
        clients[1].0.local_addr(),
    );

    let epoch = Instant::now();
    let until = epoch + Duration::from_secs_f64(secs);
    let mut streams = Vec::new();
    let mut senders = Vec::new();
    for (to_server, to_client) in &pairs {
        let (up, down) = (shared(), shared());
        tokio::spawn(receive(to_client.clone(), up.clone(), epoch));
        tokio::spawn(receive(to_server.clone(), down.clone(), epoch));
        senders.push(tokio::spawn(send_ticks(to_server.clone(), up.clone(), epoch, until)));
        senders.push(tokio::spawn(send_ticks(to_client.clone(), down.clone(), epoch, until)));
        streams.push((up, down));
    }
    for sender in senders {
        sender.await?;
    }
    let drained = Instant::now() + DRAIN;
    let delivered = |s: &Shared| {
        let s = lock(s);
        s.delivered >= s.sent
    };
    while Instant::now() < drained && !streams.iter().all(|(up, down)| delivered(up) && delivered(down)) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    println!();
    println!(
        "{:<20} {:>6} {:>14} {:>14} {:>14} {:>5}   messages delivered",
        "frames", "sent", "lost", "found spurious", "resent", "undos"
    );
    let mut held = true;
    for (i, ((to_server, to_client), (up, down))) in pairs.iter().zip(&streams).enumerate() {
        held &= row(&format!("client {} -> server", i + 1), to_server.stats(), &lock(up));
        held &= row(&format!("server -> client {}", i + 1), to_client.stats(), &lock(down));
    }
    println!();
    println!(
        "Loopback loses nothing: every frame declared lost here was spurious (its acknowledgement\n\
         came late) and resent for nothing, whether or not the sender found it spurious."
    );
    if held {
        println!("Every message arrived exactly once and in order.");
    }
    for (_, to_server) in &clients {
        to_server.disconnect().await;
    }
    Ok(if held { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
