//! What the layout of a peer's state costs a server's tick, with no protocol in it: the
//! yardstick for `active.rs` (issue 18; `docs/notes/server-scale.md`, Part 8).
//!
//! N peers each own a record of [`RECORD`] bytes (a connected peer's heap in the `active`
//! bench). A tick first passes over as much other memory as N clients hold (what the
//! `active` bench's client side does between two server ticks), then goes through the
//! peers three times, in order, as a server's read, send and step phases do: each time it
//! reads its share of `lines` cache lines of the peer, does a fixed amount of arithmetic on
//! them and writes one word back to each. Where those lines are is the layout:
//!
//! - `record`: lines spread evenly over the peer's own record, records in peer order (one
//!   slot holding the peer's state, its fields here and there in it);
//! - `scattered`: lines anywhere in all the peers' state, their addresses known up front
//!   (the loads may all be in flight at once);
//! - `chained`: the same lines, each address depending on the word the previous load read
//!   (a box, a deque's buffer, a channel behind a pointer: a pointer chase).
//!
//! In `record` and `scattered` each line of a phase's share is read by a load instruction
//! of its own, as a structure's fields are (the processor predicts a load's next address
//! from its own last ones, so one load in a loop over spread lines would be a different
//! case); that takes shares of 2, 4, 8 or 16 lines, so `lines` of 6, 12, 24 or 48 (other
//! counts are read in a loop).
//!
//! With `--shuffled` the peers are gone through in one fixed random order, as a server's
//! datagrams arrive from its peers, instead of in the order of their records (as the
//! `active` bench's do).
//!
//! It prints the median ns per peer per tick of each layout at each N, and what N costs
//! over the first N (the part of a tick that is memory, not work).
//!
//! `cargo bench -p porous-proto --bench layout` (`-- --sizes 100,10000 --lines 12,48` for
//! others, `-- --shuffled` for the random order). Under `cargo test --benches` it runs
//! once, small.

use std::hint::black_box;
use std::time::Instant;

/// Bytes of state per peer: the heap of a connected peer in the `active` bench.
const RECORD: usize = 3_712;
const LINE: usize = 64;
const WORDS_PER_LINE: usize = LINE / size_of::<u64>();
/// Mixing steps per peer per phase (a shift, an xor and a multiply each, each depending on
/// the last, which the compiler cannot fold): for the three phases, about what a tick of
/// the `active` bench's server costs per peer when its state is in the cache.
const WORK: u32 = 128;
const PHASES: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    Record,
    Scattered,
    Chained,
}

impl Layout {
    const ALL: [Self; 3] = [Self::Record, Self::Scattered, Self::Chained];

    fn name(self) -> &'static str {
        match self {
            Self::Record => "record",
            Self::Scattered => "scattered",
            Self::Chained => "chained",
        }
    }
}

/// The value after `--name` on the command line, as a list of positive numbers; `default`
/// if there is none.
fn list(name: &str, default: &[usize]) -> Vec<usize> {
    let args: Vec<String> = std::env::args().collect();
    let given: Vec<usize> = match args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)) {
        Some(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).filter(|&n| n > 0).collect(),
        None => Vec::new(),
    };
    if given.is_empty() { default.to_vec() } else { given }
}

/// A xorshift generator: the same lines on every run.
struct Lines(u64);

impl Lines {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The state of `n` peers and the word offset of each line every peer touches, in order.
struct Server {
    state: Vec<u64>,
    touched: Vec<usize>,
    lines: usize,
    chained: bool,
}

impl Server {
    /// `shuffled`: the peers are gone through in one fixed random order instead of in
    /// the order of their records.
    fn new(n: usize, lines: usize, layout: Layout, shuffled: bool) -> Self {
        let per_peer = RECORD / LINE;
        let total = n * per_peer;
        let mut order: Vec<usize> = (0..n).collect();
        if shuffled {
            let mut rng = Lines(0x2545_f491_4f6c_dd1d);
            for i in (1..n).rev() {
                order.swap(i, rng.below(i + 1));
            }
        }
        let mut rng = Lines(0x9e37_79b9_7f4a_7c15);
        let touched = order
            .into_iter()
            .flat_map(|peer| (0..lines).map(move |j| (peer, j)))
            .map(|(peer, j)| match layout {
                Layout::Record => peer * per_peer + j * per_peer / lines,
                Layout::Scattered | Layout::Chained => rng.below(total),
            })
            .map(|line| line * WORDS_PER_LINE)
            .collect();
        Self { state: vec![0; total * WORDS_PER_LINE], touched, lines, chained: layout == Layout::Chained }
    }

    /// One phase over every peer: its share of the lines read, worked on, written.
    fn phase(&mut self, phase: usize, acc: u64) -> u64 {
        let (from, to) = (self.lines * phase / PHASES, self.lines * (phase + 1) / PHASES);
        // Zero, but not to the compiler: `dep & zero` makes an address depend on a load.
        let zero = black_box(0usize);
        let mut acc = acc;
        for peer in self.touched.chunks_exact(self.lines) {
            let mine = &peer[from..to];
            let mut x = acc;
            if self.chained {
                let mut dep = 0usize;
                for &w in mine {
                    let v = self.state.get(w + (dep & zero)).copied().unwrap_or(0);
                    dep = v as usize;
                    x = x.wrapping_add(v);
                }
            } else {
                x = x.wrapping_add(match mine.len() {
                    2 => read::<2>(&self.state, mine),
                    4 => read::<4>(&self.state, mine),
                    8 => read::<8>(&self.state, mine),
                    16 => read::<16>(&self.state, mine),
                    _ => mine.iter().fold(0, |a, &w| a ^ self.state.get(w).copied().unwrap_or(0)),
                });
            }
            for _ in 0..WORK {
                x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            }
            for &w in mine {
                if let Some(slot) = self.state.get_mut(w + 1) {
                    *slot = x;
                }
            }
            acc = black_box(x);
        }
        acc
    }
}

/// The words at `at` (`K` of them), each read by a load instruction of its own: the
/// compiler unrolls a constant count.
#[inline(always)]
fn read<const K: usize>(state: &[u64], at: &[usize]) -> u64 {
    let words: [u64; K] = std::array::from_fn(|k| at.get(k).and_then(|&w| state.get(w)).copied().unwrap_or(0));
    words.iter().fold(0, |a, w| a ^ w)
}

/// Median ns per peer per tick of `n` peers touching `lines` lines each in `layout` (in
/// peer order or `shuffled`), after `warm_up` ticks, over `ticks`.
fn measure(n: usize, lines: usize, layout: Layout, shuffled: bool, (warm_up, ticks): (usize, usize)) -> f64 {
    let mut server = Server::new(n, lines, layout, shuffled);
    // The clients' state: as much memory as the server's, passed over once per tick.
    let mut clients = vec![0u64; n * RECORD / size_of::<u64>()];
    let mut acc = 0;
    let mut times = Vec::with_capacity(ticks);
    for tick in 0..warm_up + ticks {
        for w in clients.iter_mut().step_by(WORDS_PER_LINE) {
            *w = w.wrapping_add(tick as u64);
        }
        black_box(&mut clients);
        let start = Instant::now();
        for phase in 0..PHASES {
            acc = server.phase(phase, acc);
        }
        if tick >= warm_up {
            times.push(start.elapsed().as_secs_f64() * 1e9 / n as f64);
        }
    }
    black_box(acc);
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let sizes = list("--sizes", if bench { &[100, 1_000, 10_000, 20_000] } else { &[20, 40] });
    let lines = list("--lines", if bench { &[6, 12, 24, 48] } else { &[6] });
    let (warm_up, ticks) = if bench { (10, 60) } else { (1, 3) };
    let shuffled = std::env::args().any(|a| a == "--shuffled");
    let order = if shuffled { "in a random order" } else { "in order" };
    println!(
        "ns per peer per tick touching L lines of {RECORD} B of state per peer, peers {order}, medians of {ticks} ticks"
    );
    println!("| L | layout | {} | {} |", sizes.iter().map(|n| format!("{n}")).collect::<Vec<_>>().join(" | "), {
        sizes.iter().skip(1).map(|n| format!("{n} over {}", sizes[0])).collect::<Vec<_>>().join(" | ")
    });
    println!("|---:|---|{}", "---:|".repeat(2 * sizes.len() - 1));
    for &l in &lines {
        for layout in Layout::ALL {
            let ns: Vec<f64> =
                sizes.iter().map(|&n| measure(n, l.min(RECORD / LINE), layout, shuffled, (warm_up, ticks))).collect();
            let cells: Vec<String> = ns.iter().map(|v| format!("{v:.0}")).collect();
            let over: Vec<String> = ns.iter().skip(1).map(|v| format!("{:+.0}", v - ns[0])).collect();
            println!("| {l} | {} | {} | {} |", layout.name(), cells.join(" | "), over.join(" | "));
        }
    }
}
