//! The demo's `--plot FILE`: each side's connection sampled every 100 ms of the run, and
//! every packet's latency by when it was sent, per channel and direction, drawn as SVG
//! the way the netsim bench draws `docs/plots/` (its `chart.rs`, included here).

use std::error::Error;
use std::time::Duration;

use porous_proto::{PeerStats, SendMode};

use crate::relay::{TO_CLIENT, TO_SERVER};
use crate::stream::Stream;

#[path = "../../porous-proto/benches/netsim/chart.rs"]
mod chart;

use chart::{BLUE, GREEN, GREY, LIGHT_BLUE, ORANGE, Panel, RED, dots, line, panel, svg};

/// How often each side's connection is sampled.
pub const SAMPLE: Duration = Duration::from_millis(100);

/// A run's time series: named lines of (seconds since the start, value).
#[derive(Clone, Debug, Default)]
pub struct Plot {
    next: Duration,
    lines: Vec<(String, Vec<(f64, f64)>)>,
}

impl Plot {
    fn push(&mut self, name: &str, t: f64, v: f64) {
        match self.lines.iter_mut().find(|(n, _)| n == name) {
            Some((_, points)) => points.push((t, v)),
            None => self.lines.push((name.to_string(), vec![(t, v)])),
        }
    }

    fn line(&self, name: &str) -> Vec<(f64, f64)> {
        self.lines.iter().find(|(n, _)| n == name).map(|(_, p)| p.clone()).unwrap_or_default()
    }

    /// Samples each side's connection, `sides[TO_SERVER]` the client's and
    /// `sides[TO_CLIENT]` the server's, if the last sample is [`SAMPLE`] old at `t` (from
    /// the run's start): congestion window and bytes in flight (kB), pacing rate (MB/s),
    /// smoothed round trip (ms).
    pub fn sample(&mut self, t: Duration, sides: &[Option<PeerStats>; 2]) {
        if t < self.next {
            return;
        }
        self.next = t + SAMPLE;
        let t = t.as_secs_f64();
        for (side, dir) in [("client", TO_SERVER), ("server", TO_CLIENT)] {
            let Some(s) = sides[dir] else { continue };
            self.push(&format!("{side} cwnd"), t, s.cwnd as f64 / 1000.0);
            self.push(&format!("{side} flight"), t, s.flight as f64 / 1000.0);
            self.push(&format!("{side} pacing"), t, s.congestion.pacing_rate as f64 / 1e6);
            self.push(&format!("{side} rtt"), t, s.rtt.as_secs_f64() * 1000.0);
        }
    }

    /// The figure as an SVG document, under `title`: each packet of `streams` that was
    /// delivered (`streams[direction][channel]`), then the samples.
    pub fn svg(&self, title: &str, streams: &[[Stream; 4]; 2]) -> Result<String, Box<dyn Error>> {
        let mode = |m: SendMode| match m {
            SendMode::Reliable => "reliable",
            SendMode::Unreliable => "unreliable",
            SendMode::Passive => "passive",
        };
        let colors = [BLUE, GREEN, ORANGE, RED];
        let latency = |dir: usize, way: &str| -> Panel {
            let lines = streams[dir]
                .iter()
                .zip(colors)
                .enumerate()
                .map(|(ch, (s, color))| dots(&format!("channel {ch}, {}", mode(s.mode)), s.points(), color))
                .collect();
            panel(&format!("Latency of each packet delivered {way}, by when it was sent"), "ms", lines)
        };
        svg(
            title,
            &[
                latency(TO_SERVER, "client to server"),
                latency(TO_CLIENT, "server to client"),
                panel(
                    "Congestion window and bytes in flight",
                    "kB",
                    vec![
                        line("client cwnd", self.line("client cwnd"), BLUE),
                        line("client in flight", self.line("client flight"), LIGHT_BLUE),
                        line("server cwnd", self.line("server cwnd"), RED),
                        line("server in flight", self.line("server flight"), ORANGE),
                    ],
                ),
                panel(
                    "Round trip, smoothed",
                    "ms",
                    vec![line("client", self.line("client rtt"), BLUE), line("server", self.line("server rtt"), RED)],
                ),
                panel(
                    "Pacing rate",
                    "MB/s",
                    vec![
                        line("client", self.line("client pacing"), BLUE),
                        line("server", self.line("server pacing"), GREY),
                    ],
                ),
            ],
        )
    }
}
