//! `Region`: the metrics slots every process maps, and the parent's bookkeeping over them.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::bridge::SharedWords;

use super::layout::{is_counter, PID, SLOT_BYTES, SLOT_WORDS};

/// One shared mapping of `slots` slots. The parent claims a slot for each worker it starts and
/// releases it once the worker has exited; a worker only writes its own slot.
pub struct Region {
    words: SharedWords,
    slots: usize,
    book: Mutex<Book>,
}

/// What only the process that hands out slots keeps.
struct Book {
    claimed: Vec<bool>,
    /// The counter words of every worker gone, added up: a replaced worker's requests stay in
    /// the totals, so counters never go down.
    retired: Vec<u64>,
}

/// The slots summed: every word (the pid's word stays 0), and the pids of the workers that
/// have attached to a claimed slot.
pub struct Totals {
    pub words: Vec<u64>,
    pub pids: Vec<u32>,
}

impl Region {
    /// Maps `file`, whose length is a whole number of slots.
    pub fn new(file: File) -> std::io::Result<Self> {
        let len = file.metadata()?.len() as usize;
        if len == 0 || len % SLOT_BYTES != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a metrics region is a multiple of {SLOT_BYTES} bytes, not {len}"),
            ));
        }
        let slots = len / SLOT_BYTES;
        Ok(Self {
            words: SharedWords::map(&file)?,
            slots,
            book: Mutex::new(Book {
                claimed: vec![false; slots],
                retired: vec![0; SLOT_WORDS],
            }),
        })
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slot `index`'s words.
    pub fn slot(&self, index: usize) -> &[AtomicU64] {
        &self.words.words()[index * SLOT_WORDS..(index + 1) * SLOT_WORDS]
    }

    /// A free slot, zeroed, for a worker about to start; None if all are taken.
    pub fn claim(&self) -> Option<usize> {
        let mut book = self.book.lock().unwrap();
        let index = book.claimed.iter().position(|claimed| !claimed)?;
        book.claimed[index] = true;
        for word in self.slot(index) {
            word.store(0, Ordering::Relaxed);
        }
        Some(index)
    }

    /// Frees the slot of a worker that has exited, keeping its counts in the totals.
    pub fn release(&self, index: usize) {
        let mut book = self.book.lock().unwrap();
        if !book.claimed.get(index).copied().unwrap_or(false) {
            return;
        }
        book.claimed[index] = false;
        for (i, word) in self.slot(index).iter().enumerate() {
            let value = word.swap(0, Ordering::Relaxed);
            if is_counter(i) {
                book.retired[i] = book.retired[i].wrapping_add(value);
            }
        }
    }

    /// Every claimed slot plus the retired counts, summed word by word.
    pub fn totals(&self) -> Totals {
        let book = self.book.lock().unwrap();
        let mut words = book.retired.clone();
        let mut pids = Vec::new();
        for index in (0..self.slots).filter(|&index| book.claimed[index]) {
            for (i, word) in self.slot(index).iter().enumerate() {
                let value = word.load(Ordering::Relaxed);
                if i == PID {
                    if value != 0 {
                        pids.push(value as u32);
                    }
                } else {
                    words[i] = words[i].wrapping_add(value);
                }
            }
        }
        Totals { words, pids }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::metrics::layout::{CONNECTIONS, REQUESTS};

    /// A region of `slots` slots in a fresh temporary file.
    pub fn region(slots: usize) -> Region {
        Region::new(tempfile_of(slots * SLOT_BYTES)).unwrap()
    }

    #[test]
    fn a_released_slots_counters_stay_in_the_totals_and_its_gauges_do_not() {
        let region = region(2);
        let first = region.claim().unwrap();
        let second = region.claim().unwrap();
        assert_eq!(region.claim(), None);
        region.slot(first)[REQUESTS].store(3, Ordering::Relaxed);
        region.slot(first)[CONNECTIONS].store(2, Ordering::Relaxed);
        region.slot(second)[REQUESTS].store(4, Ordering::Relaxed);
        region.slot(second)[PID].store(42, Ordering::Relaxed);
        assert_eq!(region.totals().words[REQUESTS], 7);
        assert_eq!(region.totals().words[CONNECTIONS], 2);
        assert_eq!(region.totals().pids, vec![42]);
        region.release(first);
        region.release(first);
        let totals = region.totals();
        assert_eq!(totals.words[REQUESTS], 7);
        assert_eq!(totals.words[CONNECTIONS], 0);
        let again = region.claim().unwrap();
        assert_eq!(again, first);
        assert_eq!(region.slot(again)[REQUESTS].load(Ordering::Relaxed), 0);
        assert_eq!(region.totals().words[REQUESTS], 7);
    }

    #[test]
    fn a_file_that_is_not_whole_slots_is_refused() {
        let file = tempfile_of(SLOT_BYTES + 8);
        assert!(Region::new(file).is_err());
        assert!(Region::new(tempfile_of(0)).is_err());
    }

    /// A file of `len` bytes, already unlinked (named by process, thread and length, so tests
    /// running at once never share one).
    fn tempfile_of(len: usize) -> File {
        let path = std::env::temp_dir().join(format!(
            "ferrule-metrics-test-{}-{:?}-{len}",
            std::process::id(),
            std::thread::current().id()
        ));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let _ = std::fs::remove_file(&path);
        file.set_len(len as u64).unwrap();
        file
    }
}
