//! `Coding`: the content codings the server compresses with, and `Compression`, one at a level.

use http::HeaderValue;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Coding {
    Zstd,
    Br,
    Gzip,
}

impl Coding {
    pub const ALL: [Coding; 3] = [Coding::Zstd, Coding::Br, Coding::Gzip];

    /// Its name in `Accept-Encoding`, `Content-Encoding` and `--compress`.
    pub fn name(self) -> &'static str {
        match self {
            Coding::Zstd => "zstd",
            Coding::Br => "br",
            Coding::Gzip => "gzip",
        }
    }

    pub fn from_name(name: &str) -> Option<Coding> {
        Coding::ALL.into_iter().find(|coding| coding.name() == name)
    }

    /// The levels taken, lowest and highest, and the one used when none is given: zstd's own
    /// default, and up to 19 (its levels 20-22 want windows past the 8 MiB that HTTP's zstd
    /// coding allows); brotli's 4, where servers compressing on the fly settle (its 11 is for
    /// files compressed once); gzip's 6, zlib's default.
    pub fn levels(self) -> (u32, u32, u32) {
        match self {
            Coding::Zstd => (1, 19, 3),
            Coding::Br => (0, 11, 4),
            Coding::Gzip => (1, 9, 6),
        }
    }

    /// The suffix of a file precompressed with it, beside the original (`app.css.br`).
    pub fn file_suffix(self) -> &'static str {
        match self {
            Coding::Zstd => ".zst",
            Coding::Br => ".br",
            Coding::Gzip => ".gz",
        }
    }

    pub fn header_value(self) -> HeaderValue {
        HeaderValue::from_static(self.name())
    }
}

/// A coding at a level (checked against `Coding::levels` when the settings are read).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Compression {
    pub coding: Coding,
    pub level: u32,
}
