//! A relay on 127.0.0.1 between a client and a server that loses, delays and jitters
//! datagrams and drops those larger than its path MTU, like a small bad network, on two
//! threads of its own so that neither host's loop paces it. The intake thread blocks in `recv_from`, so a datagram is stamped the
//! moment it arrives, and decides its fate; the forwarding thread holds it and sends it
//! when it is due, waking on a channel's timed receive (a futex with a nanosecond timeout:
//! no millisecond rounding, no spinning on a two-core machine). A direction is a queue,
//! never reordered. The server is the address the relay is started for; the client is the
//! first other address that sends to it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::bulk::{io_error, raw_socket};
use crate::rng::Rng;

/// What the relay does to each datagram, each way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Path {
    /// Chance that a datagram is dropped, each way.
    pub loss: f64,
    /// One-way delay.
    pub delay: Duration,
    /// Random extra delay, up to this, uniform.
    pub jitter: Duration,
    /// Seeds the relay's generators (one per direction).
    pub seed: u64,
    /// The path's MTU, IPv4 and UDP headers counted ([`IP_UDP_HEADERS`]): a datagram
    /// whose UDP payload is larger than `mtu - 28` is dropped silently, as a router that
    /// cannot forward it and sends no ICMP message would (counted in
    /// [`RelayStats::too_large`]). `None`: loopback's own, 65,536.
    pub mtu: Option<usize>,
}

/// IPv4 and UDP headers: what a path MTU counts beyond a datagram's UDP payload (the relay
/// is on 127.0.0.1).
pub const IP_UDP_HEADERS: usize = 28;

impl Path {
    /// Whether the path carries a datagram of `len` bytes of UDP payload.
    pub fn carries(&self, len: usize) -> bool {
        self.mtu.is_none_or(|mtu| len + IP_UDP_HEADERS <= mtu)
    }
}

/// Which way a datagram goes: [`TO_SERVER`] (from the client) or [`TO_CLIENT`].
pub type Direction = usize;
/// From the client to the server.
pub const TO_SERVER: Direction = 0;
/// From the server to the client.
pub const TO_CLIENT: Direction = 1;

/// What the relay did, per direction ([`TO_SERVER`], [`TO_CLIENT`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Datagrams forwarded.
    pub forwarded: [u64; 2],
    /// Of those, POROUS datagrams that carried a frame (see `dropped_frames`).
    pub forwarded_frames: [u64; 2],
    /// Datagrams dropped at random (`Path::loss`).
    pub dropped: [u64; 2],
    /// Of those, POROUS datagrams that carried a frame (a connection datagram with its `D`
    /// bit: `docs/wire-format.md`): what a sender can count as lost. The others carried
    /// acknowledgements and pings only, or were handshake and disconnection datagrams,
    /// which no sender counts as lost frames.
    pub dropped_frames: [u64; 2],
    /// Datagrams dropped for being larger than the path's MTU (`Path::mtu`), apart from
    /// `dropped`.
    pub too_large: [u64; 2],
    /// How late the relay forwarded datagrams, both ways: the 99th percentile and the
    /// worst. What it adds to the path's delay is the machine's scheduling, not POROUS: on
    /// a busy two-core machine it is the floor of every latency figure's noise.
    pub late_p99: Duration,
    /// See `late_p99`.
    pub late_max: Duration,
}

/// Whether `datagram` is a POROUS connection datagram that carries a frame: type byte
/// `0 D w w A P Q 0` with `D` set. (Plain mode; a sealed datagram keeps its type byte.)
pub fn carries_frame(datagram: &[u8]) -> bool {
    datagram.first().is_some_and(|&ty| ty & 0x80 == 0 && ty & 0x40 != 0)
}

/// A datagram the relay holds: when it is due, which way it goes, where, what.
type Held = (Instant, Direction, SocketAddr, Vec<u8>);

/// What the intake thread counts per direction: random drops, of those the frames, and
/// drops for size.
type Drops = ([u64; 2], [u64; 2], [u64; 2]);

/// What the forwarding thread counts: datagrams and frames forwarded per direction, and
/// how late each datagram was.
type Forwards = ([u64; 2], [u64; 2], Vec<Duration>);

/// A running relay (see the [module docs](self)).
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    intake: thread::JoinHandle<std::io::Result<Drops>>,
    forward: thread::JoinHandle<std::io::Result<Forwards>>,
}

impl Relay {
    /// A relay for `server` on `path`; the client sends to [`Relay::addr`].
    pub fn start(server: SocketAddr, path: Path) -> std::io::Result<Self> {
        // The adapters' socket buffers: a burst of the bulk transfers must not overflow the
        // relay's buffer where it would not overflow a host's.
        let (socket, _) = raw_socket()?;
        let addr = socket.local_addr()?;
        // Only so that the intake notices `stop`; datagrams wake it at once.
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let out = socket.try_clone()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Held>();
        let intake = {
            let stop = stop.clone();
            thread::spawn(move || -> std::io::Result<Drops> {
                // One generator per direction: one direction's fate does not depend on how
                // many datagrams the other carried.
                let mut seeds = Rng::new(path.seed);
                let mut rng = [Rng::new(seeds.next_u64()), Rng::new(seeds.next_u64())];
                let (mut client, mut last_due) = (None, [None::<Instant>; 2]);
                let (mut dropped, mut frames, mut too_large) = ([0u64; 2], [0u64; 2], [0u64; 2]);
                let mut buf = vec![0u8; 65_536];
                while !stop.load(Ordering::Acquire) {
                    let (n, from) = match socket.recv_from(&mut buf) {
                        Ok(got) => got,
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                            continue;
                        }
                        Err(e) => return Err(e),
                    };
                    let now = Instant::now();
                    let (dir, to) = if from == server {
                        match client {
                            Some(c) => (TO_CLIENT, c),
                            None => continue,
                        }
                    } else {
                        client = Some(from);
                        (TO_SERVER, server)
                    };
                    // Drawn whatever the size: a datagram too large does not shift the
                    // loss pattern of those after it.
                    let lost = rng[dir].unit() < path.loss;
                    if !path.carries(n) {
                        too_large[dir] += 1;
                        continue;
                    }
                    if lost {
                        dropped[dir] += 1;
                        frames[dir] += u64::from(carries_frame(&buf[..n]));
                        continue;
                    }
                    let mut due = now + path.delay;
                    if !path.jitter.is_zero() {
                        due += path.jitter.mul_f64(rng[dir].unit());
                    }
                    // A queue, not a shuffle: never before the datagram ahead of it.
                    let due = last_due[dir].map_or(due, |last| due.max(last));
                    last_due[dir] = Some(due);
                    if tx.send((due, dir, to, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Ok((dropped, frames, too_large))
            })
        };
        let forward = thread::spawn(move || -> std::io::Result<Forwards> {
            // Per direction, in due order (the intake keeps each direction's order).
            let mut held: [VecDeque<Held>; 2] = [VecDeque::new(), VecDeque::new()];
            let (mut forwarded, mut frames, mut late) = ([0u64; 2], [0u64; 2], Vec::new());
            loop {
                let now = Instant::now();
                for queue in &mut held {
                    while queue.front().is_some_and(|h| h.0 <= now) {
                        let Some((due, dir, to, data)) = queue.pop_front() else { break };
                        // A host that is gone (the run is ending) is not the relay's error.
                        if out.send_to(&data, to).is_ok() {
                            forwarded[dir] += 1;
                            frames[dir] += u64::from(carries_frame(&data));
                            late.push(now - due);
                        }
                    }
                }
                let next = held.iter().filter_map(|q| q.front().map(|h| h.0)).min();
                let wait = next.map_or(Duration::from_millis(20), |t| t.saturating_duration_since(Instant::now()));
                match rx.recv_timeout(wait) {
                    Ok(h) => held[h.1].push_back(h),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    // The intake stopped: so does the relay.
                    Err(mpsc::RecvTimeoutError::Disconnected) => return Ok((forwarded, frames, late)),
                }
            }
        });
        Ok(Self { addr, stop, intake, forward })
    }

    /// Where the client sends.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the relay (what it still holds is not forwarded) and says what it did.
    pub fn finish(self) -> std::io::Result<RelayStats> {
        self.stop.store(true, Ordering::Release);
        let (dropped, dropped_frames, too_large) =
            self.intake.join().map_err(|_| io_error("relay intake panicked"))??;
        let (forwarded, forwarded_frames, mut late) =
            self.forward.join().map_err(|_| io_error("relay forwarder panicked"))??;
        late.sort();
        let at = |q: f64| late.get(((late.len().max(1) - 1) as f64 * q) as usize).copied().unwrap_or_default();
        Ok(RelayStats {
            forwarded,
            forwarded_frames,
            dropped,
            dropped_frames,
            too_large,
            late_p99: at(0.99),
            late_max: at(1.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;

    #[test]
    fn frames_are_told_from_acknowledgements_and_handshakes_by_their_type_byte() {
        // Data with a frame (`D`), acknowledgements alone, a connection request, nothing.
        assert!(carries_frame(&[0x40, 1, 2]));
        assert!(carries_frame(&[0x7e]));
        assert!(!carries_frame(&[0x08, 1, 2]));
        assert!(!carries_frame(&[0x80, 1, 2]));
        assert!(!carries_frame(&[0xc0]));
        assert!(!carries_frame(&[]));
    }

    /// A relay with a path MTU forwards datagrams up to it, headers counted, and drops
    /// larger ones silently, counting them apart from random loss.
    #[test]
    fn a_relay_drops_what_its_path_mtu_does_not_carry() {
        let server = UdpSocket::bind("127.0.0.1:0").unwrap();
        server.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let path = Path { loss: 0.0, delay: Duration::ZERO, jitter: Duration::ZERO, seed: 7, mtu: Some(1280) };
        let relay = Relay::start(server.local_addr().unwrap(), path).unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        for len in [1200, 1253, 1252, 9000, 1] {
            client.send_to(&vec![0x40; len], relay.addr()).unwrap();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 16_384];
        while let Ok((n, _)) = server.recv_from(&mut buf) {
            got.push(n);
        }
        let stats = relay.finish().unwrap();
        assert_eq!(got, [1200, 1252, 1]);
        assert_eq!((stats.too_large, stats.dropped, stats.forwarded), ([2, 0], [0, 0], [3, 0]));
    }

    /// Everything through a lossless relay arrives, in order, from the relay's address;
    /// through one that loses everything, nothing does, and each drop is counted.
    #[test]
    fn a_relay_forwards_in_order_or_drops_and_counts() {
        for loss in [0.0, 1.0] {
            let server = UdpSocket::bind("127.0.0.1:0").unwrap();
            server.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
            let path =
                Path { loss, delay: Duration::from_millis(2), jitter: Duration::from_millis(1), seed: 7, mtu: None };
            let relay = Relay::start(server.local_addr().unwrap(), path).unwrap();
            let client = UdpSocket::bind("127.0.0.1:0").unwrap();
            for i in 0..20u8 {
                let ty = if i % 2 == 0 { 0x40 } else { 0x08 };
                client.send_to(&[ty, i], relay.addr()).unwrap();
            }
            let mut got = Vec::new();
            let mut buf = [0u8; 16];
            while let Ok((n, from)) = server.recv_from(&mut buf) {
                assert_eq!((n, from), (2, relay.addr()));
                got.push(buf[1]);
            }
            let stats = relay.finish().unwrap();
            if loss == 0.0 {
                assert_eq!(got, (0..20).collect::<Vec<u8>>(), "all, in order");
                assert_eq!((stats.forwarded, stats.forwarded_frames, stats.dropped), ([20, 0], [10, 0], [0, 0]));
            } else {
                assert!(got.is_empty());
                assert_eq!((stats.dropped, stats.dropped_frames), ([20, 0], [10, 0]));
            }
        }
    }
}
