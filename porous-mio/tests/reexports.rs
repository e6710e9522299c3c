//! Everything an application names comes from the adapter, so its Cargo.toml needs no
//! porous-proto and no bytes: the vocabulary program every crate compiles against its own
//! re-exports alone (porous-proto/tests/vocabulary/program.rs, which names everything at
//! porous-proto's root), and what this adapter adds.

use porous_mio as adapter;

#[path = "../../porous-proto/tests/vocabulary/program.rs"]
mod program;

#[test]
fn the_vocabulary_program_compiles_and_runs_against_the_adapter_alone() {
    program::run();
}

/// The socket layer's vocabulary, the core as `proto`, and payloads passed the one way:
/// anything `Into<Bytes>`, as the core's `Host::send` takes them.
#[test]
fn the_socket_vocabulary_and_payloads_the_one_way() {
    use adapter::{Batching, Bytes, Host, PeerId, SOCKET_BUFFER, SendError, SendMode, SocketStats, proto};
    assert_eq!(SOCKET_BUFFER, 1 << 20);
    assert_eq!(Batching::default(), Batching::FULL);
    assert_eq!(SocketStats::default().sent, 0);
    let _ = |host: &mut Host, peer: PeerId| -> Result<(), SendError> {
        host.send(peer, 0, vec![1u8, 2, 3], SendMode::Reliable)?;
        host.send(peer, 0, "text", SendMode::Unreliable)?;
        host.send(peer, 0, Bytes::from_static(b"bytes"), SendMode::Passive)
    };
    let _ = |core: &mut proto::Host, peer: PeerId| core.send(peer, 0, vec![1u8], SendMode::Reliable);
}
