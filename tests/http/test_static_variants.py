"""Static files served by the server itself (``--static-path-precompressed``,
``--static-path-fallthrough``, with ``--compress``): precompressed variants chosen by the request's
Accept-Encoding, missing files handed to the app, and the server's own compression of static
responses.

The tree served is made per module by ``staticutil.make_site`` (every file with a known mtime, a 10
MiB random file, precompressed variants, symlinks). The app is ``static_app``: it answers its own
404 page with ``x-from-app`` and lists what it was called with (``/_seen``), so each test can tell a
response of the server's from one of the app's, and check that a static request never entered
Python. Requests go over raw sockets, and curl as a real client that decodes. The working paths are
split by concern: ``test_static_serving.py`` (file responses, routes and mounts),
``test_static_conditions.py`` (304s, ranges, expiry), ``test_static_variants.py`` (precompressed
variants, fallthrough, ``--compress``) and ``test_static_protocols.py`` (large files, HTTP/2, TLS,
HTTP/3, settings); the hostile requests (traversal, symlinks out of the mount, odd ranges) are in
``tests/hostile/test_static_paths_hostile.py`` and
``tests/hostile/test_static_transfers_hostile.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
import zlib
from collections.abc import Iterator

import pytest
from support.h1raw import request_bytes
from support.serverutil import (
    ServerProcess,
    running_server,
)
from support.staticutil import (
    APP,
    SUFFIX,
    Site,
    app_saw,
    ctype,
    fetch,
    from_app,
    make_site,
    prose,
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
def precompressed_server(site: Site) -> Iterator[ServerProcess]:
    with running_server(
        APP, "--static-path-mount", str(site.root), "--static-path-precompressed"
    ) as srv:
        yield srv


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
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
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
