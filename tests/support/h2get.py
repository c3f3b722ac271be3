"""One GET over HTTP/2 with prior knowledge (h2c), with the ``h2`` library on a raw socket, so
that the body is not decoded: what the server's frames say, as the library's events."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import h2.config
import h2.connection
import h2.events

from support.serverutil import ServerProcess


def h2c_get(
    server: ServerProcess,
    path: str,
    headers: Sequence[tuple[str, str]] = (),
    timeout: float = 5.0,
) -> list[Any]:
    """The events of the server's frames for ``GET path`` with ``headers``, until its stream
    ends or is reset (or ``timeout`` passes)."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    head = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "t")]
    conn.send_headers(1, [*head, *headers], end_stream=True)
    events: list[Any] = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                events.append(event)
                if isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
            sock.sendall(conn.data_to_send())
            if any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) for e in events):
                break
    return events
