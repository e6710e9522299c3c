//! Everything an application names comes from this crate, so its Cargo.toml needs no
//! porous-proto and no bytes: the vocabulary program every adapter compiles against its
//! own re-exports alone (porous-proto/tests/vocabulary/program.rs), and what this crate
//! adds.

use porous_bevy as adapter;

#[path = "../../porous-proto/tests/vocabulary/program.rs"]
mod program;

#[test]
fn the_vocabulary_program_compiles_and_runs_against_the_plugin_alone() {
    program::run();
}

/// The socket layer's vocabulary, the core as `proto`, and payloads passed the one way:
/// anything `Into<Bytes>`, as the core's `Host::send` takes them.
#[test]
fn the_socket_vocabulary_and_payloads_the_one_way() {
    use adapter::{
        Batching, Bytes, PeerId, PorousClient, PorousServer, SOCKET_BUFFER, SendError, SendMode, SocketStats, proto,
    };
    assert_eq!(SOCKET_BUFFER, 1 << 20);
    assert_eq!(Batching::default(), Batching::FULL);
    assert_eq!(SocketStats::default().sent, 0);
    let _ = |server: &mut PorousServer, peer: PeerId| -> Result<(), SendError> {
        server.send(peer, 0, vec![1u8, 2, 3], SendMode::Reliable)?;
        server.send(peer, 0, "text", SendMode::Unreliable)?;
        server.send(peer, 0, Bytes::from_static(b"bytes"), SendMode::Passive)
    };
    let _ = |client: &mut PorousClient| client.send(0, vec![1u8], SendMode::Reliable);
    let _ = |core: &mut proto::Host, peer: PeerId| core.send(peer, 0, vec![1u8], SendMode::Reliable);
}

/// A server on a socket the application bound itself.
#[test]
fn a_server_on_a_socket_of_the_application() {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("bound");
    let server = adapter::PorousServer::from_std(socket, adapter::HostConfig::default()).expect("server");
    assert_eq!(server.local_addr(), addr);
}
