"""Static files served by the server itself (``--static-path-mount``, ``--static-path-route``,
``--static-path-dir-to-file``): what a file response is (its type, validators and cache headers,
HEAD, the request never entering Python, its access line, kept-alive connections) and routes and
mounts (each route its own mount, directory files, the defaults, a missing file, other methods).

The tree served is made per module by ``staticutil.make_site`` (every file with a known mtime, a 10
MiB random file, precompressed variants, symlinks). The app is ``static_app``: it answers its own
404 page with ``x-from-app`` and lists what it was called with (``/_seen``), so each test can tell a
response of the server's from one of the app's, and check that a static request never entered
Python. Requests go over raw sockets where the exact bytes matter (HEAD on a kept-alive connection),
and curl as a real client. The working paths are split by concern: ``test_static_serving.py`` (file
responses, routes and mounts), ``test_static_conditions.py`` (304s, ranges, expiry),
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
from email.utils import formatdate, parsedate_to_datetime

import pytest
from support.h1raw import request_bytes
from support.loopkinds import LOOP_KINDS
from support.serverutil import (
    APPS_DIR,
    ServerProcess,
    running_server,
)
from support.staticutil import (
    APP,
    MTIME,
    Site,
    app_saw,
    assert_file_response,
    ctype,
    fetch,
    from_app,
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


@pytest.fixture(scope="module")
def defaults_server(site: Site) -> Iterator[ServerProcess]:
    """Only ``--static-path-mount``: the default route ``/static``, no directory file."""
    with running_server(APP, "--static-path-mount", str(site.root)) as srv:
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
