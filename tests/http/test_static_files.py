"""Static files served by the server itself (``--static-path-mount``, ``--static-path-route``,
``--static-path-dir-to-file``, ``--static-path-expires``, ``--static-path-precompressed``,
``--static-path-fallthrough``): the working paths.

The tree served is made per module by ``staticutil.make_site`` (every file with a known mtime, a
10 MiB random file, precompressed variants, symlinks). The app is ``static_app``: it answers its
own 404 page with ``x-from-app`` and lists what it was called with (``/_seen``), so each test can
tell a response of the server's from one of the app's, and check that a static request never
entered Python. Requests go over raw sockets where the exact bytes matter (HEAD, 304 and 206 on
a kept-alive connection), httpx and curl as real clients, httpx's h2 for HTTP/2 and aioquic
(``h3client``) for HTTP/3. The hostile requests (traversal, symlinks out of the mount, odd
ranges) are in ``tests/hostile/test_static_files_hostile.py``.
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
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

import httpx
import pytest
from certs import Certs
from h1raw import request_bytes
from h3client import h3_connection
from loopkinds import LOOP_KINDS
from serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    run_to_exit,
    running_server,
)
from staticutil import (
    APP,
    BIG_SIZE,
    LAST_MODIFIED,
    MTIME,
    STRONG_ETAG,
    SUFFIX,
    Site,
    app_saw,
    fetch,
    from_app,
    make_site,
    prose,
    tokens,
)

#: Bound for one exchange of a large body.
BIG_TIMEOUT = 60.0
TEXT_SIZE = 1000  # text.txt


def ctype(value: str | None) -> str:
    """A Content-Type compared without case or spaces."""
    return (value or "").lower().replace(" ", "")


def assert_file_response(response, site: Site, name: str, *, max_age: int | None = 86400) -> None:
    """A whole-file 200 with the headers every file response carries."""
    data = site.content(name)
    assert response.status == 200, response.raw_head
    assert response.header("content-length") == str(len(data)), response.raw_head
    assert response.header("accept-ranges") == "bytes", response.raw_head
    etag = response.header("etag")
    assert etag is not None and STRONG_ETAG.match(etag), response.raw_head
    assert response.header("last-modified") == LAST_MODIFIED, response.raw_head
    if max_age is None:
        assert response.header("cache-control") is None, response.raw_head
    else:
        assert tokens(response.header("cache-control")) == {"public", f"max-age={max_age}"}, (
            response.raw_head
        )
    assert not from_app(response), response.raw_head


def site_args(site: Site, *extra: str) -> list[str]:
    """Two mounts: the tree's root at ``/static`` and ``media`` at ``/media``."""
    return [
        "--static-path-route",
        "/static",
        "--static-path-mount",
        str(site.root),
        "--static-path-route",
        "/media",
        "--static-path-mount",
        str(site.media),
        *extra,
    ]


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


@pytest.fixture(scope="module")
def defaults_server(site: Site) -> Iterator[ServerProcess]:
    """Only ``--static-path-mount``: the default route ``/static``, no directory file."""
    with running_server(APP, "--static-path-mount", str(site.root)) as srv:
        yield srv


@pytest.fixture(scope="module")
def precompressed_server(site: Site) -> Iterator[ServerProcess]:
    with running_server(
        APP, "--static-path-mount", str(site.root), "--static-path-precompressed"
    ) as srv:
        yield srv


# -- what a file response is ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("index.html", {"text/html;charset=utf-8"}),
        ("style.css", {"text/css;charset=utf-8"}),
        (
            "app.js",
            {
                "text/javascript;charset=utf-8",
                "text/javascript",
                "application/javascript",
                "application/javascript;charset=utf-8",
            },
        ),
        ("data.json", {"application/json", "application/json;charset=utf-8"}),
        ("image.png", {"image/png"}),
        ("blob.qqzz", {"application/octet-stream"}),
    ],
)
def test_a_file_comes_with_its_type_and_validators(
    server: ServerProcess, site: Site, name: str, expected: set[str]
) -> None:
    """Rule: GET of a file under the route answers 200 with its exact bytes, the Content-Type of
    its extension (application/octet-stream when unknown), Content-Length, ``Accept-Ranges:
    bytes``, a strong quoted ETag, the file's mtime as Last-Modified and ``Cache-Control:
    public, max-age=86400``, from the server, not the app. Broken: the request reaches the app
    (its 404), or a header is missing or wrong (a guessed type, a weak ETag, a local time)."""
    response = fetch(server, f"/static/{name}")
    assert_file_response(response, site, name)
    assert ctype(response.header("content-type")) in expected, response.raw_head
    assert response.body == site.content(name)
    assert f"GET /static/{name}" not in app_saw(server)


def test_the_request_never_enters_python(server: ServerProcess, site: Site) -> None:
    """Rule: a served file, a missing one and a refused method are all answered by the server:
    the app is never called for any of them, while a path outside every route still is. Broken:
    the app's list of requests names one of the static paths."""
    marker = uuid.uuid4().hex
    assert fetch(server, "/static/text.txt").status == 200
    assert fetch(server, f"/static/missing-{marker}.txt").status == 404
    assert fetch(server, "/static/text.txt", method="DELETE").status == 405
    assert fetch(server, f"/elsewhere-{marker}").status == 404
    seen = app_saw(server)
    assert f"GET /elsewhere-{marker}" in seen, seen
    assert not [line for line in seen if line.split(" ", 1)[1].startswith("/static")], seen


@pytest.mark.parametrize("loop", LOOP_KINDS)
def test_each_static_answer_has_its_access_line(site: Site, loop: str) -> None:
    """Rule: a file served, a missing one and a refused path each get the access line an app's
    response gets (client, request line, status), on either loop (uvloop's written on the
    loop's thread). Broken: only the app's requests were logged, none of the server's own
    static answers (seen before the static route wrote one)."""
    marker = uuid.uuid4().hex
    with running_server(APP, *site_args(site), "--access-log", "--loop", loop) as srv:
        assert fetch(srv, f"/static/text.txt?{marker}").status == 200
        assert fetch(srv, f"/static/missing-{marker}.txt").status == 404
        assert fetch(srv, f"/static/%2e%2e/{marker}").status == 400
        for line in (
            rf'"GET /static/text\.txt\?{marker} HTTP/1\.1" 200',
            rf'"GET /static/missing-{marker}\.txt HTTP/1\.1" 404',
            rf'"GET /static/%2e%2e/{marker} HTTP/1\.1" 400',
        ):
            srv.wait_for_output(line, stream="stdout")


def test_head_has_the_headers_and_no_body(server: ServerProcess, site: Site) -> None:
    """Rule: HEAD answers the headers GET would (Content-Length of the file included) and not a
    byte of body: a GET on the same connection right after parses as the next response. Broken:
    the body is sent after the HEAD's headers, and the second response is read from it."""
    with server.raw() as conn:
        conn.send(request_bytes("HEAD", "/static/style.css"))
        head = conn.read_response(head=True)
        conn.send(request_bytes("GET", "/static/style.css"))
        get = conn.read_response()
    assert_file_response(head, site, "style.css")
    assert_file_response(get, site, "style.css")
    for name in ("content-type", "content-length", "etag", "last-modified", "cache-control"):
        assert head.header(name) == get.header(name), (head.raw_head, get.raw_head)
    assert get.body == site.content("style.css")


def test_the_etag_is_stable_and_follows_the_file(server: ServerProcess, site: Site) -> None:
    """Rule: the same file gets the same ETag on every request; once it is rewritten (another
    size and mtime) the server serves the new bytes with a new ETag and Last-Modified. Broken: a
    random ETag per request, or a cache serving the old bytes or validators."""
    name = f"changing-{uuid.uuid4().hex}.txt"
    path = site.root / name
    path.write_bytes(b"first version\n")
    os.utime(path, (MTIME, MTIME))
    first = fetch(server, f"/static/{name}")
    again = fetch(server, f"/static/{name}")
    assert first.status == again.status == 200
    assert first.header("etag") == again.header("etag")
    path.write_bytes(b"the second, longer version\n")
    os.utime(path, (MTIME + 86400, MTIME + 86400))
    second = fetch(server, f"/static/{name}")
    assert second.status == 200
    assert second.body == b"the second, longer version\n"
    assert second.header("etag") != first.header("etag"), (first.raw_head, second.raw_head)
    assert second.header("last-modified") == formatdate(MTIME + 86400, usegmt=True)


def test_an_empty_file(server: ServerProcess) -> None:
    """Rule: a file of 0 bytes is 200 with ``Content-Length: 0`` and no body. Broken: a 404, or
    a response that never ends (chunked without its last chunk)."""
    response = fetch(server, "/static/empty.txt")
    assert response.status == 200
    assert response.header("content-length") == "0"
    assert response.body == b""


def test_names_are_percent_decoded(server: ServerProcess, site: Site) -> None:
    """Rule: the path is percent-decoded (UTF-8) before it names a file, and the query string
    is no part of the name: ``hello%20world.txt``, ``caf%C3%A9.txt`` and ``text.txt?v=3`` are
    served. Broken: 404 for the encoded names, or for a cache-busting query."""
    assert fetch(server, "/static/hello%20world.txt").body == site.content("hello world.txt")
    assert fetch(server, "/static/caf%C3%A9.txt").body == site.content("café.txt")
    response = fetch(server, "/static/text.txt?v=3&x=%2e%2e")
    assert (response.status, response.body) == (200, site.content("text.txt"))
    assert fetch(server, "/static/nested/deep/leaf.txt").body == b"leaf\n"


def test_keep_alive_mixes_static_and_app_responses(server: ServerProcess, site: Site) -> None:
    """Rule: static responses of every kind (200, HEAD, 304, 206, 404, 405) and the app's share
    one kept-alive connection, each framed exactly. Broken: one of them leaves stray bytes or
    closes the connection, and a later response is misread or never comes."""
    etag = fetch(server, "/static/text.txt").header("etag")
    assert etag is not None
    requests = [
        (request_bytes("GET", "/static/text.txt"), False, 200),
        (request_bytes("GET", "/ok"), False, 200),
        (request_bytes("HEAD", "/static/big.bin"), True, 200),
        (request_bytes("GET", "/static/text.txt", headers=[("If-None-Match", etag)]), False, 304),
        (request_bytes("GET", "/static/text.txt", headers=[("Range", "bytes=0-4")]), False, 206),
        (request_bytes("GET", "/static/nothing-here.txt"), False, 404),
        (request_bytes("GET", "/media/clip.txt"), False, 200),
    ]
    with server.raw() as conn:
        statuses = []
        for data, head, _ in requests:
            conn.send(data)
            statuses.append(conn.read_response(head=head))
        conn.send(request_bytes("POST", "/static/text.txt", body=b"x"))
        refused = conn.read_response()
    assert [r.status for r in statuses] == [status for _, _, status in requests]
    assert statuses[0].body == site.content("text.txt")
    assert statuses[1].body == b"ok"
    assert statuses[4].body == b"0000\n"
    assert statuses[6].body == b"media clip\n"
    assert refused.status == 405


# -- routes and mounts ---------------------------------------------------------------------------


def test_each_route_serves_its_own_mount(server: ServerProcess, site: Site) -> None:
    """Rule: with two route/mount pairs, each route serves the directory at the same position:
    ``/media/clip.txt`` is the media file and not found under ``/static``, ``/static/text.txt``
    is not found under ``/media``. Broken: routes and mounts paired in the wrong order, or every
    route serving the first mount."""
    media = fetch(server, "/media/clip.txt")
    assert_file_response(media, site, "clip.txt")
    assert media.body == b"media clip\n"
    assert fetch(server, "/static/clip.txt").status == 404
    assert fetch(server, "/media/text.txt").status == 404


@pytest.mark.parametrize("path", ["/staticx/text.txt", "/stat", "/x/static/text.txt", "/"])
def test_paths_outside_every_route_go_to_the_app(server: ServerProcess, path: str) -> None:
    """Rule: only the route itself and paths starting with ``ROUTE/`` are static; a path that
    merely starts with the same letters (``/staticx/...``) or contains it further on goes to
    the app. Broken: a prefix match on the string (``/staticx`` served from the mount)."""
    response = fetch(server, path)
    assert from_app(response), response.raw_head
    assert response.body == f"app 404: GET {path}".encode()


def test_a_directory_serves_its_index_file(server: ServerProcess, site: Site) -> None:
    """Rule: with ``--static-path-dir-to-file index.html`` a request for a directory serves the
    ``index.html`` in it, as text/html, ``/static/sub/`` and through a symlinked directory.
    ``/static/sub`` (no slash) serves it too, or redirects to ``/static/sub/``. A directory
    without that file is not found. Broken: a 404 for the directory, a listing, or the wrong
    directory's index."""
    response = fetch(server, "/static/sub/")
    assert response.status == 200, response.raw_head
    assert response.body == site.content("sub/index.html")
    assert ctype(response.header("content-type")) == "text/html;charset=utf-8"
    assert fetch(server, "/static/linkdir/").body == site.content("sub/index.html")
    bare = fetch(server, "/static/sub")
    if bare.status in (301, 302, 307, 308):
        assert (bare.header("location") or "").endswith("/static/sub/"), bare.raw_head
    else:
        assert (bare.status, bare.body) == (200, site.content("sub/index.html")), bare.raw_head
    assert fetch(server, "/static/emptydir/").status == 404
    assert not from_app(fetch(server, "/static/emptydir/"))


def test_the_route_itself_is_the_mount_directory(server: ServerProcess, site: Site) -> None:
    """Rule: the route's own path (``/static/``, and ``/static`` served or redirected to it) is
    the mount's root directory, so it serves the root ``index.html``. Broken: the bare route
    goes to the app or is not found."""
    response = fetch(server, "/static/")
    assert (response.status, response.body) == (200, site.content("index.html"))
    bare = fetch(server, "/static")
    assert not from_app(bare), bare.raw_head
    if bare.status in (301, 302, 307, 308):
        assert (bare.header("location") or "").endswith("/static/"), bare.raw_head
    else:
        assert (bare.status, bare.body) == (200, site.content("index.html")), bare.raw_head


def test_defaults_route_static_and_no_directory_file(
    defaults_server: ServerProcess, site: Site
) -> None:
    """Rule: with only ``--static-path-mount`` the route is ``/static``; without
    ``--static-path-dir-to-file`` a directory is not found (404 from the server, no listing),
    even one holding an ``index.html``. Broken: the mount served elsewhere, a directory listing
    (the names of the files in it), or the index served anyway."""
    assert fetch(defaults_server, "/static/text.txt").body == site.content("text.txt")
    for path in ("/static/sub/", "/static/", "/static/sub"):
        response = fetch(defaults_server, path)
        if response.status in (301, 302, 307, 308):
            continue  # a redirect to the slash form, which is itself checked
        assert response.status == 404, (path, response.raw_head)
        assert b"page.html" not in response.body and b"sub index" not in response.body
        assert not from_app(response), response.raw_head


def test_off_by_default(site: Site) -> None:
    """Rule: without ``--static-path-mount`` nothing is static: ``/static/text.txt`` goes to the
    app (its 404 page), even run from the directory that holds a ``static`` folder. Broken: the
    server serves files it was never asked to."""
    (site.base / "static").mkdir(exist_ok=True)
    (site.base / "static" / "text.txt").write_bytes(b"should not be served\n")
    with running_server(APP, "--app-dir", str(APPS_DIR), cwd=site.base) as srv:
        response = fetch(srv, "/static/text.txt")
        assert from_app(response), response.raw_head
        assert b"should not be served" not in response.body
        assert app_saw(srv) == ["GET /static/text.txt"]


def test_a_missing_file_is_the_servers_404(server: ServerProcess) -> None:
    """Rule: without ``--static-path-fallthrough`` a file that does not exist under a route is a
    404 answered by the server, whatever the method (HEAD too), and the app never sees it.
    Broken: the app's 404 page (``x-from-app``), or a 500."""
    marker = uuid.uuid4().hex
    response = fetch(server, f"/static/{marker}.txt")
    assert response.status == 404 and not from_app(response), response.raw_head
    head = fetch(server, f"/static/{marker}.css", method="HEAD")
    assert head.status == 404 and not from_app(head), head.raw_head
    assert fetch(server, f"/static/sub/{marker}/deeper.txt").status == 404
    assert fetch(server, "/static/text.txt/more").status == 404  # a file used as a directory
    assert not [line for line in app_saw(server) if marker in line]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405(server: ServerProcess, method: str) -> None:
    """Rule: a method other than GET and HEAD on a static route is 405 with ``Allow: GET,
    HEAD``, from the server (with or without a request body), and the connection still serves.
    Broken: the file served to a POST, the request handed to the app, or no Allow."""
    with server.raw() as conn:
        conn.send(request_bytes(method, "/static/text.txt", body=b"payload"))
        response = conn.read_response()
        assert response.status == 405, response.raw_head
        assert tokens(response.header("allow")) == {"get", "head"}, response.raw_head
        assert not from_app(response)
        if response.header("connection") != "close":
            conn.send(request_bytes("GET", "/static/empty.txt"))
            assert conn.read_response().status == 200
    assert f"{method} /static/text.txt" not in app_saw(server)


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


def test_a_mount_given_through_a_symlink_or_relative(site: Site) -> None:
    """Rule: a mount named through a symlink to the directory (``/srv/static -> /data/static``,
    or macOS's ``/tmp``), or by a path relative to the working directory, serves its files, and
    its inside symlinks too. Broken: the containment check compares the resolved file against
    the unresolved mount and refuses every file (404)."""
    alias = site.base / f"alias-{uuid.uuid4().hex}"
    alias.symlink_to(site.root, target_is_directory=True)
    with running_server(APP, "--static-path-mount", str(alias)) as srv:
        assert fetch(srv, "/static/text.txt").body == site.content("text.txt")
        assert fetch(srv, "/static/link.txt").body == site.content("text.txt")
        assert fetch(srv, "/static/linkdir/page.html").body == site.content("sub/page.html")
    args = ["--app-dir", str(APPS_DIR), "--static-path-mount", site.root.name]
    with running_server(APP, *args, cwd=site.base) as srv:
        assert fetch(srv, "/static/sub/page.html").body == site.content("sub/page.html")


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
    start, end = 5_000_000, 6_000_000
    result = subprocess.run(
        ["curl", "-s", "--max-time", "20", "--range", f"{start}-{end - 1}", "-o", "-",
         f"{server.base_url}/static/big.bin"],
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == site.content("big.bin")[start:end]


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


# -- precompressed variants ----------------------------------------------------------------------


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip"])
def test_a_precompressed_variant_is_sent(
    precompressed_server: ServerProcess, site: Site, coding: str
) -> None:
    """Rule: with ``--static-path-precompressed`` and an Accept-Encoding naming the coding, the
    file ``NAME.br``/``.zst``/``.gz`` beside NAME is sent byte for byte, with ``Content-Encoding``,
    ``Vary: Accept-Encoding``, NAME's Content-Type, the variant's length and an ETag of its own
    (not NAME's, so no cache mixes the two). Broken: the plain file sent, the variant sent with
    its own type (application/gzip), or NAME's ETag on the variant."""
    plain = fetch(precompressed_server, "/static/doc.html")
    assert plain.header("content-encoding") is None and plain.body == site.content("doc.html")
    response = fetch(precompressed_server, "/static/doc.html", [("Accept-Encoding", coding)])
    variant = site.content("doc.html" + SUFFIX[coding])
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") == coding, response.raw_head
    assert response.body == variant
    assert response.header("content-length") == str(len(variant))
    assert "accept-encoding" in tokens(", ".join(response.all("vary"))), response.raw_head
    assert ctype(response.header("content-type")) == "text/html;charset=utf-8", response.raw_head
    assert response.header("etag") is not None
    assert response.header("etag") != plain.header("etag"), (plain.raw_head, response.raw_head)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("gzip, zstd, br", "br"),
        ("gzip, zstd", "zstd"),
        ("*", "br"),
        ("br;q=0.5, gzip;q=0.9", "gzip"),
        ("br;q=0, zstd;q=0, gzip", "gzip"),
        ("identity", None),
        ("deflate", None),
        (None, None),
    ],
)
def test_which_variant(
    precompressed_server: ServerProcess, site: Site, accept: str | None, expected: str | None
) -> None:
    """Rule: among the acceptable variants the highest q wins, equal weights going to br, then
    zstd, then gzip; ``q=0`` refuses a coding; no acceptable one (or no Accept-Encoding) means
    the plain file. Broken: the client's order taken for preference, a refused coding sent, or a
    variant sent to a client that did not ask."""
    headers = [] if accept is None else [("Accept-Encoding", accept)]
    response = fetch(precompressed_server, "/static/doc.html", headers)
    assert response.status == 200
    assert response.header("content-encoding") == expected, response.raw_head
    name = "doc.html" if expected is None else "doc.html" + SUFFIX[expected]
    assert response.body == site.content(name)


@pytest.mark.parametrize(
    ("path", "accept", "expected", "name"),
    [
        ("/static/onlygz.css", "br, zstd, gzip", "gzip", "onlygz.css.gz"),
        ("/static/zonly.js", "br, zstd, gzip", "zstd", "zonly.js.zst"),
        ("/static/zonly.js", "br, gzip", None, "zonly.js"),
        ("/static/text.txt", "br, zstd, gzip", None, "text.txt"),
    ],
)
def test_a_missing_variant_is_skipped(
    precompressed_server: ServerProcess,
    site: Site,
    path: str,
    accept: str,
    expected: str | None,
    name: str,
) -> None:
    """Rule: a variant the client would prefer but that is not on disk is skipped for the next
    acceptable one, and with none the plain file is sent. Broken: a 404 for the missing
    ``.br``, or the plain file although an acceptable variant exists."""
    response = fetch(precompressed_server, path, [("Accept-Encoding", accept)])
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") == expected, response.raw_head
    assert response.body == site.content(name)


def test_head_and_304_of_a_variant(precompressed_server: ServerProcess, site: Site) -> None:
    """Rule: HEAD with ``Accept-Encoding: br`` has the variant's headers (its length, br) and no
    body; its ETag sent back in ``If-None-Match`` with the same Accept-Encoding is a 304. Broken:
    the plain file's length on the HEAD, or a 200 because the variant's ETag is not recognised."""
    accept = ("Accept-Encoding", "br")
    with precompressed_server.raw() as conn:
        conn.send(request_bytes("HEAD", "/static/doc.html", headers=[accept]))
        head = conn.read_response(head=True)
        etag = head.header("etag")
        assert etag is not None
        conn.send(
            request_bytes("GET", "/static/doc.html", headers=[accept, ("If-None-Match", etag)])
        )
        fresh = conn.read_response()
    assert head.status == 200
    assert head.header("content-encoding") == "br"
    assert head.header("content-length") == str(len(site.content("doc.html.br")))
    assert fresh.status == 304, fresh.raw_head


def test_curl_decodes_a_variant_to_the_file(
    precompressed_server: ServerProcess, site: Site
) -> None:
    """Rule: curl ``--compressed`` (offering br, zstd, gzip) decodes what it gets back to the
    file's exact bytes. Broken: a variant that is not what its Content-Encoding says."""
    result = subprocess.run(
        ["curl", "-s", "--max-time", "10", "--compressed", "-o", "-", "-D", "/dev/stderr",
         f"{precompressed_server.base_url}/static/doc.html"],
        capture_output=True,
        timeout=20,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert b"content-encoding: br" in result.stderr.lower(), result.stderr
    assert result.stdout == site.content("doc.html")


def test_no_variants_without_the_option(server: ServerProcess, site: Site) -> None:
    """Rule: ``--static-path-precompressed`` is off by default: ``Accept-Encoding: br`` on a
    file with a ``.br`` beside it gets the plain file. Broken: variants served unasked."""
    response = fetch(server, "/static/doc.html", [("Accept-Encoding", "br, gzip, zstd")])
    assert response.header("content-encoding") is None, response.raw_head
    assert response.body == site.content("doc.html")


# -- fallthrough ---------------------------------------------------------------------------------


def test_fallthrough_hands_missing_files_to_the_app(site: Site) -> None:
    """Rule: with ``--static-path-fallthrough`` a missing file under the route, and a method
    other than GET/HEAD on it, go to the app (its own 404 page), while an existing file is still
    served by the server without the app seeing it. Broken: the server's own 404 (no
    ``x-from-app``), or the app called for files that exist."""
    marker = uuid.uuid4().hex
    args = ["--static-path-mount", str(site.root), "--static-path-fallthrough"]
    with running_server(APP, *args) as srv:
        missing = fetch(srv, f"/static/{marker}.txt")
        assert missing.status == 404 and from_app(missing), missing.raw_head
        assert missing.body == f"app 404: GET /static/{marker}.txt".encode()
        served = fetch(srv, "/static/text.txt")
        assert (served.status, served.body) == (200, site.content("text.txt"))
        assert not from_app(served)
        posted = fetch(srv, "/static/text.txt", method="POST", body=b"x")
        assert from_app(posted), posted.raw_head
        seen = app_saw(srv)
    assert f"GET /static/{marker}.txt" in seen
    assert "POST /static/text.txt" in seen
    assert "GET /static/text.txt" not in seen


# -- with the server's compression ---------------------------------------------------------------


@pytest.fixture(scope="module")
def compress_server(site: Site) -> Iterator[ServerProcess]:
    args = ["--static-path-mount", str(site.root), "--static-path-precompressed"]
    with running_server(APP, "--compress", "gzip", *args) as srv:
        yield srv


def test_compress_gzips_a_text_file(compress_server: ServerProcess, site: Site) -> None:
    """Rule: with ``--compress gzip`` a text file of 20 kB with no precompressed variant is
    compressed on the fly: ``Content-Encoding: gzip``, ``Vary: Accept-Encoding``, decoding to
    the file. Broken: static responses bypass the compression layer."""
    response = fetch(compress_server, "/static/prose.txt", [("Accept-Encoding", "gzip")])
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") == "gzip", response.raw_head
    assert "accept-encoding" in tokens(", ".join(response.all("vary")))
    assert zlib.decompress(response.body, wbits=31) == site.content("prose.txt")
    assert len(response.body) < len(site.content("prose.txt"))


def test_compress_streams_a_large_text_file(compress_server: ServerProcess, site: Site) -> None:
    """Rule: a 3 MiB text file (larger than what is compressed in one piece) is compressed as it
    is read: gzip that decodes to the whole file. Broken: the stream cut, or a chunk lost
    between the file reader and the encoder."""
    name = f"large-prose-{uuid.uuid4().hex}.txt"
    data = b"".join(
        f"line {i}: ".encode() + prose(60) + b"\n" for i in range(3 * 1024 * 1024 // 70)
    )
    (site.root / name).write_bytes(data)
    try:
        response = fetch(
            compress_server, f"/static/{name}", [("Accept-Encoding", "gzip")], timeout=30
        )
    finally:
        (site.root / name).unlink()
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") == "gzip", response.raw_head
    assert zlib.decompress(response.body, wbits=31) == data


def test_compress_never_touches_a_range(compress_server: ServerProcess, site: Site) -> None:
    """Rule: a Range request is answered 206 with the identity bytes of the range even when the
    client accepts gzip. Broken: a compressed 206 (the range's offsets then refer to nothing
    the client can use)."""
    headers = [("Accept-Encoding", "gzip"), ("Range", "bytes=100-1099")]
    response = fetch(compress_server, "/static/prose.txt", headers)
    assert response.status == 206, response.raw_head
    assert response.header("content-encoding") is None, response.raw_head
    assert response.body == site.content("prose.txt")[100:1100]
    assert response.header("content-range") == "bytes 100-1099/20000"


@pytest.mark.parametrize(("accept", "coding"), [("br, gzip", "br"), ("gzip", "gzip")])
def test_a_variant_is_not_compressed_again(
    compress_server: ServerProcess, site: Site, accept: str, coding: str
) -> None:
    """Rule: when a precompressed variant is sent, the dynamic compression leaves it alone: the
    body is the variant file byte for byte with one Content-Encoding. Broken: a gzip of the
    ``.br`` or of the ``.gz`` (two codings, or one that decodes to compressed bytes)."""
    response = fetch(compress_server, "/static/doc.html", [("Accept-Encoding", accept)])
    assert response.status == 200
    assert response.all("content-encoding") == [coding], response.raw_head
    assert response.body == site.content("doc.html" + SUFFIX[coding])


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


def test_curl_gets_a_file_like_a_browser(server: ServerProcess, site: Site) -> None:
    """Rule: a real client's plain GET (curl, HTTP/1.1) gets the file and the headers a browser
    caches it by. Broken: anything curl reports as an error."""
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    result = subprocess.run(
        ["curl", "-s", "--max-time", "10", "-D", "/dev/stderr", "-o", "-",
         f"{server.base_url}/static/app.js"],
        capture_output=True,
        timeout=20,
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout == site.content("app.js")
    headers = result.stderr.decode().lower()
    assert "etag:" in headers and "last-modified:" in headers and "cache-control:" in headers
    modified = [line for line in headers.splitlines() if line.startswith("last-modified:")][0]
    assert parsedate_to_datetime(modified.split(":", 1)[1].strip()).timestamp() == MTIME
