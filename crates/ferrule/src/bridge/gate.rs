//! `LoopGate`: whether a selector event loop's thread is blocked in `select`, the only time a
//! tokio thread may drive on 3.11-3.13 (see `selector`, which keeps it).

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Default)]
pub struct LoopGate {
    in_select: AtomicBool,
}

impl LoopGate {
    pub fn loop_in_select(&self) -> bool {
        self.in_select.load(Ordering::Acquire)
    }

    /// The loop thread is about to block in `select` (true) or is back from it (false).
    pub fn set_in_select(&self, in_select: bool) {
        self.in_select.store(in_select, Ordering::Release);
    }
}
