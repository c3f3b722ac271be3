"""A WebSocket over an HTTP/2 stream (RFC 8441) for the tests: the ``h2`` library's client on a
plain socket (h2c) or TLS, and WebSocket frames built and parsed by hand on the stream's DATA
(client frames masked, as RFC 6455 asks of a client). Every read is bounded by a socket
timeout."""

from __future__ import annotations

import os
import socket

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from support.serverutil import ServerProcess

TIMEOUT = 5.0


def ws_frame(opcode: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    key = os.urandom(4)
    masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
    if len(payload) < 126:
        length = bytes([0x80 | len(payload)])
    else:
        length = bytes([0x80 | 126]) + len(payload).to_bytes(2, "big")
    return bytes([0x80 | opcode]) + length + key + masked


def parse_frames(data: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Whole unmasked server frames at the start of ``data``, and what is left."""
    frames = []
    while len(data) >= 2:
        opcode, length, start = data[0] & 0x0F, data[1] & 0x7F, 2
        if length == 126:
            length, start = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, start = int.from_bytes(data[2:10], "big"), 10
        if len(data) < start + length:
            break
        frames.append((opcode, data[start : start + length]))
        data = data[start + length :]
    return frames, data


class H2Client:
    """One HTTP/2 connection, with the streams' events sorted by stream."""

    def __init__(self, sock: socket.socket, authority: str, scheme: str = "http") -> None:
        self.sock = sock
        self.authority = authority
        self.scheme = scheme
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.flush()
        self.pending = b""
        self.status: dict[int, int] = {}
        self.data: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.reset: set[int] = set()
        self.goaway = False
        while not self.conn.remote_settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL):
            if not self.pump():
                break

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.sock.sendall(out)

    def pump(self) -> bool:
        """Reads once and sorts the events; False at the end of the connection."""
        received = self.sock.recv(65536)
        if not received:
            return False
        self.pending += received
        for event in self.events():
            if isinstance(event, h2.events.ResponseReceived):
                self.status[event.stream_id] = int(dict(event.headers)[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                self.data[event.stream_id] = self.data.get(event.stream_id, b"") + event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                self.reset.add(event.stream_id)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.goaway = True
        self.flush()
        return True

    def events(self) -> list[h2.events.Event]:
        """The events of each whole frame received, a frame at a time: after the server's
        GOAWAY, h2 refuses frames the server may still send (a PING at shutdown), and one
        refused frame must not lose the others read with it."""
        events: list[h2.events.Event] = []
        while len(self.pending) >= 9:
            end = 9 + int.from_bytes(self.pending[:3], "big")
            if len(self.pending) < end:
                break
            frame, self.pending = self.pending[:end], self.pending[end:]
            try:
                events += self.conn.receive_data(frame)
            except h2.exceptions.ProtocolError:
                self.goaway = True
                self.keep_data(frame)
        return events

    def keep_data(self, frame: bytes) -> None:
        """A DATA frame h2 refused after GOAWAY: its payload kept by hand (streams the server
        had started still finish)."""
        kind, flags = frame[3], frame[4]
        stream = int.from_bytes(frame[5:9], "big") & 0x7FFFFFFF
        if kind != 0x0:
            return
        payload = frame[9:]
        if flags & 0x8:  # PADDED
            payload = payload[1 : len(payload) - payload[0]]
        self.data[stream] = self.data.get(stream, b"") + payload

    def connect_ws(self, path: str, *extra: tuple[str, str]) -> int:
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", self.scheme),
            (":path", path),
            (":authority", self.authority),
            ("sec-websocket-version", "13"),
            *extra,
        ]
        self.conn.send_headers(stream, headers)
        self.flush()
        return stream

    def get(self, path: str) -> int:
        stream = self.conn.get_next_available_stream_id()
        headers = [
            (":method", "GET"),
            (":scheme", self.scheme),
            (":path", path),
            (":authority", self.authority),
        ]
        self.conn.send_headers(stream, headers, end_stream=True)
        self.flush()
        return stream

    def send_ws(self, stream: int, opcode: int, payload: bytes) -> None:
        self.conn.send_data(stream, ws_frame(opcode, payload))
        self.flush()

    def wait(self, done: object) -> None:
        while not done():  # type: ignore[operator]
            assert self.pump(), "the connection ended"

    def response(self, stream: int) -> int:
        # A complete answer may be followed by RST_STREAM(NO_ERROR): the client's side of a
        # refused CONNECT stream is still open, and the server needs nothing more from it.
        self.wait(lambda: stream in self.status or stream in self.reset)
        assert stream in self.status, f"stream {stream} reset without a response"
        return self.status[stream]

    def next_frames(self, stream: int, count: int = 1) -> list[tuple[int, bytes]]:
        """The next ``count`` WebSocket frames the server sent on ``stream``."""
        frames: list[tuple[int, bytes]] = []

        def enough() -> bool:
            parsed, rest = parse_frames(self.data.get(stream, b""))
            if len(frames) + len(parsed) >= count:
                frames.extend(parsed)
                self.data[stream] = rest
                return True
            return False

        self.wait(enough)
        return frames


def plain_client(srv: ServerProcess) -> H2Client:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT)
    return H2Client(sock, f"127.0.0.1:{srv.port}")
