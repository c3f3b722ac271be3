"""Static files served by the server itself (``--static-path-mount``, ``--static-path-expires``):
conditional requests (``If-None-Match``, ``If-Modified-Since``: 304s), byte ranges (206, 416,
``If-Range``) and the expiry of the cache headers.

The tree served is made per module by ``staticutil.make_site`` (every file with a known mtime, a 10
MiB random file, precompressed variants, symlinks). The app is ``static_app``: it answers its own
404 page with ``x-from-app`` and lists what it was called with (``/_seen``), so each test can tell a
response of the server's from one of the app's, and check that a static request never entered
Python. Requests go over raw sockets where the exact bytes matter (304 and 206 on a kept-alive
connection). The working paths are split by concern: ``test_static_serving.py`` (file responses,
routes and mounts), ``test_static_conditions.py`` (304s, ranges, expiry),
``test_static_variants.py`` (precompressed variants, fallthrough, ``--compress``) and
``test_static_protocols.py`` (large files, HTTP/2, TLS, HTTP/3, settings); the hostile requests
(traversal, symlinks out of the mount, odd ranges) are in
``tests/hostile/test_static_paths_hostile.py`` and
``tests/hostile/test_static_transfers_hostile.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from email.utils import formatdate

import pytest
from support.h1raw import request_bytes
from support.serverutil import (
    ServerProcess,
    running_server,
)
from support.staticutil import (
    APP,
    LAST_MODIFIED,
    MTIME,
    TEXT_SIZE,
    Site,
    ctype,
    fetch,
    make_site,
    site_args,
    tokens,
)

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


# -- conditional requests ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "condition",
    [
        "{etag}",
        '"not-it", {etag}',
        '"a", "b",{etag} , "c"',
        "*",
        "W/{etag}",
    ],
)
def test_if_none_match_gives_304(server: ServerProcess, condition: str) -> None:
    """Rule: ``If-None-Match`` naming the file's ETag (alone, in a list, as ``*``, or in the
    W/ form, the comparison being weak) answers 304 with the ETag and Cache-Control and no
    body: the next response on the connection parses. Broken: a 200 with the whole file, or a
    304 followed by body bytes."""
    etag = fetch(server, "/static/style.css").header("etag")
    assert etag is not None
    with server.raw() as conn:
        conn.send(
            request_bytes(
                "GET", "/static/style.css", headers=[("If-None-Match", condition.format(etag=etag))]
            )
        )
        response = conn.read_response()
        conn.send(request_bytes("GET", "/static/empty.txt"))
        after = conn.read_response()
    assert response.status == 304, response.raw_head
    assert response.header("etag") == etag
    assert tokens(response.header("cache-control")) == {"public", "max-age=86400"}
    assert (after.status, after.body) == (200, b"")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([("If-None-Match", '"something-else"')], 200),
        ([("If-None-Match", 'W/"something-else", "other"')], 200),
        ([("If-Modified-Since", LAST_MODIFIED)], 304),
        ([("If-Modified-Since", formatdate(MTIME + 3600, usegmt=True))], 304),
        ([("If-Modified-Since", formatdate(MTIME - 3600, usegmt=True))], 200),
        ([("If-Modified-Since", "not a date")], 200),
        # If-None-Match decides alone when present (RFC 9110 13.1.3).
        (
            [
                ("If-None-Match", '"something-else"'),
                ("If-Modified-Since", formatdate(MTIME + 3600, usegmt=True)),
            ],
            200,
        ),
    ],
)
def test_conditional_requests(
    server: ServerProcess, site: Site, headers: list[tuple[str, str]], status: int
) -> None:
    """Rule: a non-matching ``If-None-Match`` is a 200 with the file; ``If-Modified-Since`` at
    or after the mtime is a 304, before it (or not a date) a 200; with both, If-None-Match
    alone decides. Broken: a 304 for a stale validator (the client keeps an old copy), or a 200
    for a fresh one."""
    response = fetch(server, "/static/text.txt", headers)
    assert response.status == status, response.raw_head
    if status == 200:
        assert response.body == site.content("text.txt")
    else:
        assert response.body == b""
        assert response.header("etag") is not None


def test_validators_of_a_file_with_a_fractional_mtime(server: ServerProcess, site: Site) -> None:
    """Rule: a file whose mtime has a fraction of a second (every file a modern filesystem
    writes) is fresh for an ``If-Modified-Since`` equal to the Last-Modified the server sent
    (whole seconds), and an ``If-Range`` of that date keeps the range. Broken: the nanoseconds
    compared against the header's whole second, so a client revalidating with the server's own
    date always gets the whole file again."""
    name = f"fraction-{uuid.uuid4().hex}.txt"
    path = site.root / name
    path.write_bytes(b"0123456789" * 10)
    os.utime(path, ns=(MTIME * 10**9 + 600_000_000, MTIME * 10**9 + 600_000_000))
    first = fetch(server, f"/static/{name}")
    assert first.header("last-modified") == LAST_MODIFIED, first.raw_head
    fresh = fetch(server, f"/static/{name}", [("If-Modified-Since", LAST_MODIFIED)])
    assert fresh.status == 304, fresh.raw_head
    part = fetch(server, f"/static/{name}", [("Range", "bytes=0-4"), ("If-Range", LAST_MODIFIED)])
    assert (part.status, part.body) == (206, b"01234"), part.raw_head


def test_an_http10_client(server: ServerProcess, site: Site) -> None:
    """Rule: an HTTP/1.0 request gets the file with its Content-Length (no chunked coding, which
    1.0 does not know) and a 206 for a range. Broken: a chunked body or a missing length."""
    for headers, status, body in (
        ([], 200, site.content("text.txt")),
        ([("Range", "bytes=0-4")], 206, b"0000\n"),
    ):
        with server.raw() as conn:
            conn.send(request_bytes("GET", "/static/text.txt", headers=headers, version="HTTP/1.0"))
            response = conn.read_response()
        assert (response.status, response.body) == (status, body), response.raw_head
        assert response.header("transfer-encoding") is None
        assert response.header("content-length") == str(len(body))


# -- ranges --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-99", 0, 99),
        ("bytes=100-", 100, 999),
        ("bytes=-100", 900, 999),
        ("bytes=990-5000", 990, 999),
        ("bytes=999-999", 999, 999),
        ("bytes=0-0", 0, 0),
        ("bytes=-5000", 0, 999),
    ],
)
def test_a_single_range_is_206(
    server: ServerProcess, site: Site, header: str, first: int, last: int
) -> None:
    """Rule: one byte range (from-to, from-, a suffix, an end past the file clipped) answers 206
    with ``Content-Range: bytes FIRST-LAST/SIZE``, the length of the part and exactly those
    bytes, with the file's ETag and Cache-Control. Broken: the whole file, an off-by-one
    (``last`` is inclusive), or an unclipped length that leaves the client waiting."""
    response = fetch(server, "/static/text.txt", [("Range", header)])
    assert response.status == 206, response.raw_head
    assert response.header("content-range") == f"bytes {first}-{last}/{TEXT_SIZE}"
    assert response.header("content-length") == str(last - first + 1)
    assert response.body == site.content("text.txt")[first : last + 1]
    assert response.header("etag") is not None
    assert ctype(response.header("content-type")).startswith("text/plain")
    assert tokens(response.header("cache-control")) == {"public", "max-age=86400"}


@pytest.mark.parametrize("header", ["bytes=1000-", "bytes=5000-6000", "bytes=1000-1000"])
def test_an_unsatisfiable_range_is_416(server: ServerProcess, header: str) -> None:
    """Rule: a range starting at or after the end of the file is 416 with ``Content-Range:
    bytes */SIZE``. Broken: a 206 with an empty or negative part, or a 200."""
    response = fetch(server, "/static/text.txt", [("Range", header)])
    assert response.status == 416, response.raw_head
    assert response.header("content-range") == f"bytes */{TEXT_SIZE}"


@pytest.mark.parametrize(
    "header",
    ["bytes=0-1,5-6", "bytes=0-1, 5-6", "bytes=abc", "bytes 0-10", "chars=0-10", "bytes=5-x"],
)
def test_multiple_or_malformed_ranges_give_the_whole_file(
    server: ServerProcess, site: Site, header: str
) -> None:
    """Rule: several ranges (the server does not make multipart/byteranges, RFC 9110 allows
    the whole file instead), an unknown unit or a Range that does not parse are ignored: 200
    with the whole file. Broken: a 206 for the first range only, a 416, or a 400."""
    response = fetch(server, "/static/text.txt", [("Range", header)])
    assert response.status == 200, response.raw_head
    assert response.body == site.content("text.txt")
    assert response.header("content-range") is None


@pytest.mark.parametrize(
    ("if_range", "partial"),
    [
        ("{etag}", True),
        ('"another-etag"', False),
        (LAST_MODIFIED, True),
        (formatdate(MTIME - 86400, usegmt=True), False),
    ],
)
def test_if_range(server: ServerProcess, site: Site, if_range: str, partial: bool) -> None:
    """Rule: ``If-Range`` with the file's ETag or its Last-Modified date keeps the range (206);
    another ETag or an earlier date means the client's copy is stale, so the whole file is sent
    (200). Broken: a part spliced onto a stale copy (206 for a changed file)."""
    etag = fetch(server, "/static/text.txt").header("etag")
    headers = [("Range", "bytes=10-19"), ("If-Range", if_range.format(etag=etag))]
    response = fetch(server, "/static/text.txt", headers)
    if partial:
        assert response.status == 206, response.raw_head
        assert response.body == site.content("text.txt")[10:20]
    else:
        assert response.status == 200, response.raw_head
        assert response.body == site.content("text.txt")


def test_range_of_a_big_file_with_curl(server: ServerProcess, site: Site) -> None:
    """Rule: curl's ``--range`` over the middle of the 10 MiB file gets exactly those bytes
    (a part read from an offset deep in the file, not from its start). Broken: the part
    starts at byte 0 or has the wrong length."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    start, end = 5_000_000, 6_000_000
    result = subprocess.run(
        ["curl", "-s", "--max-time", "20", "--range", f"{start}-{end - 1}", "-o", "-",
         f"{server.base_url}/static/big.bin"],
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == site.content("big.bin")[start:end]


# -- expiry --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "expected"), [("60", "public, max-age=60"), ("0", None)])
def test_expires_sets_cache_control(site: Site, seconds: str, expected: str | None) -> None:
    """Rule: ``--static-path-expires N`` makes ``Cache-Control: public, max-age=N`` on every
    file response (200, 206, 304); 0 sends no Cache-Control at all. Broken: the default 86400
    kept, ``max-age=0`` sent for 0, or the header missing on 206/304."""
    args = ["--static-path-mount", str(site.root), "--static-path-expires", seconds]
    with running_server(APP, *args) as srv:
        whole = fetch(srv, "/static/text.txt")
        part = fetch(srv, "/static/text.txt", [("Range", "bytes=0-9")])
        fresh = fetch(srv, "/static/text.txt", [("If-None-Match", whole.header("etag") or "")])
    assert (whole.status, part.status, fresh.status) == (200, 206, 304)
    for response in (whole, part, fresh):
        if expected is None:
            assert response.header("cache-control") is None, response.raw_head
        else:
            assert tokens(response.header("cache-control")) == tokens(expected), response.raw_head
