//! Every count the bridge keeps, readable from Python: tests and benchmarks assert on them.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Monotonic event counts, one atomic each (relaxed: they order nothing).
        #[derive(Default)]
        pub struct Counters {
            $($(#[doc = $doc])* pub $name: AtomicU64,)*
        }

        impl Counters {
            /// The counters' names, in the order `snapshot` reports them.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($name),)*];

            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name.load(Ordering::Relaxed)),)*]
            }

            pub fn reset(&self) {
                $(self.$name.store(0, Ordering::Relaxed);)*
            }
        }
    };
}

counters! {
    /// Coroutines handed to the bridge.
    spawned,
    /// Coroutines that finished, with a result or an exception.
    completed,
    /// Calls of the driver loop (each is one or more steps under one context entry).
    drives,
    /// Values sent (or exceptions thrown) into coroutines.
    steps,
    /// Times a thread took the GIL to work on a coroutine: a tokio thread attaching, or the loop
    /// thread entering one of the bridge's callbacks.
    gil_acquisitions,
    /// Drives a tokio thread could not do itself and handed to the loop thread.
    handoffs,
    /// Signals sent to wake the loop thread (coalesced: one per wake, not per reason).
    wakes,
    /// `RuntimeError: Cannot enter into task` seen by the driver. Must stay zero.
    collisions,
    /// Coroutines that finished on their first drive, never suspending.
    inline_completions,
    /// Already-done asyncio futures continued without suspending.
    future_fast_path,
    /// Coroutines resumed inside an asyncio future's done callback on the loop thread.
    resumes_inline,
    /// Resumes queued instead of driven because a tokio thread was driving at the time.
    deferred_resumes,
    /// Drives that used their whole step budget and were rescheduled.
    budget_exhaustions,
    /// `DriverTask`s built; every other coroutine's task was a finished one reused.
    tasks_made,
    /// App-made tasks whose first drive followed the drive that made them, not a loop callback.
    first_drives_after,
}

#[inline]
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_every_counter_in_order_and_reset_zeroes_them() {
        let counters = Counters::default();
        bump(&counters.drives);
        bump(&counters.drives);
        bump(&counters.collisions);
        let snapshot = counters.snapshot();
        let names: Vec<_> = snapshot.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, Counters::NAMES);
        assert!(snapshot.contains(&("drives", 2)));
        assert!(snapshot.contains(&("collisions", 1)));
        counters.reset();
        assert!(counters.snapshot().iter().all(|(_, value)| *value == 0));
    }
}
