"""``--proxy-protocol`` against hostile starts, on raw sockets straight to ferrule (no HAProxy).

With the option on, every connection must begin with a PROXY protocol header from a peer in
``--forwarded-allow-ips``. A connection without one, with a malformed, oversized or wrong-version
header, with a header that never ends, or from an untrusted peer is closed with no HTTP answer,
and the server logs a line naming ``PROXY protocol``. Each case then checks that the server still
serves: a good header on a new connection gets a 200 whose scope's ``client`` is the header's.

The v2 headers are made by hand with :mod:`struct`. The servers are shared per
``--proxy-protocol`` value within the module; each case counts the ``PROXY protocol`` lines on
stderr before it starts, so it sees its own line. The working paths (HAProxy in front, HTTP/2,
TLS, the access log) are in ``tests/http/test_proxy_protocol.py``.
"""

from __future__ import annotations

import contextlib
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from support.proxyproto import (
    REQUEST,
    V2_PROXY,
    V2_SIGNATURE,
    V2_TCP4,
    scope_of,
    v1_line,
    v2_header,
)
from support.serverutil import WAIT_TIMEOUT, ServerProcess, poll, running_server

APP = "scope_app:app"
#: The header timeout (--timeout-keep-alive) of the servers that are to refuse at once: long,
#: so that a server that waits for it is told from a prompt one on a loaded machine.
HEADER_TIMEOUT = "30"
#: Bound for one exchange: how long the server may keep a connection open before the test
#: fails (longer than the header timeout, so a late close is told from none).
READ_TIMEOUT = 40.0
#: A bad start whose bytes are all in is refused at once: well within the header timeout, so a
#: server that waits for that timeout fails; at once is a second or two on a loaded machine.
PROMPT = 10.0
#: A v1 start of 200 bytes with no CRLF: past the protocol's 107-byte line.
V1_TOO_LONG = b"PROXY TCP4 " + b"1" * 189
WARNING_RE = re.compile(r"(?m)^.*PROXY protocol.*$")


@dataclass
class Outcome:
    received: bytes
    #: Seconds from the end of the sending to the close (EOF or reset).
    seconds: float


def exchange(
    port: int, data: bytes, *, source: str | None = None, timeout: float = READ_TIMEOUT
) -> Outcome:
    """Connect (from the address ``source`` if given), send ``data`` and read until the server
    closes or resets the connection. Fails if it is still open after ``timeout``."""
    bind = (source, 0) if source else None
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=bind) as s:
        # A server that refuses at once may reset the connection before all of it is sent.
        with contextlib.suppress(OSError):
            s.sendall(data)
        started = time.monotonic()
        deadline = started + timeout
        received = b""
        while True:
            s.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                raise AssertionError(
                    f"the connection was still open {timeout}s after sending {data[:80]!r}; "
                    f"received {received[:300]!r}"
                ) from None
            except OSError:  # reset: as good as a close here
                break
            if not chunk:
                break
            received += chunk
        return Outcome(received, time.monotonic() - started)


def warnings(server: ServerProcess) -> list[str]:
    """The server's stderr lines naming ``PROXY protocol`` so far."""
    return WARNING_RE.findall(server.stderr)


def new_warning(server: ServerProcess, before: int, timeout: float = WAIT_TIMEOUT) -> str:
    """Wait for a ``PROXY protocol`` line past the first ``before`` ones; return it."""
    try:
        return poll(
            lambda: warnings(server)[before:] and warnings(server)[before],
            timeout=timeout,
            what="a new line naming 'PROXY protocol' on stderr",
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.describe()}") from None


def assert_still_serving(server: ServerProcess, option: str, source: str | None = None) -> None:
    """A new connection with a good header (v2 for a ``v2`` server, else v1) gets a 200 whose
    scope's ``client`` is the header's source."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    client = ("198.51.100.20", 40001)
    header = v2_header(src=client) if option == "v2" else v1_line(src=client)
    outcome = exchange(server.port, header + REQUEST, source=source)
    assert scope_of(outcome.received)["client"] == client


def loopback_alias_works(address: str = "127.0.0.2") -> bool:
    """Whether a socket can be bound to ``address`` (all of 127/8 is local on Linux; macOS has
    only 127.0.0.1 unless configured)."""
    try:
        with socket.socket() as sock:
            sock.bind((address, 0))
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def servers() -> Iterator[Callable[[str], ServerProcess]]:
    """``servers("v1")``: the module's server with ``--proxy-protocol v1`` (started on first
    use, stopped at the module's end)."""
    with contextlib.ExitStack() as stack:
        started: dict[str, ServerProcess] = {}

        def get(option: str) -> ServerProcess:
            if option not in started:
                server = running_server(
                    APP, "--proxy-protocol", option, "--timeout-keep-alive", HEADER_TIMEOUT
                )
                started[option] = stack.enter_context(server)
            return started[option]

        yield get


# (id, --proxy-protocol, the bytes the connection begins with). No bytes sent after these could
# make a header the server may take (within its size caps), so it can refuse at once.
BAD_STARTS = [
    ("no-header-v1", "v1", REQUEST),
    ("no-header-v2", "v2", REQUEST),
    ("no-header-auto", "auto", REQUEST),
    ("malformed-v1", "v1", b"PROXY TCP4 garbage\r\n" + REQUEST),
    ("malformed-v1-auto", "auto", b"PROXY TCP4 garbage\r\n" + REQUEST),
    ("v1-200-bytes-without-crlf", "v1", V1_TOO_LONG),
    ("v1-200-bytes-without-crlf-auto", "auto", V1_TOO_LONG),
    ("v2-wrong-signature", "v2", v2_header(signature=b"\r\n\r\n\x00\r\nQUIX\n") + REQUEST),
    ("v2-wrong-signature-auto", "auto", v2_header(signature=b"\r\n\r\n\x00\r\nQUIX\n") + REQUEST),
    ("v2-declaring-65535-bytes", "v2", v2_header(length=65535) + REQUEST),
    ("v2-declaring-65535-bytes-auto", "auto", v2_header(length=65535) + REQUEST),
    ("v1-to-a-v2-server", "v2", v1_line() + REQUEST),
    ("v2-to-a-v1-server", "v1", v2_header() + REQUEST),
]


@pytest.mark.parametrize(
    ("option", "start"), [c[1:] for c in BAD_STARTS], ids=[c[0] for c in BAD_STARTS]
)
def test_a_bad_start_is_closed_without_an_answer(
    servers: Callable[[str], ServerProcess], option: str, start: bytes
) -> None:
    """Each bad start (no header, a malformed v1 line, a v1 line past 107 bytes with no CRLF, a
    wrong v2 signature, a v2 header declaring 65,535 bytes, the other version than the one
    configured) is closed within :data:`PROMPT` with no HTTP answer, a ``PROXY protocol`` line
    is logged, and a good header on a new connection still gets a 200 with its client.

    Seen failing (``HTTP/`` came back) in the no-header, wrong-signature and other-version
    cases with a connection that did not begin with a header served as one without."""
    server = servers(option)
    before = len(warnings(server))
    outcome = exchange(server.port, start)
    assert b"HTTP/" not in outcome.received, outcome.received[:300]
    assert outcome.seconds < PROMPT, f"closed only after {outcome.seconds:.2f}s"
    new_warning(server, before)
    assert_still_serving(server, option)


@pytest.mark.parametrize(
    ("option", "start"),
    [("v1", b"PROXY "), ("v2", V2_SIGNATURE + bytes([V2_PROXY, V2_TCP4, 0, 12]))],
    ids=["v1-prefix-only", "v2-without-its-addresses"],
)
def test_a_header_that_never_ends_is_closed_at_the_timeout(option: str, start: bytes) -> None:
    """A client that sends the start of a header (``PROXY ``, or a v2 header's 16 bytes with
    none of the 12 address bytes it declares) and then nothing is closed once
    ``--timeout-keep-alive 2`` is up: not at once (more than 1 s) and not never (less than
    12 s: a loaded machine's delay, short of ten timeouts), with no HTTP answer and a
    ``PROXY protocol`` line; the server then still serves.

    Seen failing (the read timed out) with the header's timeout ten times the keep-alive
    timeout."""
    args = ("--proxy-protocol", option, "--timeout-keep-alive", "2")
    with running_server(APP, *args) as server:
        before = len(warnings(server))
        outcome = exchange(server.port, start, timeout=30.0)
        assert b"HTTP/" not in outcome.received, outcome.received[:300]
        assert 1.0 < outcome.seconds < 12.0, f"closed after {outcome.seconds:.2f}s"
        new_warning(server, before)
        assert_still_serving(server, option)


def test_a_valid_header_from_an_untrusted_peer_is_closed_unread() -> None:
    """With ``--forwarded-allow-ips 10.9.8.7,127.0.0.2``, a valid v1 header from 127.0.0.1 is
    closed at once with no HTTP answer, and the ``PROXY protocol`` line names the peer
    127.0.0.1. The same header from 127.0.0.2 (a listed peer; Linux routes all of 127/8 to the
    loopback) is then taken: a 200 with the header's client, so the refusal was about the peer.

    Seen failing (a 200 came back) with the trust check left out."""
    args = (
        "--proxy-protocol",
        "v1",
        "--forwarded-allow-ips",
        "10.9.8.7,127.0.0.2",
        "--timeout-keep-alive",
        HEADER_TIMEOUT,
    )
    with running_server(APP, *args) as server:
        before = len(warnings(server))
        outcome = exchange(server.port, v1_line() + REQUEST)
        assert b"HTTP/" not in outcome.received, outcome.received[:300]
        assert outcome.seconds < PROMPT, f"closed only after {outcome.seconds:.2f}s"
        line = new_warning(server, before)
        assert "127.0.0.1" in line, line
        if loopback_alias_works("127.0.0.2"):
            assert_still_serving(server, "v1", source="127.0.0.2")
        else:  # no second loopback address here: at least it did not die
            assert server.returncode is None, server.describe()
