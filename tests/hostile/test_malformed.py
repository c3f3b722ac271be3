"""Malformed requests: each is answered with a 4xx (400 mostly) and the connection is
closed, the request never reaches the app, and the server answers a normal request on a new
connection afterwards (``hostile_app``).

The cases are our own bytes, drawn from the kinds of input in hyper's server tests, h11's test
vectors, http-desync-guardian's ``tests/*.yaml`` and http-garden's findings. Every request is
complete (nothing left for the server to wait for), so a correct server answers at once; each
exchange is bounded by :data:`READ_TIMEOUT`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.h1raw import RawResponse, parse_responses
from support.serverutil import ServerProcess, fetch_record, running_server

#: Bound for one malformed exchange: a correct server answers and closes in milliseconds.
READ_TIMEOUT = 2.0
#: What "rejected" means by default: any 4xx.
REJECT = frozenset(range(400, 500))
#: For an unknown or unsupported HTTP version, 505 is as good as a 4xx.
REJECT_OR_505 = REJECT | {505}

Build = Callable[[bytes], bytes]


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("hostile_app:app") as srv:
        yield srv


# -- building requests ------------------------------------------------------------------------


def request(
    *headers: bytes,
    body: bytes = b"",
    line: bytes = b"POST {t} HTTP/1.1",
    host: bool = True,
) -> Build:
    """A request as raw bytes: ``line`` (``{t}`` becomes the target), a Host header, ``headers``
    as given (each gets CRLF), an empty line and ``body``. Nothing is added or fixed up."""

    def build(target: bytes) -> bytes:
        head = [line.replace(b"{t}", target)]
        if host:
            head.append(b"Host: test")
        head += headers
        return b"\r\n".join(head) + b"\r\n\r\n" + body

    return build


def raw(data: bytes) -> Build:
    """Bytes sent as they are (the target is not used)."""
    return lambda _target: data


@dataclass(frozen=True)
class Case:
    id: str
    build: Build
    allowed: frozenset[int] = REJECT


# Refused by the server's own record of the raw head (crates/ferrule/src/http/heads.rs):
# hyper alone applies RFC 9112 here (Transfer-Encoding wins over Content-Length, then it closes;
# identical repeated Content-Lengths are merged). Before that record existed these cases were
# strict xfails and were served (2xx) instead of refused.
# Cases known to fail, kept visible as strict xfails (none at the moment).
KNOWN_GAPS: dict[str, Any] = {}


def case(id: str, build: Build, allowed: frozenset[int] = REJECT) -> Any:
    marks = [KNOWN_GAPS[id]] if id in KNOWN_GAPS else []
    return pytest.param(Case(id, build, allowed), id=id, marks=marks)


NOISE = random.Random(5).randbytes(96)

HEAD_CASES = [
    # Bad request lines.
    case("line-space-in-method", request(line=b"GE T {t} HTTP/1.1")),
    case("line-two-spaces", request(line=b"POST  {t} HTTP/1.1")),
    case("line-no-version", request(line=b"POST {t}")),
    case("line-trailing-junk", request(line=b"POST {t} HTTP/1.1 junk")),
    case("line-version-not-digits", request(line=b"POST {t} HTTP/1.x")),
    case("line-version-lowercase", request(line=b"POST {t} http/1.1")),
    case("line-version-unknown", request(line=b"POST {t} HTTP/3.7"), REJECT_OR_505),
    case("line-tabs-as-separators", request(line=b"POST\t{t}\tHTTP/1.1")),
    case("line-leading-space", request(line=b" POST {t} HTTP/1.1")),
    case("line-control-in-method", request(line=b"P\x01ST {t} HTTP/1.1")),
    case("line-nul-in-target", request(line=b"POST {t}\x00x HTTP/1.1")),
    case("line-del-in-target", request(line=b"POST {t}\x7fx HTTP/1.1")),
    # Not HTTP at all.
    case("garbage-random-bytes", raw(NOISE + b"\r\n\r\n")),
    case("garbage-text", raw(b"hello there, this is not HTTP\r\n\r\n")),
    case("garbage-nul-bytes", raw(b"\x00" * 64 + b"\r\n\r\n")),
    case("garbage-tls-client-hello", raw(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + NOISE)),
    # Conflicting or repeated Content-Length.
    case("cl-conflicting", request(b"Content-Length: 5", b"Content-Length: 6", body=b"hello!")),
    case(
        "cl-repeated-identical", request(b"Content-Length: 5", b"Content-Length: 5", body=b"hello")
    ),
    case("cl-list-conflicting", request(b"Content-Length: 5, 6", body=b"hello!")),
    case("cl-list-identical", request(b"Content-Length: 5, 5", body=b"hello")),
    # Non-numeric, negative, overflowing Content-Length.
    case("cl-word", request(b"Content-Length: five", body=b"hello")),
    case("cl-plus-sign", request(b"Content-Length: +5", body=b"hello")),
    case("cl-hex", request(b"Content-Length: 0x5", body=b"hello")),
    case("cl-decimal-point", request(b"Content-Length: 5.0", body=b"hello")),
    case("cl-inner-space", request(b"Content-Length: 1 2", body=b"hello world!")),
    case("cl-empty", request(b"Content-Length: ", body=b"")),
    case("cl-control-char", request(b"Content-Length: 5\x0b", body=b"hello")),
    case("cl-negative", request(b"Content-Length: -1", body=b"x")),
    case("cl-u64-plus-one", request(b"Content-Length: 18446744073709551616", body=b"x")),
    case("cl-forty-nines", request(b"Content-Length: " + b"9" * 40, body=b"x")),
    # Content-Length together with Transfer-Encoding (a valid chunked body of 5 bytes).
    case(
        "cl-then-te",
        request(b"Content-Length: 5", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
    ),
    case(
        "te-then-cl",
        request(b"Transfer-Encoding: chunked", b"Content-Length: 5", body=b"0\r\n\r\n"),
    ),
    # Transfer-Encoding that does not end in chunked (or applies chunked twice).
    case("te-gzip", request(b"Transfer-Encoding: gzip", body=b"hello")),
    case("te-identity", request(b"Transfer-Encoding: identity", body=b"hello")),
    case("te-chunked-then-gzip", request(b"Transfer-Encoding: chunked, gzip", body=b"0\r\n\r\n")),
    case(
        "te-second-header-not-chunked",
        request(b"Transfer-Encoding: chunked", b"Transfer-Encoding: identity", body=b"0\r\n\r\n"),
    ),
    case("te-xchunked", request(b"Transfer-Encoding: xchunked", body=b"0\r\n\r\n")),
    case("te-chunked-twice", request(b"Transfer-Encoding: chunked, chunked", body=b"0\r\n\r\n")),
    case(
        "te-two-chunked-headers",
        request(b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked", body=b"0\r\n\r\n"),
    ),
    case("te-empty", request(b"Transfer-Encoding: ", body=b"0\r\n\r\n")),
    case("te-vertical-tab", request(b"Transfer-Encoding: \x0bchunked", body=b"0\r\n\r\n")),
    # Chunked on HTTP/1.0.
    case(
        "te-on-http10",
        request(
            b"Transfer-Encoding: chunked",
            body=b"5\r\nhello\r\n0\r\n\r\n",
            line=b"POST {t} HTTP/1.0",
        ),
    ),
    # Obsolete line folding.
    case("obs-fold-space", request(b"X-Fold: first", b" second")),
    case("obs-fold-tab", request(b"X-Fold: first", b"\tsecond")),
    case("obs-fold-hides-te", request(b"X-Fold: first", b" Transfer-Encoding: chunked")),
    # Whitespace between the field name and the colon.
    case("space-before-colon", request(b"X-Custom : value")),
    case("tab-before-colon", request(b"X-Custom\t: value")),
    case("space-before-colon-cl", request(b"Content-Length : 5", body=b"hello")),
    # CR, LF or NUL (and other controls) inside a header name or value.
    case("cr-in-name", request(b"X-Bad\rName: 1")),
    case("cr-in-value", request(b"X-Bad: one\rtwo")),
    case("cr-ends-value", request(b"X-Bad: one\r")),
    case("lf-in-name", request(b"X-Bad\nName: 1")),
    case("lf-in-value", request(b"X-Bad: one\ntwo")),
    case("nul-in-name", request(b"X-Bad\x00Name: 1")),
    case("nul-starts-line", request(b"\x00X-Bad: 1")),
    case("nul-in-value", request(b"X-Bad: one\x00two")),
    case("nul-starts-value", request(b"X-Bad: \x00one")),
    case("nul-ends-value", request(b"X-Bad: one\x00")),
    case("control-in-value", request(b"X-Bad: one\x01two")),
    # Other broken header lines.
    case("empty-name", request(b": value")),
    case("space-in-name", request(b"X Bad: 1")),
    case("no-colon", request(b"X-Bad value")),
]

CHUNKED_HEAD = b"POST {t} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"

CHUNK_CASES = [
    pytest.param(body, id=id)
    for id, body in [
        ("size-not-hex", b"zz\r\nhello\r\n0\r\n\r\n"),
        ("size-negative", b"-5\r\nhello\r\n0\r\n\r\n"),
        ("size-0x-prefix", b"0x5\r\nhello\r\n0\r\n\r\n"),
        ("size-leading-space", b" 5\r\nhello\r\n0\r\n\r\n"),
        ("size-inner-space", b"1 0\r\nhello\r\n0\r\n\r\n"),
        ("size-empty", b"\r\nhello\r\n0\r\n\r\n"),
        ("size-u64-plus-one", b"10000000000000000\r\nhello\r\n0\r\n\r\n"),
        ("size-forty-fs", b"f" * 40 + b"\r\nhello\r\n0\r\n\r\n"),
        ("data-longer-than-size", b"5\r\nhelloXX\r\n0\r\n\r\n"),
        ("data-without-crlf", b"5\r\nhello0\r\n\r\n"),
        ("second-size-not-hex", b"5\r\nhello\r\nzz\r\nhi\r\n0\r\n\r\n"),
    ]
]


def smuggled_request(marker: bytes, content_length: int | None = None) -> bytes:
    lines = [b"GET /smuggled-" + marker + b" HTTP/1.1", b"Host: test"]
    if content_length is not None:
        lines.append(b"Content-Length: " + str(content_length).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def cl_te(*te_headers: bytes, line: bytes = b"POST {t} HTTP/1.1") -> Callable[[bytes], Build]:
    """CL.TE: the body is a last-chunk followed by a second request, and the Content-Length
    covers all of it. A server that honours the (possibly obfuscated) Transfer-Encoding ends
    the body at the last-chunk and parses the rest as a new request."""

    def for_marker(marker: bytes) -> Build:
        body = b"0\r\n\r\n" + smuggled_request(marker)
        cl = b"Content-Length: " + str(len(body)).encode()
        return request(cl, *te_headers, body=body, line=line)

    return for_marker


def te_cl(marker: bytes) -> Build:
    """TE.CL: the chunked body is one chunk holding a second request; the Content-Length covers
    only the chunk-size line. A server that honours Content-Length parses the chunk as a request
    (whose own Content-Length swallows the chunked framing after it)."""
    tail = b"\r\n0\r\n\r\n"
    inner = smuggled_request(marker, content_length=len(tail))
    size_line = f"{len(inner):x}\r\n".encode()
    body = size_line + inner + tail
    return request(
        b"Content-Length: " + str(len(size_line)).encode(), b"Transfer-Encoding: chunked", body=body
    )


def cl_cl(marker: bytes) -> Build:
    """CL.CL: ``Content-Length: 0`` then one covering a second request."""
    body = smuggled_request(marker)
    return request(b"Content-Length: 0", b"Content-Length: " + str(len(body)).encode(), body=body)


def chunk_size_wraps(marker: bytes) -> Build:
    """A chunk size of 2**64, which a parser that wraps silently reads as 0 (the last-chunk):
    the second request after it would then be parsed on its own."""
    body = b"1" + b"0" * 16 + b"\r\n\r\n" + smuggled_request(marker)
    return request(b"Transfer-Encoding: chunked", body=body)


SMUGGLE_CASES = [
    pytest.param(builder, id=id)
    for id, builder in [
        ("cl-te", cl_te(b"Transfer-Encoding: chunked")),
        ("te-cl", te_cl),
        ("cl-te-space-before-colon", cl_te(b"Transfer-Encoding : chunked")),
        ("cl-te-vertical-tab", cl_te(b"Transfer-Encoding:\x0bchunked")),
        ("cl-te-xchunked", cl_te(b"Transfer-Encoding: xchunked")),
        ("cl-te-chunked-identity", cl_te(b"Transfer-Encoding: chunked, identity")),
        ("cl-te-obs-fold", cl_te(b"X-Fold: first", b" Transfer-Encoding: chunked")),
        ("cl-te-http10", cl_te(b"Transfer-Encoding: chunked", line=b"POST {t} HTTP/1.0")),
        ("cl-cl", cl_cl),
        ("chunk-size-wraps-to-zero", chunk_size_wraps),
    ]
]


# -- exchanging and checking ------------------------------------------------------------------


@dataclass
class Exchange:
    sent: bytes
    received: bytes
    closed: bool
    elapsed: float
    responses: list[RawResponse]
    leftover: bytes

    def describe(self) -> str:
        return (
            f"sent {self.sent[:300]!r}\nreceived {self.received[:400]!r}\n"
            f"closed by the server: {self.closed} (after {self.elapsed:.2f}s)"
        )


def exchange(server: ServerProcess, data: bytes, timeout: float = READ_TIMEOUT) -> Exchange:
    """Send ``data`` on a new connection; read until the server closes or ``timeout``."""
    started = time.monotonic()
    with server.raw(timeout) as conn:
        try:
            conn.send(data)
        except OSError:
            pass  # the server may reject and close before reading everything
        closed = conn.wait_closed(timeout)
        received = conn.received
    responses, leftover = parse_responses(received)
    return Exchange(data, received, closed, time.monotonic() - started, responses, leftover)


def check_rejected(got: Exchange, allowed: frozenset[int] = REJECT) -> None:
    """One complete response with an allowed status, then the server closed the connection."""
    assert got.responses, f"no complete response\n{got.describe()}"
    status = got.responses[0].status
    assert status in allowed, f"answered {status}, wanted a 4xx\n{got.describe()}"
    assert len(got.responses) == 1 and not got.leftover, (
        f"more than one response on the connection\n{got.describe()}"
    )
    assert got.closed, f"the connection was left open after a {status}\n{got.describe()}"


def app_saw(server: ServerProcess, marker: str) -> list[str]:
    """Paths the app was called with that contain ``marker``."""
    return [path for path in server.get("/_seen").json() if marker in path]


def check_still_serving(server: ServerProcess) -> None:
    assert server.returncode is None, f"the server died\n{server.describe()}"
    response = server.get("/ok")
    assert response.status_code == 200 and response.text == "ok", response


def new_marker() -> str:
    return uuid.uuid4().hex


# -- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", HEAD_CASES)
def test_malformed_request_rejected(server: ServerProcess, case: Case) -> None:
    """Rule: a request with a malformed request line or header section (the case id says which)
    gets a 4xx (400 mostly; 505 allowed for an unknown version) and the connection is closed;
    the app is never called with it; a normal request on a new connection then gets 200.
    Broken: the request is served (2xx), the server closes without a response, answers 5xx,
    keeps the connection open, lets the app see the request, or stops serving."""
    marker = new_marker()
    got = exchange(server, case.build(b"/echo?case=" + marker.encode()))
    check_rejected(got, case.allowed)
    assert not app_saw(server, marker), f"the app was called with it\n{got.describe()}"
    check_still_serving(server)


@pytest.mark.parametrize("chunks", CHUNK_CASES)
def test_malformed_chunked_body_rejected(server: ServerProcess, chunks: bytes) -> None:
    """Rule: a chunked body with an invalid or overflowing chunk size, or chunk data not
    followed by CRLF, ends the exchange: the app reading the body gets http.disconnect (never a
    final http.request claiming the body is complete), the client gets a 4xx (the response had
    not started) and the connection is closed; the server serves a new connection. Broken:
    the body is accepted (200), truncated silently into a complete body, the app waits forever
    in receive(), no response or a 5xx, or the connection stays open."""
    key = new_marker()
    data = CHUNKED_HEAD.replace(b"{t}", f"/echo?key={key}".encode()) + chunks
    got = exchange(server, data)
    problems = []
    try:
        check_rejected(got)
    except AssertionError as exc:
        problems.append(f"client side: {str(exc).splitlines()[0]}")
    messages = fetch_record(server, key)
    if not messages or messages[-1]["type"] != "http.disconnect":
        problems.append(f"app side: the last message was not http.disconnect: {messages}")
    if [m for m in messages if m["type"] == "http.request" and not m["more_body"]]:
        problems.append(f"app side: told the broken body was complete: {messages}")
    assert not problems, "\n".join(problems) + "\n" + got.describe()
    check_still_serving(server)


@pytest.mark.parametrize("builder", SMUGGLE_CASES)
def test_smuggled_request_never_reaches_app(
    server: ServerProcess, builder: Callable[[bytes], Build]
) -> None:
    """Rule: a request smuggled behind another (CL.TE, TE.CL and obfuscated variants: the id
    says which) is never parsed as a second request: the app never sees the smuggled path, the
    connection carries at most one response, and that response is a 4xx followed by a close.
    Broken: ``/smuggled-...`` shows up in the app's ``/_seen`` list or a second response
    appears (request smuggling), or the carrier request is served (2xx) or left open (the CL+TE
    cases were served by hyper's Transfer-Encoding reading before the raw-head record)."""
    marker = new_marker()
    build = builder(marker.encode())
    got = exchange(server, build(b"/echo?carrier=" + marker.encode()))
    time.sleep(0.2)  # a smuggled request, if parsed, would be in the app by now
    assert not app_saw(server, "smuggled-" + marker), f"SMUGGLED into the app\n{got.describe()}"
    assert len(got.responses) <= 1, f"a second response: smuggled\n{got.describe()}"
    check_rejected(got)
    check_still_serving(server)


def frames(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames in ``data`` (9-byte headers; a cut last frame ends it)."""
    types, at = [], 0
    while at + 9 <= len(data):
        length = int.from_bytes(data[at : at + 3], "big")
        types.append(data[at + 3])
        at += 9 + length
    return types


def test_http2_preface_then_garbage_gets_goaway_and_close(server: ServerProcess) -> None:
    """Rule: the HTTP/2 preface is not garbage to a server that speaks HTTP/2 (h2c with prior
    knowledge, ``--http auto``); garbage after it is an HTTP/2 connection error: the server
    answers in HTTP/2 (its SETTINGS, then a GOAWAY) and closes, and keeps serving others.
    Broken: no answer or no close within the timeout, an HTTP/1 response to an HTTP/2 client,
    or a dead server. (Before HTTP/2 support, hyper closed on the preface without a word and
    this case was a strict xfail expecting a 400.)"""
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    got = exchange(server, preface + b"\x00\x00\x05\xff\x00\x00\x00\x00\x00" + b"junk!" * 4)
    assert got.closed, f"left open\n{got.describe()}"
    kinds = frames(got.received)
    assert kinds[:1] == [0x4] and 0x7 in kinds, f"frame types {kinds}\n{got.describe()}"
    check_still_serving(server)


def test_pipelined_requests_reach_app_control(server: ServerProcess) -> None:
    """Control for the smuggling test: two well-formed pipelined requests on one connection both
    reach the app and get two responses, so ``/_seen`` and the response count do detect a
    second request. Broken: the detector is blind (or pipelining is broken)."""
    marker = new_marker()
    first = request(b"Content-Length: 5", body=b"hello")(b"/echo?carrier=" + marker.encode())
    second = smuggled_request(marker.encode())[:-2] + b"Connection: close\r\n\r\n"
    got = exchange(server, first + second)
    assert [r.status for r in got.responses] == [200, 200], got.describe()
    assert app_saw(server, "smuggled-" + marker), got.describe()
    check_still_serving(server)
