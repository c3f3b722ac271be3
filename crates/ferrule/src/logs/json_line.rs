//! `JsonLine`: one log line as a JSON object (JSON Lines), written straight into a buffer: the
//! time, level and logger first, then the fields in the order given.

use std::io::Write;

/// A JSON object being written into `buf`; `end` closes it and the line.
pub struct JsonLine<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> JsonLine<'a> {
    /// Opens the object with `"time"` (now, UTC, ISO 8601 to the millisecond, as Python's
    /// `datetime.isoformat(timespec="milliseconds")` writes it), `"level"` and `"logger"`.
    pub fn start(buf: &'a mut Vec<u8>, level: &str, logger: &str) -> Self {
        let now = chrono::Utc::now();
        let _ = write!(
            buf,
            "{{\"time\":\"{}\"",
            now.format("%Y-%m-%dT%H:%M:%S%.3f+00:00")
        );
        let mut line = Self { buf };
        line.string("level", level);
        line.string("logger", logger);
        line
    }

    fn key(&mut self, key: &str) {
        self.buf.push(b',');
        self.quoted(key);
        self.buf.push(b':');
    }

    fn quoted(&mut self, text: &str) {
        // Escaping is serde_json's: control characters, quotes, backslashes.
        let _ = serde_json::to_writer(&mut *self.buf, text);
    }

    pub fn string(&mut self, key: &str, value: &str) {
        self.key(key);
        self.quoted(value);
    }

    /// A string, or `null` for none.
    pub fn optional(&mut self, key: &str, value: Option<&str>) {
        self.key(key);
        match value {
            Some(value) => self.quoted(value),
            None => self.buf.extend_from_slice(b"null"),
        }
    }

    pub fn number(&mut self, key: &str, value: u64) {
        self.key(key);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    /// Seconds, to the microsecond.
    pub fn seconds(&mut self, key: &str, value: f64) {
        self.key(key);
        let _ = write!(self.buf, "{value:.6}");
    }

    /// An object of strings (or `null`s), in the order given.
    pub fn object<'v>(
        &mut self,
        key: &str,
        fields: impl Iterator<Item = (&'v str, Option<&'v str>)>,
    ) {
        self.key(key);
        self.buf.push(b'{');
        for (i, (name, value)) in fields.enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            self.quoted(name);
            self.buf.push(b':');
            match value {
                Some(value) => self.quoted(value),
                None => self.buf.extend_from_slice(b"null"),
            }
        }
        self.buf.push(b'}');
    }

    /// Closes the object and ends the line.
    pub fn end(self) {
        self.buf.extend_from_slice(b"}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_object_that_serde_reads_back() {
        let mut buf = Vec::new();
        let mut line = JsonLine::start(&mut buf, "INFO", "uvicorn.access");
        line.string("path", "/a\"b\\c\n\u{1}é");
        line.optional("referer", None);
        line.number("status", 200);
        line.seconds("duration", 0.000_512_4);
        line.object("headers", [("x-id", Some("7")), ("x-no", None)].into_iter());
        line.end();
        assert_eq!(buf.iter().filter(|&&b| b == b'\n').count(), 1);
        let value: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(value["path"], "/a\"b\\c\n\u{1}é");
        assert_eq!(value["status"], 200);
        assert_eq!(value["duration"], 0.000512);
        assert!(value["referer"].is_null());
        assert_eq!(value["headers"]["x-id"], "7");
        assert!(value["time"].as_str().unwrap().ends_with("+00:00"));
    }
}
