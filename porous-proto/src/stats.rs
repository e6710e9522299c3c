//! Observability: per-peer and per-host counters. The core does no logging; these are how
//! an operator sees a connection's health and an attack in progress.

use std::net::SocketAddr;
use std::time::Duration;

/// Counters of one connection's transfer layer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransferStats {
    /// New frames sent.
    pub frames_sent: u64,
    /// Frames sent again after being considered dropped.
    pub frames_resent: u64,
    /// Frames considered dropped (by timeout or by later acknowledgements).
    pub frames_lost: u64,
    /// Of those, frames the peer had received after all: their acknowledgement was lost or
    /// late (a peer's loop that ran late), not the frame. On a path that loses nothing,
    /// every loss is one of these.
    pub losses_spurious: u64,
    /// Times the congestion controller's reaction to losses was taken back because every
    /// loss it reacted to (since its state was last known good) proved spurious.
    pub congestion_undos: u64,
    /// Frames acknowledged.
    pub frames_acked: u64,
    /// Dropped unreliable frames turned into sentinel frames.
    pub sentinel_frames: u64,
    /// Frames received inside the receive window.
    pub frames_received: u64,
    /// Frames dropped for lying outside the receive window.
    pub frames_out_of_window: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received and verified.
    pub datagrams_received: u64,
    /// Bytes sent, UDP payload.
    pub bytes_sent: u64,
    /// Bytes received, UDP payload.
    pub bytes_received: u64,
    /// Unreliable messages removed from dropped frames.
    pub unreliable_stripped: u64,
    /// Unreliable messages dropped from a full send queue before being sent.
    pub unreliable_dropped: u64,
    /// Unreliable messages dropped unsent because their channel's deadline passed (see
    /// [`ChannelConfig::unreliable_deadline`](crate::ChannelConfig::unreliable_deadline)).
    pub unreliable_expired: u64,
    /// Repair copies of small reliable messages sent in spare datagram room (see
    /// [`ChannelConfig::repair`](crate::ChannelConfig::repair)).
    pub repair_copies: u64,
    /// Tail-loss probes: datagrams sent only to carry repair copies.
    pub probes: u64,
    /// Congestion window resets (spec equations (13)-(15)).
    pub congestion_resets: u64,
    /// Frames given up without an acknowledgement: unreliable frames considered lost and
    /// discarded, and frames still unacknowledged when the connection ended. A count that
    /// climbs while `frames_acked` stands still means the peer hears nothing of what this
    /// side sends.
    pub frames_unacknowledged: u64,
    /// Frame ids skipped on purpose (never sent) to catch dishonest acknowledgements.
    pub frames_skipped: u64,
    /// Acknowledgements of skipped ids: the peer acknowledged what it never received.
    pub dishonest_acks: u64,
    /// Path MTU probes sent: padded datagrams that carry only a ping (see
    /// [`PeerConfig::max_mtu`](crate::PeerConfig::max_mtu)).
    pub mtu_probes: u64,
    /// Of those, probes no echo answered in time (the path, or the peer, does not take
    /// their size). Never counted as frames lost.
    pub mtu_probes_lost: u64,
    /// Probes from the peer larger than this side takes, left unanswered.
    pub mtu_probes_refused: u64,
    /// Black holes: the path stopped carrying the size discovery had confirmed (frames
    /// above the negotiated size lost in a row), so the size fell back to the negotiated
    /// one and a new search began.
    pub black_holes: u64,
    /// Messages cut at a granule to fit the datagram size in use: cut for a larger size
    /// that path MTU discovery has since given up (a black hole), when they were queued or
    /// when the frame carrying them was lost.
    pub messages_cut: u64,
}

/// What a congestion controller is doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CongestionMode {
    /// AIMD below its threshold: one datagram more per acknowledged frame.
    #[default]
    SlowStart,
    /// AIMD above its threshold: one datagram more per window acknowledged.
    Avoidance,
    /// Model: doubling the rate each round trip to find the bottleneck.
    Startup,
    /// Model: draining the queue Startup built.
    Drain,
    /// Model: at the bottleneck rate, probing for more now and then.
    ProbeBandwidth,
    /// Model: the flight held down to see the path's minimum round trip again.
    ProbeRtt,
}

/// The congestion controller's view of the path (see
/// [`CongestionControl`](crate::CongestionControl)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CongestionStats {
    /// What the controller is doing.
    pub mode: CongestionMode,
    /// Estimated bottleneck bandwidth, bytes per second (0 for AIMD, or before a sample).
    pub bandwidth: u64,
    /// Minimum round trip seen recently (zero for AIMD).
    pub min_rtt: Duration,
    /// Rate sends are paced at, bytes per second (0: unpaced, as AIMD is).
    pub pacing_rate: u64,
}

/// The five states of a peer (spec §2.2): the spec's set, so the enum is exhaustive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerState {
    /// The handshake is under way.
    Connecting,
    /// Packets flow.
    Connected,
    /// Flushing pending packets, then waiting for the disconnection to be acknowledged.
    Disconnecting,
    /// Disconnected; lingers to acknowledge repeated disconnection requests.
    Disconnected,
    /// About to be deleted.
    Zombie,
}

/// A snapshot of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerStats {
    /// The peer's state.
    pub state: PeerState,
    /// The peer's address.
    pub remote: SocketAddr,
    /// Smoothed round-trip time: RFC 6298's average (spec §3.1.3) of samples from the
    /// handshake, from echoes of pings and from acknowledgements of frames sent once
    /// (Karn's rule). A sample runs from the `now` of the call that produced the datagram
    /// ([`Host::step`](crate::Host::step)) to the `now` of the
    /// [`Host::handle_datagram`](crate::Host::handle_datagram) that brought its answer, so
    /// it includes both directions of the path, the time the datagrams waited in either
    /// side's socket buffers, and both applications' loop latency: how long this side took
    /// to send what `step` produced and to hand in what arrived, and how long the peer
    /// took to answer (its step interval).
    ///
    /// It excludes the peer's acknowledgement delay: the time the peer reports it held an
    /// acknowledgement on purpose, waiting for data of its own to carry it (reported in
    /// 32 µs units, [`wire::ACK_DELAY_UNIT`](crate::wire::ACK_DELAY_UNIT); at most 25 ms
    /// is held), which is taken off the sample, unless what is left would be shorter than
    /// the smallest round trip seen (so a peer cannot shrink the estimate by claiming
    /// long holds). Before the first sample it is the spec's 200 ms.
    pub rtt: Duration,
    /// Round-trip time variation (RFC 6298's `RTTVAR`), of the same samples as `rtt`.
    pub rttvar: Duration,
    /// The latest round-trip sample, as `rtt` counts it (the peer's reported hold taken
    /// off).
    pub latest_rtt: Duration,
    /// Resend timeout: how long a frame waits for its acknowledgement before it counts as
    /// lost; it adds to `rtt` a margin for its variation and for the peer's holds
    /// (`docs/protocol.md`, Round-trip time and pings).
    pub rto: Duration,
    /// Congestion window, bytes.
    pub cwnd: usize,
    /// The congestion controller's mode, bandwidth estimate, minimum RTT and pacing rate.
    pub congestion: CongestionStats,
    /// Slow start threshold, bytes (`usize::MAX` before the first loss).
    pub ssthresh: usize,
    /// Bytes in flight.
    pub flight: usize,
    /// Frames sent and not yet acknowledged (or given up, see
    /// [`TransferStats::frames_unacknowledged`]).
    pub frames_in_flight: usize,
    /// The datagram size this side sends now: the negotiated one, raised by path MTU
    /// discovery ([`PeerConfig::max_mtu`](crate::PeerConfig::max_mtu)) as far as the path
    /// carries.
    pub mtu: usize,
    /// Transfer layer counters: frames, datagrams and bytes each way, losses, resends.
    pub transfer: TransferStats,
    /// Packets the application sent.
    pub packets_sent: u64,
    /// Packets delivered to the application.
    pub packets_received: u64,
    /// Unreliable packets this side dropped because a channel's send queue was full.
    pub unreliable_dropped: u64,
    /// Unreliable packets this side replaced, unsent, with newer ones on channels with
    /// [`ChannelConfig::latest_only`](crate::ChannelConfig::latest_only).
    pub unreliable_replaced: u64,
    /// Frames held back (not acknowledged) because the reassembly budget was full.
    pub frames_refused: u64,
    /// Messages the peer should not have sent (inconsistent or oversized fragments,
    /// bad window acknowledgements, unknown channels); counted and ignored.
    pub protocol_violations: u64,
    /// Datagrams from the peer's address that failed to decode or verify.
    pub malformed: u64,
    /// Bytes of incomplete and undelivered packets held for this peer.
    pub reassembly_bytes: usize,
    /// Payload bytes waiting, queued or in flight on the sending side, all channels.
    pub queued_bytes: usize,
}

impl PeerStats {
    /// Fraction of frames sent that were considered lost, 0.0 to 1.0.
    pub fn loss(&self) -> f64 {
        let sent = self.transfer.frames_sent + self.transfer.frames_resent;
        if sent == 0 { 0.0 } else { self.transfer.frames_lost as f64 / sent as f64 }
    }
}

/// The memory a host holds, in bytes, by what holds it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryUsage {
    /// Everything below.
    pub total: usize,
    /// The peers: their state, connection structures, queued and in-flight payloads, and
    /// reassembly memory.
    pub peers: usize,
    /// Of `peers`, reassembly memory (incomplete and undelivered packets).
    pub reassembly: usize,
    /// The peer table, the timer heap and the other host bookkeeping.
    pub table: usize,
    /// Datagrams and events waiting to be polled, and the receive and send buffers.
    pub buffers: usize,
}

/// Counters of a whole host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStats {
    /// Datagrams handed to [`Host::handle_datagram`](crate::Host::handle_datagram).
    pub datagrams_received: u64,
    /// Datagrams handed out by [`Host::poll_transmit`](crate::Host::poll_transmit).
    pub datagrams_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams dropped because they failed to decode or verify.
    pub malformed: u64,
    /// Of those, the ones whose integrity check failed.
    pub bad_checksum: u64,
    /// Datagrams from addresses with no peer that were not connection requests (nor a
    /// connected peer's from a new address: [`HostStats::address_changes`]).
    pub unknown_source: u64,
    /// Connections that moved to a new address of their remote, after it proved it
    /// receives there ([`Event::AddressChanged`](crate::Event::AddressChanged)).
    pub address_changes: u64,
    /// Connection datagrams from addresses with no peer answered with an unknown path
    /// (their sender, if it is a remote that moved, answers where it is now).
    pub unknown_paths: u64,
    /// Connection requests refused (incompatible, host full, not accepting).
    pub refused: u64,
    /// Connection requests answered with a cookie challenge.
    pub challenged: u64,
    /// Requests echoing a cookie that did not verify.
    pub bad_cookies: u64,
    /// Connection requests left unanswered because `max_pending` handshakes were under
    /// way (the requester retries). A handshake once answered is never dropped to make
    /// room, so this, not an eviction, is what a burst of connections beyond
    /// `max_pending` costs.
    pub handshakes_deferred: u64,
    /// Incoming connections currently in their handshake.
    pub pending: usize,
    /// Peers created by incoming requests (under
    /// [`HostConfig::manual_accept`](crate::HostConfig::manual_accept), requests reported
    /// to the application).
    pub accepted: u64,
    /// Incoming requests the application rejected ([`Host::reject`](crate::Host::reject),
    /// or a disconnection while the request awaited its decision).
    pub rejected: u64,
    /// Live connections: peers connecting or connected, `connecting + connected`. A
    /// connection leaves this count when it starts to end (either side disconnects) or
    /// fails, and the host's `Event::Disconnected` for it follows.
    pub peers: usize,
    /// Peers in their handshake, started by either side (incoming ones still in it are
    /// `pending` too).
    pub connecting: usize,
    /// Peers connected: packets flow.
    pub connected: usize,
    /// Peers ending or ended that the table still holds: flushing before a graceful
    /// disconnection, or disconnected and lingering for
    /// [`PeerConfig::linger`](crate::PeerConfig::linger) to acknowledge repeated
    /// disconnection requests, before they are deleted. They still count against
    /// `max_peers`: the table holds `peers + closing`.
    pub closing: usize,
    /// Secure mode: connection requests whose token or seal did not verify (forged,
    /// altered, another key, undecodable), dropped unanswered.
    pub bad_tokens: u64,
    /// Secure mode: connection requests with an expired token, dropped unanswered.
    pub expired_tokens: u64,
    /// Secure mode: connection requests with a token for other servers, dropped
    /// unanswered.
    pub wrong_server_tokens: u64,
    /// Secure mode: connection requests with a token already used from another address,
    /// dropped unanswered.
    pub reused_tokens: u64,
    /// Secure mode: sealed datagrams dropped as replays (a counter accepted already, or
    /// too far behind the newest to tell).
    pub replayed: u64,
}
