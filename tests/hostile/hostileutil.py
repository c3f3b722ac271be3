"""What the hostile tests (``tests/hostile/``) share: the app's gauge of calls in flight, the
check that a server still serves promptly after an attack, a maximal ping frame, provoking HTTP/2
stream resets (MadeYouReset), clients that write without ever reading (:class:`Flood`,
:func:`flood`), and how many sockets the server closes in time (:func:`closed_within`).

Imported by the test modules as ``from hostileutil import ...`` (pytest puts ``tests/hostile``
on ``sys.path``).
"""

from __future__ import annotations

import selectors
import socket
import ssl
import struct
import time
from collections.abc import Sequence

from support.h2raw import DATA, END_STREAM, WINDOW_UPDATE, H2Raw, frame, get
from support.serverutil import ServerProcess
from support.wsutil import OP_PING, build_frame, run, ws_connect


def gauge(server: ServerProcess, name: str) -> dict[str, int]:
    """The app's count of calls of one route now in flight, and the most at once so far."""
    return server.get("/_gauge", timeout=2.0).json()[name]


#: How long a server under attack may take to answer another client. What the checks catch is a
#: loop or connection task held for as long as the attack lasts (no answer at all); a bound of
#: a second failed once with the whole suite run twice at once on two cores.
PROMPT = 10.0


def check_serves_promptly(server: ServerProcess, *, websocket: bool = False) -> None:
    """The server is alive and answers HTTP/1.1 on a new connection, HTTP/2 too, and
    (``websocket``) echoes over a new WebSocket, each within :data:`PROMPT`."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    assert server.get("/ok", timeout=PROMPT).text == "ok"
    with server.client(timeout=PROMPT, http1=False, http2=True) as client:
        assert client.get("/ok").http_version == "HTTP/2"
    if websocket:

        async def echo() -> str | bytes:
            async with ws_connect(server, "/echo") as ws:
                await ws.send("still here")
                return await ws.recv()

        assert run(echo(), timeout=PROMPT) == "still here"


#: A masked ping with the largest payload a control frame may carry.
PING_FRAME = build_frame(OP_PING, b"p" * 125)

#: RFC 9113 6.9.1: a stream window pushed past 2^31-1 is a stream error FLOW_CONTROL_ERROR.
OVERFLOW = struct.pack(">I", 0x7FFFFFFF)

#: What makes the server reset a stream it has accepted (sent once the HEADERS are in).
PROVOKE = {
    "window-overflow": lambda sid: frame(WINDOW_UPDATE, 0, sid, OVERFLOW),
    "data-on-half-closed": lambda sid: frame(DATA, END_STREAM, sid, b"late"),
}


def provoke_resets(conn: H2Raw, form: str, path: str, count: int = 1000) -> None:
    """``count`` streams, in batches of 100: the HEADERS (a GET of ``path``), 50 ms for the
    server to accept them, then the frame that makes it reset each."""
    for first in range(0, count, 100):
        ids = [2 * i + 1 for i in range(first, min(first + 100, count))]
        if not conn.send(b"".join(get(sid, path) for sid in ids)):
            return
        time.sleep(0.05)
        if not conn.send(b"".join(PROVOKE[form](sid) for sid in ids)):
            return


class Flood:
    """Writes ``batch`` on ``sock`` over and over without ever reading, a non-blocking write at
    a time (:meth:`pump`), resuming a short write where it stopped so that the stream is never
    cut inside ``batch`` (make it whole frames or requests). Run several with :func:`flood`."""

    def __init__(self, sock: socket.socket, batch: bytes) -> None:
        self.sock = sock
        self.batch = memoryview(batch)
        self.offset = 0
        self.sent = 0
        self.started = time.monotonic()
        self.last_send = self.started
        #: Seconds from the start to the write that failed (the peer closed or reset), if any.
        self.closed_after: float | None = None
        sock.setblocking(False)

    def pump(self) -> None:
        if self.closed_after is not None:
            return
        try:
            count = self.sock.send(self.batch[self.offset :])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        except OSError:
            self.closed_after = time.monotonic() - self.started
            return
        self.sent += count
        self.offset = (self.offset + count) % len(self.batch)
        self.last_send = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the last write the peer took."""
        return time.monotonic() - self.last_send

    def finish(self, timeout: float = 5.0) -> None:
        """Write the rest of the current ``batch`` (blocking, bounded by ``timeout``), so that
        what follows on the socket starts at a batch boundary; the socket is left blocking."""
        self.sock.settimeout(timeout)
        if self.closed_after is None and self.offset:
            self.sock.sendall(self.batch[self.offset :])
            self.sent += len(self.batch) - self.offset
            self.offset = 0


def flood(floods: Sequence[Flood], seconds: float) -> None:
    """Pump every :class:`Flood` whose socket takes more, for ``seconds`` (or until all fail)."""
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        for index, each in enumerate(floods):
            selector.register(each.sock, selectors.EVENT_WRITE, index)
        while (left := deadline - time.monotonic()) > 0:
            if all(each.closed_after is not None for each in floods):
                return
            for key, _ in selector.select(min(left, 0.1)):
                floods[key.data].pump()


def closed_within(socks: Sequence[socket.socket], timeout: float) -> int:
    """How many of ``socks`` the peer closes (or resets) within ``timeout``; whatever arrives on
    them meanwhile is read and dropped."""
    left_open = {sock.fileno(): sock for sock in socks}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while left_open and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(min(left, 0.1)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(sock)
                    left_open.pop(sock.fileno(), None)
    return len(socks) - len(left_open)
