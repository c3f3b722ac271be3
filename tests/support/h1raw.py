"""A raw HTTP/1.1 client for the black-box tests, in every folder of ``tests/``:
:class:`RawConnection` sends exact bytes on a plain socket and parses the responses (interim 1xx,
Content-Length, chunked, close-delimited, HEAD) or reads until the peer closes;
:func:`request_bytes` makes a request's exact bytes; :func:`parse_responses` splits what one
connection received. Every read is bounded, so a broken server fails a test instead of hanging.

Imported by the test modules as ``from support.h1raw import ...`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: Default bound for one HTTP exchange.
HTTP_TIMEOUT = 5.0


class IncompleteResponse(AssertionError):
    """The peer closed (or went silent) before a complete response was read."""

    def __init__(self, message: str, received: bytes) -> None:
        super().__init__(f"{message}; received so far: {received[:600]!r}")
        self.received = received


@dataclass
class RawResponse:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw_head: bytes
    chunked: bool = False
    chunk_sizes: list[int] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key == name]

    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    """One TCP connection with a read buffer, every operation bounded by ``timeout``."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = HTTP_TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        # A bytearray and a list of chunks: a 32 MiB body read into bytes by `+=` took most of
        # a minute on a loaded machine.
        self._buffer = bytearray()
        self._received: list[bytes] = []  # everything read, for diagnostics
        self.eof = False

    @property
    def buffer(self) -> bytes:
        """What was read and not yet consumed."""
        return bytes(self._buffer)

    @property
    def received(self) -> bytes:
        """Everything read so far."""
        return b"".join(self._received)

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read more bytes into the buffer; False at EOF. Raises ``TimeoutError`` at deadline."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self._buffer += data
        self._received.append(data)
        return True

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def read_until(self, marker: bytes, timeout: float | None = None) -> bytes:
        """Bytes up to and including ``marker``."""
        deadline = self._deadline(timeout)
        while marker not in self._buffer:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse(f"no {marker!r} in time", self.received) from None
            if not more:
                raise IncompleteResponse(f"EOF before {marker!r}", self.received)
        index = self._buffer.index(marker) + len(marker)
        data = bytes(self._buffer[:index])
        del self._buffer[:index]
        return data

    def read_exactly(self, count: int, timeout: float | None = None) -> bytes:
        deadline = self._deadline(timeout)
        while len(self._buffer) < count:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse(
                    f"fewer than {count} bytes in time", self.received
                ) from None
            if not more:
                raise IncompleteResponse(f"EOF before {count} bytes", self.received)
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def read_until_close(self, timeout: float | None = None) -> bytes:
        """Everything until the peer closes; raises :class:`IncompleteResponse` on timeout."""
        deadline = self._deadline(timeout)
        while True:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse("the peer did not close in time", self.received) from None
            if not more:
                data = bytes(self._buffer)
                self._buffer.clear()
                return data

    def wait_closed(self, timeout: float) -> bool:
        """True if the peer closes within ``timeout`` (any unread bytes are discarded)."""
        try:
            self.read_until_close(timeout)
        except IncompleteResponse:
            return False
        return True

    def read_response(self, *, head: bool = False, timeout: float | None = None) -> RawResponse:
        """Parse one response (an interim 1xx response is returned as is)."""
        deadline = self._deadline(timeout)

        def left() -> float:
            return max(deadline - time.monotonic(), 0.001)

        raw_head = self.read_until(b"\r\n\r\n", left())
        lines = raw_head[:-4].split(b"\r\n")
        version, _, rest = lines[0].decode("latin-1").partition(" ")
        status_text, _, reason = rest.partition(" ")
        headers = []
        for line in lines[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip().lower(), value.strip()))
        response = RawResponse(version, int(status_text), reason, headers, b"", raw_head)
        encoding = ",".join(response.all("transfer-encoding")).lower()
        length = response.header("content-length")
        if head or 100 <= response.status < 200 or response.status in (204, 304):
            return response
        if "chunked" in encoding:
            response.chunked = True
            body = []
            while True:
                size_line = self.read_until(b"\r\n", left())
                size = int(size_line.split(b";")[0].strip(), 16)
                response.chunk_sizes.append(size)
                if size == 0:
                    while self.read_until(b"\r\n", left()) != b"\r\n":  # trailers
                        pass
                    break
                body.append(self.read_exactly(size, left()))
                if self.read_exactly(2, left()) != b"\r\n":
                    raise IncompleteResponse("chunk not followed by CRLF", self.received)
            response.body = b"".join(body)
        elif length is not None:
            response.body = self.read_exactly(int(length), left())
        else:
            response.body = self.read_until_close(left())
        return response

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def request_bytes(
    method: str,
    target: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: str = "test",
    content_length: bool | None = None,
) -> bytes:
    """A request as bytes; ``Content-Length`` is added when there is a body (or when asked)."""
    lines = [f"{method} {target} {version}", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if content_length or (content_length is None and body):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def raw_exchange(port: int, data: bytes, timeout: float = HTTP_TIMEOUT) -> bytes:
    """Send ``data`` on a new connection and return what arrives until close or ``timeout``."""
    with RawConnection(port, timeout=timeout) as conn:
        conn.send(data)
        try:
            conn.read_until_close(timeout)
        except IncompleteResponse:
            pass
        return conn.received


class _ReceivedBytes(RawConnection):
    """A :class:`RawConnection` over bytes already read (no socket), to reuse its parser."""

    def __init__(self, data: bytes) -> None:  # no socket on purpose
        self.timeout = 0.001
        self._buffer = bytearray(data)
        self._received = [data]
        self.eof = True

    def close(self) -> None:
        pass


def parse_responses(data: bytes) -> tuple[list[RawResponse], bytes]:
    """Split everything read from one connection into complete responses, in order; also
    returns the bytes left over after the last complete one (a truncated response, junk)."""
    reader = _ReceivedBytes(data)
    responses: list[RawResponse] = []
    while reader.buffer:
        before = reader.buffer
        try:
            responses.append(reader.read_response())
        except (IncompleteResponse, ValueError, IndexError):
            return responses, before
    return responses, b""


def send_in_background(conn: RawConnection, data: bytes) -> threading.Thread:
    """``sendall`` on a daemon thread (errors such as a reset are swallowed), so the caller can
    read an early answer while a large request is still being written. Join it when done."""

    def run() -> None:
        with contextlib.suppress(OSError):
            conn.sock.sendall(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


#: Offset of ``tcpi_data_segs_in`` (segments with data received) in Linux's ``struct tcp_info``.
TCPI_DATA_SEGS_IN = 152


def data_segments_in(sock: socket.socket) -> int:
    """How many TCP segments with data ``sock`` has received (Linux ``TCP_INFO``): with the
    server's ``TCP_NODELAY``, about how many writes the server made to it."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int.from_bytes(info[TCPI_DATA_SEGS_IN : TCPI_DATA_SEGS_IN + 4], "little")
