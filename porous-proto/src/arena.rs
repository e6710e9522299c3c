//! The buffers datagrams are encoded into (sending) or copied into (receiving), handed
//! out as `Bytes` slices.
//!
//! Slices outlive the call that made them: a transmit waits for the caller to send it, a
//! received packet sits in an event until the application drops it. A buffer can only be
//! reused once all its slices are gone, so an arena keeps a few buffers and reclaims
//! whichever is free ([`BytesMut::try_reclaim`]); only when the caller still holds slices
//! of every one does it allocate a new buffer (the old one lives on in its slices). In a
//! loop that drains transmits and events, nothing is allocated in steady state.

use bytes::BytesMut;

/// Buffers an arena rotates through.
const BUFFERS: usize = 4;

/// Size of each buffer: about fifty full datagrams.
const SIZE: usize = 64 * 1024;

#[derive(Debug, Default)]
pub(crate) struct Arena {
    buffers: [BytesMut; BUFFERS],
    current: usize,
}

impl Arena {
    /// A buffer with room for `n` more bytes, empty before them: write, then split off
    /// what was written.
    pub(crate) fn room(&mut self, n: usize) -> &mut BytesMut {
        let spare = self.buffers.get(self.current).map_or(0, |b| b.capacity() - b.len());
        if spare < n {
            self.current = self.refill(n);
        }
        let [a, b, c, d] = &mut self.buffers;
        match self.current {
            0 => a,
            1 => b,
            2 => c,
            _ => d,
        }
    }

    /// The index of a buffer with room for `n` bytes: a free one reclaimed, or a new one.
    fn refill(&mut self, n: usize) -> usize {
        let want = SIZE.max(n);
        for k in 0..BUFFERS {
            let i = (self.current + k) % BUFFERS;
            if self.buffers.get_mut(i).is_some_and(|b| b.try_reclaim(want)) {
                return i;
            }
        }
        let i = (self.current + 1) % BUFFERS;
        if let Some(b) = self.buffers.get_mut(i) {
            *b = BytesMut::with_capacity(want);
        }
        i
    }

    /// Bytes the arena's buffers hold (those still shared with slices included).
    pub(crate) fn capacity(&self) -> usize {
        self.buffers.iter().map(BytesMut::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    /// Writes `count` slices of 1,000 bytes, returning where each landed; keeps them in
    /// `keep`, or drops each at once.
    fn write(arena: &mut Arena, count: usize, mut keep: Option<&mut Vec<bytes::Bytes>>) -> Vec<usize> {
        (0..count)
            .map(|_| {
                let b = arena.room(1000);
                b.extend_from_slice(&[7; 1000]);
                let slice = b.split().freeze();
                let at = slice.as_ptr() as usize;
                if let Some(k) = keep.as_mut() {
                    k.push(slice);
                }
                at
            })
            .collect()
    }

    #[test]
    fn buffers_are_reused_once_their_slices_are_dropped() {
        let mut arena = Arena::default();
        let mut held = Vec::new();
        // Fill all four buffers while holding every slice: each is a new allocation.
        let first = write(&mut arena, 4 * (SIZE / 1000), Some(&mut held));
        // Consecutive slices of one buffer lie 1,000 bytes apart: that gives the regions.
        let mut regions: Vec<(usize, usize)> = Vec::new();
        for &at in &first {
            match regions.last_mut() {
                Some((_, end)) if *end == at => *end = at + 1000,
                _ => regions.push((at, at + 1000)),
            }
        }
        assert_eq!(regions.len(), 4, "four buffers filled");
        // With the slices dropped, the buffers are reclaimed, not replaced: every new
        // slice (dropped at once, as a host's caller does) lands in an old region.
        held.clear();
        for at in write(&mut arena, 8 * (SIZE / 1000), None) {
            assert!(regions.iter().any(|&(s, e)| (s..e).contains(&at)), "a new allocation");
        }
    }

    #[test]
    fn a_request_larger_than_a_buffer_gets_its_own() {
        let mut arena = Arena::default();
        let b = arena.room(3 * SIZE);
        assert!(b.capacity() >= 3 * SIZE);
        assert!(b.is_empty());
    }
}
