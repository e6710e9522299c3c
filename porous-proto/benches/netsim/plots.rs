//! The figures of `docs/plots/`: the time series of the workloads (`workloads::Series`),
//! drawn by `chart.rs`. Each figure runs its workloads once, with the first seed of the
//! tables beside it.

use std::error::Error;

use crate::chart::{BLUE, GREEN, GREY, LIGHT_BLUE, ORANGE, RED, dots, line, panel, svg};
use crate::workloads::{Series, beside_bulk, config, link, queueing, share};
use crate::{AIMD, BDP, MODEL, RATE, Scale};

/// Issue 16: one flow through the bottleneck at 5% random loss, the model-based
/// controller against the spec's AIMD.
fn loss(s: &Scale) -> Result<String, Box<dyn Error>> {
    let c = link(0.05, RATE, BDP);
    let run = |cc| {
        let mut series = Series::default();
        queueing(1, c, &config(cc, true), s.warm_up, s.run, Some(&mut series));
        series
    };
    let (m, a) = (run(MODEL), run(AIMD));
    svg(
        "One flow, 10 MB/s bottleneck with 1 BDP of queue, 25 ms one way, 5% random loss: model vs AIMD",
        &[
            panel(
                "Delivery rate at the receiver (100 ms windows), and the model's pacing rate",
                "MB/s",
                vec![
                    line("model", m.line("delivery"), BLUE),
                    line("model pacing rate", m.line("pacing"), LIGHT_BLUE),
                    line("AIMD", a.line("delivery"), RED),
                ],
            ),
            panel(
                "Congestion window and bytes in flight",
                "kB",
                vec![
                    line("model cwnd", m.line("cwnd"), BLUE),
                    line("model in flight", m.line("flight"), LIGHT_BLUE),
                    line("AIMD cwnd", a.line("cwnd"), RED),
                    line("AIMD in flight", a.line("flight"), ORANGE),
                ],
            ),
            panel(
                "Round trip, the sender's latest sample",
                "ms",
                vec![line("model", m.line("rtt"), BLUE), line("AIMD", a.line("rtt"), RED)],
            ),
            panel(
                "Bytes queued at the bottleneck",
                "kB",
                vec![line("model", m.line("queue"), BLUE), line("AIMD", a.line("queue"), RED)],
            ),
        ],
    )
}

/// Issue 17: a tick's unreliable state beside 8 KB reliable packets, 5% random loss.
fn beside(s: &Scale) -> Result<String, Box<dyn Error>> {
    let mut series = Series::default();
    // Ten seconds (600 ticks) show the pattern; the table runs 30.
    let b = beside_bulk(1, link(0.05, 0, 0), &config(MODEL, true), s.ticks.min(600), Some(&mut series));
    svg(
        "A 60 Hz state beside 8 KB reliable packets (3 a second, 7 fragments), 25 ms one way, 5% random loss",
        &[
            panel(
                "Latency of each packet that arrived, by when it was sent",
                "ms",
                vec![
                    dots("state (unreliable, 200 B, every tick)", b.state.points().to_vec(), BLUE),
                    dots("8 KB packet (reliable)", b.bulk.points().to_vec(), RED),
                ],
            ),
            panel(
                "Congestion window and bytes in flight",
                "kB",
                vec![line("cwnd", series.line("cwnd"), BLUE), line("in flight", series.line("flight"), LIGHT_BLUE)],
            ),
            panel(
                "Pacing rate: what spreads a packet's fragments",
                "MB/s",
                vec![line("pacing rate", series.line("pacing"), GREEN)],
            ),
        ],
    )
}

/// Issue 16: two flows through one shared bottleneck with 1 BDP of queue.
fn sharing(s: &Scale) -> Result<String, Box<dyn Error>> {
    let run = |ccs| {
        let mut series = Series::default();
        share(1, ccs, (RATE, BDP), s.warm_up, s.run, Some(&mut series));
        series
    };
    let (mm, ma) = (run((MODEL, MODEL)), run((MODEL, AIMD)));
    svg(
        "Two flows through one 10 MB/s bottleneck with 1 BDP of queue, 25 ms one way",
        &[
            panel(
                "model + model: delivery rate of each flow (100 ms windows)",
                "MB/s",
                vec![
                    line("first (model)", mm.line("delivery 1"), BLUE),
                    line("second (model)", mm.line("delivery 2"), GREEN),
                ],
            ),
            panel("model + model: bytes queued at the bottleneck", "kB", vec![line("queue", mm.line("queue"), GREY)]),
            panel(
                "model + AIMD: delivery rate of each flow (100 ms windows)",
                "MB/s",
                vec![
                    line("first (model)", ma.line("delivery 1"), BLUE),
                    line("second (AIMD)", ma.line("delivery 2"), RED),
                ],
            ),
            panel("model + AIMD: bytes queued at the bottleneck", "kB", vec![line("queue", ma.line("queue"), GREY)]),
        ],
    )
}

/// What draws a figure.
type Figure = fn(&Scale) -> Result<String, Box<dyn Error>>;

/// Every figure: its file name under `docs/plots/` and its SVG.
pub(crate) fn all(s: &Scale) -> Vec<(&'static str, String)> {
    let figures: [(&str, Figure); 3] =
        [("loss-5-percent.svg", loss), ("state-beside-bulk.svg", beside), ("sharing-a-bottleneck.svg", sharing)];
    figures.into_iter().map(|(name, draw)| (name, draw(s).unwrap_or_else(|e| panic!("drawing {name}: {e}")))).collect()
}
