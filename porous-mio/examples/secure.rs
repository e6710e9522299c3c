//! Secure mode in one program: a token issuer (the game's backend), a server and a client,
//! each on its own thread, over UDP on 127.0.0.1.
//!
//! 1. The issuer and the server share a private key. The issuer makes a connect token for
//!    one client (its id, the server's address, 30 s of validity, user data) and hands
//!    the bytes to the client, as a login service would over HTTPS.
//! 2. The client connects with the token; the server verifies it and gets the client id
//!    and the user data with the connection. Every datagram is sealed (ChaCha20-Poly1305).
//! 3. They exchange a few messages; then a second client tries the same token from another
//!    address, and the server drops it unanswered (its attempt times out).
//!
//! ```text
//! cargo run -p porous-mio --example secure
//! ```
//!
//! Exit status 0 when all of that happened as described, 1 otherwise.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use porous_mio::token::{self, ConnectToken, PrivateKey, TokenParams};
use porous_mio::{Bytes, DisconnectReason, Event, Host, HostConfig, SecureConfig, SendMode};

/// How long anything in the example may take.
const PATIENCE: Duration = Duration::from_secs(10);

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The backend: a token for `client_id` at `server`, with user data it vouches for.
fn issue(key: &PrivateKey, client_id: u64, server: SocketAddr) -> Result<Vec<u8>, token::TokenError> {
    let mut params = TokenParams::new(client_id, vec![server], unix_now(), Duration::from_secs(30));
    params.user_data = b"name=ada;team=blue".to_vec();
    token::generate_from_entropy(key, &params)
}

/// The game server: accepts one client, echoes what it sends, reports what it learnt.
fn server(host: &mut Host, report: &mpsc::Sender<String>) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    let mut echoed = 0;
    while Instant::now() < deadline {
        match host.service(Duration::from_millis(20)).map_err(|e| e.to_string())? {
            Some(Event::Connected { peer, remote, data, client_id, .. }) => {
                let name = String::from_utf8_lossy(&data);
                let _ = report.send(format!("server: client {client_id:?} ({name}) connected from {remote}"));
                let _ = host.send(peer, 0, Bytes::from_static(b"welcome"), SendMode::Reliable);
            }
            Some(Event::Received { peer, data, .. }) => {
                echoed += 1;
                let _ = host.send(peer, 0, data, SendMode::Reliable);
            }
            Some(Event::Disconnected { reason, .. }) => {
                let _ = report.send(format!("server: client left ({reason})"));
                let s = host.core().stats();
                let _ = report.send(format!(
                    "server: echoed {echoed} messages; tokens refused as reused from another address: {}",
                    s.reused_tokens
                ));
                return if s.reused_tokens > 0 { Ok(()) } else { Err("the copied token was not refused".into()) };
            }
            _ => {}
        }
    }
    Err("the server gave up waiting".into())
}

/// A game client: connects with `token`, sends `messages` and waits for their echoes.
fn client(server: SocketAddr, token: &[u8], messages: usize) -> Result<Host, String> {
    let mut config = HostConfig::default();
    config.secure = Some(SecureConfig::client());
    let mut host = Host::bind("127.0.0.1:0", config).map_err(|e| e.to_string())?;
    let peer = host.connect_with_token(server, token).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PATIENCE;
    let mut got = 0;
    while got < messages + 1 {
        if Instant::now() > deadline {
            return Err("the client gave up waiting".into());
        }
        match host.service(Duration::from_millis(20)).map_err(|e| e.to_string())? {
            Some(Event::Connected { .. }) => {
                for i in 0..messages {
                    let _ = host.send(peer, 0, Bytes::from(format!("move {i}")), SendMode::Reliable);
                }
            }
            Some(Event::Received { data, .. }) => {
                println!("client: {}", String::from_utf8_lossy(&data));
                got += 1;
            }
            Some(Event::Disconnected { reason, .. }) => return Err(format!("client: disconnected ({reason})")),
            _ => {}
        }
    }
    host.disconnect(peer);
    Ok(host)
}

/// A client that copied the token: it may not connect, and gets no answer at all.
fn impostor(server: SocketAddr, token: &[u8]) -> Result<(), String> {
    let mut config = HostConfig::default();
    config.secure = Some(SecureConfig::client());
    config.peer.connect_timeout = Duration::from_secs(1);
    let mut host = Host::bind("127.0.0.1:0", config).map_err(|e| e.to_string())?;
    host.connect_with_token(server, token).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        match host.service(Duration::from_millis(20)).map_err(|e| e.to_string())? {
            Some(Event::Connected { .. }) => return Err("the impostor connected".into()),
            Some(Event::Disconnected { reason, .. }) => {
                println!("impostor: {reason} (the server never answered)");
                return if reason == DisconnectReason::Timeout { Ok(()) } else { Err(format!("{reason}")) };
            }
            _ => {}
        }
    }
    Err("the impostor's attempt never ended".into())
}

fn run() -> Result<(), String> {
    // The private key: in a real deployment, loaded by the backend and the servers from a
    // secret store (`PrivateKey::from_bytes`).
    let key = PrivateKey::from_entropy();

    // The server binds once, to a port the system picks. Tokens name the server by its
    // address: with no public address configured, it takes the one it bound. (Behind a
    // load balancer or a NAT, give the address clients see in `SecureConfig::server`, or
    // later with `Host::set_public_addresses`.)
    let mut config = HostConfig::default();
    config.secure = Some(SecureConfig::server(key.clone(), Vec::new(), Instant::now(), unix_now()));
    let mut server_host = Host::bind("127.0.0.1:0", config).map_err(|e| e.to_string())?;
    let addr = server_host.local_addr();
    let named = server_host.core().config().secure.as_ref().map(|s| s.public_addresses.clone());
    println!("server: bound {addr}; tokens must name {named:?}");
    let (report, reports) = mpsc::channel();
    let server_thread = thread::spawn(move || server(&mut server_host, &report));

    // The backend issues a token; the client sees only its clear part.
    let token = issue(&key, 42, addr).map_err(|e| e.to_string())?;
    let view = ConnectToken::decode(&token).map_err(|e| e.to_string())?;
    println!(
        "issuer: a {}-byte token for {:?}, expires at {} (Unix), timeout {:?}",
        token.len(),
        view.server_addresses(),
        view.expires(),
        view.timeout()
    );

    let mut host = client(addr, &token, 3)?;
    // The honest client is connected; now someone who copied its token tries it.
    impostor(addr, &token)?;
    // The honest client leaves.
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Some(Event::Disconnected { .. }) = host.service(Duration::from_millis(20)).map_err(|e| e.to_string())? {
            break;
        }
    }
    let result = server_thread.join().map_err(|_| "the server thread panicked".to_string())?;
    for line in reports.try_iter() {
        println!("{line}");
    }
    result
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => {
            println!("ok: admitted with a token, sealed traffic, the copied token refused");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs_as_described() {
        assert!(super::run().is_ok());
    }
}
