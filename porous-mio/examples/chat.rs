//! A minimal chat: a server that relays every line to everyone, and a client that sends the
//! lines you type. A starting point to copy.
//!
//! ```text
//! cargo run -p porous-mio --example chat -- server 127.0.0.1:7777
//! cargo run -p porous-mio --example chat -- client 127.0.0.1:7777 alice
//! ```
//!
//! Channel 0 carries chat lines (reliable: every line arrives, in order). The first line a
//! client sends is its name. At the end of its input (Ctrl-D, or the end of a piped file)
//! the client delivers what it has sent, disconnects and exits. Exit status: 0, or 1 when
//! the connection failed, or 2 for a usage error.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc::{self, TryRecvError};
use std::time::Duration;

use porous_mio::{Bytes, DisconnectReason, Event, Host, HostConfig, PeerId, SendMode};

const CHAT: usize = 0;

const USAGE: &str = "\
usage: chat server [ADDR]          relay lines between clients (ADDR: 127.0.0.1:7777)
       chat client [ADDR] [NAME]   send the lines typed on standard input";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Server(SocketAddr),
    Client(SocketAddr, String),
    Help,
}

fn parse(args: &[String]) -> Result<Command, String> {
    let addr = |i: usize| -> Result<SocketAddr, String> {
        let text = args.get(i).map_or("127.0.0.1:7777", String::as_str);
        text.parse().map_err(|_| format!("not an address: {text} (such as 127.0.0.1:7777)"))
    };
    match args.first().map(String::as_str) {
        Some("server") if args.len() <= 2 => Ok(Command::Server(addr(1)?)),
        Some("client") if args.len() <= 3 => {
            Ok(Command::Client(addr(1)?, args.get(2).cloned().unwrap_or_else(|| "anonymous".into())))
        }
        Some("server" | "client") => Err(String::from("too many arguments")),
        Some("--help" | "-h" | "help") => Ok(Command::Help),
        Some(other) => Err(format!("unknown command {other}")),
        None => Err(String::from("say server or client")),
    }
}

/// Relays lines until `running` says stop (a server normally runs until killed).
fn server(mut host: Host, out: &mut dyn Write, running: &dyn Fn() -> bool) -> std::io::Result<()> {
    writeln!(out, "chat server on {}", host.local_addr())?;
    let mut names: BTreeMap<PeerId, String> = BTreeMap::new();
    while running() {
        let Some(event) = host.service(Duration::from_millis(20))? else { continue };
        let announce = match event {
            Event::Connected { peer, remote, .. } => {
                writeln!(out, "{remote} connected as {peer}")?;
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
            Event::Disconnected { peer, reason, .. } => {
                names.remove(&peer).map(|name| format!("* {name} left ({reason})"))
            }
            _ => None,
        };
        if let Some(line) = announce {
            writeln!(out, "{line}")?;
            let line = Bytes::from(line);
            for &peer in names.keys() {
                // A full queue means a client that stopped reading; it will time out.
                let _ = host.send(peer, CHAT, line.clone(), SendMode::Reliable);
            }
        }
    }
    Ok(())
}

/// Sends `name`, then each line from `typed`, printing what the server relays; at the end
/// of the input, disconnects (after delivering what was sent) and returns how the
/// connection ended.
fn client(
    mut host: Host,
    addr: SocketAddr,
    name: String,
    typed: mpsc::Receiver<String>,
    out: &mut dyn Write,
) -> std::io::Result<DisconnectReason> {
    let server = host.connect(addr).map_err(std::io::Error::other)?;
    let (mut connected, mut leaving) = (false, false);
    loop {
        if connected && !leaving {
            loop {
                match typed.try_recv() {
                    Ok(line) => {
                        host.send(server, CHAT, Bytes::from(line), SendMode::Reliable)
                            .map_err(std::io::Error::other)?;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        // End of input: deliver what was sent, then leave.
                        host.disconnect(server);
                        leaving = true;
                        break;
                    }
                }
            }
        }
        match host.service(Duration::from_millis(20))? {
            Some(Event::Connected { .. }) => {
                connected = true;
                host.send(server, CHAT, Bytes::from(name.clone()), SendMode::Reliable)
                    .map_err(std::io::Error::other)?;
                writeln!(out, "connected; type lines to chat, end the input to leave")?;
            }
            Some(Event::Received { data, .. }) => writeln!(out, "{}", String::from_utf8_lossy(&data))?,
            Some(Event::Disconnected { reason, .. }) => {
                writeln!(out, "disconnected: {reason}")?;
                return Ok(reason);
            }
            _ => {}
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(e) => {
            eprintln!("chat: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Help => {
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Command::Server(addr) => {
            Host::bind(addr, HostConfig::default()).and_then(|host| server(host, &mut std::io::stdout(), &|| true))
        }
        Command::Client(addr, name) => {
            // Read the terminal on its own thread; the network loop never blocks on it.
            let (lines, typed) = mpsc::channel::<String>();
            std::thread::spawn(move || {
                for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                    if lines.send(line).is_err() {
                        break;
                    }
                }
            });
            Host::bind("0.0.0.0:0", HostConfig::default())
                .and_then(|host| client(host, addr, name, typed, &mut std::io::stdout()))
                .and_then(|end| match end {
                    DisconnectReason::Local => Ok(()),
                    other => Err(std::io::Error::other(other.to_string())),
                })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn the_command_line_is_parsed_and_usage_errors_are_reported() {
        let local: SocketAddr = "127.0.0.1:7777".parse().unwrap();
        assert_eq!(parse(&args("server")), Ok(Command::Server(local)));
        assert_eq!(
            parse(&args("client 127.0.0.1:9 bob")),
            Ok(Command::Client("127.0.0.1:9".parse().unwrap(), "bob".into()))
        );
        assert_eq!(parse(&args("client")), Ok(Command::Client(local, "anonymous".into())));
        assert_eq!(parse(&args("--help")), Ok(Command::Help));
        for (line, says) in [
            ("", "say server or client"),
            ("serve", "unknown command serve"),
            ("server nowhere", "not an address"),
            ("client 127.0.0.1:9 bob extra", "too many arguments"),
        ] {
            let err = parse(&args(line)).expect_err(line);
            assert!(err.contains(says), "{line}: {err}");
        }
    }

    /// A client whose input ends delivers its lines, leaves and returns.
    #[test]
    fn the_client_leaves_at_the_end_of_its_input() {
        let host = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
        let addr = host.local_addr();
        let running = Arc::new(AtomicBool::new(true));
        let server_thread = std::thread::spawn({
            let running = Arc::clone(&running);
            move || {
                let mut log = Vec::new();
                server(host, &mut log, &|| running.load(Ordering::SeqCst)).unwrap();
                String::from_utf8(log).unwrap()
            }
        });
        let (lines, typed) = mpsc::channel();
        for line in ["hello", "bye"] {
            lines.send(line.to_string()).unwrap();
        }
        drop(lines); // the end of the input
        let mut seen = Vec::new();
        let host = Host::bind("127.0.0.1:0", HostConfig::default()).unwrap();
        let end = client(host, addr, "alice".into(), typed, &mut seen).unwrap();
        assert_eq!(end, DisconnectReason::Local);
        running.store(false, Ordering::SeqCst);
        let server_log = server_thread.join().unwrap();
        for line in ["* alice joined", "alice: hello", "alice: bye"] {
            assert!(server_log.contains(line), "{line} missing from:\n{server_log}");
        }
        // Leaving does not wait for the server's relays of its own lines.
        let seen = String::from_utf8(seen).unwrap();
        assert!(
            seen.starts_with("connected;") && seen.ends_with("disconnected: disconnected by this side\n"),
            "{seen}"
        );
    }
}
