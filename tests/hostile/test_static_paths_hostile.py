"""Hostile request paths to the static files (``--static-path-mount``): path traversal in every
encoding, NUL bytes and backslashes, symlinks out of the mount, odd paths and methods, over HTTP/1.1
and HTTP/2. Whatever the request, the server answers 400 or 404 (never a file outside the mount,
never a 500), does not hand a traversal to the app, and keeps serving. Odd ranges and files that
change while sent are in ``test_static_transfers_hostile.py``; the working paths are in
``tests/http/test_static_*.py``.

The tree is ``staticutil.make_hostile_site``: ``site`` is mounted at ``/static``, ``media`` at
``/media``; ``outside/secret.txt``, ``beside.txt`` and ``site-private/secret.txt`` beside them hold
a random marker that must never appear in a response. The app is ``static_app``, which lists every
request it was called with (``/_seen``). Request targets are sent byte for byte on raw sockets
(httpx and curl would normalise ``..`` away), and over HTTP/2 with ``h2raw``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from hostileutil import PROMPT, check_serves_promptly
from support.h1raw import RawResponse
from support.h2raw import (
    DATA,
    H2Raw,
    Received,
    get,
)
from support.serverutil import ServerProcess, running_server
from support.staticutil import (
    APP,
    Site,
    app_saw,
    ask,
    fetch,
    from_app,
    make_hostile_site,
    mounts,
)

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
    return make_hostile_site(tmp_path_factory.mktemp("static-hostile"))


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
    (400, 403 or 404; within :data:`PROMPT` on a loaded machine) instead of blocking on an
    open that waits for a writer, and the server keeps serving. Broken: the request hangs
    (the client times out; ``ask`` takes the silence for a close, which only the time tells)
    and ties up a worker."""
    started = time.monotonic()
    response = ask(server, "/static/fifo", timeout=2 * PROMPT)
    assert response.status in (400, 403, 404), response.raw_head
    assert time.monotonic() - started < PROMPT
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
