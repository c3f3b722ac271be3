//! `RawHead`: one request head as the client sent it, for the scope's headers in its order.

use std::ops::Range;

/// One request head: header lines in the client's order, names lowercased.
pub struct RawHead {
    pub(crate) bytes: Vec<u8>,
    pub(crate) fields: Vec<(Range<usize>, Range<usize>)>,
    /// Framing two parsers could read differently: the request gets 400 and the connection
    /// closes before anything reads its body.
    pub ambiguous: bool,
}

impl RawHead {
    pub fn headers(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(name, value)| (&self.bytes[name.clone()], &self.bytes[value.clone()]))
    }
}
