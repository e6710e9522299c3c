//! An echo server and a client in one program, over UDP on loopback, on smol.
//!
//! ```sh
//! cargo run -p porous-smol --example smol_echo
//! ```

use std::error::Error;

use porous_smol::{Host, HostConfig, Packet, Peer, SendMode};

/// Sends every packet back on the channel it came on, in the mode it came in, until the
/// client disconnects.
async fn echo(peer: Peer) {
    loop {
        match peer.recv().await {
            Ok(Packet { channel, mode, data, .. }) => {
                if let Err(e) = peer.send(channel, data, mode) {
                    eprintln!("server: cannot echo to {}: {e}", peer.remote());
                }
            }
            Err(end) => {
                println!("server: {} left ({end})", peer.remote());
                return;
            }
        }
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    smol::block_on(async {
        let server = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
        println!("server: listening on {}", server.local_addr());
        smol::spawn({
            let server = server.clone();
            async move {
                while let Ok(peer) = server.accept().await {
                    println!("server: {} connected", peer.remote());
                    smol::spawn(echo(peer)).detach();
                }
            }
        })
        .detach();

        let client = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
        let peer = client.connect(server.local_addr()).await?;
        println!("client: connected to {} from {}", peer.remote(), client.local_addr());
        let messages =
            [(0, SendMode::Reliable, "hello"), (1, SendMode::Passive, "porous"), (2, SendMode::Reliable, "world")];
        for (channel, mode, text) in messages {
            peer.send(channel, text.as_bytes().to_vec(), mode)?;
        }
        for _ in messages {
            let Packet { channel, mode, data, .. } = peer.recv().await?;
            println!("client: echo on channel {channel} ({mode:?}): {}", String::from_utf8_lossy(&data));
        }
        let rtt = peer.stats().map(|s| s.rtt).unwrap_or_default();
        let reason = peer.disconnect().await;
        println!("client: disconnected ({reason}); round-trip time was {rtt:?}");
        Ok(())
    })
}
