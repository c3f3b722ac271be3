"""A small HTTP/3 client for the tests, on aioquic's QUIC and HTTP/3 classes: requests on one
connection (concurrent ones too), responses with their trailers, stream resets, and the frames
of the server's control stream (to see its GOAWAY)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer, BufferReadError
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamDataReceived, StreamReset

#: HTTP/3 frame and stream types (RFC 9114 7.2, 6.2.1).
GOAWAY = 0x7
CONTROL_STREAM = 0x0

Headers = Sequence[tuple[bytes, bytes]]


class StreamError(Exception):
    """The server reset the stream, or the connection ended before the response did."""


@dataclass
class Response:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    trailers: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: The informational (1xx) responses before the final one: status and fields of each.
    informational: list[tuple[int, list[tuple[bytes, bytes]]]] = field(default_factory=list)

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key == name), None)


class H3Client(QuicConnectionProtocol):
    """One QUIC connection speaking HTTP/3."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.authority = b"127.0.0.1"
        self._responses: dict[int, tuple[Response, asyncio.Future[Response]]] = {}
        #: Bytes of every server-initiated unidirectional stream, by stream id.
        self.uni_streams: dict[int, bytearray] = {}
        self.terminated: ConnectionTerminated | None = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            self.uni_streams.setdefault(event.stream_id, bytearray()).extend(event.data)
        if isinstance(event, StreamReset) and event.stream_id in self._responses:
            _, waiter = self._responses.pop(event.stream_id)
            if not waiter.done():
                waiter.set_exception(StreamError(f"stream reset, code {event.error_code:#x}"))
        if isinstance(event, ConnectionTerminated):
            self.terminated = event
            for _, waiter in self._responses.values():
                if not waiter.done():
                    waiter.set_exception(StreamError(f"connection closed: {event}"))
            self._responses.clear()
        for h3_event in self.http.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: H3Event) -> None:
        if not isinstance(event, (HeadersReceived, DataReceived)):
            return
        entry = self._responses.get(event.stream_id)
        if entry is None:
            return
        response, waiter = entry
        if isinstance(event, HeadersReceived):
            if response.status == 0:
                for name, value in event.headers:
                    if name == b":status":
                        response.status = int(value)
                    else:
                        response.headers.append((name, value))
                if 100 <= response.status < 200:
                    response.informational.append((response.status, response.headers))
                    response.status, response.headers = 0, []
            else:
                response.trailers.extend(event.headers)
        else:
            response.body.extend(event.data)
        if event.stream_ended:
            del self._responses[event.stream_id]
            if not waiter.done():
                waiter.set_result(response)

    def start_request(
        self, method: str, path: str, headers: Headers = (), body: bytes | None = None
    ) -> tuple[int, asyncio.Future[Response]]:
        """Sends a request; returns its stream id and the future of its response."""
        stream_id = self._quic.get_next_available_stream_id()
        head = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", self.authority),
            (b":path", path.encode()),
            *headers,
        ]
        self.http.send_headers(stream_id, head, end_stream=body is None)
        if body is not None:
            self.http.send_data(stream_id, body, end_stream=True)
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._responses[stream_id] = (Response(), waiter)
        self.transmit()
        return stream_id, waiter

    async def request(
        self,
        method: str,
        path: str,
        headers: Headers = (),
        body: bytes | None = None,
        timeout: float = 10.0,
    ) -> Response:
        _, waiter = self.start_request(method, path, headers, body)
        return await asyncio.wait_for(waiter, timeout)

    def reset_stream(self, stream_id: int, code: int = 0x10C) -> None:
        """Abandons a request (H3_REQUEST_CANCELLED by default)."""
        # aioquic forgets a stream once both its sides are done: nothing left to reset then.
        with contextlib.suppress(ValueError):
            self._quic.reset_stream(stream_id, code)
        with contextlib.suppress(ValueError):
            self._quic.stop_stream(stream_id, code)
        self._responses.pop(stream_id, None)
        self.transmit()

    def control_frames(self) -> list[tuple[int, bytes]]:
        """The frames the server sent on its control stream so far, as (type, payload)."""
        for data in self.uni_streams.values():
            buf = Buffer(data=bytes(data))
            try:
                if buf.pull_uint_var() != CONTROL_STREAM:
                    continue
            except BufferReadError:
                continue
            frames = []
            while not buf.eof():
                try:
                    kind = buf.pull_uint_var()
                    length = buf.pull_uint_var()
                    frames.append((kind, buf.pull_bytes(length)))
                except BufferReadError:
                    break
            return frames
        return []


async def stream_credit(client: H3Client, at_least: int) -> int:
    """Request streams ``client`` may open now, once there are at least ``at_least`` (quinn
    sends MAX_STREAMS once an eighth of its limit is free; aioquic does not wait for it)."""
    deadline = time.monotonic() + 5
    while True:
        opened = client._quic.get_next_available_stream_id() // 4
        free = client._quic._remote_max_streams_bidi - opened
        if free >= at_least:
            return free
        assert time.monotonic() < deadline, free
        await asyncio.sleep(0.02)


async def open_and_reset(client: H3Client, rounds: int, path: str) -> None:
    """``rounds`` times, opens as many POST streams to ``path`` as the client may (a body to
    come) and resets each at once; returns once a stream may be opened again."""
    head = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"127.0.0.1")]
    for _ in range(rounds):
        ids = []
        for _ in range(await stream_credit(client, 100 - 100 // 8)):
            stream_id = client._quic.get_next_available_stream_id()
            client.http.send_headers(stream_id, [*head, (b":path", path.encode())])
            client.http.send_data(stream_id, b"partial", end_stream=False)
            ids.append(stream_id)
        client.transmit()
        for stream_id in ids:
            client.reset_stream(stream_id)
    await stream_credit(client, 1)


def configuration(ca: Path, *, max_idle: float = 10.0) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, idle_timeout=max_idle)
    config.load_verify_locations(str(ca))
    config.verify_mode = ssl.CERT_REQUIRED
    config.server_name = "127.0.0.1"
    return config


@contextlib.asynccontextmanager
async def h3_connection(
    port: int, ca: Path, *, timeout: float = 10.0, max_idle: float = 10.0
) -> AsyncIterator[H3Client]:
    """An HTTP/3 connection to 127.0.0.1:``port``, verifying the server against ``ca``."""
    async with asyncio.timeout(timeout):
        manager = connect(
            "127.0.0.1",
            port,
            configuration=configuration(ca, max_idle=max_idle),
            create_protocol=H3Client,
        )
        client = await manager.__aenter__()
    assert isinstance(client, H3Client)
    try:
        yield client
    finally:
        await manager.__aexit__(None, None, None)
