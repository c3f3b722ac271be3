//! The layout of one worker's slot in the metrics region: every figure is one `u64` word at a
//! fixed offset, so processes built from the same wheel agree on it without a header.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bridge::Counters;

/// The `protocol` label of `ferrule_requests_total`, by `Protocol`.
pub const PROTOCOLS: [&str; 4] = ["http/1.1", "h2", "ws", "h3"];

/// What a request came over. HTTP/1.0 counts as `http/1.1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1 = 0,
    H2 = 1,
    Ws = 2,
    H3 = 3,
}

/// The `status` label, by the status code's first digit minus one.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Upper bounds of the request-duration buckets, in nanoseconds: 50 us to 10 s.
pub const DURATION_BOUNDS_NS: [u64; 17] = [
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Upper bounds of the GIL-wait buckets: powers of four nanoseconds, 256 ns to 2^34 ns (17 s).
/// Each is where one of the trace's finer buckets ends, so regrouping them is exact.
pub const GIL_WAIT_BOUNDS_NS: [u64; 14] = {
    let mut bounds = [0; 14];
    let mut i = 0;
    while i < bounds.len() {
        bounds[i] = 1 << (8 + 2 * i);
        i += 1;
    }
    bounds
};

/// The `phase` label of `ferrule_gil_wait_seconds`: a request's start waiting for the GIL,
/// a suspended coroutine waiting to be resumed.
pub const GIL_WAIT_PHASES: [&str; 2] = ["start", "resume"];

/// Words of a histogram: one per bucket, the last for everything past the bounds (`+Inf`),
/// then the sum of the values (ns) and their count.
pub const fn histogram_words(bounds: usize) -> usize {
    bounds + 3
}

/// The worker's pid, 0 until a worker attaches.
pub const PID: usize = 0;
/// `ferrule_requests_total`: one word per protocol and status class.
pub const REQUESTS: usize = 1;
/// `ferrule_request_duration_seconds`: one histogram each for HTTP/1.1 and HTTP/2.
pub const DURATION: usize = REQUESTS + PROTOCOLS.len() * STATUS_CLASSES.len();
pub const DURATION_WORDS: usize = histogram_words(DURATION_BOUNDS_NS.len());
/// `ferrule_gil_wait_seconds`: one histogram per phase, copied from the bridge's trace.
pub const GIL_WAIT: usize = DURATION + 2 * DURATION_WORDS;
pub const GIL_WAIT_WORDS: usize = histogram_words(GIL_WAIT_BOUNDS_NS.len());
/// The bridge's counters, copied, in `Counters::NAMES` order.
pub const BRIDGE: usize = GIL_WAIT + GIL_WAIT_PHASES.len() * GIL_WAIT_WORDS;
/// `ferrule_access_log_lines_dropped_total`: access lines dropped while stdout was not read.
pub const ACCESS_DROPPED: usize = BRIDGE + Counters::NAMES.len();
/// Gauges: connections open, WebSocket sessions whose app runs.
pub const CONNECTIONS: usize = ACCESS_DROPPED + 1;
pub const WEBSOCKETS: usize = CONNECTIONS + 1;

/// A slot's size: 1 KiB, so two workers never write the same cache line.
pub const SLOT_WORDS: usize = 128;
pub const SLOT_BYTES: usize = SLOT_WORDS * 8;
const _: () = assert!(WEBSOCKETS < SLOT_WORDS);

/// Whether word `index` of a slot only counts up: kept, when its worker is gone, in the
/// totals (the pid and the gauges are not).
pub fn is_counter(index: usize) -> bool {
    (REQUESTS..CONNECTIONS).contains(&index)
}

/// Adds one value to the histogram at `base` of `words`.
#[inline]
pub fn observe(words: &[AtomicU64], base: usize, bounds: &[u64], value: u64) {
    let bucket = bounds
        .iter()
        .position(|&bound| value <= bound)
        .unwrap_or(bounds.len());
    words[base + bucket].fetch_add(1, Ordering::Relaxed);
    words[base + bounds.len() + 1].fetch_add(value, Ordering::Relaxed);
    words[base + bounds.len() + 2].fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_lands_in_the_first_bucket_that_holds_it_and_in_sum_and_count() {
        let words: Vec<AtomicU64> = (0..DURATION_WORDS).map(|_| AtomicU64::new(0)).collect();
        observe(&words, 0, &DURATION_BOUNDS_NS, 50_000);
        observe(&words, 0, &DURATION_BOUNDS_NS, 50_001);
        observe(&words, 0, &DURATION_BOUNDS_NS, u64::MAX / 4);
        let read = |i: usize| words[i].load(Ordering::Relaxed);
        assert_eq!(read(0), 1);
        assert_eq!(read(1), 1);
        assert_eq!(read(DURATION_BOUNDS_NS.len()), 1, "+Inf");
        assert_eq!(read(DURATION_WORDS - 2), 100_001 + u64::MAX / 4, "sum");
        assert_eq!(read(DURATION_WORDS - 1), 3, "count");
    }

    #[test]
    fn gil_wait_bounds_are_where_trace_buckets_end() {
        let ends: Vec<u64> = crate::bridge::trace::bucket_upper_bounds()
            .into_iter()
            .map(|upper| upper + 1)
            .collect();
        for bound in GIL_WAIT_BOUNDS_NS {
            assert!(ends.contains(&bound), "{bound}");
        }
    }
}
