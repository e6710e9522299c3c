//! Which queued datagrams go out together: in one GSO send (a run of equal-size datagrams
//! to one destination), or in one `sendmmsg` (datagrams that form no such run).

use std::collections::VecDeque;

use porous_proto::Transmit;

/// The largest GSO send, in payload bytes: under the 65,507 bytes an IPv4 UDP datagram
/// can carry (the kernel checks the whole batch against it), with room to spare.
pub(crate) const MAX_GSO_BYTES: usize = 64_000;

/// How many datagrams from the front of `queue` one GSO send takes: the front one, and then
/// the following ones while they go to the same destination, have the front one's size
/// (the last may be shorter, and ends the run), and fit `max_segments` and
/// [`MAX_GSO_BYTES`]. 0 for an empty queue.
pub(crate) fn run_length(queue: &VecDeque<Transmit>, max_segments: usize) -> usize {
    run_at(queue, 0, max_segments)
}

/// [`run_length`] for the datagrams from `start` on.
fn run_at(queue: &VecDeque<Transmit>, start: usize, max_segments: usize) -> usize {
    let Some(first) = queue.get(start) else { return 0 };
    let segment = first.payload.len();
    if segment == 0 || segment > usize::from(u16::MAX) {
        return 1;
    }
    let mut total = segment;
    let mut count = 1;
    for next in queue.iter().skip(start + 1) {
        let len = next.payload.len();
        if count >= max_segments || next.remote != first.remote || len == 0 || len > segment {
            break;
        }
        if total + len > MAX_GSO_BYTES {
            break;
        }
        total += len;
        count += 1;
        if len < segment {
            break;
        }
    }
    count
}

/// How many datagrams from the front of `queue` one `sendmmsg` takes: those, up to
/// `max_messages`, that would each go alone anyway (none starts a GSO run of two or more).
/// At least 1 for a non-empty queue whose front datagram goes alone; 0 when it starts a run.
pub(crate) fn lone_datagrams(queue: &VecDeque<Transmit>, max_segments: usize, max_messages: usize) -> usize {
    let mut count = 0;
    while count < max_messages.min(queue.len()) && run_at(queue, count, max_segments) == 1 {
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use bytes::Bytes;

    use super::*;

    fn queue(items: &[(u16, usize)]) -> VecDeque<Transmit> {
        items
            .iter()
            .map(|&(port, len)| Transmit::new(SocketAddr::from(([127, 0, 0, 1], port)), Bytes::from(vec![0; len])))
            .collect()
    }

    #[test]
    fn equal_sizes_to_one_destination_make_one_run() {
        assert_eq!(run_length(&queue(&[(1, 100); 10]), 64), 10);
        assert_eq!(run_length(&queue(&[]), 64), 0);
        assert_eq!(run_length(&queue(&[(1, 100)]), 64), 1);
    }

    #[test]
    fn a_shorter_datagram_ends_the_run_inside_it() {
        assert_eq!(run_length(&queue(&[(1, 100), (1, 100), (1, 40), (1, 40)]), 64), 3);
    }

    #[test]
    fn a_longer_datagram_or_another_destination_ends_the_run_before_it() {
        assert_eq!(run_length(&queue(&[(1, 100), (1, 100), (1, 101)]), 64), 2);
        assert_eq!(run_length(&queue(&[(1, 100), (2, 100), (1, 100)]), 64), 1);
        assert_eq!(run_length(&queue(&[(1, 100), (1, 0)]), 64), 1);
    }

    #[test]
    fn lone_datagrams_are_those_that_start_no_run() {
        // Alternating destinations: nothing to coalesce, all go in one sendmmsg.
        let q = queue(&[(1, 100), (2, 100), (1, 100), (2, 100)]);
        assert_eq!(lone_datagrams(&q, 64, 32), 4);
        assert_eq!(lone_datagrams(&q, 64, 3), 3);
        // A run starts at the third: the first two go together, then the run by GSO.
        let q = queue(&[(1, 100), (2, 50), (3, 70), (3, 70), (3, 70)]);
        assert_eq!(lone_datagrams(&q, 64, 32), 2);
        assert_eq!(lone_datagrams(&q, 1, 32), 5, "without GSO every datagram goes alone");
        assert_eq!(lone_datagrams(&queue(&[(1, 100), (1, 100)]), 64, 32), 0);
        assert_eq!(lone_datagrams(&queue(&[]), 64, 32), 0);
    }

    #[test]
    fn runs_respect_the_segment_and_byte_limits() {
        assert_eq!(run_length(&queue(&[(1, 100); 100]), 64), 64);
        assert_eq!(run_length(&queue(&[(1, 100); 100]), 1), 1);
        // 1,200-byte datagrams: 53 fit in 64,000 bytes.
        assert_eq!(run_length(&queue(&[(1, 1200); 100]), 64), MAX_GSO_BYTES / 1200);
        // A datagram too large for a segment size goes alone.
        assert_eq!(run_length(&queue(&[(1, 65_536), (1, 65_536)]), 64), 1);
        assert_eq!(run_length(&queue(&[(1, 40_000), (1, 40_000)]), 64), 1);
    }
}
