//! `UdpIo` on real sockets on 127.0.0.1: batching where the kernel has it, the forced
//! fallback, and faults that must stay confined to one destination.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use bytes::Bytes;
use porous_udp::{AsSocketRef, Batching, Faults, Transmit, UdpIo, bind};

const DEADLINE: Duration = Duration::from_secs(10);

fn open(batching: Batching) -> (UdpSocket, UdpIo) {
    let socket = bind("127.0.0.1:0").unwrap();
    let io = UdpIo::new(&socket, batching).unwrap();
    (socket, io)
}

/// A datagram that says who it is for and its index, padded to `len`.
fn datagram(to: u8, index: u32, len: usize) -> Bytes {
    let mut v = vec![to];
    v.extend_from_slice(&index.to_le_bytes());
    v.resize(len.max(5), index as u8);
    Bytes::from(v)
}

fn push(io: &mut UdpIo, remote: SocketAddr, payload: Bytes) {
    io.push(Transmit::new(remote, payload));
}

/// Sends everything queued, waiting out `WouldBlock`.
fn send_all(socket: &UdpSocket, io: &mut UdpIo) {
    let end = Instant::now() + DEADLINE;
    while let Err(e) = io.send(socket.as_socket_ref()) {
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "send errors are counted, not returned");
        assert!(Instant::now() < end, "the socket stayed blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receives until `count` datagrams arrived; returns them with the number of calls each
/// non-empty receive took.
fn receive(socket: &UdpSocket, io: &mut UdpIo, count: usize) -> Vec<(SocketAddr, Vec<u8>)> {
    let end = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    while got.len() < count {
        assert!(Instant::now() < end, "{} of {count} datagrams arrived", got.len());
        match io.recv(socket.as_socket_ref()) {
            Ok(n) => {
                let before = got.len();
                got.extend(io.received().map(|(from, d)| (from, d.to_vec())));
                assert_eq!(got.len() - before, n, "recv counts what received() yields");
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("receive failed: {e}"),
        }
    }
    got
}

#[test]
fn equal_datagrams_to_one_destination_leave_in_few_calls_and_arrive_in_order() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let (rx, mut rx_io) = open(Batching::FULL);
    let to = rx.local_addr().unwrap();
    let sent: Vec<Bytes> = (0..200).map(|i| datagram(1, i, 1_000)).collect();
    for d in &sent {
        push(&mut tx_io, to, d.clone());
    }
    send_all(&tx, &mut tx_io);
    let got = receive(&rx, &mut rx_io, sent.len());
    assert!(got.iter().all(|(from, _)| *from == tx.local_addr().unwrap()));
    assert_eq!(got.into_iter().map(|(_, d)| d).collect::<Vec<_>>(), sent);

    let (s, r) = (tx_io.stats(), rx_io.stats());
    assert_eq!((s.sent, s.send_errors, s.send_fallbacks), (200, 0, 0));
    assert_eq!(r.received, 200);
    if tx_io.max_segments() > 1 {
        // 64 segments of 1,000 bytes fit in 64,000 bytes: 4 calls.
        assert_eq!(s.send_calls, 4, "{s:?}");
        if rx_io.gro_segments() > 1 {
            // Loopback hands a GSO send to a GRO socket whole.
            assert!(r.recv_calls < 200, "{r:?}");
        }
    } else {
        assert_eq!(s.send_calls, 200);
    }
}

#[test]
fn forced_fallback_sends_and_receives_one_datagram_per_call() {
    let (tx, mut tx_io) = open(Batching::NONE);
    let (rx, mut rx_io) = open(Batching::NONE);
    assert_eq!(tx_io.max_segments(), 1);
    let to = rx.local_addr().unwrap();
    let sent: Vec<Bytes> = (0..100).map(|i| datagram(1, i, 300 + i as usize % 3)).collect();
    for d in &sent {
        push(&mut tx_io, to, d.clone());
    }
    send_all(&tx, &mut tx_io);
    let got = receive(&rx, &mut rx_io, sent.len());
    assert_eq!(got.into_iter().map(|(_, d)| d).collect::<Vec<_>>(), sent);
    let (s, r) = (tx_io.stats(), rx_io.stats());
    assert_eq!((s.sent, s.send_calls), (100, 100));
    assert_eq!((r.received, r.recv_calls), (100, 100));

    // Batching can come back at any time.
    tx_io.set_batching(Batching::FULL);
    assert_eq!(tx_io.batching(), Batching::FULL);
}

#[test]
fn mixed_sizes_and_destinations_keep_each_destinations_order() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let (a, mut a_io) = open(Batching::FULL);
    let (b, mut b_io) = open(Batching::FULL);
    let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    let (mut want_a, mut want_b) = (Vec::new(), Vec::new());
    for i in 0..300u32 {
        // Runs of equal sizes, broken by shorter and longer datagrams and by the other
        // destination.
        let to_b_now = i % 7 == 3 || (100..110).contains(&i);
        let len = match i % 11 {
            0 => 40,
            5 => 1_200,
            _ => 700,
        };
        let d = datagram(u8::from(to_b_now), i, len);
        if to_b_now {
            push(&mut tx_io, to_b, d.clone());
            want_b.push(d);
        } else {
            push(&mut tx_io, to_a, d.clone());
            want_a.push(d);
        }
    }
    send_all(&tx, &mut tx_io);
    let got_a: Vec<_> = receive(&a, &mut a_io, want_a.len()).into_iter().map(|(_, d)| d).collect();
    let got_b: Vec<_> = receive(&b, &mut b_io, want_b.len()).into_iter().map(|(_, d)| d).collect();
    assert_eq!(got_a, want_a);
    assert_eq!(got_b, want_b);
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors), (300, 0));
    if tx_io.max_segments() > 1 {
        assert!(s.send_calls < 300, "{s:?}");
    }
}

/// A real kernel error for one destination: a broadcast address without `SO_BROADCAST`
/// (`EACCES` on Linux). Datagrams for another destination, queued before, between and
/// after, all leave; GSO stays on, since it was not what failed.
#[test]
fn a_refused_destination_costs_only_its_own_datagrams() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let (rx, mut rx_io) = open(Batching::FULL);
    let to = rx.local_addr().unwrap();
    let broadcast = SocketAddr::from(([255, 255, 255, 255], to.port()));
    let segments = tx_io.max_segments();
    let mut want = Vec::new();
    for round in 0..3u32 {
        for i in 0..10 {
            let d = datagram(1, round * 100 + i, 500);
            push(&mut tx_io, to, d.clone());
            want.push(d);
        }
        for i in 0..10 {
            push(&mut tx_io, broadcast, datagram(9, round * 100 + i, 500));
        }
    }
    send_all(&tx, &mut tx_io);
    let got: Vec<_> = receive(&rx, &mut rx_io, want.len()).into_iter().map(|(_, d)| d).collect();
    assert_eq!(got, want);
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors), (30, 30), "{s:?}");
    assert_eq!(tx_io.max_segments(), segments, "a destination's error does not switch GSO off");
}

#[test]
fn an_injected_unreachable_destination_costs_only_its_own_datagrams() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let (a, mut a_io) = open(Batching::FULL);
    let (b, _b_io) = open(Batching::FULL);
    let (to_a, to_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    tx_io.inject(Faults::unreachable(to_b));
    let mut want = Vec::new();
    for i in 0..50u32 {
        let d = datagram(1, i, 200);
        push(&mut tx_io, to_a, d.clone());
        want.push(d);
        push(&mut tx_io, to_b, datagram(2, i, 200));
        push(&mut tx_io, to_b, datagram(2, i, 200));
    }
    send_all(&tx, &mut tx_io);
    let got: Vec<_> = receive(&a, &mut a_io, want.len()).into_iter().map(|(_, d)| d).collect();
    assert_eq!(got, want);
    assert_eq!((tx_io.stats().sent, tx_io.stats().send_errors), (50, 100));
}

/// A kernel that announces GSO and refuses it at send time: the batch goes out datagram by
/// datagram, nothing is lost, and GSO stays off afterwards.
#[test]
fn a_refused_gso_send_falls_back_to_single_datagrams_for_good() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let (rx, mut rx_io) = open(Batching::FULL);
    if tx_io.max_segments() == 1 {
        eprintln!("this kernel has no GSO: the fallback is the only path, tested elsewhere");
        return;
    }
    tx_io.inject(Faults::gso_refused());
    let to = rx.local_addr().unwrap();
    let sent: Vec<Bytes> = (0..100).map(|i| datagram(1, i, 900)).collect();
    for d in &sent {
        push(&mut tx_io, to, d.clone());
    }
    send_all(&tx, &mut tx_io);
    let got: Vec<_> = receive(&rx, &mut rx_io, sent.len()).into_iter().map(|(_, d)| d).collect();
    assert_eq!(got, sent);
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors, s.send_fallbacks), (100, 0, 1), "{s:?}");
    assert_eq!(tx_io.max_segments(), 1);
    // The first datagram alone, then the rest by sendmmsg where there is one.
    assert_eq!(s.send_calls, 1 + 99u64.div_ceil(tx_io.max_messages() as u64), "{s:?}");
}

#[test]
fn receive_errors_are_returned_and_counted() {
    let (rx, mut rx_io) = open(Batching::FULL);
    rx_io.inject(Faults::recv_error(io::ErrorKind::ConnectionRefused));
    for _ in 0..3 {
        assert_eq!(rx_io.recv(rx.as_socket_ref()).unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
        assert_eq!(rx_io.received().count(), 0);
    }
    assert_eq!(rx_io.stats().recv_errors, 3);
    rx_io.inject(Faults::NONE);
    assert_eq!(rx_io.recv(rx.as_socket_ref()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
    assert_eq!(rx_io.stats().recv_errors, 3, "WouldBlock is not an error");
}

#[test]
fn the_socket_gets_the_buffers_the_kernel_allows() {
    let (socket, _io) = open(Batching::FULL);
    let (recv, send) = porous_udp::socket_buffers(&socket).unwrap();
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (plain_recv, plain_send) = porous_udp::socket_buffers(&plain).unwrap();
    assert!(recv >= plain_recv && send >= plain_send);
}

/// `n` receiving sockets.
fn receivers(n: usize) -> Vec<(UdpSocket, UdpIo)> {
    (0..n).map(|_| open(Batching::FULL)).collect()
}

/// One datagram to each of `rx` (sizes differ, so GSO takes none of them), with `odd` in
/// the middle, which the kernel refuses; checks every receiver got its own.
fn fan_out(tx: &UdpSocket, tx_io: &mut UdpIo, rx: &mut [(UdpSocket, UdpIo)], odd: Option<SocketAddr>) {
    for (i, (socket, _)) in rx.iter().enumerate() {
        push(tx_io, socket.local_addr().unwrap(), datagram(i as u8, i as u32, 200 + i));
        if i == rx.len() / 2
            && let Some(odd) = odd
        {
            push(tx_io, odd, datagram(99, 0, 77));
        }
    }
    send_all(tx, tx_io);
    for (i, (socket, io)) in rx.iter_mut().enumerate() {
        let got = receive(socket, io, 1);
        assert_eq!(got[0].1, datagram(i as u8, i as u32, 200 + i), "receiver {i}");
    }
}

#[test]
fn datagrams_to_many_destinations_leave_together_by_sendmmsg() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let mut rx = receivers(40);
    fan_out(&tx, &mut tx_io, &mut rx, None);
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors, s.send_fallbacks), (40, 0, 0));
    if cfg!(target_os = "linux") {
        assert_eq!(tx_io.max_messages(), 32);
        assert_eq!(s.send_calls, 2, "32 + 8: {s:?}");
    } else {
        assert_eq!(s.send_calls, 40);
    }

    // Forced off: one call each.
    tx_io.set_batching(Batching::NONE);
    assert_eq!(tx_io.max_messages(), 1);
    fan_out(&tx, &mut tx_io, &mut rx, None);
    assert_eq!(tx_io.stats().send_calls - s.send_calls, 40);
}

/// A real kernel error inside a `sendmmsg` batch (a broadcast address without
/// `SO_BROADCAST`): the call ends before it, the datagram is tried alone and dropped, and
/// the rest go on, batched as before.
#[test]
fn a_refused_destination_inside_a_sendmmsg_batch_costs_only_its_datagram() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let mut rx = receivers(40);
    let broadcast = SocketAddr::from(([255, 255, 255, 255], 9));
    fan_out(&tx, &mut tx_io, &mut rx, Some(broadcast));
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors), (40, 1), "{s:?}");
    assert_eq!(tx_io.max_messages(), if cfg!(target_os = "linux") { 32 } else { 1 });
}

#[test]
fn an_injected_unreachable_destination_inside_a_sendmmsg_batch_costs_only_its_datagram() {
    let (tx, mut tx_io) = open(Batching::FULL);
    let mut rx = receivers(40);
    let (dead, _dead_io) = open(Batching::FULL);
    let dead = dead.local_addr().unwrap();
    tx_io.inject(Faults::unreachable(dead));
    fan_out(&tx, &mut tx_io, &mut rx, Some(dead));
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_errors), (40, 1), "{s:?}");
}

/// A kernel (or sandbox) that refuses `sendmmsg`: the first datagram goes alone, and from
/// then on every datagram does; nothing is lost.
#[test]
fn a_refused_sendmmsg_falls_back_to_single_datagrams_for_good() {
    let (tx, mut tx_io) = open(Batching::FULL);
    if tx_io.max_messages() == 1 {
        eprintln!("no sendmmsg here: the fallback is the only path, tested elsewhere");
        return;
    }
    tx_io.inject(Faults::mmsg_refused());
    let mut rx = receivers(40);
    fan_out(&tx, &mut tx_io, &mut rx, None);
    let s = tx_io.stats();
    assert_eq!((s.sent, s.send_calls, s.send_errors, s.send_fallbacks), (40, 40, 0, 1), "{s:?}");
    assert_eq!(tx_io.max_messages(), 1);
}

/// Walks a pcapng file's blocks (little-endian, as `porous-pcap` writes it) and returns
/// the enhanced packet blocks' packets and flags: (IP packet, direction bits).
fn packets(file: &[u8]) -> Vec<(Vec<u8>, u32)> {
    let u32_at = |at: usize| u32::from_le_bytes(file[at..at + 4].try_into().unwrap());
    let mut at = 0;
    let mut out = Vec::new();
    while at < file.len() {
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        assert_eq!(u32_at(at + len - 4) as usize, len, "a whole block at {at}");
        if kind == 6 {
            let caplen = u32_at(at + 20) as usize;
            let packet = file[at + 28..at + 28 + caplen].to_vec();
            // Options after the padded packet: the flags (code 2) say the direction.
            let mut opt = at + 28 + caplen.next_multiple_of(4);
            let mut flags = 0;
            while opt < at + len - 4 {
                let code = u16::from_le_bytes([file[opt], file[opt + 1]]);
                let olen = u16::from_le_bytes([file[opt + 2], file[opt + 3]]) as usize;
                if code == 2 {
                    flags = u32_at(opt + 4);
                }
                if code == 0 {
                    break;
                }
                opt += 4 + olen.next_multiple_of(4);
            }
            out.push((packet, flags));
        }
        at += len;
    }
    out
}

#[test]
fn a_capture_records_what_each_socket_sent_and_received() {
    let (a, mut io_a) = open(Batching::default());
    let (b, mut io_b) = open(Batching::default());
    let path = std::env::temp_dir().join(format!("porous-udp-capture-{}.pcapng", std::process::id()));
    let recorder = porous_pcap::Recorder::create(&path, 1 << 20).unwrap();
    io_a.set_capture(a.as_socket_ref(), Some(recorder.clone())).unwrap();
    io_b.set_capture(b.as_socket_ref(), Some(recorder.clone())).unwrap();
    assert_eq!(io_a.capture().map(porous_pcap::Recorder::path), Some(path.as_path()));
    let (addr_a, addr_b) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    for i in 0..10 {
        push(&mut io_a, addr_b, datagram(1, i, 100));
    }
    send_all(&a, &mut io_a);
    let got = receive(&b, &mut io_b, 10);
    assert_eq!(got.len(), 10);
    io_a.set_capture(a.as_socket_ref(), None).unwrap();
    drop((io_a, io_b, recorder));
    let file = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let packets = packets(&file);
    assert_eq!(packets.len(), 20, "each datagram as sent and as received");
    let port = |p: &[u8], at: usize| u16::from_be_bytes([p[at], p[at + 1]]);
    let sent: Vec<_> = packets.iter().filter(|(_, flags)| flags & 3 == 2).collect();
    let received: Vec<_> = packets.iter().filter(|(_, flags)| flags & 3 == 1).collect();
    assert_eq!((sent.len(), received.len()), (10, 10));
    for (i, (p, _)) in sent.iter().enumerate() {
        assert_eq!((p[0], &p[12..16], &p[16..20]), (0x45, &[127, 0, 0, 1][..], &[127, 0, 0, 1][..]));
        assert_eq!((port(p, 20), port(p, 22)), (addr_a.port(), addr_b.port()));
        assert_eq!(&p[28..], &datagram(1, i as u32, 100)[..]);
    }
    for (p, _) in received {
        assert_eq!((port(p, 20), port(p, 22)), (addr_a.port(), addr_b.port()));
    }
}
