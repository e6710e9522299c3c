//! The fixed-tick loop of the crate docs: `receive` at the start of a tick sends nothing,
//! `flush` at its end is the only call that sends, and one tick costs about one datagram
//! per peer.

use std::time::{Duration, Instant};

use porous_mio::{Bytes, Event, Host, HostConfig, PeerId, SendMode};

const TICKS: u32 = 120;

/// What one tick loop measured.
#[derive(Debug, Default)]
struct Tally {
    /// Datagrams each host sent from the first tick both sides were connected on.
    datagrams: [u64; 2],
    ticks: u64,
    inputs: u64,
    snapshots: u64,
}

/// Runs a server and a client through `TICKS` ticks of `tick`. Each tick the client sends
/// 3 reliable inputs and the server one unreliable snapshot. With `split`, a tick is
/// `receive`, simulate, `flush`; otherwise `process`, simulate, `process`.
fn run(split: bool, tick: Duration) -> Tally {
    let mut hosts = [
        Host::bind("127.0.0.1:0", HostConfig::default()).unwrap(),
        Host::bind("127.0.0.1:0", HostConfig::default()).unwrap(),
    ];
    let to_server = hosts[1].connect(hosts[0].local_addr()).unwrap();
    let mut to_client: Option<PeerId> = None;
    let mut client_up = false;
    let mut tally = Tally::default();
    let mut counted_from: Option<[u64; 2]> = None;
    let mut next = Instant::now();
    let end = Instant::now() + Duration::from_secs(30);
    for frame in 0..TICKS {
        assert!(Instant::now() < end, "the loop missed its deadline");
        for host in &mut hosts {
            let before = host.socket_stats().sent;
            if split {
                host.receive().unwrap();
                assert_eq!(host.socket_stats().sent, before, "receive() sent a datagram");
            } else {
                host.process().unwrap();
            }
        }
        while let Some(event) = hosts[0].poll_event() {
            match event {
                Event::Connected { peer, .. } => to_client = Some(peer),
                Event::Received { .. } => tally.inputs += 1,
                _ => {}
            }
        }
        while let Some(event) = hosts[1].poll_event() {
            match event {
                Event::Connected { .. } => client_up = true,
                Event::Received { .. } => tally.snapshots += 1,
                _ => {}
            }
        }
        if client_up {
            for i in 0..3u8 {
                hosts[1].send(to_server, 0, Bytes::from(vec![i; 16]), SendMode::Reliable).unwrap();
            }
        }
        if let Some(peer) = to_client {
            hosts[0].send(peer, 1, Bytes::from(vec![frame as u8; 200]), SendMode::Unreliable).unwrap();
        }
        if client_up && to_client.is_some() && counted_from.is_none() {
            counted_from = Some([hosts[0].socket_stats().sent, hosts[1].socket_stats().sent]);
        }
        if counted_from.is_some() {
            tally.ticks += 1;
        }
        for host in &mut hosts {
            if split {
                host.flush().unwrap();
            } else {
                host.process().unwrap();
            }
        }
        next += tick;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let from = counted_from.expect("the hosts never connected");
    tally.datagrams = [hosts[0].socket_stats().sent - from[0], hosts[1].socket_stats().sent - from[1]];
    tally
}

#[test]
fn receive_sends_nothing_and_one_flush_per_tick_costs_about_one_datagram_per_peer() {
    // 200 Hz keeps the test short; the pattern is the 60 Hz one of the crate docs.
    let tally = run(true, Duration::from_millis(5));
    assert!(tally.ticks >= u64::from(TICKS) - 10, "{tally:?}");
    assert!(tally.inputs > 0 && tally.snapshots > 0, "{tally:?}");
    let per_tick = tally.datagrams.map(|d| d as f64 / tally.ticks as f64);
    eprintln!("receive + flush: {per_tick:?} datagrams per tick (server, client), {tally:?}");
    // One datagram carries a tick's packets and acknowledgements. The core may add a
    // separate acknowledgement or ping datagram now and then, never one per tick more.
    for (host, d) in per_tick.iter().enumerate() {
        assert!(*d <= 1.5, "host {host}: {d:.2} datagrams per tick; {tally:?}");
    }
}

#[test]
fn process_at_both_ends_of_the_tick_sends_more_than_receive_and_flush() {
    let split = run(true, Duration::from_millis(5));
    let twice = run(false, Duration::from_millis(5));
    let rate = |t: &Tally| (t.datagrams[0] + t.datagrams[1]) as f64 / t.ticks as f64;
    eprintln!("datagrams per tick, both hosts: receive + flush {:.2}, process twice {:.2}", rate(&split), rate(&twice));
    assert!(rate(&split) < rate(&twice), "split {split:?}, twice {twice:?}");
}
