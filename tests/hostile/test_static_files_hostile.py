"""Hostile requests to the static files (``--static-path-mount``): path traversal in every
encoding, NUL bytes and backslashes, symlinks out of the mount, odd and huge Range headers, and
files that change or vanish while they are being sent. Whatever the request, the server answers
400 or 404 (never a file outside the mount, never a 500), does not hand a traversal to the app,
and keeps serving. The working paths are in ``tests/http/test_static_files.py``.

The tree is ``staticutil.make_site``: ``site`` is mounted at ``/static``, ``media`` at
``/media``; ``outside/secret.txt``, ``beside.txt`` and ``site-private/secret.txt`` beside them
hold a random marker that must never appear in a response. The app is ``static_app``, which
lists every request it was called with (``/_seen``). Request targets are sent byte for byte on
raw sockets (httpx and curl would normalise ``..`` away), and over HTTP/2 with ``h2raw``.
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
from h1raw import IncompleteResponse, RawConnection, RawResponse, request_bytes
from h2raw import (
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
from hostileutil import check_serves_promptly
from memutil import MiB, RssGrowth
from serverutil import ServerProcess, poll, running_server
from staticutil import APP, Site, app_saw, fetch, from_app, make_site

TEXT_SIZE = 1000  # text.txt
PASSWD_MARK = b"root:x:0:0"

#: Targets that climb out of the mount: ``..`` raw, percent-encoded in every case, mixed with
#: encoded slashes and backslashes, and through the second mount into the first.
TRAVERSALS = [
    "/static/../outside/secret.txt",
    "/static/../beside.txt",
    "/static/../site-private/secret.txt",
    "/static/../../../../../../../../etc/passwd",
    "/static/%2e%2e/outside/secret.txt",
    "/static/%2E%2e/outside/secret.txt",
    "/static/%2E%2E%2Foutside%2Fsecret.txt",
    "/static/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/static/..%2foutside/secret.txt",
    "/static/..%2Foutside%2Fsecret.txt",
    "/static/.%2e/outside/secret.txt",
    "/static/%2e./outside/secret.txt",
    "/static/sub/../../outside/secret.txt",
    "/static/sub/%2e%2e/%2e%2e/outside/secret.txt",
    "/static/sub/..%2f..%2foutside%2fsecret.txt",
    "/static/./../outside/secret.txt",
    "/static/..",
    "/static/%2e%2e",
    "/static/%2e%2e/",
    "/static/..%5coutside%5csecret.txt",
    "/static/%5c..%5coutside%5csecret.txt",
    "/static/..\\outside\\secret.txt",
    "/static/sub/..\\..\\outside\\secret.txt",
    "/static/%2F..%2F..%2Foutside/secret.txt",
    "/media/../site/text.txt",
    "/media/%2e%2e/outside/secret.txt",
]

#: Targets that are no traversal but look like one, or name an absolute path: served from the
#: mount or not found, never what they seem to point at.
LOOKALIKES = [
    "/static//etc/passwd",
    "/static///etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/%2Fetc/passwd",
    "/static/%252e%252e/outside/secret.txt",
    "/static/..;/outside/secret.txt",
    "/static/%c0%ae%c0%ae/outside/secret.txt",
    "/static/%u002e%u002e/outside/secret.txt",
    "/static/....//outside/secret.txt",
    "/static/...",
    "/static/~/outside/secret.txt",
    "/static/C:%5cWindows%5cwin.ini",
    "/static/file:///etc/passwd",
]

NULS = [
    "/static/text.txt%00",
    "/static/text.txt%00.png",
    "/static/%00",
    "/static/sub%00/index.html",
    "/static/..%00/outside/secret.txt",
    "/static/%00../outside/secret.txt",
]

BACKSLASHES = [
    "/static/sub%5cindex.html",
    "/static/sub%5Cpage.html",
    "/static/sub\\page.html",
    "/static/back%5cslash.txt",
    "/static/%5cetc%5cpasswd",
]

SYMLINKS_OUT = [
    "/static/escape.txt",
    "/static/escdir/secret.txt",
    "/static/escdir/",
    "/static/absescape.txt",
    "/static/passwd",
    "/static/devzero",
    "/static/sub/up/outside/secret.txt",
]


# -- checks --------------------------------------------------------------------------------------


def assert_refused(site: Site, response: RawResponse, target: str) -> None:
    """400 or 404, and nothing of a file outside the mount in the answer."""
    assert response.status in (400, 404), (target, response.raw_head, response.body[:300])
    assert site.secret_text not in response.body, (target, response.raw_head)
    assert site.secret_text not in response.raw_head, target
    assert PASSWD_MARK not in response.body, (target, response.raw_head)


def ask(server: ServerProcess, target: str, **options) -> RawResponse:  # type: ignore[no-untyped-def]
    """``fetch``, where the server may also answer by closing the connection (a target hyper
    refuses to parse): that counts as a 400 with no body."""
    try:
        return fetch(server, target, **options)
    except IncompleteResponse as exc:
        assert exc.received == b"", exc
        return RawResponse("HTTP/1.1", 400, "closed", [], b"", b"")


def h2_answer(server: ServerProcess, path: str) -> tuple[str | None, bytes, Received]:
    """One GET of ``path`` over h2c on a raw socket: its status (None if the stream was reset
    before any), the DATA of stream 1, and everything received."""
    with H2Raw(server) as conn:
        conn.send(get(1, path))
        received = conn.read(until_close=False)
    data = b"".join(f.payload for f in received.frames if f.kind == DATA and f.stream == 1)
    return received.statuses.get(1), data, received


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    site = make_site(tmp_path_factory.mktemp("static-hostile"))
    (site.root / "back\\slash.txt").write_bytes(b"a name with a backslash\n")
    (site.root / "devzero").symlink_to("/dev/zero")
    (site.root / "sub" / "up").symlink_to(Path("..") / "..", target_is_directory=True)
    os.mkfifo(site.root / "fifo")
    # A directory file that is a link out, and precompressed variants that are links out.
    (site.root / "trap").mkdir()
    (site.root / "trap" / "index.html").symlink_to(Path("..") / ".." / "outside" / "secret.txt")
    site.files["pre.html"] = b"<p>plain pre</p>\n" * 100
    (site.root / "pre.html").write_bytes(site.files["pre.html"])
    (site.root / "pre.html.br").symlink_to(site.outside / "secret.txt")
    (site.root / "pre.html.gz").symlink_to(Path("..") / "outside" / "secret.txt")
    (site.root / "pre.html.zst").symlink_to("/etc/passwd")
    return site


def mounts(site: Site, *extra: str) -> list[str]:
    return [
        "--static-path-route",
        "/static",
        "--static-path-mount",
        str(site.root),
        "--static-path-route",
        "/media",
        "--static-path-mount",
        str(site.media),
        "--static-path-dir-to-file",
        "index.html",
        *extra,
    ]


@pytest.fixture(scope="module")
def server(site: Site) -> Iterator[ServerProcess]:
    with running_server(APP, *mounts(site)) as srv:
        yield srv


@pytest.fixture(scope="module")
def precompressed_server(site: Site) -> Iterator[ServerProcess]:
    with running_server(APP, *mounts(site, "--static-path-precompressed")) as srv:
        yield srv


@pytest.fixture(scope="module")
def fallthrough_server(site: Site) -> Iterator[ServerProcess]:
    with running_server(APP, *mounts(site, "--static-path-fallthrough")) as srv:
        yield srv


# -- traversal -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_is_refused(server: ServerProcess, site: Site, target: str) -> None:
    """Rule: a target climbing out of the mount (``..`` raw or percent-encoded in any case,
    with encoded slashes or backslashes) is 400 or 404, never a byte of the file it points at.
    Broken: the path decoded after the ``..`` check (``%2e%2e``) or joined with a backslash
    read as a separator, serving ``outside/secret.txt`` or ``/etc/passwd``."""
    response = ask(server, target)
    assert_refused(site, response, target)
    if target.startswith("/media/../site"):
        assert response.body != site.content("text.txt")


@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_never_reaches_the_app(
    fallthrough_server: ServerProcess, site: Site, target: str
) -> None:
    """Rule: even with ``--static-path-fallthrough`` (missing files go to the app), a traversal
    is refused by the server itself: 400 or 404 without the app's page, and the app never sees
    the request. Broken: the traversal taken for a missing file and handed to the app, which
    might then serve or log it."""
    before = app_saw(fallthrough_server)
    response = ask(fallthrough_server, target)
    assert_refused(site, response, target)
    assert not from_app(response), (target, response.raw_head)
    assert app_saw(fallthrough_server) == before, target


@pytest.mark.parametrize("target", LOOKALIKES)
def test_lookalikes_stay_in_the_mount(server: ServerProcess, site: Site, target: str) -> None:
    """Rule: targets that only look like an escape (a double-encoded ``%252e``, ``..;``,
    overlong UTF-8, ``//etc/passwd`` and other absolute-looking names) are names inside the
    mount, none of which exists: 400 or 404. Broken: an absolute path joined onto the mount
    replacing it (``/etc/passwd`` served), or a second decoding pass."""
    assert_refused(site, ask(server, target), target)


def test_absolute_form_target(server: ServerProcess, site: Site) -> None:
    """Rule: a request line in absolute form (``GET http://host/static/../outside/...``) is no
    way around the check. Broken: the path taken from the absolute URI unchecked."""
    for target in (
        "http://test/static/../outside/secret.txt",
        "http://test/static/%2e%2e/outside/secret.txt",
    ):
        assert_refused(site, ask(server, target), target)
    response = ask(server, "http://test/static/text.txt")
    assert response.status in (200, 400), response.raw_head


@pytest.mark.parametrize("target", NULS)
def test_nul_is_refused(server: ServerProcess, site: Site, target: str) -> None:
    """Rule: a NUL (``%00``) anywhere in the path is 400 or 404; in particular
    ``text.txt%00.png`` is not ``text.txt`` (C-string truncation). Broken: the name cut at the
    NUL and the file served, or a 500 from the failed open."""
    response = ask(server, target)
    assert_refused(site, response, target)
    assert response.body != site.content("text.txt")


@pytest.mark.parametrize("target", BACKSLASHES)
def test_backslashes_are_refused(server: ServerProcess, site: Site, target: str) -> None:
    """Rule: a backslash (``%5c`` or raw) in the path is refused, 400 or 404, even where a file
    of that name exists (``back\\slash.txt``) or it would make a Windows path of a name in the
    mount. Broken: the file served, or the backslash read as a separator (``sub\\page.html``
    served as ``sub/page.html``)."""
    response = ask(server, target)
    assert_refused(site, response, target)
    assert response.body not in (site.content("sub/page.html"), site.content("sub/index.html"))


# -- symlinks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", SYMLINKS_OUT)
def test_symlinks_out_of_the_mount_are_refused(
    server: ServerProcess, fallthrough_server: ServerProcess, site: Site, target: str
) -> None:
    """Rule: a symlink inside the mount pointing outside it (relative or absolute, to a file, a
    directory, ``/etc/passwd`` or ``/dev/zero``) is 400 or 404 and its target is never sent,
    with or without fallthrough. Broken: the link followed (the secret, the password file, or an
    endless body of zeros)."""
    for srv in (server, fallthrough_server):
        response = ask(srv, target, timeout=5.0)
        assert_refused(site, response, target)
        assert not response.body or response.body.strip(b"\0"), "zeros from /dev/zero"


def test_a_directory_file_linking_out_is_refused(server: ServerProcess, site: Site) -> None:
    """Rule: the ``--static-path-dir-to-file`` file of a directory is checked like any file: an
    ``index.html`` that is a symlink out of the mount is not served. Broken: the check made on
    the directory the request named, not on the file then opened in it."""
    for target in ("/static/trap/", "/static/trap"):
        response = ask(server, target)
        assert site.secret_text not in response.body, target
        assert response.status in (301, 302, 307, 308, 400, 404), (target, response.raw_head)


@pytest.mark.parametrize("accept", ["br", "gzip", "zstd", "br, zstd, gzip"])
def test_precompressed_variants_linking_out_are_refused(
    precompressed_server: ServerProcess, site: Site, accept: str
) -> None:
    """Rule: a ``NAME.br``/``.gz``/``.zst`` beside a file but linking out of the mount is never
    sent: the plain file goes instead (the variant treated as absent), or the request is
    refused. Broken: the check made on NAME only, and the variant's target (a secret, the
    password file) sent as br/gzip/zstd."""
    response = ask(precompressed_server, "/static/pre.html", headers=[("Accept-Encoding", accept)])
    assert site.secret_text not in response.body and PASSWD_MARK not in response.body
    assert response.status in (200, 400, 404), response.raw_head
    if response.status == 200:
        assert response.header("content-encoding") is None, response.raw_head
        assert response.body == site.content("pre.html")


def test_symlinks_inside_the_mount_are_served(server: ServerProcess, site: Site) -> None:
    """Rule: a symlink inside the mount to a file or directory inside it is served like its
    target; a dangling one is 404. Broken: every symlink refused, or a 500 for the dangling
    one."""
    link = fetch(server, "/static/link.txt")
    assert (link.status, link.body) == (200, site.content("text.txt"))
    through = fetch(server, "/static/linkdir/page.html")
    assert (through.status, through.body) == (200, site.content("sub/page.html"))
    assert fetch(server, "/static/dangling.txt").status == 404


def test_a_file_swapped_for_a_symlink_is_checked_again(server: ServerProcess, site: Site) -> None:
    """Rule: a file served once, then replaced by a symlink out of the mount (and a symlink made
    after the server started) is refused on the next request. Broken: a cache of checked paths
    that lets the new link through to the secret."""
    name = f"swap-{uuid.uuid4().hex}.txt"
    path = site.root / name
    path.write_bytes(b"harmless\n")
    assert fetch(server, f"/static/{name}").body == b"harmless\n"
    path.unlink()
    path.symlink_to(site.outside / "secret.txt")
    assert_refused(site, fetch(server, f"/static/{name}"), name)
    late = site.root / f"late-{uuid.uuid4().hex}"
    late.symlink_to(site.outside, target_is_directory=True)
    assert_refused(site, fetch(server, f"/static/{late.name}/secret.txt"), late.name)


def test_a_fifo_does_not_hang_the_server(server: ServerProcess, site: Site) -> None:
    """Rule: a named pipe in the mount is no file to serve: the request is answered at once
    (400, 403 or 404) instead of blocking on an open that waits for a writer, and the server
    keeps serving. Broken: the request hangs (the client times out) and ties up a worker."""
    started = time.monotonic()
    response = ask(server, "/static/fifo", timeout=5.0)
    assert response.status in (400, 403, 404), response.raw_head
    assert time.monotonic() - started < 3.0
    check_serves_promptly(server)


# -- odd paths -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        "/static/" + "a/" * 2000 + "x.txt",
        "/static/" + "a" * 300 + ".txt",
        "/static/" + "%2e" * 1000,
        "/static/%zz",
        "/static/%",
        "/static/%e9%ff.txt",
        "/static/text.txt%",
        "/static/\x7f.txt",
    ],
)
def test_odd_paths_are_not_found(server: ServerProcess, site: Site, target: str) -> None:
    """Rule: very long paths, a name longer than the filesystem allows, broken percent escapes
    and bytes that are not UTF-8 are 400, 404 or 414, never a 500 (``ENAMETOOLONG`` or a
    decoding error is the client's problem). Broken: a 500, a crash, or a hang."""
    response = ask(server, target)
    assert response.status in (400, 404, 414), (target[:80], response.raw_head)
    assert site.secret_text not in response.body
    assert server.returncode is None, server.describe()


@pytest.mark.parametrize("method", ["TRACE", "FOO", "PROPFIND", "CONNECT"])
def test_odd_methods(server: ServerProcess, site: Site, method: str) -> None:
    """Rule: an unusual method on a static route is refused (405, or 400 for one hyper will not
    take in origin form) and never serves or echoes the file. Broken: the file served to any
    method other than GET/HEAD."""
    response = ask(server, "/static/text.txt", method=method)
    # CONNECT: the server's general 501 (it is no proxy) comes before any route.
    assert response.status in ((400, 405, 501) if method == "CONNECT" else (400, 405)), (
        response.raw_head
    )
    assert site.content("text.txt") not in response.body


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
    with the file, answered at once. Broken: a quadratic parse, a 500, or a 304."""
    many = ", ".join(f'"etag-{i}"' for i in range(1000))
    for value in (many, '"unterminated', ",,,,", "W/W/W/"):
        started = time.monotonic()
        response = ask(server, "/static/text.txt", headers=[("If-None-Match", value)])
        assert response.status in (200, 400, 431), (value[:40], response.raw_head)
        if response.status == 200:
            assert response.body == site.content("text.txt")
        assert time.monotonic() - started < 2.0


# -- HTTP/2 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/static/../outside/secret.txt",
        "/static/%2e%2e/outside/secret.txt",
        "/static/..%2foutside%2fsecret.txt",
        "/static/..\\outside\\secret.txt",
        "/static/escape.txt",
        "/static/text.txt%00",
        "/static//etc/passwd",
    ],
)
def test_http2_refuses_the_same(server: ServerProcess, site: Site, path: str) -> None:
    """Rule: over HTTP/2 the ``:path`` is checked as the HTTP/1.1 target is: a traversal, a
    symlink out, a NUL or an absolute path is 400 or 404 (or the stream reset as malformed), and
    no DATA of the secret. Broken: the h2 path checked less than the HTTP/1.1 one."""
    status, data, received = h2_answer(server, path)
    if status is None:
        assert 1 in received.resets() or received.goaway() is not None, received.describe()
    else:
        assert status in ("400", "404"), received.describe()
    assert site.secret_text not in data and PASSWD_MARK not in data


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
            opened = poll(lambda: descriptors_on(srv.pid, big), timeout=3, what="a descriptor")
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
