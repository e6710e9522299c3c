//! Simulated evidence for the transfer layer (issues 16, 17 and 18): runs the workloads of
//! `workloads.rs` over many seeds in the deterministic simulator and writes the tables of
//! `docs/simulated.md` (medians over the seeds, with the range in brackets).
//!
//! `cargo bench -p porous-proto --bench netsim` rewrites the document and draws the time
//! series of its key workloads into `docs/plots/` (`plots.rs`); `-- --print` only prints;
//! `-- --only NAME[,NAME]` runs and rewrites those sections (and draws no plots).
//! Under `cargo test --benches` it runs each workload once, briefly, draws the plots in
//! memory and writes nothing. Simulated time, so the figures do not depend on the machine.

mod chart;
mod plots;
mod pmtu;
mod workloads;

use std::time::Duration;

use porous_proto::CongestionControl;
use workloads::{SEC, beside_bulk, bulk, config, game, link, queueing, share};

/// How much work: full under `cargo bench`, a smoke run otherwise.
pub(crate) struct Scale {
    seeds: u64,
    transfer: usize,
    pub(crate) run: Duration,
    pub(crate) warm_up: Duration,
    pub(crate) ticks: u32,
}

fn scale() -> Scale {
    if std::env::args().any(|a| a == "--bench") {
        Scale { seeds: 7, transfer: 2_000_000, run: 30 * SEC, warm_up: 10 * SEC, ticks: 1_800 }
    } else {
        Scale { seeds: 1, transfer: 100_000, run: 4 * SEC, warm_up: 2 * SEC, ticks: 120 }
    }
}

/// Median and range of `v`, formatted with `digits` decimals.
fn summary(mut v: Vec<f64>, digits: usize) -> String {
    v.sort_by(f64::total_cmp);
    let (lo, mid, hi) = (v[0], v[v.len() / 2], v[v.len() - 1]);
    if (hi - lo).abs() < 0.5 * 10f64.powi(-(digits as i32)) {
        format!("{mid:.digits$}")
    } else {
        format!("{mid:.digits$} [{lo:.digits$}-{hi:.digits$}]")
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) const MODEL: CongestionControl = CongestionControl::Model;
pub(crate) const AIMD: CongestionControl = CongestionControl::Aimd;
/// The bottleneck: 10 MB/s.
pub(crate) const RATE: u64 = 10_000_000;
/// One bandwidth-delay product at 10 MB/s and 50 ms.
pub(crate) const BDP: usize = 500_000;

/// The presets' workloads over more seeds than the one-seed table's (median [range]): one
/// seed's figure on a lossy path is one draw of its losses.
fn presets_seeds_table(s: &Scale) -> String {
    use workloads::presets;
    let mut t = String::from(
        "| conditions | bulk goodput (kB/s) | input latency p50 (ms) | p99 (ms) | wire bytes per packet |\n\
         |---|---:|---:|---:|---:|\n",
    );
    let seeds = 2 * s.seeds + 1;
    for (name, c) in presets::grid() {
        let bulks: Vec<_> = (1..=seeds).map(|i| presets::bulk(c, presets::SEED + i).0).collect();
        let games: Vec<_> = (1..=seeds).map(|i| presets::game(c, presets::SEED + i)).collect();
        t += &format!(
            "| {name} | {} | {} | {} | {} |\n",
            summary(bulks, 0),
            summary(games.iter().map(|g| g.0).collect(), 1),
            summary(games.iter().map(|g| g.1).collect(), 1),
            summary(games.iter().map(|g| g.3).collect(), 1)
        );
    }
    t
}

/// Issue 16: one 2 MB transfer per loss rate, each controller, and the model's steady
/// state: a flow kept busy for the run, its goodput counted after the warm-up (a 2 MB
/// transfer at 10 MB/s is over in about four round trips of Startup, so it measures the
/// ramp more than the controller's verdict on loss).
fn loss_table(s: &Scale) -> String {
    let mut t = String::from(
        "| random loss | model goodput, 2 MB (kB/s) | AIMD goodput, 2 MB (kB/s) | model / AIMD | model frames resent | model steady state (kB/s) | steady, share of the bottleneck |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for loss in [0.0, 0.01, 0.02, 0.05, 0.10, 0.20] {
        let c = link(loss, RATE, BDP);
        let run =
            |cc| -> Vec<_> { (1..=s.seeds).map(|seed| bulk(seed, c, c, &config(cc, true), s.transfer)).collect() };
        let (m, a) = (run(MODEL), run(AIMD));
        let goodput = |v: &[workloads::Bulk]| -> Vec<f64> { v.iter().map(|b| b.goodput / 1000.0).collect() };
        let ratio = median(goodput(&m)) / median(goodput(&a));
        let resent = m.iter().map(|b| b.resent * 100.0).collect();
        let steady: Vec<f64> = (1..=s.seeds)
            .map(|seed| queueing(seed, c, &config(MODEL, true), s.warm_up, s.run, None).goodput / 1000.0)
            .collect();
        let share = steady.iter().map(|g| g * 1000.0 / RATE as f64 * 100.0).collect();
        t += &format!(
            "| {:.0}% | {} | {} | {ratio:.1}x | {}% | {} | {}% |\n",
            loss * 100.0,
            summary(goodput(&m), 0),
            summary(goodput(&a), 0),
            summary(resent, 1),
            summary(steady, 0),
            summary(share, 0)
        );
    }
    t
}

/// Issue 16: two flows through one bottleneck, drop-tail queues of 1 and 4 BDP.
fn share_table(s: &Scale) -> String {
    let mut t = String::from(
        "| flows | queue | first flow (kB/s) | second flow (kB/s) | first / second | link used |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for (name, ccs) in
        [("model + model", (MODEL, MODEL)), ("model + AIMD", (MODEL, AIMD)), ("AIMD + AIMD", (AIMD, AIMD))]
    {
        for bdps in [1, 4] {
            let runs: Vec<_> =
                (1..=s.seeds).map(|seed| share(seed, ccs, (RATE, bdps * BDP), s.warm_up, s.run, None)).collect();
            let first: Vec<f64> = runs.iter().map(|r| r.first / 1000.0).collect();
            let second: Vec<f64> = runs.iter().map(|r| r.second / 1000.0).collect();
            let ratio: Vec<f64> = runs.iter().map(|r| r.first / r.second.max(1.0)).collect();
            let used: Vec<f64> = runs.iter().map(|r| (r.first + r.second) / RATE as f64 * 100.0).collect();
            t += &format!(
                "| {name} | {bdps} BDP | {} | {} | {} | {}% |\n",
                summary(first, 0),
                summary(second, 0),
                summary(ratio, 2),
                summary(used, 0)
            );
        }
    }
    t
}

/// Issue 16: the round trips a busy flow sees through the bottleneck (4 BDP of buffer).
fn queue_table(s: &Scale) -> String {
    let mut t = String::from(
        "| controller | min RTT | p50 RTT | p95 RTT | p95 / min | goodput (kB/s) |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for (name, cc) in [("model", MODEL), ("AIMD", AIMD)] {
        let runs: Vec<_> = (1..=s.seeds)
            .map(|seed| queueing(seed, link(0.0, RATE, 4 * BDP), &config(cc, true), s.warm_up, s.run, None))
            .collect();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        t += &format!(
            "| {name} | {} ms | {} ms | {} ms | {} | {} |\n",
            summary(runs.iter().map(|r| ms(r.min_rtt)).collect(), 1),
            summary(runs.iter().map(|r| ms(r.p50_rtt)).collect(), 1),
            summary(runs.iter().map(|r| ms(r.p95_rtt)).collect(), 1),
            summary(runs.iter().map(|r| ms(r.p95_rtt) / ms(r.min_rtt).max(1e-9)).collect(), 2),
            summary(runs.iter().map(|r| r.goodput / 1000.0).collect(), 0),
        );
    }
    t
}

/// Issues 16, 17 and 18: the two-way 60 Hz game per loss rate, controller and repair.
fn game_table(s: &Scale) -> String {
    let mut t = String::from(
        "| loss | controller | repair | input p50 / p99 (ms) | event p50 / p99 | passive p99 | state p50 / p99 | state delivered | datagrams per tick up / down | wire B per packet | srtt error (ms) |\n\
         |---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for loss in [0.0, 0.05, 0.20] {
        for (name, cc, repair) in [("model", MODEL, true), ("model", MODEL, false), ("AIMD", AIMD, true)] {
            let c = link(loss, 0, 0);
            let runs: Vec<_> = (1..=s.seeds).map(|seed| game(seed, c, c, &config(cc, repair), s.ticks)).collect();
            let q = |f: &dyn Fn(&workloads::Game) -> f64| median(runs.iter().map(f).collect());
            t += &format!(
                "| {:.0}% | {name} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} / {:.1} | {:.1}% | {:.2} / {:.2} | {:.1} | {:.1} |\n",
                loss * 100.0,
                if repair { "on" } else { "off" },
                q(&|g| g.input.quantile(0.5)),
                q(&|g| g.input.quantile(0.99)),
                q(&|g| g.event.quantile(0.5)),
                q(&|g| g.event.quantile(0.99)),
                q(&|g| g.passive.quantile(0.99)),
                q(&|g| g.state.quantile(0.5)),
                q(&|g| g.state.quantile(0.99)),
                q(&|g| g.state.delivered() * 100.0),
                q(&|g| g.up_per_tick),
                q(&|g| g.down_per_tick),
                q(&|g| g.wire_per_packet),
                q(&|g| g.srtt_error),
            );
        }
    }
    t
}

/// Issue 17: a tick's unreliable state beside a fragmented reliable packet.
fn beside_table(s: &Scale) -> String {
    let mut t = String::from(
        "| loss | state p50 / p99 (ms) | state delivered | 8 KB packet p50 / p99 (ms) |\n|---:|---:|---:|---:|\n",
    );
    for loss in [0.0, 0.05, 0.20] {
        let c = link(loss, 0, 0);
        let runs: Vec<_> =
            (1..=s.seeds).map(|seed| beside_bulk(seed, c, &config(MODEL, true), s.ticks, None)).collect();
        let q = |f: &dyn Fn(&workloads::Beside) -> f64| summary(runs.iter().map(f).collect(), 1);
        t += &format!(
            "| {:.0}% | {} / {} | {}% | {} / {} |\n",
            loss * 100.0,
            q(&|b| b.state.quantile(0.5)),
            q(&|b| b.state.quantile(0.99)),
            q(&|b| b.state.delivered() * 100.0),
            q(&|b| b.bulk.quantile(0.5)),
            q(&|b| b.bulk.quantile(0.99)),
        );
    }
    t
}

/// Issue 32: a 60 Hz reliable stream over a lossless path while one side's loop stalls
/// 5-20 ms about every 200 ms: the frames each side declared lost, resent, and found
/// spurious, as a share of the frames it sent (every one is spurious: the path loses
/// nothing).
fn stalls_table(s: &Scale) -> String {
    let mut t = String::from(
        "| stream | loop late | client: lost / resent / found spurious | server: lost / resent / found spurious | undone |\n\
         |---|---|---:|---:|---:|\n",
    );
    let secs = (s.ticks / 30).max(4);
    for both_ways in [false, true] {
        for (side, host) in [("none", None), ("server", Some(workloads::addr(2))), ("client", Some(workloads::addr(1)))]
        {
            let runs: Vec<_> = (1..=s.seeds)
                .map(|seed| {
                    workloads::stalled_stream(
                        seed,
                        host.map(|h| (h, porous_proto::sim::Stalls::busy())),
                        both_ways,
                        secs,
                    )
                })
                .collect();
            let pct = |f: &dyn Fn(&workloads::Stalled) -> (u64, u64)| {
                summary(
                    runs.iter()
                        .map(|r| {
                            let (n, of) = f(r);
                            n as f64 * 100.0 / of.max(1) as f64
                        })
                        .collect(),
                    2,
                )
            };
            let side_cell = |get: &dyn Fn(&workloads::Stalled) -> porous_proto::TransferStats| {
                if median(runs.iter().map(|r| get(r).frames_sent as f64).collect()) < 100.0 {
                    return "(acknowledgements only)".to_string();
                }
                format!(
                    "{}% / {}% / {}%",
                    pct(&|r| (get(r).frames_lost, get(r).frames_sent)),
                    pct(&|r| (get(r).frames_resent, get(r).frames_sent)),
                    pct(&|r| (get(r).losses_spurious, get(r).frames_sent)),
                )
            };
            let undone = summary(
                runs.iter().map(|r| (r.client.congestion_undos + r.server.congestion_undos) as f64).collect(),
                0,
            );
            t += &format!(
                "| {} | {side} | {} | {} | {undone} |\n",
                if both_ways { "both ways" } else { "client to server" },
                side_cell(&|r| r.client),
                side_cell(&|r| r.server),
            );
        }
    }
    t
}

/// Issue 32: what each side of a 60 Hz game sends into a blackout until it times out
/// (10 s), and how soon what waited arrives once an 8 s outage ends.
fn blackout_table(s: &Scale) -> String {
    let mut t = String::from(
        "| path | client: datagrams / bytes | server: datagrams / bytes | gave up after | delivered after the path came back |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for (name, outage) in [("dead for good", None), ("dead for 8 s", Some(8 * SEC))] {
        let runs: Vec<_> = (1..=s.seeds).map(|seed| workloads::blackout(seed, outage)).collect();
        let n = |f: &dyn Fn(&workloads::Blackout) -> u64| summary(runs.iter().map(|r| f(r) as f64).collect(), 0);
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        t += &format!(
            "| {name} | {} / {} | {} / {} | {} | {} |\n",
            n(&|r| r.client.0),
            n(&|r| r.client.1),
            n(&|r| r.server.0),
            n(&|r| r.server.1),
            if outage.is_some() {
                "(did not)".to_string()
            } else {
                format!(
                    "{} s",
                    summary(runs.iter().map(|r| r.client_gave_up.max(r.server_gave_up).as_secs_f64()).collect(), 2)
                )
            },
            match outage {
                Some(_) =>
                    format!("{} ms", summary(runs.iter().map(|r| r.recovered.map_or(f64::NAN, ms)).collect(), 0)),
                None => String::new(),
            },
        );
    }
    t
}

/// Issue 32, item 6: what repair copies cost a one-way stream of 50-byte reliable
/// messages (5 s of them, default configuration), from the first send until all are
/// acknowledged: datagrams and bytes from the sender, datagrams back.
fn repair_table() -> String {
    let mut t = String::from(
        "| path, rate | loss | datagrams to the receiver (repair on / off) | bytes (on / off) | datagrams back (on / off) |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for loss in [0.0, 0.05] {
        for (latency, every) in [(10, 10), (10, 16), (25, 33), (1, 10)] {
            let (latency, every) = (latency * workloads::MS, every * workloads::MS);
            let count = (5 * SEC).as_millis() as u32 / every.as_millis() as u32;
            let on = workloads::stream_cost(3, latency, loss, every, count, true);
            let off = workloads::stream_cost(3, latency, loss, every, count, false);
            t += &format!(
                "| {} ms one way, every {} ms | {:.0}% | {} / {} | {} / {} | {} / {} |\n",
                latency.as_millis(),
                every.as_millis(),
                loss * 100.0,
                on.datagrams,
                off.datagrams,
                on.bytes,
                off.bytes,
                on.back,
                off.back
            );
        }
    }
    t
}

/// What makes one section's table.
type Table = dyn Fn(&Scale) -> String;

fn main() {
    let s = scale();
    let print_only = std::env::args().any(|a| a == "--print") || s.seeds == 1;
    let only = std::env::args().skip_while(|a| a != "--only").nth(1);
    let all: [(&str, &Table); 11] = [
        ("netsim", &|_| workloads::presets::table()),
        ("presets-seeds", &presets_seeds_table),
        ("loss", &loss_table),
        ("share", &share_table),
        ("queue", &queue_table),
        ("game", &game_table),
        ("beside", &beside_table),
        ("pmtu", &pmtu::table),
        ("stalls", &stalls_table),
        ("blackout", &blackout_table),
        ("repair", &|_| repair_table()),
    ];
    let sections: Vec<(&str, String)> = all
        .iter()
        .filter(|(name, _)| only.as_deref().is_none_or(|o| o.split(',').any(|n| n == *name)))
        .map(|(name, table)| (*name, table(&s)))
        .collect();
    for (name, table) in &sections {
        println!("{name}:\n{table}");
    }
    let figures = if only.is_some() { Vec::new() } else { plots::all(&s) };
    for (name, svg) in &figures {
        println!("plot {name}: {} bytes of SVG", svg.len());
    }
    if print_only {
        return;
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/plots");
    std::fs::create_dir_all(dir).expect("create docs/plots");
    for (name, svg) in &figures {
        let path = format!("{dir}/{name}");
        std::fs::write(&path, svg).expect("write a plot");
        println!("wrote {path}");
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/simulated.md");
    let mut doc = std::fs::read_to_string(path).expect("docs/simulated.md exists");
    for (name, table) in &sections {
        doc = workloads::splice(&doc, name, table);
    }
    std::fs::write(path, doc).expect("write docs/simulated.md");
    println!("wrote {path}");
}
