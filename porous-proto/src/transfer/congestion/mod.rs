//! Congestion control behind one small interface: the transfer layer asks the
//! [`Controller`] for the window (bytes that may be in flight) and the pacing rate (bytes
//! per second, or none), and tells it about acknowledgements and dropped frames. Nothing
//! else of the layer knows which controller runs.
//!
//! Two controllers, chosen per host by `PeerConfig::congestion`:
//!
//! - [`Model`] (the default; `model.rs`): estimates the path's bottleneck bandwidth and
//!   minimum round trip from delivery rate samples, paces at a gain over the bandwidth and
//!   keeps the flight near the bandwidth-delay product; random loss does not shrink it, only
//!   loss that comes with a queue. A departure from the spec, justified in
//!   `docs/protocol.md`.
//! - [`Aimd`] (`aimd.rs`): the spec's additive increase, multiplicative decrease, unpaced,
//!   exactly as §3.1.4-§3.1.5 write it.
//!
//! All arithmetic saturates: an RTT of zero or of hours, a rate of zero, cannot overflow or
//! divide by zero.

mod aimd;
mod model;

use crate::time::Time;
use std::time::Duration;

pub(crate) use aimd::Aimd;
pub(crate) use model::Model;

use super::delivery::RateSample;
use crate::config::CongestionControl;
use crate::stats::CongestionStats;

/// What a congestion controller sees of the connection's round trip.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path {
    pub(crate) srtt: Duration,
    pub(crate) rto: Duration,
}

/// One acknowledgement that acknowledged frames, as the controller sees it.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AckEvent {
    /// Bytes newly acknowledged.
    pub(crate) acked: usize,
    /// The delivery rate sample it gave.
    pub(crate) sample: Option<RateSample>,
    /// A round-trip sample from a frame it acknowledged that was sent once (Karn), if any.
    pub(crate) rtt: Option<Duration>,
    /// Bytes still in flight afterwards.
    pub(crate) in_flight: usize,
    /// Bytes delivered on the connection in all, this acknowledgement included.
    pub(crate) delivered: u64,
    /// Of the bytes acknowledged, those of frames declared lost that had arrived after
    /// all: the loss they were counted as did not happen.
    pub(crate) spurious: usize,
}

/// The controller of one connection, inline in its transfer layer: every acknowledgement
/// and every datagram sent reads it, and a box of its own was one more dependent cache
/// miss each time at thousands of peers. The model (the default) is the larger kind; an
/// AIMD connection leaves most of its room unused.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // inline on purpose, see above
pub(crate) enum Controller {
    Model(Model),
    Aimd(Aimd),
}

/// The state a controller's reactions to loss change ([`Controller::reaction`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reaction {
    Model(model::Reaction),
    Aimd(aimd::Reaction),
}

/// What a controller is made from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) mtu: usize,
    /// Congestion window before any acknowledgement, in bytes.
    pub(crate) initial_window: usize,
    /// Negotiated sending bandwidth B in bytes per second, 0 for no limit.
    pub(crate) bandwidth: u64,
    /// The largest window that can ever matter: the transfer window in bytes.
    pub(crate) ceiling: usize,
}

impl Controller {
    pub(crate) fn new(kind: CongestionControl, limits: Limits) -> Self {
        match kind {
            CongestionControl::Aimd => {
                Self::Aimd(Aimd::new(limits.mtu, limits.initial_window, limits.bandwidth, limits.ceiling))
            }
            CongestionControl::Model => Self::Model(Model::new(limits)),
        }
    }

    /// Bytes that may be in flight.
    pub(crate) fn window(&self) -> usize {
        match self {
            Self::Model(m) => m.window(),
            Self::Aimd(a) => a.window(),
        }
    }

    /// Bytes per second to pace sends at; `None`: unpaced.
    pub(crate) fn pacing_rate(&self) -> Option<u64> {
        match self {
            Self::Model(m) => Some(m.pacing_rate()),
            Self::Aimd(_) => None,
        }
    }

    /// The slow start threshold (AIMD); `usize::MAX` for a controller without one.
    pub(crate) fn ssthresh(&self) -> usize {
        match self {
            Self::Model(_) => usize::MAX,
            Self::Aimd(a) => a.ssthresh(),
        }
    }

    /// A frame of `bytes` bytes was acknowledged (each, in turn, before the
    /// acknowledgement's [`Controller::on_ack`]).
    pub(crate) fn on_frame_acked(&mut self, now: Time, bytes: usize, path: Path) {
        if let Self::Aimd(a) = self {
            a.on_frame_acked(now, bytes, path);
        }
    }

    /// An acknowledgement acknowledged frames.
    pub(crate) fn on_ack(&mut self, now: Time, ack: &AckEvent, path: Path) {
        if let Self::Model(m) = self {
            m.on_ack(now, ack, path);
        }
    }

    /// A frame of `bytes` bytes was considered dropped.
    pub(crate) fn on_drop(&mut self, now: Time, bytes: usize, path: Path) {
        match self {
            Self::Model(m) => m.on_drop(now, bytes, path),
            Self::Aimd(a) => a.on_drop(now, path),
        }
    }

    /// What the controller's reactions to loss have set so far, to restore with
    /// [`Controller::undo`] if the losses it reacts to next prove spurious.
    pub(crate) fn reaction(&self) -> Reaction {
        match self {
            Self::Model(m) => Reaction::Model(m.reaction()),
            Self::Aimd(a) => Reaction::Aimd(a.reaction()),
        }
    }

    /// Takes back the reactions to loss since `before` was taken: every loss since proved
    /// spurious (the frames had arrived; their acknowledgements were late).
    pub(crate) fn undo(&mut self, before: Reaction) {
        match (self, before) {
            (Self::Model(m), Reaction::Model(r)) => m.undo(r),
            (Self::Aimd(a), Reaction::Aimd(r)) => a.undo(r),
            _ => {}
        }
    }

    /// Congestion window resets (the spec's (13)-(15), or the model's silence rule).
    pub(crate) fn resets(&self) -> u64 {
        match self {
            Self::Model(m) => m.resets(),
            Self::Aimd(a) => a.resets(),
        }
    }

    pub(crate) fn stats(&self) -> CongestionStats {
        match self {
            Self::Model(m) => m.stats(),
            Self::Aimd(a) => a.stats(),
        }
    }
}
