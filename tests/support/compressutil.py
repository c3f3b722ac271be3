"""What the response-compression tests (``--compress``, ``tests/http/test_compress_*.py``)
share: the app and the main server's settings, incremental and whole decoding of each coding
(:class:`Decoder`, :func:`decode`, :func:`decoded`), the Vary tokens of a response, one raw
HTTP/1.1 exchange (:func:`fetch`), the ``/body`` target of ``compress_app``, the check of a
response sent as the app gave it (:func:`assert_plain`), and :func:`check_each` for the tables of
cases.

Imported by those modules as ``from support.compressutil import ...`` (``tests/`` is on
``sys.path``).
"""

from __future__ import annotations

import zlib
from typing import Any
from urllib.parse import quote

import pytest

from support.h1raw import RawResponse, request_bytes
from support.serverutil import ServerProcess, import_app

APP = "compress_app:app"
CODINGS = ["gzip", "br", "zstd"]
#: The main server's codings, in its order of preference.
ORDER = "zstd,br,gzip"
#: Bound for one exchange.
TIMEOUT = 5.0
#: How long a chunk the app has sent may take to be decodable by the client.
FLUSH_TIMEOUT = 3.0

text_body = import_app("compress_app:text_body")
stream_chunk = import_app("compress_app:stream_chunk")


# -- decoding ------------------------------------------------------------------------------------


class Decoder:
    """An incremental decoder of one content coding: :meth:`feed` returns what the bytes so far
    decode to; :attr:`finished` says the coding's end marker was seen."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        if coding == "gzip":
            self._obj: Any = zlib.decompressobj(wbits=31)
        elif coding == "br":
            self._obj = pytest.importorskip("brotli").Decompressor()
        elif coding == "zstd":
            self._obj = pytest.importorskip("zstandard").ZstdDecompressor().decompressobj()
        else:
            raise AssertionError(f"not a coding the tests decode: {coding!r}")

    def feed(self, data: bytes) -> bytes:
        if self.coding == "br":
            return self._obj.process(data)
        return self._obj.decompress(data)

    @property
    def finished(self) -> bool:
        if self.coding == "br":
            return self._obj.is_finished()
        return self._obj.eof


def decode(coding: str, data: bytes) -> bytes:
    """``data`` decoded whole; fails if the coding's stream does not end properly."""
    decoder = Decoder(coding)
    out = decoder.feed(data)
    assert decoder.finished, f"the {coding} stream is truncated ({len(data)} bytes)"
    return out


def decoded(response: RawResponse) -> bytes:
    """The body of ``response`` decoded by its Content-Encoding (as is without one)."""
    coding = response.header("content-encoding")
    return response.body if coding is None else decode(coding, response.body)


def vary(headers: Any) -> list[str]:
    """The Vary tokens of a response (all its Vary lines), lowercased, in order."""
    values = headers.all("vary") if isinstance(headers, RawResponse) else headers
    return [token.strip().lower() for value in values for token in value.split(",") if token]


# -- clients -------------------------------------------------------------------------------------


def fetch(
    server: ServerProcess,
    target: str,
    accept: str | None = None,
    *,
    method: str = "GET",
    headers: list[tuple[str, str]] | None = None,
) -> RawResponse:
    """One request on a new HTTP/1.1 connection, with ``Accept-Encoding: accept`` when given."""
    extra = list(headers or [])
    if accept is not None:
        extra.append(("Accept-Encoding", accept))
    with server.raw() as conn:
        conn.send(request_bytes(method, target, headers=extra))
        return conn.read_response(head=method == "HEAD")


def body_target(**query: Any) -> str:
    """``/body?...``; ``h`` may be a list of ``NAME:VALUE`` headers."""
    parts = []
    for name, value in query.items():
        for item in value if isinstance(value, list) else [value]:
            parts.append(f"{name}={quote(str(item), safe='')}")
    return "/body?" + "&".join(parts)


def assert_plain(response: RawResponse, expected: bytes, *, vary_added: bool) -> None:
    """Sent as the app gave it; with ``Vary: Accept-Encoding`` exactly when ``vary_added``."""
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") is None, response.raw_head
    assert response.body == expected
    assert ("accept-encoding" in vary(response)) is vary_added, response.raw_head


def check_each(cases: list[Any], check: Any) -> None:
    """Run ``check(case)`` for every case of a table and fail once with every case that failed
    (so one run shows the whole picture, not only the first mismatch)."""
    failures = []
    for case in cases:
        try:
            check(case)
        except AssertionError as exc:
            failures.append(f"{case!r}: {str(exc).splitlines()[0][:300]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)
