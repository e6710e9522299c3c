//! The `pmtu-*` scenarios (issue 38): path MTU discovery over real UDP. The lossy relay is
//! given a path MTU (datagrams larger than it dropped silently, as a path that sends no
//! ICMP message does; `Path::mtu` counts the IPv4 and UDP headers, as `docs/simulated.md`'s
//! 1,500-byte path carries 1,472 bytes of UDP payload), and one bulk transfer of small
//! reliable packets runs through it per scenario:
//!
//! - `pmtu-off`: discovery off (`max_mtu` 0, the default), relay MTU `--path-mtu`;
//! - `pmtu-on`: discovery on (`max_mtu` `--max-mtu` on both sides, the base staying at
//!   1,200), the same relay;
//! - `pmtu-low`: discovery on through a relay of `--low-mtu` bytes, below the ceiling, so
//!   the search must settle between the base and the ceiling.
//!
//! The sender keeps the send queue full, as in `lossy-*`; the receiver checks that every
//! reliable packet arrives intact, exactly once and in order. With discovery on, the
//! sender samples `PeerStats::mtu` after every `service` call from the moment it is
//! connected, and after the transfer keeps the connection up until no probe has gone for a
//! while (the search is over), so that the size reached and when are the search's, not
//! cut short by the end of the transfer.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use porous_loopback::bulk::{WATCHDOG, io_error, localhost};
use porous_loopback::relay::{Path, Relay, RelayStats};
use porous_loopback::stream;
use porous_mio::{Event, Host, HostConfig, PeerStats, SendError, SendMode};

/// After the transfer, the search counts as over once no probe has gone for this long (or
/// four resend timeouts, if longer): a search under way always has a probe out, resent
/// within a resend timeout.
const QUIET: Duration = Duration::from_secs(1);

/// The longest the sender waits for the search to end, from the start of the transfer.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// One `pmtu-*` run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Run {
    /// From the first send to the last delivery.
    pub(crate) wall: Duration,
    /// Payload bytes delivered.
    pub(crate) bytes: u64,
    /// The sender's datagrams (data, acknowledgements, pings, probes) and wire bytes
    /// during the transfer.
    pub(crate) datagrams: u64,
    pub(crate) wire_bytes: u64,
    /// The datagram size the sender had when it was connected, and each change after:
    /// (time since it was connected, size).
    pub(crate) mtu_log: Vec<(Duration, usize)>,
    /// Every reliable packet arrived intact, exactly once, in order.
    pub(crate) exactly_once: bool,
    /// What the receiver saw of the stream, for the report when `exactly_once` fails.
    pub(crate) delivered: u64,
    pub(crate) out_of_order: u64,
    pub(crate) missing: u64,
    /// The search had not ended when the sender stopped waiting for it.
    pub(crate) unsettled: bool,
    /// The sender's connection at the end.
    pub(crate) sender: Option<PeerStats>,
    pub(crate) relay: RelayStats,
    /// Datagrams the kernel dropped for a full receive buffer during the run (any
    /// socket's: the hosts' and the relay's).
    pub(crate) kernel_drops: u64,
}

impl Run {
    pub(crate) fn goodput(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The sender's datagrams per MB of payload.
    pub(crate) fn datagrams_per_mb(&self) -> f64 {
        self.datagrams as f64 / (self.bytes.max(1) as f64 / 1e6)
    }

    /// The sender's wire bytes per payload byte.
    pub(crate) fn wire_per_byte(&self) -> f64 {
        self.wire_bytes as f64 / self.bytes.max(1) as f64
    }

    /// The size the sender ended with.
    pub(crate) fn final_mtu(&self) -> usize {
        self.mtu_log.last().map_or(0, |&(_, m)| m)
    }

    /// When the sender first sent at the size it ended with, from the moment it was
    /// connected; `None` if it never left the size it started at.
    pub(crate) fn reached(&self) -> Option<Duration> {
        let first = self.mtu_log.first()?.1;
        let last = self.final_mtu();
        (last != first).then(|| self.mtu_log.iter().find(|&&(_, m)| m == last).map_or(Duration::ZERO, |&(t, _)| t))
    }

    pub(crate) fn black_holes(&self) -> u64 {
        self.sender.map_or(0, |p| p.transfer.black_holes)
    }

    /// Frames the sender declared lost and, of those, found delivered after all.
    pub(crate) fn frames_lost(&self) -> (u64, u64) {
        self.sender.map_or((0, 0), |p| (p.transfer.frames_lost, p.transfer.losses_spurious))
    }

    /// Probes sent and, of those, unanswered.
    pub(crate) fn probes(&self) -> (u64, u64) {
        self.sender.map_or((0, 0), |p| (p.transfer.mtu_probes, p.transfer.mtu_probes_lost))
    }
}

/// Both sides' configuration: the default, with `max_mtu` (0: discovery off).
fn config(max_mtu: usize) -> HostConfig {
    let mut config = HostConfig::default();
    config.peer.max_mtu = max_mtu;
    config
}

/// What the two ends of a run tell each other.
#[derive(Debug, Default)]
struct Flags {
    /// The receiver is connected.
    ready: AtomicBool,
    /// Every packet is delivered (or the receiver failed: nothing more will be).
    delivered: AtomicBool,
    /// The sender is done with the connection (the receiver answers probes until then).
    finished: AtomicBool,
}

/// `bytes` of reliable packets of `size` bytes through a relay on `path`, discovery on up
/// to `max_mtu` (0: off) on both sides.
pub(crate) fn run(max_mtu: usize, size: usize, bytes: u64, path: Path) -> io::Result<Run> {
    let n = bytes.div_ceil(size as u64);
    let (addr_tx, addr_rx) = mpsc::channel();
    let flags = Arc::new(Flags::default());
    let receiver = {
        let flags = flags.clone();
        thread::spawn(move || {
            let result = receive(max_mtu, n, &addr_tx, &flags);
            // The sender must not wait for a transfer that will not end.
            flags.delivered.store(true, Ordering::Release);
            result
        })
    };
    let receiver_addr = addr_rx.recv().map_err(io_error)?;
    let relay = Relay::start(receiver_addr, path)?;
    let remote = relay.addr();
    let sender = thread::spawn(move || {
        let result = send(max_mtu, size, n, remote, &flags);
        flags.finished.store(true, Ordering::Release);
        result
    });
    let sent = sender.join().map_err(|_| io_error("sender panicked"));
    let received = receiver.join().map_err(|_| io_error("receiver panicked"));
    // Stop the relay whatever happened, so that a failed run leaves no thread behind.
    let relay = relay.finish()?;
    let ((mut run, t0), (got, last)) = (sent??, received??);
    run.wall = last.saturating_duration_since(t0);
    run.bytes = got.delivered.min(n) * size as u64;
    run.delivered = got.delivered;
    run.out_of_order = got.out_of_order;
    run.missing = got.missing();
    run.exactly_once = got.held() && got.delivered == n && got.missing() == 0;
    run.relay = relay;
    Ok(run)
}

/// The receiving end: checks each of the `n` packets as it arrives, and reads on until the
/// sender is done, so that a duplicate after the last new packet is seen too. Returns the
/// stream's record and when its last packet arrived.
fn receive(
    max_mtu: usize,
    n: u64,
    addr_tx: &mpsc::Sender<std::net::SocketAddr>,
    flags: &Flags,
) -> io::Result<(stream::Stream, Instant)> {
    let mut host = Host::bind(localhost(), config(max_mtu))?;
    addr_tx.send(host.local_addr()).map_err(io_error)?;
    while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
    flags.ready.store(true, Ordering::Release);
    let mut got = stream::Stream::new(SendMode::Reliable);
    for _ in 0..n {
        got.on_sent();
    }
    let deadline = Instant::now() + WATCHDOG;
    let mut last = Instant::now();
    while !flags.finished.load(Ordering::Acquire) {
        match host.service(Duration::from_millis(5))? {
            Some(Event::Received { data, .. }) => {
                got.receive(&data, Duration::ZERO);
                if got.delivered == n {
                    last = Instant::now();
                    flags.delivered.store(true, Ordering::Release);
                }
            }
            Some(Event::Disconnected { reason, .. }) => return Err(io_error(reason)),
            _ => {}
        }
        if Instant::now() > deadline {
            return Err(io_error(format!("watchdog: {} of {n} delivered", got.delivered)));
        }
    }
    Ok((got, last))
}

/// The sending end: keeps the send queue full of the `n` packets until the receiver has
/// them all, sampling its datagram size; then, with discovery on, waits for the search to
/// end. Returns its record and when the transfer started.
fn send(
    max_mtu: usize,
    size: usize,
    n: u64,
    remote: std::net::SocketAddr,
    flags: &Flags,
) -> io::Result<(Run, Instant)> {
    let mut host = Host::bind(localhost(), config(max_mtu))?;
    let peer = host.connect(remote).map_err(io_error)?;
    while !matches!(host.service(Duration::from_millis(10))?, Some(Event::Connected { .. })) {}
    let connected = Instant::now();
    let mut run = Run::default();
    let sample = |host: &Host, run: &mut Run| {
        if let Some(s) = host.peer_stats(peer)
            && run.mtu_log.last().is_none_or(|&(_, m)| m != s.mtu)
        {
            run.mtu_log.push((connected.elapsed(), s.mtu));
        }
    };
    sample(&host, &mut run);
    // The host keeps working (and the search runs) while the receiver gets ready.
    while !flags.ready.load(Ordering::Acquire) {
        let _ = host.service(Duration::from_millis(1))?;
        sample(&host, &mut run);
    }
    let before = host.peer_stats(peer).map(|p| p.transfer).unwrap_or_default();
    let t0 = Instant::now();
    let mut sent = 0u64;
    while !flags.delivered.load(Ordering::Acquire) {
        while sent < n {
            match host.send(peer, 0, stream::packet(sent, Duration::ZERO, size), SendMode::Reliable) {
                Ok(()) => sent += 1,
                Err(SendError::QueueFull { .. }) => break,
                Err(e) => return Err(io_error(e)),
            }
        }
        let _ = host.service(Duration::from_millis(1))?;
        sample(&host, &mut run);
        if t0.elapsed() > WATCHDOG {
            return Err(io_error("watchdog: the sender gave up"));
        }
    }
    let after = host.peer_stats(peer).map(|p| p.transfer).unwrap_or_default();
    run.datagrams = after.datagrams_sent - before.datagrams_sent;
    run.wire_bytes = after.bytes_sent - before.bytes_sent;
    if max_mtu > 0 {
        // Until the search is over: no probe for a while.
        let mut probes = (after.mtu_probes, Instant::now());
        loop {
            let _ = host.service(Duration::from_millis(1))?;
            sample(&host, &mut run);
            let Some(s) = host.peer_stats(peer) else { break };
            let now = Instant::now();
            if s.transfer.mtu_probes != probes.0 {
                probes = (s.transfer.mtu_probes, now);
            }
            if now - probes.1 >= QUIET.max(4 * s.rto) {
                break;
            }
            if now - t0 > SETTLE_LIMIT {
                run.unsettled = true;
                break;
            }
        }
    }
    run.sender = host.peer_stats(peer);
    Ok((run, t0))
}
