//! An echo server and a client in one program, over UDP on loopback.
//!
//! ```sh
//! cargo run -p porous-async-std --example echo
//! ```

use std::error::Error;

use async_std::task;
use porous_async_std::{Host, HostConfig, Peer, SendMode};

/// Sends every packet back on the channel it came on, until the client disconnects.
async fn echo(peer: Peer) {
    loop {
        match peer.recv().await {
            // migration 12, the next two lines
            Ok(packet) => {
                if let Err(e) = peer.send(packet.channel, packet.data, SendMode::Reliable) {
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
    task::block_on(async {
        let server = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
        println!("server: listening on {}", server.local_addr());
        task::spawn({
            let server = server.clone();
            async move {
                while let Ok(peer) = server.accept().await {
                    println!("server: {} connected", peer.remote());
                    task::spawn(echo(peer));
                }
            }
        });

        let client = Host::bind("127.0.0.1:0", HostConfig::default()).await?;
        let peer = client.connect(server.local_addr()).await?;
        println!("client: connected to {} from {}", peer.remote(), client.local_addr());
        let messages =
            [(0, SendMode::Reliable, "hello"), (1, SendMode::Passive, "porous"), (2, SendMode::Reliable, "world")];
        for (channel, mode, text) in messages {
            peer.send(channel, text.as_bytes().to_vec(), mode)?;
        }
        for _ in messages {
            let packet = peer.recv().await?; // migration 12
            // migration 12
            println!("client: echo on channel {}: {}", packet.channel, String::from_utf8_lossy(&packet.data));
        }
        let rtt = peer.stats().map(|s| s.rtt).unwrap_or_default();
        let reason = peer.disconnect().await;
        println!("client: disconnected ({reason}); round-trip time was {rtt:?}");
        Ok(())
    })
}
