//! The server's tasks: one accepts sessions, one per session reads its datagrams and
//! closes it when its POROUS connection never comes, or has ended.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use porous_async::transport::PeerChange;
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};
use wtransport::VarInt;
use wtransport::endpoint::IncomingSession;
use wtransport::endpoint::endpoint_side::Server;

use crate::{Counters, Shared};

/// The application error code a session is closed with by the server: its connection
/// completed no handshake in time.
pub(crate) const CLOSE_NO_HANDSHAKE: u32 = 1;
/// ... its connection has ended.
pub(crate) const CLOSE_ENDED: u32 = 0;

/// What the driver said of a session's connection, for the session's task.
#[derive(Debug, Default)]
pub(crate) struct Control {
    /// 0: not yet connected, 1: connected, 2: ended.
    state: AtomicU8,
    changed: Notify,
}

const CONNECTING: u8 = 0;
const CONNECTED: u8 = 1;
const ENDED: u8 = 2;

impl Control {
    pub(crate) fn change(&self, change: PeerChange) {
        let to = match change {
            PeerChange::Connected => CONNECTED,
            _ => ENDED,
        };
        // An ended connection stays ended (a late `Connected` cannot revive it).
        let _ = self.state.fetch_max(to, Ordering::AcqRel);
        self.changed.notify_one();
    }

    fn state(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
}

/// Accepts sessions until the endpoint closes; each in a task of its own, so that a slow
/// handshake holds up no other.
pub(crate) async fn accept_loop(endpoint: Arc<wtransport::Endpoint<Server>>, shared: Arc<Shared>) {
    loop {
        let incoming = endpoint.accept().await;
        if shared.lock().closed {
            break;
        }
        tokio::spawn(session(incoming, Arc::clone(&shared)));
    }
}

/// One session, from its request to its end.
async fn session(incoming: IncomingSession, shared: Arc<Shared>) {
    let counters = &shared.counters;
    let Ok(request) = incoming.await else {
        Counters::add(&counters.handshakes_failed);
        return;
    };
    if shared.config.path.as_deref().is_some_and(|p| p != request.path()) {
        Counters::add(&counters.sessions_refused);
        request.not_found().await;
        return;
    }
    if shared.lock().sessions.len() >= shared.config.max_sessions {
        Counters::add(&counters.sessions_refused);
        request.too_many_requests().await;
        return;
    }
    let Ok(connection) = request.accept().await else {
        Counters::add(&counters.handshakes_failed);
        return;
    };
    let Some(mtu) = datagram_size(&connection) else {
        Counters::add(&counters.sessions_refused);
        connection.close(VarInt::from_u32(CLOSE_NO_HANDSHAKE), b"datagrams unsupported");
        return;
    };
    let Some((remote, control)) = shared.open(&connection, mtu) else {
        Counters::add(&counters.sessions_refused);
        connection.close(VarInt::from_u32(CLOSE_ENDED), b"server full");
        return;
    };
    Counters::add(&counters.sessions_accepted);
    run(&shared, remote, &connection, &control).await;
    shared.closed(remote);
}

/// The smallest UDP payload every QUIC path carries (RFC 9000, section 14).
const QUIC_MIN_MTU: usize = 1200;

/// The largest datagram the session can always send: QUIC's datagram size on a path of
/// QUIC's minimum size. QUIC's path MTU discovery may have raised the size already (on
/// loopback it does within the handshake), and may lower it again to that minimum when a
/// larger size stops getting through; a POROUS connection keeps one size, so it takes the
/// one that always fits. `None` if the browser takes no datagrams.
pub(crate) fn datagram_size(connection: &wtransport::Connection) -> Option<usize> {
    let now = connection.max_datagram_size()?;
    let path = usize::from(connection.quic_connection().stats().path.current_mtu);
    Some(now.saturating_sub(path.saturating_sub(QUIC_MIN_MTU)))
}

/// Reads the session's datagrams until it closes or the server closes it.
async fn run(shared: &Shared, remote: SocketAddr, connection: &wtransport::Connection, control: &Control) {
    let mut deadline = Instant::now() + shared.config.handshake_timeout;
    loop {
        let state = control.state();
        tokio::select! {
            datagram = connection.receive_datagram() => match datagram {
                Ok(d) => shared.received(remote, d.payload()),
                Err(_) => {
                    // Closed by the browser, or by QUIC's idle timeout, before the
                    // connection ended (otherwise the server closes it first).
                    if state != ENDED {
                        Counters::add(&shared.counters.closed_by_remote);
                    }
                    return;
                }
            },
            () = control.changed.notified() => {
                if control.state() == ENDED {
                    deadline = Instant::now() + shared.config.close_grace;
                }
            }
            () = sleep_until(deadline), if state != CONNECTED => {
                if state == CONNECTING {
                    Counters::add(&shared.counters.handshake_timeouts);
                    connection.close(VarInt::from_u32(CLOSE_NO_HANDSHAKE), b"no POROUS handshake");
                } else {
                    connection.close(VarInt::from_u32(CLOSE_ENDED), b"disconnected");
                }
                return;
            }
        }
    }
}
