//! What an adapter tells the host about the path to a remote (`Host::set_path_mtu`,
//! `Host::close_path`): a transport that carries smaller datagrams than UDP (a
//! WebTransport session) caps the connections across it, on both sides, and a transport
//! that closes ends its connection at once.

#[cfg(target_family = "wasm")]
use wasm_bindgen_test::wasm_bindgen_test as test;

mod support;

use std::time::Duration;

use bytes::Bytes;
use porous_proto::{ConfigError, DisconnectReason, Event, HostConfig, PeerState, SendMode, wire};
use support::{Mode, Pair, disconnected, received};

const SEC: Duration = Duration::from_secs(1);

/// Connects `a` to `b` in `mode` (a token in secure mode) and returns both ends.
fn establish(p: &mut Pair, mode: Mode) -> (porous_proto::PeerId, porous_proto::PeerId) {
    let token = mode.token(7, p.b_addr, Duration::ZERO, 10 * SEC);
    p.establish_with(token.as_deref())
}

#[test]
fn a_path_limit_on_either_side_caps_the_connection_on_both() {
    for mode in Mode::BOTH {
        for (on_a, on_b, want) in [(None, Some(600), 600), (Some(500), None, 500), (Some(700), Some(650), 650)] {
            let config = HostConfig::default();
            let mut p = Pair::in_mode(mode, config.clone(), config, 1, 2);
            let (a_addr, b_addr) = (p.a_addr, p.b_addr);
            if let Some(mtu) = on_a {
                p.a.set_path_mtu(b_addr, mtu).unwrap();
            }
            if let Some(mtu) = on_b {
                p.b.set_path_mtu(a_addr, mtu).unwrap();
            }
            let (pa, pb) = establish(&mut p, mode);
            assert_eq!(p.a.peer_stats(pa).unwrap().mtu, want, "{mode:?} {on_a:?} {on_b:?}");
            assert_eq!(p.b.peer_stats(pb).unwrap().mtu, want, "{mode:?} {on_a:?} {on_b:?}");
            // Packets larger than the limit are fragmented to it, both ways.
            let big = Bytes::from(vec![0x5A; 3000]);
            p.a.send(pa, 0, big.clone(), SendMode::Reliable).unwrap();
            p.b.send(pb, 1, big.clone(), SendMode::Reliable).unwrap();
            p.run_for(2 * SEC);
            assert_eq!(received(&p.events_b, 4)[0], std::slice::from_ref(&big));
            assert_eq!(received(&p.events_a, 4)[1], [big]);
            let largest = p.log.iter().map(|d| d.payload.len()).max().unwrap();
            assert!(largest <= want, "{mode:?}: a {largest}-byte datagram on a {want}-byte path");
        }
    }
}

#[test]
fn the_configured_mtu_stays_the_ceiling() {
    let mut config = HostConfig::default();
    config.peer.mtu = 900;
    let mut p = Pair::new(config.clone(), config);
    let a_addr = p.a_addr;
    p.b.set_path_mtu(a_addr, 1400).unwrap();
    let (pa, pb) = p.establish();
    assert_eq!((p.a.peer_stats(pa).unwrap().mtu, p.b.peer_stats(pb).unwrap().mtu), (900, 900));
}

#[test]
fn a_path_limit_the_protocol_cannot_work_with_is_refused() {
    let mut plain = Pair::new(HostConfig::default(), HostConfig::default());
    let addr = plain.a_addr;
    assert_eq!(plain.b.set_path_mtu(addr, wire::MIN_MTU - 1), Err(ConfigError::Mtu(wire::MIN_MTU - 1)));
    assert_eq!(plain.b.set_path_mtu(addr, wire::MAX_MTU + 1), Err(ConfigError::Mtu(wire::MAX_MTU + 1)));
    assert_eq!(plain.b.set_path_mtu(addr, wire::MIN_MTU), Ok(()));
    // Sealing takes room: a secure host needs more.
    let mut secure = Pair::in_mode(Mode::Secure, HostConfig::default(), HostConfig::default(), 1, 2);
    let small = wire::MIN_MTU + wire::secure::SEAL_EXTRA - 1;
    assert_eq!(secure.b.set_path_mtu(addr, small), Err(ConfigError::Mtu(small)));
    assert_eq!(secure.b.set_path_mtu(addr, small + 1), Ok(()));
}

#[test]
fn connect_data_must_fit_the_path() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let (now, b_addr) = (p.now, p.b_addr);
    p.a.set_path_mtu(b_addr, wire::MIN_MTU).unwrap();
    // 200 bytes fit the configured 1,200 but not a 128-byte path.
    let err = p.a.connect_with(now, b_addr, &[1; 200]).unwrap_err();
    assert!(matches!(err, porous_proto::ConnectError::DataTooLarge { size: 200, max, .. } if max < 128), "{err:?}");
}

#[test]
fn a_closed_path_ends_its_connection_at_once_sending_nothing() {
    for mode in Mode::BOTH {
        let mut p = Pair::in_mode(mode, HostConfig::default(), HostConfig::default(), 1, 2);
        let a_addr = p.a_addr;
        p.b.set_path_mtu(a_addr, 1000).unwrap();
        let (pa, pb) = establish(&mut p, mode);
        p.a.send(pa, 0, Bytes::from_static(b"on its way"), SendMode::Reliable).unwrap();
        let (now, logged) = (p.now, p.log.len());
        p.b.close_path(now, a_addr);
        // Reported at once, and nothing goes to the closed path.
        let event = p.b.poll_event();
        assert!(
            matches!(event, Some(Event::Disconnected { peer, reason: DisconnectReason::TransportClosed, .. }) if peer == pb),
            "{event:?}"
        );
        p.b.step(now);
        assert_eq!(p.b.poll_transmit(), None, "{mode:?}");
        assert!(p.b.peer_stats(pb).is_none(), "{mode:?}: deleted at the next step");
        assert_eq!(p.b.poll_event(), None);
        // Whatever still arrives from there is a stranger's.
        p.run_for(SEC);
        assert!(p.log[logged..].iter().all(|d| d.from == a_addr), "{mode:?}: b sent after the close");
        assert!(p.b.stats().unknown_source > 0, "{mode:?}");
    }
}

#[test]
fn a_closed_path_drops_a_handshake_and_ends_a_request_the_application_saw() {
    // Unseen by the application: dropped without an event.
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let a_addr = p.a_addr;
    // b's answers never arrive: its handshake stays under way.
    p.pass = Box::new(|d| d.from.port() != 5000);
    p.connect();
    p.run_until(SEC, |p| p.b.stats().pending > 0);
    assert_eq!(p.b.stats().pending, 1);
    let now = p.now;
    p.b.close_path(now, a_addr);
    p.b.step(now);
    assert_eq!(p.b.stats().pending, 0);
    assert_eq!(p.b.poll_event(), None);

    // Seen (manual admission): it ends with the transport.
    let mut config = HostConfig::default();
    config.manual_accept = true;
    let mut p = Pair::new(HostConfig::default(), config);
    let a_addr = p.a_addr;
    p.connect();
    assert!(p.run_until(SEC, |p| p.events_b.iter().any(|e| matches!(e, Event::ConnectRequest { .. }))));
    let now = p.now;
    p.b.close_path(now, a_addr);
    while let Some(e) = p.b.poll_event() {
        p.events_b.push(e);
    }
    assert_eq!(disconnected(&p.events_b), [DisconnectReason::TransportClosed]);
    p.b.step(now);
    assert_eq!(p.b.stats().pending, 0);
}

#[test]
fn a_new_connection_after_a_closed_path_uses_the_configured_size() {
    let mut p = Pair::new(HostConfig::default(), HostConfig::default());
    let a_addr = p.a_addr;
    p.b.set_path_mtu(a_addr, 700).unwrap();
    let (pa, _) = p.establish();
    let now = p.now;
    p.b.close_path(now, a_addr);
    p.a.disconnect_now(now, pa);
    assert!(p.run_until(60 * SEC, |p| p.a.peers().next().is_none()), "a's old peer is deleted");
    p.events_a.clear();
    p.events_b.clear();
    let (pa, pb) = p.establish();
    assert_eq!(p.a.peer_stats(pa).unwrap().mtu, 1200);
    assert_eq!(p.b.peer_stats(pb).unwrap().state, PeerState::Connected);
}

/// Path MTU discovery in both modes over a path that drops datagrams above 1,400 bytes:
/// each side settles within the search's step below it, in sealed datagrams too.
#[test]
fn discovery_finds_the_path_in_both_modes() {
    for mode in Mode::BOTH {
        let mut config = HostConfig::default();
        config.peer.max_mtu = 1452;
        let mut p = Pair::in_mode(mode, config.clone(), config, 1, 2);
        p.pass = Box::new(|d| d.payload.len() <= 1400);
        let (pa, pb) = establish(&mut p, mode);
        let big = Bytes::from(vec![0x5A; 30_000]);
        p.a.send(pa, 0, big.clone(), SendMode::Reliable).unwrap();
        p.run_for(5 * SEC);
        assert_eq!(received(&p.events_b, 4)[0], [big], "{mode:?}");
        for (side, mtu) in [("a", p.a.peer_stats(pa).unwrap().mtu), ("b", p.b.peer_stats(pb).unwrap().mtu)] {
            assert!((1385..=1400).contains(&mtu), "{mode:?} {side}: {mtu}");
        }
        let s = p.a.peer_stats(pa).unwrap().transfer;
        assert!(s.mtu_probes_lost >= 3 && s.frames_lost == 0, "{mode:?}: {s:?}");
    }
}

/// A path whose size the adapter fixed is never probed above it.
#[test]
fn discovery_never_probes_a_fixed_path_above_its_size() {
    let mut config = HostConfig::default();
    config.peer.max_mtu = 1452;
    let mut p = Pair::new(config.clone(), config);
    let b_addr = p.b_addr;
    p.a.set_path_mtu(b_addr, 1300).unwrap();
    let (pa, pb) = p.establish();
    p.a.send(pa, 0, Bytes::from(vec![1; 20_000]), SendMode::Reliable).unwrap();
    p.run_for(3 * SEC);
    let a_addr = p.a_addr;
    let largest = p.log.iter().filter(|d| d.from == a_addr).map(|d| d.payload.len()).max().unwrap();
    assert_eq!(largest, 1300, "a reaches the fixed size and never goes beyond");
    assert_eq!(p.a.peer_stats(pa).unwrap().mtu, 1300);
    // b's own ceiling is its configuration: it grows towards a as far as a takes.
    let b = p.b.peer_stats(pb).unwrap().mtu;
    assert!((1285..=1300).contains(&b), "a answers no probe above its path's size: {b}");
}
