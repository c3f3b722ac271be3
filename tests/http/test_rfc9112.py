"""RFC 9112 (HTTP/1.1 message syntax), the server's side of it, as a table: :data:`CASES`.

Each case names the RFC 9112 section, the requirement level (MUST, MUST NOT, SHOULD, MAY, or
ABNF for what the grammar alone decides) and the rule (its words, shortened), the exact bytes
sent on a new connection, and every behaviour the RFC allows in answer (:class:`Outcome`: the
status of each response on the connection, whether the server must then close it, and what the
app may have been handed). :func:`test_rfc9112` sends each case to a real ferrule serving
``rfc9112_app`` and passes when one of the allowed outcomes is what happened.

Only what the RFC requires is asserted. Where it allows several behaviours (reject with 400 or
repair and serve; close or keep the connection), each is accepted. The connection must close
only where the RFC says the server MUST close it (or where closing is the SHOULD under test): a
400 for bad syntax is not required to close, as section 2.2 only says SHOULD. A rejected
request must never reach the app as a complete request (the app's log says what it was handed).
SHOULD and MAY cases say so in their level. Every response must also start with a valid
status-line (section 4) whose version the server conforms to, HTTP/1.1 or HTTP/1.0 (section
2.3 and RFC 9110 2.5: "A server MUST NOT send a version to which it is not conformant").

Cases ferrule gets wrong stay in the table as strict xfails (:data:`GAPS`), each saying what
ferrule does instead. The server runs with ``--h11-max-incomplete-event-size 8192`` (its limit
on the request line and headers in all) so that the request-line length cases stay small.
Every exchange is bounded by :data:`READ_TIMEOUT`.

The table's rows are in ``rfc9112_cases_head.py`` (sections 2 to 5) and
``rfc9112_cases_body.py`` (6 to 9), its model in ``rfc9112_model.py``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from rfc9112_cases_body import CASES_BODY
from rfc9112_cases_head import CASES_HEAD
from rfc9112_model import (
    ABNF,
    GAPS,
    HEAD_LIMIT,
    LINGER,
    MAY,
    MUST,
    MUST_NOT,
    READ_TIMEOUT,
    SHOULD,
    STATUS_LINE,
    Case,
    Seen,
)
from support.h1raw import IncompleteResponse, RawResponse, _ReceivedBytes
from support.serverutil import ServerProcess, running_server

CASES = CASES_HEAD + CASES_BODY


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server(
        "rfc9112_app:app", "--h11-max-incomplete-event-size", str(HEAD_LIMIT)
    ) as srv:
        yield srv


#: Cases whose bytes cannot carry their id (the app's log is searched by it).
NO_ID_IN_BYTES = {"not-http"}


def test_table_is_well_formed() -> None:
    """Rule: the table itself is sound: unique ids, a known level, a section of RFC 9112
    sections 2 to 9, at least one outcome each, and the id in the bytes sent (the app's log is
    searched by it). Broken: a typo in the table; seen failing with one case's path misspelt
    (``/echo/chunk-size-hx``), which would have left its app-log checks looking for nothing."""
    rows: list[Case] = [param.values[0] for param in CASES]
    ids = [row.id for row in rows]
    assert len(ids) == len(set(ids)), f"duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    assert set(GAPS) <= set(ids), f"GAPS names unknown cases: {set(GAPS) - set(ids)}"
    for row in rows:
        assert row.level in (MUST, MUST_NOT, SHOULD, MAY, ABNF), row
        assert 2 <= int(row.section.split(".")[0]) <= 9, row
        assert row.outcomes, row
        assert row.id in NO_ID_IN_BYTES or row.id.encode() in row.data, row.id


# -- the exchange -----------------------------------------------------------------------------


def parse(data: bytes, head: bool) -> tuple[list[RawResponse], bytes]:
    """The complete responses in ``data`` (the first one answering HEAD if ``head``) and the
    bytes after them."""
    reader = _ReceivedBytes(data)  # h1raw's response parser over bytes already read
    responses: list[RawResponse] = []
    while reader.buffer:
        before = reader.buffer
        try:
            responses.append(reader.read_response(head=head and not responses))
        except (IncompleteResponse, ValueError, IndexError):
            return responses, before
    return responses, b""


def exchange(server: ServerProcess, row: Case) -> Seen:
    """Send the case's bytes on a new connection (from a thread: the server may answer and
    close before reading them all) and read until the server closes, or until the responses
    an outcome wants are in and none of the outcomes they match needs a close (then for
    :data:`LINGER` more), or :data:`READ_TIMEOUT`."""
    most = max(len(outcome.answers) for outcome in row.outcomes)
    with server.raw(READ_TIMEOUT) as conn:
        sock = conn.sock

        def write() -> None:
            try:
                sock.sendall(row.data)
                if row.half_close:
                    sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the server answered and closed early

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        received = bytearray()
        closed = False
        deadline = time.monotonic() + READ_TIMEOUT
        settled_at: float | None = None
        while True:
            responses, leftover = parse(bytes(received), row.head)
            statuses = [response.status for response in responses]
            matching = [o for o in row.outcomes if o.statuses_match(statuses)]
            enough = len(responses) >= most and not leftover
            if enough and not any(outcome.close for outcome in matching):
                settled_at = settled_at or time.monotonic() + LINGER
            limit = min(deadline, settled_at) if settled_at else deadline
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            sock.settimeout(remaining)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                closed = True
                break
            received += data
        writer.join(READ_TIMEOUT)
    responses, leftover = parse(bytes(received), row.head)
    return Seen(row, server, bytes(received), closed, responses, leftover)


@pytest.mark.parametrize("row", CASES)
def test_rfc9112(server: ServerProcess, row: Case) -> None:
    """Rule: the RFC 9112 requirement of the table row (its section, level and words are in
    ``row.rule``): the server's answer to the row's exact bytes is one of the outcomes the RFC
    allows for them (``row.expected``): the status of each response, the connection closed
    where the RFC says the server MUST close it (or must not process further requests), and
    nothing reaching the app as a complete request that the RFC says must be refused; every
    response starts with a valid status-line of version HTTP/1.1 or HTTP/1.0 (2.3, 4).
    Broken: no allowed outcome matches; the failure lists each one and why it did not. Seen
    failing: the strict xfails of GAPS (with ``--runxfail``), each with what ferrule does
    instead; and against uvicorn 0.54 (``FERRULE_TEST_SERVER_MODULE=uvicorn``), 12 other rows,
    among them trailer fields merged into the scope's headers (7.1.2), a chunked response to
    an HTTP/1.0 request (6.1), two Host lines served (3.2), trailing OWS kept (5.1)."""
    seen = exchange(server, row)
    for response in seen.responses:
        first_line = response.raw_head.split(b"\r\n", 1)[0]
        assert STATUS_LINE.fullmatch(first_line), (
            f"section 2.3/4: not a status-line of HTTP/1.1 or HTTP/1.0: {first_line!r}\n"
            f"{seen.describe()}"
        )
    results = [(outcome.label, outcome.problems(seen)) for outcome in row.outcomes]
    if not any(not problems for _, problems in results):
        report = "\n".join(f"  - {label}: {'; '.join(problems)}" for label, problems in results)
        pytest.fail(
            f"RFC 9112 {row.section} ({row.level}): {row.rule}\n"
            f"no allowed outcome matched:\n{report}\n{seen.describe()}",
            pytrace=False,
        )
    assert server.returncode is None, f"the server died\n{server.describe()}"
