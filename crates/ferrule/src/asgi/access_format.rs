//! `AccessFormat`: an `--access-log-format` string (gunicorn's atoms), parsed once into the
//! pieces each access line fills in.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use chrono::format::{Fixed, Item, Numeric, Pad};
use http::{HeaderMap, HeaderName, HeaderValue};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One `%(name)s` of the format.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Atom {
    /// `h`: the client's address (no port).
    Host,
    /// `l`: always `-` (no ident lookups).
    Logname,
    /// `u`: the user of a Basic `Authorization` header.
    User,
    /// `t`: when the request arrived, `[10/Oct/2000:13:55:36 -0700]`.
    Time,
    /// `r`: the request line, `GET /path?q HTTP/1.1`.
    RequestLine,
    /// `m`: the method.
    Method,
    /// `U`: the path without the query string, as the client sent it.
    Path,
    /// `q`: the query string.
    Query,
    /// `H`: the protocol, `HTTP/1.1`.
    Protocol,
    /// `s`: the status.
    Status,
    /// `b`: body bytes sent, `-` for none (the Common Log Format's way).
    BytesOrDash,
    /// `B`: body bytes sent.
    Bytes,
    /// `T`, `M`, `D`: the request's time in whole seconds, milliseconds, microseconds.
    Seconds,
    Millis,
    Micros,
    /// `L`: the request's time in seconds with six decimals.
    DecimalSeconds,
    /// `p`: the worker's process id, `<1234>`.
    Pid,
    /// `c`: a WebSocket session's close code (only on its closing line).
    CloseCode,
    /// `{name}i`, `f` (Referer), `a` (User-Agent): the index of a request header the format
    /// names, in `AccessFormat::request_headers`.
    RequestHeader(usize),
    /// `{name}o`: the index of a response header the format names.
    ResponseHeader(usize),
}

#[derive(Debug)]
enum Piece {
    Text(String),
    Atom(Atom),
}

/// A parsed `--access-log-format`: literal text and atoms, in order.
#[derive(Debug)]
pub struct AccessFormat {
    pieces: Vec<Piece>,
    /// The request headers the format names (lowercase), captured per request.
    pub request_headers: Vec<HeaderName>,
    /// The response headers the format names (lowercase), captured per response.
    pub response_headers: Vec<HeaderName>,
}

/// What one access line is made of; atoms whose value is missing print `-`.
pub struct AccessFields<'a> {
    /// The client's host and port (the forwarded one if a trusted proxy said so).
    pub client: Option<(&'a str, u16)>,
    pub method: &'a str,
    /// The request target, path and query, as the client sent it.
    pub target: &'a str,
    /// The HTTP version as `1.1`, `2`.
    pub version: &'a str,
    pub user: Option<&'a str>,
    pub received_at: SystemTime,
    pub elapsed: Duration,
    pub status: u16,
    pub body_bytes: u64,
    pub close_code: Option<u16>,
    /// Values of `AccessFormat::request_headers` and `response_headers`, index for index.
    pub request_headers: &'a [Option<HeaderValue>],
    pub response_headers: &'a [Option<HeaderValue>],
}

impl AccessFormat {
    /// Parses `format`: text, `%%` for a `%`, and `%(NAME)s` atoms. The error says what is
    /// wrong and where, for the usage error.
    pub fn parse(format: &str) -> Result<Self, String> {
        let mut parsed = Self {
            pieces: Vec::new(),
            request_headers: Vec::new(),
            response_headers: Vec::new(),
        };
        let mut text = String::new();
        let mut rest = format;
        while let Some(at) = rest.find('%') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('%') {
                text.push('%');
                rest = tail;
                continue;
            }
            let Some(inner) = after.strip_prefix('(') else {
                return Err(format!(
                    "a '%' must start an atom such as %(h)s, or be doubled (%%), at {:?}",
                    &rest[at..]
                ));
            };
            let close = inner
                .find(')')
                .filter(|&close| inner[close + 1..].starts_with('s'));
            let Some(close) = close else {
                return Err(format!(
                    "unterminated atom at {:?}: atoms are %(NAME)s",
                    &rest[at..]
                ));
            };
            let atom = parsed.atom(&inner[..close])?;
            if !text.is_empty() {
                parsed.pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            parsed.pieces.push(Piece::Atom(atom));
            rest = &inner[close + 2..];
        }
        text.push_str(rest);
        if !text.is_empty() {
            parsed.pieces.push(Piece::Text(text));
        }
        Ok(parsed)
    }

    fn atom(&mut self, name: &str) -> Result<Atom, String> {
        let atom = match name {
            "h" => Atom::Host,
            "l" => Atom::Logname,
            "u" => Atom::User,
            "t" => Atom::Time,
            "r" => Atom::RequestLine,
            "m" => Atom::Method,
            "U" => Atom::Path,
            "q" => Atom::Query,
            "H" => Atom::Protocol,
            "s" => Atom::Status,
            "b" => Atom::BytesOrDash,
            "B" => Atom::Bytes,
            "T" => Atom::Seconds,
            "M" => Atom::Millis,
            "D" => Atom::Micros,
            "L" => Atom::DecimalSeconds,
            "p" => Atom::Pid,
            "c" => Atom::CloseCode,
            "f" => Atom::RequestHeader(index_of(&mut self.request_headers, "referer")?),
            "a" => Atom::RequestHeader(index_of(&mut self.request_headers, "user-agent")?),
            _ => {
                let header = name
                    .strip_prefix('{')
                    .and_then(|header| header.rsplit_once('}'));
                match header {
                    Some((header, "i")) => {
                        Atom::RequestHeader(index_of(&mut self.request_headers, header)?)
                    }
                    Some((header, "o")) => {
                        Atom::ResponseHeader(index_of(&mut self.response_headers, header)?)
                    }
                    _ => return Err(format!("unknown atom %({name})s")),
                }
            }
        };
        Ok(atom)
    }

    /// Whether the format uses `%(u)s`, whose value is decoded from a request header.
    pub fn wants_user(&self) -> bool {
        self.pieces
            .iter()
            .any(|piece| matches!(piece, Piece::Atom(Atom::User)))
    }

    /// The values of `names` in `headers` (the first of each), or nothing when no name is
    /// asked for, without allocating.
    pub fn pick(names: &[HeaderName], headers: &HeaderMap) -> Vec<Option<HeaderValue>> {
        names
            .iter()
            .map(|name| headers.get(name).cloned())
            .collect()
    }

    /// The access line for `fields`.
    pub fn render(&self, fields: &AccessFields<'_>) -> String {
        let mut line = String::with_capacity(128);
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => line.push_str(text),
                Piece::Atom(atom) => render_atom(&mut line, *atom, fields),
            }
        }
        line
    }
}

/// `[10/Oct/2000:13:55:36 -0700]`: strftime's `[%d/%b/%Y:%H:%M:%S %z]`, spelled out so that
/// no line parses it again.
const CLF_TIME: [Item<'static>; 15] = [
    Item::Literal("["),
    Item::Numeric(Numeric::Day, Pad::Zero),
    Item::Literal("/"),
    Item::Fixed(Fixed::ShortMonthName),
    Item::Literal("/"),
    Item::Numeric(Numeric::Year, Pad::Zero),
    Item::Literal(":"),
    Item::Numeric(Numeric::Hour, Pad::Zero),
    Item::Literal(":"),
    Item::Numeric(Numeric::Minute, Pad::Zero),
    Item::Literal(":"),
    Item::Numeric(Numeric::Second, Pad::Zero),
    Item::Literal(" "),
    Item::Fixed(Fixed::TimezoneOffset),
    Item::Literal("]"),
];

/// Where `name` is in `names`, added if it is not there yet.
fn index_of(names: &mut Vec<HeaderName>, name: &str) -> Result<usize, String> {
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{name:?} is not a header name"))?;
    Ok(match names.iter().position(|known| *known == name) {
        Some(index) => index,
        None => {
            names.push(name);
            names.len() - 1
        }
    })
}

fn render_atom(line: &mut String, atom: Atom, fields: &AccessFields<'_>) {
    let (path, query) = match fields.target.split_once('?') {
        Some((path, query)) => (path, query),
        None => (fields.target, ""),
    };
    let micros = fields.elapsed.as_micros();
    // Writing to a String cannot fail.
    let _ = match atom {
        Atom::Host => write!(line, "{}", fields.client.map_or("-", |(host, _)| host)),
        Atom::Logname => write!(line, "-"),
        Atom::User => write!(line, "{}", fields.user.unwrap_or("-")),
        Atom::Time => {
            let local = local_time(fields.received_at);
            write!(line, "{}", local.format_with_items(CLF_TIME.iter()))
        }
        Atom::RequestLine => write!(
            line,
            "{} {} HTTP/{}",
            fields.method, fields.target, fields.version
        ),
        Atom::Method => write!(line, "{}", fields.method),
        Atom::Path => write!(line, "{path}"),
        Atom::Query => write!(line, "{query}"),
        Atom::Protocol => write!(line, "HTTP/{}", fields.version),
        Atom::Status => write!(line, "{}", fields.status),
        Atom::BytesOrDash if fields.body_bytes == 0 => write!(line, "-"),
        Atom::BytesOrDash | Atom::Bytes => write!(line, "{}", fields.body_bytes),
        Atom::Seconds => write!(line, "{}", fields.elapsed.as_secs()),
        Atom::Millis => write!(line, "{}", fields.elapsed.as_millis()),
        Atom::Micros => write!(line, "{micros}"),
        Atom::DecimalSeconds => write!(
            line,
            "{}.{:06}",
            fields.elapsed.as_secs(),
            fields.elapsed.subsec_micros()
        ),
        Atom::Pid => write!(line, "<{}>", std::process::id()),
        Atom::CloseCode => match fields.close_code {
            Some(code) => write!(line, "{code}"),
            None => write!(line, "-"),
        },
        Atom::RequestHeader(index) => write_header(line, fields.request_headers.get(index)),
        Atom::ResponseHeader(index) => write_header(line, fields.response_headers.get(index)),
    };
}

/// A header's value as text (bytes outside ASCII replaced), `-` when absent.
fn write_header(line: &mut String, value: Option<&Option<HeaderValue>>) -> std::fmt::Result {
    match value {
        Some(Some(value)) => {
            line.push_str(&String::from_utf8_lossy(value.as_bytes()));
            Ok(())
        }
        _ => write!(line, "-"),
    }
}

/// The user name of a Basic `Authorization` header (RFC 7617), as gunicorn's `%(u)s` has it.
pub fn basic_auth_user(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(http::header::AUTHORIZATION)?.as_bytes();
    let (scheme, credentials) = value.split_at(value.iter().position(|&b| b == b' ')?);
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return None;
    }
    let decoded = data_encoding::BASE64
        .decode(credentials.trim_ascii())
        .ok()?;
    let user = decoded.split(|&b| b == b':').next()?;
    Some(String::from_utf8_lossy(user).into_owned())
}

/// Checks an `--access-log-format` string as the server will parse it: a ValueError saying
/// what is wrong.
#[pyfunction]
pub fn check_access_log_format(format: &str) -> PyResult<()> {
    AccessFormat::parse(format)
        .map(drop)
        .map_err(PyValueError::new_err)
}

/// `at` in the local zone, as `%(t)s` shows it (UTC where the zone cannot be read).
fn local_time(at: SystemTime) -> chrono::DateTime<chrono::FixedOffset> {
    let offset = crate::bridge::local_utc_offset(at)
        .and_then(chrono::FixedOffset::east_opt)
        .unwrap_or(chrono::FixedOffset::east_opt(0).expect("zero is a valid offset"));
    chrono::DateTime::<chrono::Utc>::from(at).with_timezone(&offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(
        request_headers: &'a [Option<HeaderValue>],
        response_headers: &'a [Option<HeaderValue>],
    ) -> AccessFields<'a> {
        AccessFields {
            client: Some(("10.0.0.1", 5555)),
            method: "GET",
            target: "/a/b?x=1&y=2",
            version: "1.1",
            user: Some("alice"),
            received_at: SystemTime::UNIX_EPOCH,
            elapsed: Duration::from_micros(2_345_678),
            status: 200,
            body_bytes: 0,
            close_code: None,
            request_headers,
            response_headers,
        }
    }

    #[test]
    fn fills_in_each_atom() {
        let format = AccessFormat::parse(
            "%(h)s %(l)s %(u)s \"%(r)s\" %(m)s %(U)s %(q)s %(H)s %(s)s %(b)s %(B)s %(T)s \
             %(M)s %(D)s %(L)s %(c)s 100%% \"%(f)s\" \"%(a)s\" %({X-Id}i)s %({x-out}o)s",
        )
        .unwrap();
        assert_eq!(format.request_headers, ["referer", "user-agent", "x-id"]);
        assert_eq!(format.response_headers, ["x-out"]);
        let request = [None, Some(HeaderValue::from_static("curl/8")), None];
        let response = [Some(HeaderValue::from_static("yes"))];
        assert_eq!(
            format.render(&fields(&request, &response)),
            "10.0.0.1 - alice \"GET /a/b?x=1&y=2 HTTP/1.1\" GET /a/b x=1&y=2 HTTP/1.1 200 - 0 \
             2 2345 2345678 2.345678 - 100% \"-\" \"curl/8\" - yes"
        );
    }

    #[test]
    fn writes_the_time_as_the_common_log_format_does() {
        let format = AccessFormat::parse("%(t)s").unwrap();
        let mut at = fields(&[], &[]);
        at.received_at = SystemTime::UNIX_EPOCH + Duration::from_secs(971_185_336);
        let offset = crate::bridge::local_utc_offset(at.received_at).unwrap();
        let written = format.render(&at);
        // 971185336 is 13:42:16 UTC on 10 October 2000; the line shows it in the local zone.
        let utc = chrono::NaiveDate::from_ymd_opt(2000, 10, 10)
            .unwrap()
            .and_hms_opt(13, 42, 16)
            .unwrap();
        let zone = chrono::FixedOffset::east_opt(offset).unwrap();
        let expected = (utc + chrono::Duration::seconds(offset.into()))
            .format("[%d/%b/%Y:%H:%M:%S ")
            .to_string()
            + &zone.to_string().replace(':', "")
            + "]";
        assert_eq!(written, expected);
        assert_eq!(expected.len(), "[10/Oct/2000:13:55:36 -0700]".len());
    }

    #[test]
    fn refuses_unknown_atoms_and_stray_percents() {
        for (format, problem) in [
            ("%(z)s", "unknown atom %(z)s"),
            ("%(h)d", "unterminated atom"),
            ("100%", "a '%' must start an atom"),
            ("%(h", "unterminated atom"),
            ("%({bad header}i)s", "is not a header name"),
        ] {
            let err = AccessFormat::parse(format).unwrap_err();
            assert!(err.contains(problem), "{format}: {err}");
        }
    }

    #[test]
    fn reads_the_basic_auth_user() {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            // alice:secret
            HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0"),
        );
        assert_eq!(basic_auth_user(&headers).as_deref(), Some("alice"));
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(basic_auth_user(&headers), None);
    }
}
