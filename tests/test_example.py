"""The README's example app, served as a user serves it, over each protocol: HTTP/1.1,
HTTP/2 over cleartext (prior knowledge, as gRPC clients and proxies speak it) and a WebSocket.

Marked ``smoke``: with the bridge tests, this is what ``scripts/test-arm64.sh`` runs on an
aarch64 wheel under emulation (``pytest -m smoke``)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from support.serverutil import running_server
from support.wsutil import recv, run, ws_connect

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STREAM = b"".join(b"chunk %d\n" % i for i in range(5))

pytestmark = pytest.mark.smoke


def test_the_example_app_over_http1_http2_and_a_websocket() -> None:
    """Seen failing: on HTTP/2, with the server started with ``--http h11`` (the client's
    preface refused); on the WebSocket, with the example's echo sending ``bytes`` back."""
    with running_server("hello:app", cwd=EXAMPLES) as server:
        with server.client() as http1:
            assert http1.get("/").content == b"Hello from ferrule\n"
            assert http1.get("/stream").content == STREAM
        with httpx.Client(base_url=server.base_url, http1=False, http2=True) as http2:
            response = http2.get("/")
            assert (response.http_version, response.content) == ("HTTP/2", b"Hello from ferrule\n")
            assert http2.get("/stream").content == STREAM

        async def talk() -> None:
            async with ws_connect(server, "/ws") as ws:
                await ws.send("hello")
                assert await recv(ws) == "hello"
                await ws.send(b"\x00\x01")
                assert await recv(ws) == b"\x00\x01"

        run(talk())
