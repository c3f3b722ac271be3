"""The model of the RFC 9112 request-rule table (``test_rfc9112.py``): what an exchange saw
(:class:`Seen`), the checks of the app's log and the responses, the outcomes the RFC allows
(:class:`Outcome`), a table row (:class:`Case`), and the cases ferrule gets wrong (:data:`GAPS`),
made strict xfails by :func:`case`."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.h1raw import RawResponse
from support.serverutil import ServerProcess

#: Bound for one exchange: a correct server answers (and closes, where it must) in milliseconds.
READ_TIMEOUT = 3.0
#: How long to keep reading once the responses an outcome wants are in (for stray extra bytes).
LINGER = 0.1
#: A pause before reading the app's log, for a request dispatched just as the connection closed.
SETTLE = 0.1
#: The server's limit on the request line and headers in all (``--h11-max-incomplete-event-size``).
HEAD_LIMIT = 8192

STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5][0-9]{2} [\t -~\x80-\xff]*")

MUST, MUST_NOT, SHOULD, MAY, ABNF = "MUST", "MUST NOT", "SHOULD", "MAY", "ABNF"

OK = frozenset({200})
BAD_REQUEST = frozenset({400})
#: Section 3: "Recipients of an invalid request-line SHOULD respond with either a 400 (Bad
#: Request) error or a 301 (Moved Permanently) redirect with the request-target properly encoded."
INVALID_LINE = frozenset({400, 301})
ERROR = frozenset(range(400, 600))


# -- what was seen ----------------------------------------------------------------------------


@dataclass
class Seen:
    """One exchange: what was sent, what came back, whether the server closed, and (read on
    demand) the app's log of the requests it was handed."""

    case: Case
    server: ServerProcess
    received: bytes
    closed: bool
    responses: list[RawResponse]
    leftover: bytes
    _log: list[dict[str, Any]] | None = None

    def log(self) -> list[dict[str, Any]]:
        if self._log is None:
            time.sleep(SETTLE)
            self._log = self.server.get("/_log").json()
        return self._log

    def entries(self, marker: str) -> list[dict[str, Any]]:
        """The app's log entries for requests that carry ``marker`` as whole path segments, or
        as the name in a Host value (``marker``, ``marker.example``, ``marker:port``)."""

        def carries(entry: dict[str, Any]) -> bool:
            if f"/{marker}/" in entry["path"] + "/":
                return True
            return any(re.split(r"[.:]", host)[0] == marker for host in entry["host"])

        return [entry for entry in self.log() if carries(entry)]

    def app(self, index: int) -> dict[str, Any]:
        """What the app echoed in response ``index`` (JSON)."""
        return self.responses[index].json()

    def describe(self) -> str:
        return (
            f"sent {self.case.data[:400]!r}\nreceived {self.received[:800]!r}\n"
            f"closed by the server: {self.closed}"
        )


Check = Callable[[Seen], "str | None"]


@dataclass(frozen=True)
class Outcome:
    """One behaviour the RFC allows: exactly ``len(answers)`` complete responses, the i-th with
    a status in ``answers[i]``, nothing after them; then the server closed the connection if
    ``close``; and each of ``checks`` (on what the client and the app saw) holds."""

    label: str
    answers: tuple[frozenset[int], ...]
    close: bool = False
    checks: tuple[Check, ...] = ()

    def statuses_match(self, statuses: list[int]) -> bool:
        return len(statuses) == len(self.answers) and all(
            status in allowed for status, allowed in zip(statuses, self.answers, strict=True)
        )

    def problems(self, seen: Seen) -> list[str]:
        statuses = [response.status for response in seen.responses]
        if not self.statuses_match(statuses):
            wanted = [status_set(allowed) for allowed in self.answers]
            return [f"responses {statuses}, this outcome has {wanted}"]
        problems = []
        if seen.leftover:
            problems.append(f"bytes after the last complete response: {seen.leftover[:200]!r}")
        if self.close and not seen.closed:
            problems.append("the connection was left open")
        for check in self.checks:
            try:
                problem = check(seen)
            except Exception as exc:  # noqa: BLE001 - reported as the check's failure
                problem = f"{getattr(check, '__name__', 'check')} raised {exc!r}"
            if problem:
                problems.append(problem)
        return problems


def status_set(statuses: frozenset[int]) -> str:
    if statuses == ERROR:
        return "4xx/5xx"
    return "/".join(str(status) for status in sorted(statuses))


# -- checks -----------------------------------------------------------------------------------


def never_complete(marker: str | None = None) -> Check:
    """The app was never handed a request carrying ``marker`` (default: the case id) as
    complete: not called with it at all, or its body ended in ``http.disconnect``."""

    def never_complete(seen: Seen) -> str | None:
        handed = [
            entry
            for entry in seen.entries(marker or seen.case.id)
            if entry.get("complete", True)  # /no-read/ entries read nothing: complete enough
        ]
        return f"the app was handed it as a complete request: {handed}" if handed else None

    return never_complete


def never_called(marker: str | None = None) -> Check:
    """The app was not called at all with a request carrying ``marker`` (default: the id)."""

    def never_called(seen: Seen) -> str | None:
        entries = seen.entries(marker or seen.case.id)
        return f"the app was called with it: {entries}" if entries else None

    return never_called


def echoed(index: int = 0, **fields: Any) -> Check:
    """The app's echo in response ``index`` has these scope fields (``method``, ``path``,
    ``raw_path``, ``query_string``, ``scheme``, ``host``: the list of Host values, ``body``)."""

    def echoed(seen: Seen) -> str | None:
        app = seen.app(index)
        wrong = {name: app.get(name) for name, value in fields.items() if app.get(name) != value}
        return f"response {index}: the app saw {wrong}, wanted {fields}" if wrong else None

    return echoed


def echoed_header(name: str, pattern: str, index: int = 0) -> Check:
    """The app saw exactly one ``name`` header, whose value matches ``pattern`` in full."""

    def echoed_header(seen: Seen) -> str | None:
        values = [value for key, value in seen.app(index)["headers"] if key == name]
        if len(values) == 1 and re.fullmatch(pattern, values[0]):
            return None
        return f"the app saw {name} values {values}, wanted one matching {pattern!r}"

    return echoed_header


def echoed_nothing_of(fragment: str, index: int = 0) -> Check:
    """No header the app saw has ``fragment`` in its name or value."""

    def echoed_nothing_of(seen: Seen) -> str | None:
        headers = seen.app(index)["headers"]
        hits = [pair for pair in headers if fragment in (pair[0] + ":" + pair[1]).lower()]
        return f"the app saw {hits}" if hits else None

    return echoed_nothing_of


def response_lacks(*names: str, index: int = 0) -> Check:
    def response_lacks(seen: Seen) -> str | None:
        present = [name for name in names if seen.responses[index].header(name) is not None]
        return (
            f"response {index} has {present}:\n{seen.responses[index].raw_head!r}"
            if present
            else None
        )

    return response_lacks


def response_body(body: bytes, index: int = 0) -> Check:
    def response_body(seen: Seen) -> str | None:
        got = seen.responses[index].body
        return f"response {index} body {got[:200]!r}, wanted {body!r}" if got != body else None

    return response_body


def response_has(name: str, token: str, index: int = 0) -> Check:
    """Response ``index`` has a ``name`` header with ``token`` among its comma-separated
    values (case-insensitive)."""

    def response_has(seen: Seen) -> str | None:
        values = seen.responses[index].all(name)
        tokens = [part.strip().lower() for value in values for part in value.split(",")]
        return None if token in tokens else f"response {index} {name} values {values}"

    return response_has


def response_version(version: str, index: int = 0) -> Check:
    def response_version(seen: Seen) -> str | None:
        got = seen.responses[index].version
        return f"response {index} has version {got}, wanted {version}" if got != version else None

    return response_version


def head_length_matches_get(seen: Seen) -> str | None:
    """Response 0 answers HEAD, response 1 the same GET: the HEAD response's Content-Length, if
    any, is the GET body's length."""
    length = seen.responses[0].header("content-length")
    get_body = seen.responses[1].body
    if length is None or length == str(len(get_body)):
        return None
    return f"HEAD said content-length {length}, the GET body has {len(get_body)} bytes"


def paths_in_order(*paths: str) -> Check:
    def paths_in_order(seen: Seen) -> str | None:
        got = [seen.app(index)["path"] for index in range(len(seen.responses))]
        return None if got == list(paths) else f"responses answered {got}, wanted {list(paths)}"

    return paths_in_order


# -- outcomes ---------------------------------------------------------------------------------


def rejected(
    statuses: frozenset[int] = BAD_REQUEST, *, close: bool = False, label: str | None = None
) -> Outcome:
    """One response with a status in ``statuses`` (and a close, if the RFC says MUST); the app
    never handed anything of the case as a complete request."""
    label = label or f"{status_set(statuses)}{' and close' if close else ''}"
    return Outcome(label, (statuses,), close, (never_complete(),))


def served(
    *checks: Check,
    answers: tuple[frozenset[int], ...] = (OK,),
    close: bool = False,
    label: str = "served",
) -> Outcome:
    return Outcome(label, answers, close, checks)


def dropped(label: str = "no response, connection closed") -> Outcome:
    """No response at all, the connection closed, the app never handed a complete request."""
    return Outcome(label, (), True, (never_complete(),))


# -- the table --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    section: str
    level: str
    rule: str
    data: bytes
    outcomes: tuple[Outcome, ...]
    #: Shut down the sending side after ``data``: the client is done (or gone).
    half_close: bool = False
    #: The first response answers a HEAD request (no body follows its head).
    head: bool = False
    expected: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected", " | ".join(o.label for o in self.outcomes))


#: Cases ferrule gets wrong, by id: what it does instead (strict xfails: a fix makes them XPASS).
GAPS: dict[str, str] = {
    "version-higher-minor": (
        "SHOULD only. Answered 400 Bad Request: httparse (hyper's parser) accepts only "
        "HTTP/1.0 and HTTP/1.1 and fails the request line with Error::Version"
    ),
    "response-version-to-http10": (
        "SHOULD only. Answered 'HTTP/1.0 200 OK': hyper's Conn::enforce_version sets the "
        "response version to HTTP/1.0 whenever the request was HTTP/1.0"
    ),
    "request-line-over-buffer": (
        "Answered 431 Request Header Fields Too Large instead of 414 to a 24 KB request line: "
        "it fills hyper's read buffer (2 x the limit, set by ferrule) before its CRLF arrives, "
        "and hyper answers Parse::TooLarge (431) without telling a long line from long headers"
    ),
    "host-missing": (
        "Served (200): ferrule's unservable() (crates/ferrule/src/http/request.rs) refuses "
        "only two or more Host lines, and serves an HTTP/1.1 request without Host on purpose, "
        "as uvicorn's httptools parser does; hyper does not check Host"
    ),
    "te-unknown-coding-before-chunked": (
        "SHOULD only. Answered 400, not 501: ferrule's framing check (Framing::ambiguous in "
        "crates/ferrule/src/http/heads.rs) refuses any Transfer-Encoding but exactly 'chunked' "
        "as ambiguous framing; hyper alone would have served the still gzip-coded body"
    ),
}


def case(
    id: str,
    section: str,
    level: str,
    rule: str,
    data: bytes,
    *outcomes: Outcome,
    half_close: bool = False,
    head: bool = False,
) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=GAPS[id])] if id in GAPS else []
    table_row = Case(id, section, level, rule, data, outcomes, half_close, head)
    return pytest.param(table_row, id=f"{section}-{id}", marks=marks)


def line_of(length: int, id: str) -> bytes:
    """A GET request line of exactly ``length`` octets (CRLF not counted) for ``/echo/ID``."""
    prefix = f"GET /echo/{id}?q=".encode()
    return prefix + b"x" * (length - len(prefix) - len(b" HTTP/1.1")) + b" HTTP/1.1"
