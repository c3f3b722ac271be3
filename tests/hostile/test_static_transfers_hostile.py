"""Hostile transfers of the static files (``--static-path-mount``): odd and huge Range and
conditional headers, HTTP/2 streams cancelled mid-body, files that change or vanish while they are
being sent, and the descriptors and memory of downloads abandoned or never read. Whatever the
request, the server answers (never a 500, never more than the file once), and keeps serving. Hostile
paths (traversal, symlinks out of the mount) are in ``test_static_paths_hostile.py``; the working
paths are in ``tests/http/test_static_*.py``.

The tree is ``staticutil.make_hostile_site``: ``site`` is mounted at ``/static``, ``media`` at
``/media``; ``outside/secret.txt``, ``beside.txt`` and ``site-private/secret.txt`` beside them hold
a random marker that must never appear in a response. The app is ``static_app``, which lists every
request it was called with (``/_seen``). Requests are sent on raw sockets, and over HTTP/2 with
``h2raw``.
"""

from __future__ import annotations

import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostileutil import PROMPT, check_serves_promptly
from support.h1raw import IncompleteResponse, RawConnection, request_bytes
from support.h2raw import (
    DATA,
    RST_STREAM,
    SETTINGS_INITIAL_WINDOW_SIZE,
    WINDOW_UPDATE,
    H2Raw,
    Received,
    frame,
    get,
    setting,
)
from support.memutil import MiB, RssGrowth
from support.serverutil import ServerProcess, poll, running_server
from support.staticutil import (
    APP,
    TEXT_SIZE,
    Site,
    ask,
    fetch,
    make_hostile_site,
    mounts,
)

# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return make_hostile_site(tmp_path_factory.mktemp("static-hostile"))


@pytest.fixture(scope="module")
def server(site: Site) -> Iterator[ServerProcess]:
    with running_server(APP, *mounts(site)) as srv:
        yield srv


# -- ranges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "bytes=",
        "bytes=-",
        "bytes=--5",
        "bytes=1-2-3",
        "bytes=0x10-0x20",
        "bytes=+1-2",
        "bytes=1.5-2",
        "bytes=abc-def",
        "bytes=1--2",
        "bytes=-1-2",
        "bytes==0-1",
        "=0-1",
        "bytes",
        "0-1",
        "bytes=\u00bd-1",
    ],
)
def test_malformed_ranges_are_ignored(server: ServerProcess, site: Site, header: str) -> None:
    """Rule: a Range header that does not parse is ignored: 200 with the whole file. Broken: a
    400 or 416, a 206 of a part read from a half-parsed number (``0x10`` read as 0, ``+1``), or
    a 500."""
    response = ask(server, "/static/text.txt", headers=[("Range", header)])
    assert response.status == 200, (header, response.raw_head)
    assert response.body == site.content("text.txt")


@pytest.mark.parametrize(
    "header",
    [
        "bytes=0-18446744073709551615",
        "bytes=0-99999999999999999999999999",
        "bytes=18446744073709551615-",
        "bytes=18446744073709551615-18446744073709551615",
        "bytes=99999999999999999999999999-",
        "bytes=-18446744073709551615",
        "bytes=-99999999999999999999999999",
        "bytes=-0",
        "bytes=5-2",
        "bytes=999-998",
        "Bytes=0-9",
        "bytes=0-9,",
        "bytes= 0-9",
        "bytes=0-9 ",
        "bytes=0-9\t",
        "bytes=9223372036854775807-9223372036854775808",
    ],
)
def test_extreme_ranges_are_consistent(server: ServerProcess, site: Site, header: str) -> None:
    """Rule: numbers at or past 2^64, zero-length suffixes, reversed ranges and spacing are each
    answered 200 (whole file), 206 (a part whose Content-Range, length and bytes agree) or 416
    (``bytes */SIZE``), never a 500, an overflowed length or a crash. Broken: an integer
    overflow (a panic, a wrapped offset serving the wrong bytes, a Content-Length the body does
    not match)."""
    data = site.content("text.txt")
    response = ask(server, "/static/text.txt", headers=[("Range", header)])
    assert response.status in (200, 206, 416), (header, response.raw_head)
    if response.status == 200:
        assert response.body == data
    elif response.status == 206:
        content_range = response.header("content-range") or ""
        assert content_range.startswith("bytes ") and content_range.endswith(f"/{TEXT_SIZE}")
        first, last = (int(x) for x in content_range[6:].split("/")[0].split("-"))
        assert 0 <= first <= last < TEXT_SIZE, content_range
        assert response.body == data[first : last + 1]
    else:
        assert response.header("content-range") == f"bytes */{TEXT_SIZE}", response.raw_head
    assert server.returncode is None, server.describe()


def test_many_ranges_are_not_amplified(server: ServerProcess, site: Site) -> None:
    """Rule: 1000 overlapping ranges of the whole 10 MiB file, and a 7 kB header of 1-byte
    ranges, get at most the file once (200 with the whole file; or 416, or a 400/431 for the
    header's size), at once. Broken: a multipart answer repeating the file per range (a
    10 GB answer to a 10 kB request), or a server that stops answering."""
    big = len(site.content("big.bin"))
    overlapping = "bytes=" + ",".join(["0-"] * 1000)
    with server.raw(timeout=30) as conn:
        conn.send(request_bytes("GET", "/static/big.bin", headers=[("Range", overlapping)]))
        response = conn.read_response(timeout=30)
    assert response.status in (200, 400, 416, 431), response.raw_head
    assert len(response.body) <= big
    if response.status == 200:
        assert response.body == site.content("big.bin")
    tiny = "bytes=" + ",".join(f"{i}-{i}" for i in range(0, 2000, 2))
    response = ask(server, "/static/text.txt", headers=[("Range", tiny)])
    assert response.status in (200, 400, 416, 431), response.raw_head
    assert len(response.body) <= TEXT_SIZE
    check_serves_promptly(server)


def test_an_empty_file_has_no_range(server: ServerProcess) -> None:
    """Rule: any range of a 0-byte file is unsatisfiable (416 ``bytes */0``) or ignored (200,
    empty). Broken: a 206 with ``bytes 0--1/0`` (an underflow), or a panic."""
    for header in ("bytes=0-", "bytes=0-0", "bytes=-1", "bytes=-0"):
        response = ask(server, "/static/empty.txt", headers=[("Range", header)])
        assert response.status in (200, 416), (header, response.raw_head)
        if response.status == 416:
            assert response.header("content-range") == "bytes */0", response.raw_head
        else:
            assert response.body == b""


@pytest.mark.parametrize("if_range", ["garbage", '"unterminated', "W/", "", "Mon, 99 Foo 2024"])
def test_a_bad_if_range_sends_the_whole_file(
    server: ServerProcess, site: Site, if_range: str
) -> None:
    """Rule: an ``If-Range`` that is neither the ETag nor the date cannot be confirmed, so the
    Range is dropped: 200 with the whole file. Broken: the range honoured (the client may
    splice a part onto a stale copy) or a 400."""
    headers = [("Range", "bytes=0-9"), ("If-Range", if_range)]
    response = ask(server, "/static/text.txt", headers=headers)
    assert response.status == 200, (if_range, response.raw_head)
    assert response.body == site.content("text.txt")


def test_huge_conditional_lists(server: ServerProcess, site: Site) -> None:
    """Rule: an ``If-None-Match`` of 1000 ETags (none the file's) and a malformed one are a 200
    with the file, answered at once (within :data:`PROMPT`: a loaded machine takes a second or
    two). Broken: a parse that hangs (no answer: ``ask`` takes the silence for a close, which
    only the time tells), a 500, or a 304."""
    many = ", ".join(f'"etag-{i}"' for i in range(1000))
    for value in (many, '"unterminated', ",,,,", "W/W/W/"):
        started = time.monotonic()
        headers = [("If-None-Match", value)]
        response = ask(server, "/static/text.txt", headers=headers, timeout=2 * PROMPT)
        assert response.status in (200, 400, 431), (value[:40], response.raw_head)
        if response.status == 200:
            assert response.body == site.content("text.txt")
        assert time.monotonic() - started < PROMPT


# -- HTTP/2 --------------------------------------------------------------------------------------


def recv_for(sock: socket.socket, seconds: float) -> bytes:
    """Whatever arrives on ``sock`` within ``seconds`` (frames may be cut at either end)."""
    deadline = time.monotonic() + seconds
    data = bytearray()
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            break
        if not chunk:
            break
        data += chunk
    return bytes(data)


def test_http2_streams_cancelled_mid_body(server: ServerProcess, site: Site) -> None:
    """Rule: twenty HTTP/2 streams of the 10 MiB file, each cancelled (RST_STREAM CANCEL) after
    the first DATA, leave the connection and the server serving: a stream opened after them on
    the same connection gets a small file. Broken: the file task keeps the connection's window
    or dies on the reset."""
    settings = setting(SETTINGS_INITIAL_WINDOW_SIZE, 256 * 1024)
    grow_connection = frame(WINDOW_UPDATE, 0, 0, (2**30).to_bytes(4, "big"))
    received = bytearray()
    data = b""
    with H2Raw(server, settings) as conn:
        conn.send(grow_connection)
        for index in range(20):
            stream = 2 * index + 1
            conn.send(get(stream, "/static/big.bin"))
            received += recv_for(conn.sock, 0.3)
            conn.send(frame(RST_STREAM, 0, stream, (0x8).to_bytes(4, "big")))
        conn.send(get(41, "/static/text.txt"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and data != site.content("text.txt"):
            received += recv_for(conn.sock, 0.3)
            frames = Received(bytes(received), False).frames
            data = b"".join(f.payload for f in frames if f.kind == DATA and f.stream == 41)
    assert data == site.content("text.txt")
    check_serves_promptly(server)


# -- files that change under the server ----------------------------------------------------------


def write_big(site: Site, size: int = 20 * MiB) -> tuple[Path, bytes]:
    path = site.root / f"moving-{uuid.uuid4().hex}.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    return path, data


class SmallWindowConnection(RawConnection):
    """A :class:`RawConnection` whose receive buffer is set before it connects (so the window
    the kernel advertises stays small for the whole connection and the server is kept mid-file,
    without the delayed-ACK stalls of a buffer shrunk after the handshake)."""

    def __init__(self, port: int, rcvbuf: int, timeout: float) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        self.sock = sock
        self.timeout = timeout
        self._buffer = bytearray()
        self._received = []
        self.eof = False


def start_slow_download(server: ServerProcess, name: str) -> RawConnection:
    """A connection with a small receive buffer that has asked for ``name`` and read the head
    and the first 64 KiB of the body (the server is then blocked on the socket, mid-file)."""
    assert server.port is not None
    conn = SmallWindowConnection(server.port, 65536, 20.0)
    conn.send(request_bytes("GET", f"/static/{name}"))
    head = conn.read_until(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    conn.read_exactly(65536)
    time.sleep(0.2)  # the server fills the socket buffers and waits
    return conn


def test_a_file_truncated_while_sent(server: ServerProcess, site: Site) -> None:
    """Rule: a 20 MiB file truncated to 1 kB while a slow client is reading it ends that
    response (the connection closes: the declared length can no longer be met) within seconds,
    and the server keeps serving; the next request gets the short file. Broken: the connection
    hangs forever waiting for bytes that will not come, padding is sent, or the server dies."""
    path, _ = write_big(site)
    conn = start_slow_download(server, path.name)
    with conn:
        os.truncate(path, 1000)
        assert conn.wait_closed(15.0), "the connection stayed open with a short body"
    check_serves_promptly(server)
    assert len(fetch(server, f"/static/{path.name}").body) == 1000
    path.unlink()


def test_a_file_grown_while_sent(server: ServerProcess, site: Site) -> None:
    """Rule: a file appended to while it is sent goes out as exactly the Content-Length it was
    announced with (or the connection is closed), so a kept-alive connection stays framed: the
    next response on it parses. Broken: the extra bytes sent past the length, read by the client
    as the start of the next response."""
    path, data = write_big(site, 4 * MiB)
    conn = start_slow_download(server, path.name)
    with conn:
        with path.open("ab") as grow:
            grow.write(b"X" * MiB)
        rest = conn.read_exactly(len(data) - 65536, timeout=15)
        assert len(rest) == len(data) - 65536
        conn.send(request_bytes("GET", "/static/text.txt"))
        try:
            after = conn.read_response(timeout=5)
        except IncompleteResponse as exc:
            assert exc.received.endswith(rest[-100:]), "bytes past the Content-Length were sent"
        else:
            assert (after.status, after.body) == (200, site.content("text.txt"))
    path.unlink()


def test_a_file_deleted_while_sent(server: ServerProcess, site: Site) -> None:
    """Rule: a file unlinked while a slow client reads it either still goes out whole (the open
    file lives on) or the connection closes; the server keeps serving and the name is then a
    404. Broken: a hang or a crash."""
    path, data = write_big(site)
    conn = start_slow_download(server, path.name)
    with conn:
        path.unlink()
        try:
            rest = conn.read_exactly(len(data) - 65536, timeout=20)
            assert rest == data[65536:]
        except IncompleteResponse:
            assert conn.eof, "neither the whole body nor a close"
    check_serves_promptly(server)
    assert fetch(server, f"/static/{path.name}").status == 404


# -- resources -----------------------------------------------------------------------------------


def descriptors_on(pid: int, path: Path) -> int:
    """How many of ``pid``'s open descriptors point at ``path``."""
    count = 0
    target = str(path.resolve())
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                count += 1
        except OSError:
            continue
    return count


def test_abandoned_downloads_close_their_files(site: Site) -> None:
    """Rule: thirty clients that start the 10 MiB download and go away (half with a reset) leave
    no descriptor of the file open in the server once they are gone. Broken: the file task of
    an abandoned response never ends, keeping its descriptor (and the task) forever."""
    big = site.root / "big.bin"
    with running_server(APP, "--static-path-mount", str(site.root)) as srv:
        holder = start_slow_download(srv, "big.bin")
        with holder:
            opened = poll(lambda: descriptors_on(srv.pid, big), what="a descriptor")
            assert opened >= 1
        for index in range(30):
            with srv.raw() as conn:
                if index % 2:
                    conn.sock.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                conn.send(request_bytes("GET", "/static/big.bin"))
                conn.read_until(b"\r\n\r\n")
        poll(
            lambda: descriptors_on(srv.pid, big) == 0,
            timeout=10,
            what="the server to close every descriptor of big.bin",
        )
        check_serves_promptly(srv)


def test_clients_that_do_not_read_cost_no_file_sized_memory(site: Site) -> None:
    """Rule: sixteen clients asking for the 10 MiB file and reading nothing cost the server far
    less than the 160 MiB the files add up to (it reads a large file as the socket takes it).
    Broken: each response buffered whole in memory (a read-the-file-then-send server)."""
    with running_server(APP, "--static-path-mount", str(site.root)) as srv:
        growth = RssGrowth(srv.pid)
        conns = []
        try:
            for _ in range(16):
                conn = srv.raw(timeout=10)
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
                conn.send(request_bytes("GET", "/static/big.bin"))
                conns.append(conn)
            for conn in conns:
                conn.read_until(b"\r\n\r\n")
            time.sleep(1.0)
            held = growth.held()
        finally:
            for conn in conns:
                conn.close()
        assert held < 48 * MiB, f"{held / MiB:.1f} MiB held for 16 unread 10 MiB files"
        assert growth.peak() < 64 * MiB, f"peak {growth.peak() / MiB:.1f} MiB"
        check_serves_promptly(srv)
