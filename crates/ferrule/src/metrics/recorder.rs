//! `WorkerMetrics`: what one worker's server writes into its slot. Requests and connections are
//! counted as they happen (relaxed atomic adds); the bridge's own counters, its GIL-wait trace
//! and the WebSocket gauge are copied in by `publish`, which the server calls twice a second
//! and once more as it stops, so the hot path gains nothing for them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::bridge::{trace, Shared};

use super::layout::{
    observe, Protocol, ACCESS_DROPPED, BRIDGE, CONNECTIONS, DURATION, DURATION_BOUNDS_NS,
    DURATION_WORDS, GIL_WAIT, GIL_WAIT_BOUNDS_NS, GIL_WAIT_WORDS, PID, REQUESTS, STATUS_CLASSES,
    WEBSOCKETS,
};
use super::region::Region;

/// One worker's slot of a region.
pub struct WorkerMetrics {
    region: Arc<Region>,
    slot: usize,
}

impl WorkerMetrics {
    /// Takes slot `slot` of `region` for this process (its pid marks the slot attached).
    pub fn new(region: Arc<Region>, slot: usize) -> Option<Self> {
        if slot >= region.slots() {
            return None;
        }
        let metrics = Self { region, slot };
        metrics.words()[PID].store(u64::from(std::process::id()), Ordering::Relaxed);
        Some(metrics)
    }

    #[inline]
    fn words(&self) -> &[AtomicU64] {
        self.region.slot(self.slot)
    }

    /// A request answered with `status`, `nanos` after its head was read (None: not timed,
    /// as a WebSocket session is not).
    #[inline]
    pub fn record_request(&self, protocol: Protocol, status: u16, nanos: Option<u64>) {
        let class = (status / 100) as usize;
        if !(1..=STATUS_CLASSES.len()).contains(&class) {
            return;
        }
        let words = self.words();
        let index = REQUESTS + protocol as usize * STATUS_CLASSES.len() + class - 1;
        words[index].fetch_add(1, Ordering::Relaxed);
        if let (Some(nanos), Protocol::Http1 | Protocol::H2 | Protocol::H3) = (nanos, protocol) {
            let base = DURATION + protocol as usize * DURATION_WORDS;
            observe(words, base, &DURATION_BOUNDS_NS, nanos);
        }
    }

    pub fn connection_opened(&self) {
        self.words()[CONNECTIONS].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self) {
        self.words()[CONNECTIONS].fetch_sub(1, Ordering::Relaxed);
    }

    /// Copies the bridge's counters and GIL-wait histograms, the WebSocket sessions open and
    /// the access lines dropped so far, into the slot.
    pub fn publish(&self, bridge: &Shared, websockets: usize, access_dropped: u64) {
        let words = self.words();
        words[ACCESS_DROPPED].store(access_dropped, Ordering::Relaxed);
        for (i, (_, value)) in bridge.counters.snapshot().into_iter().enumerate() {
            words[BRIDGE + i].store(value, Ordering::Relaxed);
        }
        let phases = [&bridge.trace.gil_wait, &bridge.trace.resume_wait];
        for (phase, histogram) in phases.into_iter().enumerate() {
            let base = GIL_WAIT + phase * GIL_WAIT_WORDS;
            let mut coarse = [0u64; GIL_WAIT_BOUNDS_NS.len() + 1];
            for (index, count) in histogram.snapshot().into_iter().enumerate() {
                let upper = trace::bucket_upper_bound(index);
                let bucket = GIL_WAIT_BOUNDS_NS
                    .iter()
                    .position(|&bound| upper < bound)
                    .unwrap_or(GIL_WAIT_BOUNDS_NS.len());
                coarse[bucket] += count;
            }
            for (i, count) in coarse.iter().enumerate() {
                words[base + i].store(*count, Ordering::Relaxed);
            }
            words[base + coarse.len()].store(histogram.sum_nanos(), Ordering::Relaxed);
            words[base + coarse.len() + 1].store(coarse.iter().sum(), Ordering::Relaxed);
        }
        words[WEBSOCKETS].store(websockets as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::region::tests::region;

    #[test]
    fn requests_count_by_protocol_and_status_class_and_only_http_is_timed() {
        let region = Arc::new(region(1));
        let slot = region.claim().unwrap();
        let metrics = WorkerMetrics::new(region.clone(), slot).unwrap();
        assert!(WorkerMetrics::new(region.clone(), 1).is_none());
        metrics.record_request(Protocol::H2, 204, Some(1_000));
        metrics.record_request(Protocol::Http1, 503, Some(20_000_000_000));
        metrics.record_request(Protocol::Ws, 101, Some(5));
        metrics.record_request(Protocol::Http1, 0, Some(5));
        let totals = region.totals();
        let words = &totals.words;
        assert_eq!(totals.pids, vec![std::process::id()]);
        assert_eq!(words[REQUESTS + 5 + 1], 1, "h2 2xx");
        assert_eq!(words[REQUESTS + 4], 1, "http/1.1 5xx");
        assert_eq!(words[REQUESTS + 10], 1, "ws 1xx");
        assert_eq!(words[REQUESTS..REQUESTS + 15].iter().sum::<u64>(), 3);
        let count = |protocol: usize| words[DURATION + (protocol + 1) * DURATION_WORDS - 1];
        assert_eq!((count(0), count(1)), (1, 1));
    }
}
