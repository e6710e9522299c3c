//! A minimal chat: a server that relays every line to everyone, and a client that sends the
//! lines you type. A starting point to copy.
//!
//! ```text
//! cargo run -p porous-mio --example chat -- server 127.0.0.1:7777
//! cargo run -p porous-mio --example chat -- client 127.0.0.1:7777 alice
//! ```
//!
//! Channel 0 carries chat lines (reliable: every line arrives, in order). The first line a
//! client sends is its name.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use porous_mio::{Event, Host, HostConfig, PeerId, SendMode};

const CHAT: usize = 0;

fn server(addr: SocketAddr) -> std::io::Result<()> {
    let mut host = Host::bind(addr, HostConfig::default())?;
    println!("chat server on {}", host.local_addr());
    let mut names: BTreeMap<PeerId, String> = BTreeMap::new();
    loop {
        let Some(event) = host.service(Duration::from_millis(100))? else { continue };
        let announce = match event {
            // migration 3
            Event::Connected { peer, remote, .. } => {
                println!("{remote} connected as {peer}");
                None
            }
            Event::Received { peer, data, .. } => {
                let text = String::from_utf8_lossy(&data).into_owned();
                match names.get(&peer) {
                    None => {
                        names.insert(peer, text.clone());
                        Some(format!("* {text} joined"))
                    }
                    Some(name) => Some(format!("{name}: {text}")),
                }
            }
            // migration 3
            Event::Disconnected { peer, reason, .. } => {
                names.remove(&peer).map(|name| format!("* {name} left ({reason})"))
            }
            _ => None,
        };
        if let Some(line) = announce {
            println!("{line}");
            let line = Bytes::from(line);
            for &peer in names.keys() {
                // A full queue means a client that stopped reading; it will time out.
                let _ = host.send(peer, CHAT, line.clone(), SendMode::Reliable);
            }
        }
    }
}

fn client(addr: SocketAddr, name: String) -> std::io::Result<()> {
    // migration 13
    let mut host =
        Host::bind("0.0.0.0:0".parse::<SocketAddr>().map_err(std::io::Error::other)?, HostConfig::default())?;
    let server = host.connect(addr).map_err(std::io::Error::other)?;
    // Read the terminal on its own thread; the network loop never blocks on it.
    let (lines, typed) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut connected = false;
    loop {
        if connected {
            while let Ok(line) = typed.try_recv() {
                host.send(server, CHAT, Bytes::from(line), SendMode::Reliable).map_err(std::io::Error::other)?;
            }
        }
        match host.service(Duration::from_millis(20))? {
            Some(Event::Connected { .. }) => {
                connected = true;
                host.send(server, CHAT, Bytes::from(name.clone()), SendMode::Reliable)
                    .map_err(std::io::Error::other)?;
                println!("connected; type lines to chat");
            }
            Some(Event::Received { data, .. }) => println!("{}", String::from_utf8_lossy(&data)),
            Some(Event::Disconnected { reason, .. }) => {
                println!("disconnected: {reason}");
                return Ok(());
            }
            _ => {}
        }
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = |i: usize| -> std::io::Result<SocketAddr> {
        args.get(i).unwrap_or(&"127.0.0.1:7777".to_string()).parse().map_err(std::io::Error::other)
    };
    match args.first().map(String::as_str) {
        Some("server") => server(addr(1)?),
        Some("client") => client(addr(1)?, args.get(2).cloned().unwrap_or_else(|| "anonymous".into())),
        _ => {
            eprintln!("usage: chat server [addr] | chat client [addr] [name]");
            Ok(())
        }
    }
}
