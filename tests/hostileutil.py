"""What the hostile memory tests share: the app's gauge of calls in flight, the check that a
server still serves promptly after an attack, a maximal ping frame, and provoking HTTP/2 stream
resets (MadeYouReset)."""

from __future__ import annotations

import struct
import time

from h2raw import DATA, END_STREAM, WINDOW_UPDATE, H2Raw, frame, get
from serverutil import ServerProcess
from wsutil import OP_PING, build_frame, run, ws_connect


def gauge(server: ServerProcess, name: str) -> dict[str, int]:
    """The app's count of calls of one route now in flight, and the most at once so far."""
    return server.get("/_gauge", timeout=2.0).json()[name]


def check_serves_promptly(server: ServerProcess, *, websocket: bool = False) -> None:
    """The server is alive and answers HTTP/1.1 within a second on a new connection, HTTP/2 too,
    and (``websocket``) echoes over a new WebSocket."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    started = time.monotonic()
    assert server.get("/ok", timeout=1.0).text == "ok"
    with server.client(timeout=1.0, http1=False, http2=True) as client:
        assert client.get("/ok").http_version == "HTTP/2"
    assert time.monotonic() - started < 1.5, "the server answered slowly"
    if websocket:

        async def echo() -> str | bytes:
            async with ws_connect(server, "/echo") as ws:
                await ws.send("still here")
                return await ws.recv()

        assert run(echo(), timeout=2.0) == "still here"


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
