//! `AccessRoute`: which way a server's access lines go, switched by Python while it serves.
//! Written here (the fast path) only while the access logger is exactly as ferrule set it up;
//! through Python's `logging` the moment anything else may read the records.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crate::logs::LineWriter;

/// Where access lines go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessPath {
    /// Nowhere: the logger does not take INFO.
    Off = 0,
    /// Through the `ferrule.access` logger, on the loop's thread.
    Logging = 1,
    /// Formatted here, written by the process's `LineWriter`.
    Fast = 2,
}

impl AccessPath {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "off" => Some(Self::Off),
            "logging" => Some(Self::Logging),
            "fast" => Some(Self::Fast),
            _ => None,
        }
    }
}

/// What the fast path needs beside the line's fields: where to write, in which colours, and
/// the reason phrases Python's `http.HTTPStatus` has (they differ between Python versions, and
/// the line must be the one the logging path writes).
pub struct FastAccess {
    pub writer: Arc<LineWriter>,
    pub colours: bool,
    /// Indexed by status code; empty where `HTTPStatus` has none.
    phrases: Vec<Box<str>>,
}

impl FastAccess {
    pub fn new(writer: Arc<LineWriter>, colours: bool, phrases: Vec<(u16, String)>) -> Self {
        let mut table = vec![Box::<str>::default(); 600];
        for (status, phrase) in phrases {
            if let Some(slot) = table.get_mut(usize::from(status)) {
                *slot = phrase.into();
            }
        }
        Self {
            writer,
            colours,
            phrases: table,
        }
    }

    /// `status`'s reason phrase, if it has one.
    pub fn phrase(&self, status: u16) -> Option<&str> {
        self.phrases
            .get(usize::from(status))
            .map(|phrase| &**phrase)
            .filter(|phrase| !phrase.is_empty())
    }
}

/// A server's current access path, and the fast path's writer once Python has given one.
pub struct AccessRoute {
    path: AtomicU8,
    fast: OnceLock<FastAccess>,
    /// Whether records on the logging path carry the line's fields as attributes.
    fields: AtomicBool,
}

impl AccessRoute {
    /// Starts on `path` (`Logging` or `Off`: the fast path needs its writer first).
    pub fn new(path: AccessPath) -> Self {
        Self {
            path: AtomicU8::new(path as u8),
            fast: OnceLock::new(),
            fields: AtomicBool::new(true),
        }
    }

    /// Sets the writer and style of the fast path; the first call wins.
    pub fn set_fast(&self, fast: FastAccess) {
        let _ = self.fast.set(fast);
    }

    /// Switches to `path`; the fast path only once it has a writer. Whether it switched.
    pub fn switch(&self, path: AccessPath) -> bool {
        if path == AccessPath::Fast && self.fast.get().is_none() {
            return false;
        }
        self.path.store(path as u8, Ordering::Relaxed);
        true
    }

    pub fn set_fields(&self, fields: bool) {
        self.fields.store(fields, Ordering::Relaxed);
    }

    pub fn fields(&self) -> bool {
        self.fields.load(Ordering::Relaxed)
    }

    pub fn path(&self) -> AccessPath {
        match self.path.load(Ordering::Relaxed) {
            0 => AccessPath::Off,
            2 => AccessPath::Fast,
            _ => AccessPath::Logging,
        }
    }

    /// Lines the fast path's writer dropped so far (its process's, shared by its servers).
    pub fn dropped(&self) -> u64 {
        self.fast.get().map_or(0, |fast| fast.writer.dropped())
    }

    /// The fast path's writer and style, once given (`switch` takes the fast path only then).
    pub fn fast(&self) -> Option<&FastAccess> {
        self.fast.get()
    }
}
