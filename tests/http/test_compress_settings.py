"""Response compression's settings (``--compress`` with its order and levels,
``--compress-min-size``, ``--compress-types``): a server with settings of its own, compression off
by default, ``ferrule.run`` taking the same settings, and the values refused as usage errors.

The app is ``compress_app``: ``/body`` answers :func:`text_body` shaped by its query (type, length,
chunks, status, extra headers), ``/stream`` and ``/sse`` hold each next chunk until the test asks
for it. Bodies are decoded by hand (``compressutil.Decoder``: ``zlib``, ``brotli``, ``zstandard``)
from the bytes on the wire, so what is checked is what the server sent, never what a client library
made of it. The working paths are split by concern: ``test_compress_codings.py`` (each coding, the
headers of a compressed response, curl), ``test_compress_negotiation.py`` (the coding chosen, which
responses are compressed), ``test_compress_streaming.py`` (flushing, SSE, pathsend, trailers,
HTTP/2, HTTP/3, TLS) and ``test_compress_settings.py`` (the options' values, ``ferrule.run``, usage
errors); the hostile clients in ``tests/hostile/test_compress_hostile.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.compressutil import (
    APP,
    assert_plain,
    body_target,
    check_each,
    decoded,
    fetch,
    text_body,
)
from support.serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    run_to_exit,
    running_server,
)

# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def custom() -> Iterator[ServerProcess]:
    """Settings of its own: gzip at level 9 preferred to br, no zstd, a minimum of 10 bytes,
    and only ``application/x-custom`` and ``image/*``."""
    args = ["--compress", "gzip:9,br", "--compress-min-size", "10"]
    args += ["--compress-types", "application/x-custom,image/*"]
    with running_server(APP, *args) as srv:
        yield srv


# -- the options' values -------------------------------------------------------------------------


def test_the_servers_order_and_level_are_its_own(custom: ServerProcess) -> None:
    """Rule: the order of ``--compress gzip:9,br`` is the server's preference (gzip wins a tie
    with br), a coding not configured (zstd) is never used, and the level is used: the same
    1 MB of text at ``gzip:1`` comes out larger than at ``gzip:9``. Broken: a fixed order
    (br first), zstd sent although not configured, the level ignored (same sizes)."""
    small = body_target(size=2000, type="image/png")  # the custom server's types
    assert fetch(custom, small, "br, gzip").header("content-encoding") == "gzip"
    assert fetch(custom, small, "zstd, br").header("content-encoding") == "br"
    assert_plain(fetch(custom, small, "zstd"), text_body(2000), vary_added=True)
    target = body_target(size=1_000_000, type="image/png")
    best = fetch(custom, target, "gzip")
    with running_server(APP, "--compress", "gzip:1", "--compress-types", "image/*") as fast:
        quick = fetch(fast, target, "gzip")
    assert best.header("content-encoding") == quick.header("content-encoding") == "gzip"
    assert decoded(best) == decoded(quick) == text_body(1_000_000)
    assert len(quick.body) > len(best.body), (len(quick.body), len(best.body))


def test_custom_minimum_size(custom: ServerProcess) -> None:
    """Rule: ``--compress-min-size 10`` makes 10 bytes enough and 9 too few. Broken: the
    default 500 kept (10 bytes sent as they are)."""
    response = fetch(custom, body_target(size=10, type="image/png"), "gzip")
    assert response.header("content-encoding") == "gzip", response.raw_head
    assert decoded(response) == text_body(10)
    assert_plain(
        fetch(custom, body_target(size=9, type="image/png"), "gzip"), text_body(9), vary_added=False
    )


def test_custom_types(custom: ServerProcess) -> None:
    """Rule: ``--compress-types application/x-custom,image/*`` replaces the default list:
    ``application/x-custom`` and ``image/png`` are compressed, ``text/plain`` no longer is.
    Broken: the default list kept or merged in."""
    for content_type in ("application/x-custom", "image/png"):
        response = fetch(custom, body_target(size=2000, type=content_type), "gzip")
        assert response.header("content-encoding") == "gzip", (content_type, response.raw_head)
        assert decoded(response) == text_body(2000)
    plain = fetch(custom, body_target(size=2000, type="text/plain"), "gzip")
    assert_plain(plain, text_body(2000), vary_added=False)


# -- off by default, ferrule.run, usage errors ---------------------------------------------------


def test_off_by_default() -> None:
    """Rule: without ``--compress`` nothing is compressed: a client accepting every coding gets
    the app's bytes, their Content-Length and no Vary. Broken: compression on by default (a
    behaviour change for every existing deployment)."""
    with running_server(APP) as srv:
        response = fetch(srv, body_target(size=5000), "gzip, br, zstd")
        assert_plain(response, text_body(5000), vary_added=False)
        assert response.header("content-length") == "5000"
        streamed = fetch(srv, body_target(size=5000, length=0, chunks=3), "gzip")
        assert_plain(streamed, text_body(5000), vary_added=False)


def test_ferrule_run_takes_the_settings(tmp_path: Path) -> None:
    """Rule: ``ferrule.run(app, compress=..., compress_min_size=..., compress_types=...)`` sets
    the same as the options: br, a 10-byte minimum, text/plain only. Broken: a keyword
    refused (TypeError, the script dies), or ignored (nothing compressed)."""
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(APPS_DIR)!r})\n"
        "import ferrule\n"
        "ferrule.run('compress_app:app', host='127.0.0.1', port=0, compress='br',\n"
        "            compress_min_size=10, compress_types='text/plain')\n"
    )
    srv = ServerProcess([sys.executable, str(script)])
    try:
        srv.wait_running()
        small = fetch(srv, body_target(size=10), "gzip, br")
        assert small.header("content-encoding") == "br", small.raw_head
        assert decoded(small) == text_body(10)
        html = fetch(srv, body_target(size=2000, type="text/html"), "br")
        assert_plain(html, text_body(2000), vary_added=False)
    finally:
        srv.close()


#: Refused settings, each with the option the message must name.
BAD_VALUES = [
    ["--compress", "lz4"],
    ["--compress", "gzip:12"],
    ["--compress", "gzip:0"],
    ["--compress", "br:12"],
    ["--compress", "zstd:23"],
    ["--compress", "gzip:fast"],
    ["--compress", ""],
    ["--compress-min-size", "-1"],
]


def test_a_bad_value_is_a_usage_error() -> None:
    """Rule: an unknown coding, a level out of its range or not a number, an empty list, or a
    negative minimum size is refused before serving: exit status 2 and a message naming the
    option, no traceback. Broken: the server starts (the run is killed after its timeout:
    "did not exit"), exits 1 with a traceback, or the message does not say which option is
    wrong (the failing values are listed)."""

    def check(args: list[str]) -> None:
        option = args[0]
        if option == "--compress-min-size":
            args = ["--compress", "gzip", *args]
        result = run_to_exit(ferrule_command(APP, "--port", "0", *args), timeout=10)
        assert result.returncode == 2, result.describe()
        assert option in result.stderr, result.describe()
        assert "Traceback" not in result.stderr, result.describe()

    check_each(BAD_VALUES, check)
