"""Static files served by the server itself (``--static-path-mount``): large files and clients that
go away, HTTP/2 (h2c and TLS) and HTTP/3, and the settings (``--help``, usage errors,
``ferrule.run``).

The tree served is made per module by ``staticutil.make_site`` (every file with a known mtime, a 10
MiB random file, precompressed variants, symlinks). The app is ``static_app``: it answers its own
404 page with ``x-from-app`` and lists what it was called with (``/_seen``), so each test can tell a
response of the server's from one of the app's, and check that a static request never entered
Python. Requests go over raw sockets where the exact bytes matter, httpx and curl as real clients,
httpx's h2 for HTTP/2 and aioquic (``h3client``) for HTTP/3. The working paths are split by concern:
``test_static_serving.py`` (file responses, routes and mounts), ``test_static_conditions.py`` (304s,
ranges, expiry), ``test_static_variants.py`` (precompressed variants, fallthrough, ``--compress``)
and ``test_static_protocols.py`` (large files, HTTP/2, TLS, HTTP/3, settings); the hostile requests
(traversal, symlinks out of the mount, odd ranges) are in
``tests/hostile/test_static_paths_hostile.py`` and
``tests/hostile/test_static_transfers_hostile.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.certs import Certs
from support.h1raw import request_bytes
from support.h3client import h3_connection
from support.serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    run_to_exit,
    running_server,
)
from support.staticutil import (
    APP,
    BIG_SIZE,
    LAST_MODIFIED,
    TEXT_SIZE,
    Site,
    ctype,
    fetch,
    from_app,
    make_site,
    site_args,
    tokens,
)

#: Bound for one exchange of a large body.
BIG_TIMEOUT = 60.0


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return make_site(tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="module")
def server(site: Site) -> Iterator[ServerProcess]:
    """Two mounts (``/static``, ``/media``), ``index.html`` for directories, the default
    expiry, no precompressed variants, no fallthrough."""
    with running_server(APP, *site_args(site, "--static-path-dir-to-file", "index.html")) as srv:
        yield srv


# -- large files and clients that go away --------------------------------------------------------


def test_a_10_mib_file_is_byte_exact(server: ServerProcess, site: Site) -> None:
    """Rule: the 10 MiB file comes back whole and byte-exact with its Content-Length. Broken: a
    truncated or reordered body (a read loop losing a chunk, a short final read)."""
    digest = hashlib.sha256()
    with server.client(timeout=BIG_TIMEOUT) as client:
        with client.stream("GET", "/static/big.bin") as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(BIG_SIZE)
            assert ctype(response.headers["content-type"]) == "application/octet-stream"
            size = 0
            for chunk in response.iter_raw():
                digest.update(chunk)
                size += len(chunk)
    assert size == BIG_SIZE
    assert digest.hexdigest() == site.big_digest()


def test_a_50_mib_file_with_curl(server: ServerProcess, site: Site, tmp_path: Path) -> None:
    """Rule: a 50 MiB file comes back whole to curl. Broken: the body stops early (curl's exit
    18, a partial file) or the server holds the whole file in memory and fails."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    data = os.urandom(50 * 1024 * 1024)
    name = f"huge-{uuid.uuid4().hex}.bin"
    (site.root / name).write_bytes(data)
    out = tmp_path / "out.bin"
    try:
        result = subprocess.run(
            ["curl", "-s", "--max-time", "60", "-o", str(out), "-w", "%{http_code}",
             f"{server.base_url}/static/{name}"],
            capture_output=True,
            text=True,
            timeout=90,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert result.stdout == "200"
        assert out.stat().st_size == len(data)
        assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
    finally:
        (site.root / name).unlink()


def test_concurrent_downloads(server: ServerProcess, site: Site) -> None:
    """Rule: eight clients downloading the 10 MiB file at once each get it whole. Broken:
    bodies interleaved or cut short under concurrency (a shared read buffer or file offset)."""

    def download(_: int) -> str:
        with server.client(timeout=BIG_TIMEOUT) as client:
            response = client.get("/static/big.bin")
        assert response.status_code == 200
        return hashlib.sha256(response.content).hexdigest()

    with ThreadPoolExecutor(8) as pool:
        digests = list(pool.map(download, range(8)))
    assert digests == [site.big_digest()] * 8


def test_a_slow_reader_gets_the_right_bytes(server: ServerProcess, site: Site) -> None:
    """Rule: a client that reads the 10 MiB file slowly (a small receive buffer, 64 KiB every
    20 ms) gets correct bytes all along, and when it closes mid-body the server goes on serving:
    the next download is whole. Broken: the server times out the slow reader with a short body,
    or the abandoned response breaks the worker."""
    with server.raw(timeout=10) as conn:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        conn.send(request_bytes("GET", "/static/big.bin"))
        head = conn.read_until(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        got = bytearray(conn.buffer)
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and len(got) < 2 * 1024 * 1024:
            got += conn.sock.recv(65536)
            time.sleep(0.02)
    assert len(got) > 0
    assert bytes(got) == site.content("big.bin")[: len(got)]
    with server.client(timeout=BIG_TIMEOUT) as client:
        whole = client.get("/static/big.bin")
    assert hashlib.sha256(whole.content).hexdigest() == site.big_digest()


def test_clients_closing_mid_body_do_not_break_the_server(
    server: ServerProcess, site: Site
) -> None:
    """Rule: twenty clients that ask for the 10 MiB file and close after the first 64 KiB (half
    of them with a reset) leave the server serving: a file and the app both answer at once
    afterwards. Broken: the server dies (a write to a closed socket unhandled) or hangs."""
    for index in range(20):
        with server.raw() as conn:
            if index % 2:  # close with a reset (RST) instead of a FIN
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.send(request_bytes("GET", "/static/big.bin"))
            conn.read_until(b"\r\n\r\n")
            conn.read_exactly(65536)
    assert server.returncode is None, server.describe()
    assert fetch(server, "/static/text.txt").body == site.content("text.txt")
    assert fetch(server, "/ok").body == b"ok"


# -- HTTP/2 and HTTP/3 ---------------------------------------------------------------------------


def test_http2_cleartext(server: ServerProcess, site: Site) -> None:
    """Rule: over h2c a file is served with the same headers, a range is 206, a HEAD has no
    body, and the 10 MiB file comes back byte-exact under HTTP/2 flow control. Broken: the
    static path answers HTTP/1.1 only, or a DATA frame is lost."""
    with server.client(timeout=BIG_TIMEOUT, http1=False, http2=True) as client:
        response = client.get("/static/style.css")
        assert (response.http_version, response.status_code) == ("HTTP/2", 200)
        assert response.content == site.content("style.css")
        assert response.headers["etag"] and response.headers["last-modified"] == LAST_MODIFIED
        part = client.get("/static/text.txt", headers={"Range": "bytes=-5"})
        assert part.status_code == 206
        assert part.content == site.content("text.txt")[-5:]
        head = client.head("/static/big.bin")
        assert head.headers["content-length"] == str(BIG_SIZE) and head.content == b""
        big = client.get("/static/big.bin")
        assert big.status_code == 200
        assert hashlib.sha256(big.content).hexdigest() == site.big_digest()


def test_http2_concurrent_streams_of_a_big_file(server: ServerProcess, site: Site) -> None:
    """Rule: four streams downloading the 10 MiB file at once on one HTTP/2 connection each get
    it whole, with a small file answered meanwhile. Broken: the file tasks sharing the
    connection's window deadlock, or their DATA frames mixed up between streams."""

    async def main() -> list[str]:
        async with httpx.AsyncClient(
            base_url=server.base_url, http1=False, http2=True, timeout=BIG_TIMEOUT, trust_env=False
        ) as client:

            async def one(path: str) -> str:
                response = await client.get(path)
                assert response.http_version == "HTTP/2"
                return hashlib.sha256(response.content).hexdigest()

            paths = ["/static/big.bin"] * 4 + ["/static/text.txt"]
            return list(await asyncio.gather(*(one(path) for path in paths)))

    digests = asyncio.run(main())
    assert digests[:4] == [site.big_digest()] * 4
    assert digests[4] == hashlib.sha256(site.content("text.txt")).hexdigest()


def test_a_slow_http2_download_keeps_its_connection(site: Site) -> None:
    """Rule: an HTTP/2 connection whose only stream is a file download in progress is not idle:
    a client that reads the 10 MiB file with a 4 s pause (``--timeout-keep-alive 3``) gets it
    whole, and its next request goes on the same connection. Broken: the file's stream stopped
    counting as in progress once its response began, so the connection was told GOAWAY after
    the keep-alive timeout mid-download and the next request needed a new connection (seen
    failing; a client library that takes a GOAWAY for the end, Python's h2, then failed on the
    PING after it). The pause must also end before the keep-alive PING, sent after 3 s of
    silence, goes unanswered for 3 s more: with 2 and 3 s a loaded machine's client missed it."""
    args = ["--timeout-keep-alive", "3", *site_args(site)]

    async def main(port: int) -> tuple[str, object, object]:
        async with httpx.AsyncClient(http1=False, http2=True, timeout=BIG_TIMEOUT) as client:
            url = f"http://127.0.0.1:{port}"
            digest = hashlib.sha256()
            async with client.stream("GET", url + "/static/big.bin") as response:
                first = response.extensions["network_stream"].get_extra_info("client_addr")
                chunks = response.aiter_bytes()
                digest.update(await chunks.__anext__())
                await asyncio.sleep(4)
                async for chunk in chunks:
                    digest.update(chunk)
            again = await client.get(url + "/static/text.txt")
            second = again.extensions["network_stream"].get_extra_info("client_addr")
            return digest.hexdigest(), first, second

    with running_server(APP, *args) as srv:
        digest, first, second = asyncio.run(main(srv.port or 0))
    assert digest == site.big_digest()
    assert first == second, f"the next request needed a new connection: {first} then {second}"


def tls_args(certs: Certs) -> list[str]:
    return ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]


def test_http2_over_tls(site: Site, certs: Certs) -> None:
    """Rule: over TLS with h2 chosen by ALPN a file and a 304 are served as over HTTP/1.1.
    Broken: the static path missing from the TLS listener."""
    args = [*tls_args(certs), "--static-path-mount", str(site.root)]
    with running_server(APP, *args) as srv:
        context = ssl.create_default_context(cafile=str(certs.ca))
        with srv.client(timeout=10, http2=True, verify=context) as client:
            response = client.get("/static/data.json")
            fresh = client.get(
                "/static/data.json", headers={"If-None-Match": response.headers["etag"]}
            )
    assert (response.http_version, response.status_code) == ("HTTP/2", 200)
    assert response.content == site.content("data.json")
    assert fresh.status_code == 304


def test_http3(site: Site, certs: Certs) -> None:
    """Rule: over HTTP/3 a file is served with its type, length and ETag, a range is 206 with
    its bytes, and the 10 MiB file comes back byte-exact. Broken: HTTP/3 requests all go to the
    app (its 404 page), or the file body is cut under QUIC flow control."""
    args = ["--http3", *tls_args(certs), "--static-path-mount", str(site.root)]

    async def main(port: int):  # type: ignore[no-untyped-def]
        async with h3_connection(port, certs.ca) as client:
            whole = await client.request("GET", "/static/text.txt")
            part = await client.request("GET", "/static/text.txt", [(b"range", b"bytes=5-9")])
            big = await client.request("GET", "/static/big.bin", timeout=BIG_TIMEOUT)
            return whole, part, big

    with running_server(APP, *args) as srv:
        whole, part, big = asyncio.run(main(srv.port))
    assert whole.status == 200, whole
    assert bytes(whole.body) == site.content("text.txt")
    assert whole.header(b"content-length") == str(TEXT_SIZE).encode()
    assert whole.header(b"etag") is not None
    assert whole.header(b"x-from-app") is None
    assert part.status == 206, part
    assert bytes(part.body) == site.content("text.txt")[5:10]
    assert big.status == 200 and len(big.body) == BIG_SIZE
    assert hashlib.sha256(big.body).hexdigest() == site.big_digest()


# -- configuration -------------------------------------------------------------------------------


def test_help_lists_the_options() -> None:
    """Rule: ``--help`` documents every static option. Broken: an option missing from the
    parser."""
    result = run_to_exit(ferrule_command("--help"))
    assert result.returncode == 0
    for option in (
        "--static-path-mount",
        "--static-path-route",
        "--static-path-dir-to-file",
        "--static-path-expires",
        "--static-path-precompressed",
        "--static-path-fallthrough",
    ):
        assert option in result.stdout, option


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--static-path-mount", "{file}"], "--static-path-mount"),
        (["--static-path-mount", "{missing}"], "--static-path-mount"),
        (
            ["--static-path-route", "/a", "--static-path-route", "/b", "--static-path-mount",
             "{dir}"],
            "--static-path-route",
        ),
        (
            ["--static-path-route", "/a", "--static-path-mount", "{dir}", "--static-path-mount",
             "{dir}"],
            "--static-path-route",
        ),
        (["--static-path-route", "assets", "--static-path-mount", "{dir}"], "--static-path-route"),
        (
            ["--static-path-mount", "{dir}", "--static-path-expires", "soon"],
            "--static-path-expires",
        ),
    ],
)  # fmt: skip
def test_bad_settings_are_usage_errors(site: Site, args: list[str], named: str) -> None:
    """Rule: a mount that is not a directory (a file, a missing path), routes not matching the
    mounts in number, a route not starting with ``/`` and an expiry that is not a number are
    refused before serving with exit status 2, naming the option. Broken: the server starts
    (the test then times out) or fails later with another status."""
    values = {
        "file": str(site.root / "text.txt"),
        "missing": str(site.base / "no-such-dir"),
        "dir": str(site.root),
    }
    argv = [arg.format(**values) for arg in args]
    result = run_to_exit(ferrule_command(APP, "--port", "0", *argv), timeout=10)
    assert result.returncode == 2, result.describe()
    assert named in result.stderr, result.describe()


def test_python_run_takes_the_same_settings(site: Site) -> None:
    """Rule: ``ferrule.run(app, static_path_mount=[...], static_path_route=[...],
    static_path_dir_to_file=...)`` serves like the command line. Broken: ``run()`` rejects the
    keywords or ignores them (the app's 404 page)."""
    script = (
        "import ferrule\n"
        "ferrule.run('static_app:app', host='127.0.0.1', port=0, "
        f"static_path_mount=[{str(site.root)!r}], static_path_route=['/files'], "
        "static_path_dir_to_file='index.html', static_path_expires=120)\n"
    )
    process = ServerProcess([sys.executable, "-c", script], cwd=APPS_DIR)
    try:
        process.wait_running()
        response = fetch(process, "/files/sub/")
        assert (response.status, response.body) == (200, site.content("sub/index.html"))
        assert tokens(response.header("cache-control")) == {"public", "max-age=120"}
        assert from_app(fetch(process, "/static/text.txt"))
    finally:
        process.close()
