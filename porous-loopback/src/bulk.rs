//! Bulk reliable transfers on a clean path, as the adapters' loopback benches measure them,
//! and the raw UDP baselines they are measured against: what a run records
//! ([`Outcome`]), how the CPU and the kernel's drops are read, the raw runs themselves
//! ([`raw_run`]), and the small statistics of the reports.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_proto::{PeerStats, Transmit};
use porous_udp::{AsSocketRef, Batching, SOCKET_BUFFER, UdpIo};

use crate::relay::RelayStats;

/// Give up on a run after this long.
pub const WATCHDOG: Duration = Duration::from_secs(120);

/// CPU time this thread has used: nanosecond `schedstat` where the kernel offers it, else
/// the clock-tick `stat` fields.
pub fn thread_cpu() -> Duration {
    if let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat")
        && let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok())
        && ns > 0
    {
        return Duration::from_nanos(ns);
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// An I/O error that says `e`.
pub fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// 127.0.0.1, any port.
pub fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A raw socket with the kernel buffers the adapters ask for, so that the baseline differs
/// from POROUS by the protocol alone. Returns the granted receive buffer size too.
pub fn raw_socket() -> std::io::Result<(UdpSocket, usize)> {
    let socket = UdpSocket::bind(localhost())?;
    let options = socket2::SockRef::from(&socket);
    // As in the adapters: best effort, the kernel may grant less.
    let _ = options.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = options.set_send_buffer_size(SOCKET_BUFFER);
    let granted = options.recv_buffer_size()?;
    Ok((socket, granted))
}

/// The kernel's count of UDP datagrams dropped for a full receive buffer (Linux).
pub fn kernel_drops() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut rows = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let (Some(names), Some(values)) = (rows.next(), rows.next()) else { return 0 };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The machine's processor, as `/proc/cpuinfo` names it.
pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| String::from("unknown cpu"))
}

/// One measurement of one scenario.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// From the first send to the last delivery.
    pub wall: Duration,
    /// CPU time of each end over the same span.
    pub send_cpu: Duration,
    /// See `send_cpu`.
    pub recv_cpu: Duration,
    /// Packets delivered (POROUS) or datagrams arrived (raw).
    pub delivered: u64,
    /// Payload bytes delivered (POROUS) or datagram bytes arrived (raw).
    pub bytes: u64,
    /// Data-direction datagrams the sender put on the wire (resends included), and bytes.
    pub datagrams: u64,
    /// See `datagrams`.
    pub wire_bytes: u64,
    /// Acknowledgement-direction datagrams from the receiver.
    pub acks: u64,
    /// Datagrams the receiver took from its socket and verified: the sender's `datagrams`
    /// less this is what the path (the kernel, the relay) lost.
    pub arrived: u64,
    /// Frames the sender resent.
    pub resent: u64,
    /// Sends that would have blocked.
    pub would_block: u64,
    /// System calls that moved datagrams, both ends.
    pub syscalls: u64,
    /// Datagrams the kernel dropped for want of receive-buffer room (UDP `RcvbufErrors`,
    /// system-wide, during the run).
    pub kernel_drops: u64,
    /// Datagrams an async adapter's driver left unread for a consumer that was behind.
    pub deferred: u64,
    /// The sender's connection at the end, when the adapter tells it.
    pub peer: Option<PeerStats>,
    /// What the lossy relay did, when there was one.
    pub relay: RelayStats,
}

impl Outcome {
    /// CPU of both ends.
    pub fn cpu(&self) -> Duration {
        self.send_cpu + self.recv_cpu
    }

    /// CPU of both ends per packet (or datagram) delivered, ns.
    pub fn cpu_per_item(&self) -> f64 {
        self.cpu().as_nanos() as f64 / self.delivered.max(1) as f64
    }

    /// Payload bytes per second.
    pub fn rate(&self) -> f64 {
        self.bytes as f64 / self.wall.as_secs_f64()
    }

    /// The mean data datagram's size.
    pub fn datagram_size(&self) -> usize {
        (self.wire_bytes / self.datagrams.max(1)) as usize
    }

    /// Packets per data datagram.
    pub fn per_datagram(&self) -> f64 {
        self.delivered as f64 / self.datagrams.max(1) as f64
    }
}

/// The receiving end of a POROUS run, when it delivered the last packet.
#[derive(Clone, Copy, Debug)]
pub struct RecvEnd {
    /// See [`Outcome::deferred`].
    pub deferred: u64,
    /// See [`Outcome::arrived`].
    pub arrived: u64,
    /// When the last packet was delivered.
    pub last: Instant,
    /// The receiving thread's CPU over the run.
    pub cpu: Duration,
    /// See [`Outcome::delivered`].
    pub delivered: u64,
    /// See [`Outcome::bytes`].
    pub bytes: u64,
    /// See [`Outcome::acks`].
    pub acks: u64,
    /// The receiver's system calls.
    pub syscalls: u64,
}

/// The sending end of a POROUS run.
#[derive(Clone, Copy, Debug)]
pub struct SendEnd {
    /// When the first packet was sent.
    pub start: Instant,
    /// The sending thread's CPU over the run.
    pub cpu: Duration,
    /// What the sender measured.
    pub outcome: Outcome,
}

/// Both ends' threads, joined, as one outcome.
pub fn join(
    sender: thread::JoinHandle<std::io::Result<SendEnd>>,
    receiver: thread::JoinHandle<std::io::Result<RecvEnd>>,
) -> std::io::Result<Outcome> {
    let s = sender.join().map_err(|_| io_error("sender panicked"))??;
    let r = receiver.join().map_err(|_| io_error("receiver panicked"))??;
    let mut o = s.outcome;
    o.wall = r.last - s.start;
    o.send_cpu = s.cpu;
    o.recv_cpu = r.cpu;
    o.delivered = r.delivered;
    o.bytes = r.bytes;
    o.acks = r.acks;
    o.arrived = r.arrived;
    o.syscalls += r.syscalls;
    o.deferred = r.deferred;
    Ok(o)
}

/// The raw baselines: `count` datagrams of `size` bytes, blasted from one plain socket to
/// another on 127.0.0.1, one `send_to` each, or through `porous_udp::UdpIo` with full
/// batching (`batched`: GSO runs of 64, `recvmmsg` with GRO), no protocol.
pub fn raw_run(batched: bool, size: usize, count: u64) -> std::io::Result<Outcome> {
    let (rx, _) = raw_socket()?;
    let (tx, _) = raw_socket()?;
    let to = rx.local_addr()?;
    let start = Arc::new(Barrier::new(2));
    let done = Arc::new(AtomicBool::new(false));
    let receiver = {
        let (start, done) = (start.clone(), done.clone());
        thread::spawn(move || -> std::io::Result<(Option<Instant>, Duration, u64, u64, u64)> {
            let mut counts = (0u64, 0u64, 0u64);
            let mut last = None;
            if batched {
                let mut io = UdpIo::new(&rx, Batching::FULL)?;
                let mut rx = mio::net::UdpSocket::from_std(rx);
                let mut poll = mio::Poll::new()?;
                let mut events = mio::Events::with_capacity(8);
                poll.registry().register(&mut rx, mio::Token(0), mio::Interest::READABLE)?;
                start.wait();
                let cpu0 = thread_cpu();
                while counts.0 < count {
                    match io.recv(rx.as_socket_ref()) {
                        Ok(_) => {
                            for (_, d) in io.received() {
                                counts.0 += 1;
                                counts.1 += d.len() as u64;
                            }
                            counts.2 += 1;
                            last = Some(Instant::now());
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            poll.poll(&mut events, Some(Duration::from_millis(50)))?;
                            // A quiet socket after the sender finished: the rest was lost.
                            if events.is_empty() && done.load(Ordering::Acquire) {
                                break;
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((last, thread_cpu() - cpu0, counts.0, counts.1, counts.2))
            } else {
                rx.set_read_timeout(Some(Duration::from_millis(50)))?;
                let mut buf = vec![0u8; 65_536];
                start.wait();
                let cpu0 = thread_cpu();
                while counts.0 < count {
                    match rx.recv_from(&mut buf) {
                        Ok((len, _)) => {
                            counts.0 += 1;
                            counts.1 += len as u64;
                            counts.2 += 1;
                            last = Some(Instant::now());
                        }
                        // A timeout after the sender finished: the rest was lost.
                        Err(_) if done.load(Ordering::Acquire) => break,
                        Err(_) => {}
                    }
                }
                Ok((last, thread_cpu() - cpu0, counts.0, counts.1, counts.2))
            }
        })
    };
    let datagram = Bytes::from(vec![0x5A; size]);
    start.wait();
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut send_calls = 0;
    if batched {
        let mut io = UdpIo::new(&tx, Batching::FULL)?;
        for _ in 0..count {
            io.push(Transmit::new(to, datagram.clone()));
            if io.pending() >= 64 {
                while io.send(tx.as_socket_ref()).is_err() {
                    thread::yield_now();
                }
            }
        }
        while io.send(tx.as_socket_ref()).is_err() {
            thread::yield_now();
        }
        send_calls = io.stats().send_calls;
    } else {
        for _ in 0..count {
            if tx.send_to(&datagram, to).is_ok() {
                send_calls += 1;
            }
        }
    }
    let send_cpu = thread_cpu() - cpu0;
    done.store(true, Ordering::Release);
    let (last, recv_cpu, arrived, bytes, recv_calls) = receiver.join().map_err(|_| io_error("receiver panicked"))??;
    Ok(Outcome {
        wall: last.map_or(t0.elapsed(), |l| l - t0),
        send_cpu,
        recv_cpu,
        delivered: arrived,
        bytes,
        datagrams: count,
        wire_bytes: count * size as u64,
        syscalls: send_calls + recv_calls,
        ..Outcome::default()
    })
}

/// The median of `v` (the mean of the middle two for an even count); `NaN` if empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// "median (min-max)" with `digits` decimals.
pub fn spread(v: &[f64], digits: usize) -> String {
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{:.digits$} ({lo:.digits$}-{hi:.digits$})", median(v.to_vec()))
}

/// Bytes per second as MB/s.
pub fn mbps(bytes_per_s: f64) -> String {
    format!("{:.1} MB/s", bytes_per_s / 1e6)
}

/// The order of one round of `len` scenarios: rotated every run, so that each runs first
/// as often as the others and a slow moment of the machine favours none (A B, B A, ...).
pub fn round_order(run: usize, len: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.rotate_left(run % len.max(1));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_spreads_and_rounds() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
        assert_eq!(spread(&[1.0, 3.0, 2.0], 1), "2.0 (1.0-3.0)");
        assert_eq!(round_order(1, 3), [1, 2, 0]);
        assert_eq!(round_order(3, 3), [0, 1, 2]);
    }

    /// A short raw run of each kind moves what it sent on a quiet loopback.
    #[test]
    fn raw_runs_move_their_datagrams() {
        for batched in [false, true] {
            let o = raw_run(batched, 200, 100).unwrap();
            assert!(o.delivered > 0 && o.delivered <= 100, "{o:?}");
            assert_eq!(o.bytes, o.delivered * 200);
        }
    }
}
