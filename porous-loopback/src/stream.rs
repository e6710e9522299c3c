//! Packets that name and check themselves, and the record of one stream of them: what
//! was sent and refused, what arrived, in which order, intact or not, and how late.

use std::time::Duration;

use bytes::Bytes;
use porous_proto::SendMode;

/// The bytes of a packet before its pattern: sequence number, send time, length.
pub const HEADER: usize = 20;

/// A packet that names itself: its sequence number, when it was sent (from the run's
/// epoch), its length, then a pattern that depends on both, up to `len` bytes (at least
/// [`HEADER`]).
pub fn packet(seq: u64, sent: Duration, len: usize) -> Bytes {
    let len = len.max(HEADER);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&(sent.as_nanos() as u64).to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    v.extend((HEADER..len).map(|i| (seq as usize ^ i) as u8));
    Bytes::from(v)
}

/// Checks a packet; returns its sequence number and send time, `None` if it is not one
/// [`packet`] made (truncated, altered, or another length than it says).
pub fn unpack(data: &[u8]) -> Option<(u64, Duration)> {
    let word = |i: usize| data.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let (seq, sent) = (word(0)?, word(8)?);
    let len = u32::from_le_bytes(data.get(16..20)?.try_into().ok()?) as usize;
    let ok = len == data.len() && data.iter().enumerate().skip(HEADER).all(|(i, &b)| b == (seq as usize ^ i) as u8);
    ok.then(|| (seq, Duration::from_nanos(sent)))
}

/// One stream: the packets of one mode one way on one channel.
#[derive(Clone, Debug)]
pub struct Stream {
    /// How its packets are sent.
    pub mode: SendMode,
    /// Packets sent (taken by the host).
    pub sent: u64,
    /// Sends the host refused (its queue was full: the link is slower than the traffic).
    pub refused: u64,
    /// Packets delivered.
    pub delivered: u64,
    /// Delivered with a sequence number not above the last one: duplicated or reordered.
    pub out_of_order: u64,
    /// Delivered, but not as sent.
    pub corrupted: u64,
    /// Highest sequence number delivered.
    pub last: Option<u64>,
    /// Per sequence number sent, whether it was delivered.
    pub seen: Vec<bool>,
    /// Each delivery's latency from `send` to delivery, ms, in delivery order.
    pub latencies: Vec<f64>,
    /// When each delivered packet was sent, s from the run's epoch, beside `latencies`.
    pub sent_at: Vec<f64>,
}

impl Stream {
    /// A stream of `mode` packets, nothing sent yet.
    pub fn new(mode: SendMode) -> Self {
        Self {
            mode,
            sent: 0,
            refused: 0,
            delivered: 0,
            out_of_order: 0,
            corrupted: 0,
            last: None,
            seen: Vec::new(),
            latencies: Vec::new(),
            sent_at: Vec::new(),
        }
    }

    /// The next packet to send, `len` bytes, sent `at` (from the run's epoch).
    pub fn next_packet(&self, at: Duration, len: usize) -> Bytes {
        packet(self.sent, at, len)
    }

    /// The host took the packet [`Stream::next_packet`] made.
    pub fn on_sent(&mut self) {
        self.sent += 1;
        self.seen.push(false);
    }

    /// A packet arrived `now` (from the run's epoch).
    pub fn receive(&mut self, data: &[u8], now: Duration) {
        let Some((seq, sent)) = unpack(data) else {
            self.corrupted += 1;
            return;
        };
        if self.last.is_some_and(|l| seq <= l) {
            self.out_of_order += 1;
        }
        self.last = self.last.max(Some(seq));
        self.delivered += 1;
        if let Some(s) = self.seen.get_mut(seq as usize) {
            *s = true;
        }
        self.latencies.push((now.saturating_sub(sent)).as_secs_f64() * 1000.0);
        self.sent_at.push(sent.as_secs_f64());
    }

    /// Each delivery: when the packet was sent (s from the run's epoch) and its latency
    /// (ms), in delivery order.
    pub fn points(&self) -> Vec<(f64, f64)> {
        self.sent_at.iter().copied().zip(self.latencies.iter().copied()).collect()
    }

    /// Packets never delivered.
    pub fn undelivered(&self) -> u64 {
        self.seen.iter().filter(|s| !**s).count() as u64
    }

    /// Packets never delivered although a later one was: for reliable packets, a broken
    /// guarantee; for the others, what they may do.
    pub fn gaps(&self) -> u64 {
        let Some(last) = self.last else { return 0 };
        self.seen.iter().take(last as usize).filter(|s| !**s).count() as u64
    }

    /// Reliable packets never delivered (gaps and tail).
    pub fn missing(&self) -> u64 {
        if self.mode == SendMode::Reliable { self.undelivered() } else { 0 }
    }

    /// Unreliable and passive packets never delivered (sent and lost, overtaken, or never
    /// sent), as allowed.
    pub fn undelivered_allowed(&self) -> u64 {
        if self.mode == SendMode::Reliable { 0 } else { self.undelivered() }
    }

    /// Whether every guarantee of its mode held: nothing corrupted, duplicated or
    /// reordered, and for reliable packets nothing skipped.
    pub fn held(&self) -> bool {
        self.corrupted == 0 && self.out_of_order == 0 && (self.mode != SendMode::Reliable || self.gaps() == 0)
    }

    /// The latencies, sorted.
    pub fn sorted_latencies(&self) -> Vec<f64> {
        let mut l = self.latencies.clone();
        l.sort_by(f64::total_cmp);
        l
    }

    /// The `q` quantile of the latencies (nearest rank below), ms.
    pub fn percentile(&self, q: f64) -> Option<f64> {
        let l = self.sorted_latencies();
        (!l.is_empty()).then(|| percentile(&l, q))
    }
}

/// The `q` quantile of sorted values, nearest rank below; `NaN` if there are none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[((n - 1) as f64 * q) as usize],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_checks_itself() {
        let p = packet(7, Duration::from_millis(3), 40);
        assert_eq!(p.len(), 40);
        assert_eq!(unpack(&p), Some((7, Duration::from_millis(3))));
        let mut bad = p.to_vec();
        bad[30] ^= 1;
        assert_eq!(unpack(&bad), None, "altered");
        assert_eq!(unpack(&p[..39]), None, "truncated");
        assert_eq!(packet(1, Duration::ZERO, 5).len(), HEADER, "a packet holds its header");
    }

    #[test]
    fn a_stream_counts_deliveries_gaps_and_disorder() {
        let mut s = Stream::new(SendMode::Reliable);
        for _ in 0..4 {
            s.on_sent();
        }
        for seq in [0, 2, 1] {
            s.receive(&packet(seq, Duration::ZERO, 30), Duration::from_millis(5));
        }
        assert_eq!((s.delivered, s.out_of_order, s.gaps(), s.missing()), (3, 1, 0, 1));
        assert!(!s.held(), "reordered");
        s.receive(b"garbage", Duration::ZERO);
        assert_eq!(s.corrupted, 1);
        assert_eq!(s.percentile(0.5), Some(5.0));
    }
}
