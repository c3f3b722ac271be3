"""What the static-file tests (``--static-path-mount``) share: the served tree made on disk
(:func:`make_site`), with files of every content type the spec names, precompressed variants,
symlinks inside and out of the mount and a secret beside it, and the hostile tests' additions
to it (:func:`make_hostile_site`); the command-line mounts of that tree (:func:`site_args`,
:func:`mounts`); one raw HTTP/1.1 exchange (:func:`fetch`, and :func:`ask`, which takes a closed
connection for a 400); what ``static_app`` saw (:func:`app_saw`); and the checks of a file
response's headers (:func:`assert_file_response`).

Imported by ``tests/http/test_static_*.py`` and ``tests/hostile/test_static_*_hostile.py`` as
``from support.staticutil import ...`` (``tests/`` is on ``sys.path``). Each test module makes its
own module-scoped ``site`` and ``server`` fixtures from these.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import uuid
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

from support.h1raw import HTTP_TIMEOUT, IncompleteResponse, RawResponse, request_bytes
from support.serverutil import ServerProcess

APP = "static_app:app"
#: Every file and variant of the tree is given this mtime (2024-01-02 03:04:05 UTC), so that
#: ``Last-Modified`` is known, and is a strong validator for ``If-Range`` (long past).
MTIME = 1704164645
LAST_MODIFIED = formatdate(MTIME, usegmt=True)
#: The size of ``big.bin``.
BIG_SIZE = 10 * 1024 * 1024
TEXT_SIZE = 1000  # text.txt
STRONG_ETAG = re.compile(r'^"[^"]*"$')

#: What the precompressed variants are called, by the coding they carry.
SUFFIX = {"br": ".br", "zstd": ".zst", "gzip": ".gz"}


@dataclass
class Site:
    """The served tree: ``root`` (mounted at ``/static``), ``media`` (a second mount), and
    ``outside``, beside them, holding :attr:`secret_text` that must never be served."""

    base: Path
    root: Path
    media: Path
    outside: Path
    secret_text: bytes
    files: dict[str, bytes] = field(default_factory=dict)

    def content(self, name: str) -> bytes:
        """The bytes of ``root/name`` as written."""
        return self.files[name]

    def big_digest(self) -> str:
        return hashlib.sha256(self.files["big.bin"]).hexdigest()


def _write(path: Path, data: bytes) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (MTIME, MTIME))
    return data


def text_lines(count: int) -> bytes:
    """``0000\\n0001\\n...``: 5 bytes a line, so that any range of it is easy to tell apart."""
    return "".join(f"{i:04d}\n" for i in range(count)).encode()


def prose(size: int) -> bytes:
    """Compressible English-like text of exactly ``size`` bytes."""
    words = b"the quick brown fox jumps over the lazy dog while static files are served "
    return (words * (size // len(words) + 1))[:size]


def compressed(coding: str, data: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(data, mtime=0)
    if coding == "br":
        import brotli

        return brotli.compress(data)
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def make_site(base: Path) -> Site:
    """Write the tree under ``base``; every regular file gets :data:`MTIME`."""
    root, media, outside = base / "site", base / "media", base / "outside"
    secret = f"OUTSIDE-SECRET-{uuid.uuid4().hex}".encode()
    site = Site(base, root, media, outside, secret)
    files = site.files
    _write(outside / "secret.txt", secret + b"\n")
    _write(base / "beside.txt", secret + b" beside the mount\n")
    # A directory whose name starts like the mount's, the classic prefix-check escape.
    _write(base / "site-private" / "secret.txt", secret + b" in site-private\n")

    files["index.html"] = _write(root / "index.html", b"<h1>root index</h1>\n")
    files["style.css"] = _write(root / "style.css", b"body { color: #123456; }\n")
    files["app.js"] = _write(root / "app.js", b"console.log('static js');\n")
    files["data.json"] = _write(root / "data.json", b'{"static": true, "n": 42}\n')
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    files["image.png"] = _write(root / "image.png", png)
    files["blob.qqzz"] = _write(root / "blob.qqzz", b"no known type\x00\x01\x02")
    files["text.txt"] = _write(root / "text.txt", text_lines(200))  # 1000 bytes
    files["empty.txt"] = _write(root / "empty.txt", b"")
    files["prose.txt"] = _write(root / "prose.txt", prose(20_000))
    files["big.bin"] = _write(root / "big.bin", os.urandom(BIG_SIZE))
    files["sub/index.html"] = _write(root / "sub" / "index.html", b"<h1>sub index</h1>\n")
    files["sub/page.html"] = _write(root / "sub" / "page.html", b"<p>sub page</p>\n")
    files["hello world.txt"] = _write(root / "hello world.txt", b"spaced name\n")
    files["café.txt"] = _write(root / "café.txt", b"accented name\n")
    files["nested/deep/leaf.txt"] = _write(root / "nested" / "deep" / "leaf.txt", b"leaf\n")
    (root / "emptydir").mkdir()

    # Precompressed variants: every coding beside doc.html, only gzip beside onlygz.css, and
    # only zstd beside zonly.js.
    files["doc.html"] = _write(root / "doc.html", b"<p>" + prose(4000) + b"</p>\n")
    for coding, suffix in SUFFIX.items():
        name = "doc.html" + suffix
        files[name] = _write(root / name, compressed(coding, files["doc.html"]))
    files["onlygz.css"] = _write(root / "onlygz.css", b"p { margin: 0 }\n" * 200)
    files["onlygz.css.gz"] = _write(root / "onlygz.css.gz", compressed("gzip", files["onlygz.css"]))
    files["zonly.js"] = _write(root / "zonly.js", b"var x = 1;\n" * 300)
    files["zonly.js.zst"] = _write(root / "zonly.js.zst", compressed("zstd", files["zonly.js"]))

    # Symlinks: inside pointing inside (served), inside pointing outside (never served).
    (root / "link.txt").symlink_to("text.txt")
    (root / "linkdir").symlink_to("sub", target_is_directory=True)
    (root / "escape.txt").symlink_to(Path("..") / "outside" / "secret.txt")
    (root / "escdir").symlink_to(Path("..") / "outside", target_is_directory=True)
    (root / "absescape.txt").symlink_to(outside / "secret.txt")
    (root / "passwd").symlink_to("/etc/passwd")
    (root / "dangling.txt").symlink_to("does-not-exist.txt")

    files["clip.txt"] = _write(media / "clip.txt", b"media clip\n")
    return site


def fetch(
    server: ServerProcess,
    target: str,
    headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
    *,
    method: str = "GET",
    body: bytes = b"",
    timeout: float = HTTP_TIMEOUT,
) -> RawResponse:
    """One request with ``target`` sent byte for byte on a new HTTP/1.1 connection."""
    with server.raw(timeout=timeout) as conn:
        conn.send(request_bytes(method, target, headers=list(headers), body=body))
        return conn.read_response(head=method == "HEAD", timeout=timeout)


def app_saw(server: ServerProcess) -> list[str]:
    """``METHOD PATH`` of every request ``static_app`` was called with so far."""
    return server.get("/_seen").json()


def from_app(response: RawResponse) -> bool:
    return response.header("x-from-app") == "static_app"


def tokens(value: str | None) -> set[str]:
    """The comma-separated tokens of a header value, lowercased."""
    return {token.strip().lower() for token in (value or "").split(",") if token.strip()}


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


def make_hostile_site(base: Path) -> Site:
    """:func:`make_site` with what only the hostile tests serve: a name with a backslash, a
    symlink to ``/dev/zero`` and one up out of ``sub``, a FIFO, a directory whose index file
    links out, and precompressed variants of ``pre.html`` that link out."""
    site = make_site(base)
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
    """The two mounts of :func:`site_args` with ``index.html`` for directories: the hostile
    tests' servers."""
    return site_args(site, "--static-path-dir-to-file", "index.html", *extra)


def ask(server: ServerProcess, target: str, **options) -> RawResponse:  # type: ignore[no-untyped-def]
    """``fetch``, where the server may also answer by closing the connection (a target hyper
    refuses to parse): that counts as a 400 with no body."""
    try:
        return fetch(server, target, **options)
    except IncompleteResponse as exc:
        assert exc.received == b"", exc
        return RawResponse("HTTP/1.1", 400, "closed", [], b"", b"")
