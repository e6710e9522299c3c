//! What a forger who knows a connection's keys could compute, for the fuzz targets: the
//! id references a host expands truncated ids around, and the check it accepts. The
//! layers expose only plain read accessors (`Host::session_at`, `Peer::session`,
//! `Transfer::id_references`, `Channels::window_bases`, `Session::seal`); everything the
//! fuzzers need is assembled here.

use std::net::SocketAddr;

use crate::Host;

impl Host {
    /// The references the connection with `remote` expands ids around: one past the
    /// newest frame received, the next frame id it sends, and each channel's next
    /// expected packet id.
    pub(crate) fn id_references(&self, remote: SocketAddr) -> Option<(u32, u32, Vec<u32>)> {
        let session = self.session_at(remote)?;
        let (recv, send) = session.transfer.id_references();
        Some((recv, send, session.channels.window_bases()))
    }

    /// Appends to `body` (a data datagram without its check) the check this host accepts
    /// from `remote`; false if there is no connection or `body` does not parse.
    pub(crate) fn seal_from(&self, remote: SocketAddr, body: &mut Vec<u8>) -> bool {
        match self.session_at(remote).and_then(|s| s.seal(body).ok()) {
            Some(check) => {
                body.extend_from_slice(&check.to_le_bytes());
                true
            }
            None => false,
        }
    }
}
