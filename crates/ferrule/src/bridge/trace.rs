//! The opt-in per-request trace: latency histograms of the waits the GIL relay causes.
//!
//! - `gil_wait`: a tokio thread asking for the GIL to start a request until it has it; in
//!   loop-only mode, a request's start queued for the loop thread until it runs there.
//! - `first_drive`: the request handed to ferrule by hyper (head parsed) until the app
//!   coroutine's first step starts; includes `gil_wait`, building the scope and calling the app.
//! - `resume_wait`: a suspended coroutine becoming resumable (a native future resolved, a drive
//!   queued for the loop thread, a step rescheduled with `call_soon`) until its next step starts.
//!   An asyncio future's done callback resumes the coroutine in the same call, so it adds nothing.
//!
//! Off unless the bridge is made with `trace=True`: then each event costs a clock read and an
//! atomic add. Histograms are cumulative; readers diff two snapshots.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Buckets per doubling: each bucket spans 1/8 of its power of two (at most 12.5% wide).
const SUB_BUCKETS: u64 = 8;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Everything under 2^MIN_EXP ns (256 ns) shares bucket 0.
const MIN_EXP: u32 = 8;
/// Doublings covered: 256 ns up to 2^(8+27) ns, about 34 s; longer waits land in the last bucket.
const DOUBLINGS: u32 = 27;
pub const BUCKETS: usize = 1 + (DOUBLINGS as usize) * (SUB_BUCKETS as usize);

/// The instant all marks count from, so a mark fits in an `AtomicU64` (0 means no mark).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since `epoch()`, never 0.
pub fn now_mark() -> u64 {
    (epoch().elapsed().as_nanos() as u64).max(1)
}

fn bucket_of(nanos: u64) -> usize {
    if nanos < 1 << MIN_EXP {
        return 0;
    }
    let exp = 63 - nanos.leading_zeros();
    if exp >= MIN_EXP + DOUBLINGS {
        return BUCKETS - 1;
    }
    let sub = (nanos >> (exp - SUB_BITS)) & (SUB_BUCKETS - 1);
    1 + ((exp - MIN_EXP) as usize) * SUB_BUCKETS as usize + sub as usize
}

/// The largest wait, in nanoseconds, that bucket `index` holds.
pub fn bucket_upper_bound(index: usize) -> u64 {
    if index == 0 {
        return (1 << MIN_EXP) - 1;
    }
    let exp = MIN_EXP + ((index - 1) as u64 / SUB_BUCKETS) as u32;
    let sub = (index - 1) as u64 % SUB_BUCKETS;
    ((SUB_BUCKETS + sub + 1) << (exp - SUB_BITS)) - 1
}

/// Every bucket's upper bound, in bucket order: what readers of a snapshot need to read it.
pub fn bucket_upper_bounds() -> Vec<u64> {
    (0..BUCKETS).map(bucket_upper_bound).collect()
}

/// Counts of waits by log-spaced bucket, and their sum (what a Prometheus histogram reports).
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_nanos: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_nanos: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    pub fn record_nanos(&self, nanos: u64) {
        self.buckets[bucket_of(nanos)].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Every wait recorded, added up, in nanoseconds.
    pub fn sum_nanos(&self) -> u64 {
        self.sum_nanos.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|bucket| bucket.load(Ordering::Relaxed))
            .collect()
    }
}

/// The bridge's trace: off, or three histograms.
#[derive(Default)]
pub struct Trace {
    enabled: bool,
    pub gil_wait: Histogram,
    pub first_drive: Histogram,
    pub resume_wait: Histogram,
}

impl Trace {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A mark to record against later, or 0 (no mark) when tracing is off.
    pub fn mark(&self) -> u64 {
        if self.enabled {
            now_mark()
        } else {
            0
        }
    }

    /// Records the time since `mark` into `histogram`, unless `mark` is 0.
    pub fn record_since(&self, histogram: &Histogram, mark: u64) {
        if mark != 0 {
            histogram.record_nanos(now_mark().saturating_sub(mark));
        }
    }

    /// `(name, bucket counts)` for each histogram.
    pub fn snapshot(&self) -> [(&'static str, Vec<u64>); 3] {
        [
            ("gil_wait", self.gil_wait.snapshot()),
            ("first_drive", self.first_drive.snapshot()),
            ("resume_wait", self.resume_wait.snapshot()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wait_lands_in_the_bucket_whose_bounds_hold_it() {
        let mut previous_upper = None;
        for index in 0..BUCKETS {
            let upper = bucket_upper_bound(index);
            assert_eq!(bucket_of(upper), index, "upper bound of bucket {index}");
            if let Some(previous) = previous_upper {
                assert!(upper > previous);
                assert_eq!(
                    bucket_of(previous + 1),
                    index,
                    "lower bound of bucket {index}"
                );
            }
            previous_upper = Some(upper);
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        // At most 12.5% wide from 256 ns up.
        for index in 2..BUCKETS - 1 {
            let lower = bucket_upper_bound(index - 1) + 1;
            let upper = bucket_upper_bound(index);
            assert!(
                (upper - lower + 1) * 8 <= lower,
                "bucket {index}: {lower}..={upper}"
            );
        }
    }

    #[test]
    fn a_disabled_trace_makes_no_marks_and_records_nothing() {
        let trace = Trace::new(false);
        let mark = trace.mark();
        assert_eq!(mark, 0);
        trace.record_since(&trace.first_drive, mark);
        assert!(trace.first_drive.snapshot().iter().all(|&n| n == 0));
        let trace = Trace::new(true);
        let mark = trace.mark();
        assert_ne!(mark, 0);
        trace.record_since(&trace.first_drive, mark);
        assert_eq!(trace.first_drive.snapshot().iter().sum::<u64>(), 1);
    }
}
