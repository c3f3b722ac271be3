"""The HTTP connection scope (ASGI HTTP spec 2.4), seen by a plain ASGI app.

``scope_app`` answers ``repr()`` of the scope's standard keys; the tests read it back with
``ast.literal_eval``, so they check exact Python types (``bytes`` vs ``str``, ``int`` ports).
One server serves the module; ``--root-path`` gets its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

import pytest
from support.h1raw import RawConnection, request_bytes
from support.serverutil import ServerProcess, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("scope_app:app") as srv:
        yield srv


def scope_of(server: ServerProcess, path: str = "/", **options: Any) -> dict[str, Any]:
    with server.client() as client:
        response = client.request(options.pop("method", "GET"), path, **options)
    assert response.status_code == 200, response.text
    return ast.literal_eval(response.text)


def raw_scope(server: ServerProcess, data: bytes) -> tuple[dict[str, Any], RawConnection]:
    conn = server.raw()
    conn.send(data)
    response = conn.read_response()
    assert response.status == 200, response
    return ast.literal_eval(response.body.decode()), conn


def test_type_and_asgi_versions(server: ServerProcess) -> None:
    """Rule: scope type is "http" and asgi is {"version": "3.0", "spec_version": "2.4"}.
    Broken: a framework that checks the spec version (or the type) would misbehave; the dict
    differs."""
    scope = scope_of(server)
    assert scope["type"] == "http"
    assert scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}


def test_http_version_1_1(server: ServerProcess) -> None:
    """Rule: http_version is "1.1" for an HTTP/1.1 request. Broken: another string (e.g.
    "HTTP/1.1" or "1")."""
    assert scope_of(server)["http_version"] == "1.1"


def test_http_version_1_0(server: ServerProcess) -> None:
    """Rule: http_version is "1.0" for an HTTP/1.0 request (raw socket). Broken: "1.1" is
    reported for every request."""
    scope, conn = raw_scope(server, request_bytes("GET", "/", version="HTTP/1.0"))
    conn.close()
    assert scope["http_version"] == "1.0"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PURGE"])
def test_method_is_uppercase_str(server: ServerProcess, method: str) -> None:
    """Rule: method is the request method as an uppercase str, extension methods included.
    Broken: bytes, a mangled or a refused method."""
    scope = scope_of(server, "/", method=method)
    assert scope["method"] == method


def test_scheme_is_http(server: ServerProcess) -> None:
    """Rule: scheme is "http" on a plain TCP connection. Broken: missing or "https"."""
    assert scope_of(server)["scheme"] == "http"


def test_path_is_percent_decoded_utf8(server: ServerProcess) -> None:
    """Rule: path is the request target's path, percent-decoded, UTF-8 decoded to str.
    Broken: the path stays percent-encoded, is decoded as latin-1 ("cafÃ©"), or is bytes."""
    scope, conn = raw_scope(server, request_bytes("GET", "/caf%C3%A9/a%20b/x%2Fy?q=1"))
    conn.close()
    assert scope["path"] == "/café/a b/x/y"
    assert isinstance(scope["path"], str)


def test_raw_path_is_undecoded_bytes_without_query(server: ServerProcess) -> None:
    """Rule: raw_path is the path exactly as sent, as bytes, without the query string.
    Broken: raw_path decoded, a str, or including ``?q=1``."""
    scope, conn = raw_scope(server, request_bytes("GET", "/caf%C3%A9/a%20b/x%2Fy?q=1"))
    conn.close()
    assert scope["raw_path"] == b"/caf%C3%A9/a%20b/x%2Fy"


def test_query_string_is_raw_bytes(server: ServerProcess) -> None:
    """Rule: query_string is the undecoded bytes after "?" (b"" when absent). Broken: str,
    decoded ("%20" turned into a space), or None for no query."""
    scope, conn = raw_scope(server, request_bytes("GET", "/p?a=1&b=%20x&c=caf%C3%A9&d"))
    conn.close()
    assert scope["query_string"] == b"a=1&b=%20x&c=caf%C3%A9&d"
    assert scope_of(server, "/no-query")["query_string"] == b""


def test_headers_lowercased_bytes(server: ServerProcess) -> None:
    """Rule: headers are [name, value] pairs of bytes, names lowercased, values untouched.
    Broken: str items, names with their original case, or values lowercased."""
    data = request_bytes("GET", "/", headers=[("X-Custom-Header", "Some Value")])
    scope, conn = raw_scope(server, data)
    conn.close()
    headers = scope["headers"]
    assert all(isinstance(n, bytes) and isinstance(v, bytes) for n, v in headers), headers
    assert (b"x-custom-header", b"Some Value") in headers
    assert all(name == name.lower() for name, _ in headers), headers


def test_header_values_keep_non_ascii_bytes(server: ServerProcess) -> None:
    """Rule: header values are the bytes received (obs-text such as 0xE9 kept). Broken: the
    value is re-encoded (UTF-8 of "é"), replaced, or the request is refused."""
    data = b"GET / HTTP/1.1\r\nHost: test\r\nX-Latin: caf\xe9\r\n\r\n"
    scope, conn = raw_scope(server, data)
    conn.close()
    assert (b"x-latin", b"caf\xe9") in scope["headers"]


def test_duplicate_headers_kept_in_order(server: ServerProcess) -> None:
    """Rule: repeated header names are kept as separate pairs in the order received. Broken:
    the values are merged ("1, 2, 3"), deduplicated or reordered."""
    data = request_bytes("GET", "/", headers=[("X-Dup", "1"), ("X-Dup", "2"), ("X-Dup", "3")])
    scope, conn = raw_scope(server, data)
    conn.close()
    values = [value for name, value in scope["headers"] if name == b"x-dup"]
    assert values == [b"1", b"2", b"3"]


def test_header_order_across_names_kept(server: ServerProcess) -> None:
    """Rule: the header list keeps the order of the request, also across different names
    (interleaved duplicates stay interleaved). Broken: headers grouped by name, as a hash map
    iterates them: [a=1, a=3, b=2] instead of [a=1, b=2, a=3]."""
    sent = [("X-A", "1"), ("X-B", "2"), ("X-A", "3"), ("X-C", "4")]
    scope, conn = raw_scope(server, request_bytes("GET", "/", headers=sent))
    conn.close()
    ours = [(n, v) for n, v in scope["headers"] if n in (b"x-a", b"x-b", b"x-c")]
    assert ours == [(b"x-a", b"1"), (b"x-b", b"2"), (b"x-a", b"3"), (b"x-c", b"4")]
    assert scope["headers"][0] == (b"host", b"test"), "Host came first on the wire"


def test_header_order_follows_each_pipelined_request(server: ServerProcess) -> None:
    """Rule: with requests pipelined on one connection behind a Content-Length body and a
    chunked body with a trailer, each scope gets its own request's headers in order. The server
    reads header order from its own record of the byte stream, which must follow body framing
    exactly to stay in step with hyper. Broken: a later request gets an earlier request's
    headers, or its headers grouped by name (seen with the recorder's trailer skipping
    removed: the third request fell back to hyper's grouped map)."""
    first = request_bytes("POST", "/", headers=[("X-N", "1"), ("X-Z", "a")], body=b"hello")
    second = (
        b"POST / HTTP/1.1\r\nHost: test\r\nX-N: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    third = request_bytes("GET", "/", headers=[("X-Z", "c"), ("X-N", "3"), ("X-Z", "d")])
    conn = server.raw()
    conn.send(first + second + third)
    scopes = [ast.literal_eval(conn.read_response().body.decode()) for _ in range(3)]
    conn.close()
    ours = [[(n, v) for n, v in s["headers"] if n in (b"x-n", b"x-z")] for s in scopes]
    assert ours == [
        [(b"x-n", b"1"), (b"x-z", b"a")],
        [(b"x-n", b"2")],
        [(b"x-z", b"c"), (b"x-n", b"3"), (b"x-z", b"d")],
    ]


def test_each_request_on_a_kept_alive_connection_has_its_own_version(
    server: ServerProcess,
) -> None:
    """Rule: http_version is each request's own, though the requests of one connection share
    their client, server and scheme: HTTP/1.1, then HTTP/1.0 kept alive, then HTTP/1.1 again
    on one socket. Broken: a later request reports the version of an earlier one (seen with
    the version the connection's shared start of a scope was made with: "1.0" for the third
    and fourth)."""
    conn = server.raw()
    scopes = []
    for version, headers in (
        ("HTTP/1.1", []),
        ("HTTP/1.0", [("Connection", "keep-alive")]),
        ("HTTP/1.1", []),
        ("HTTP/1.1", []),
    ):
        conn.send(request_bytes("GET", "/", version=version, headers=headers))
        scopes.append(ast.literal_eval(conn.read_response().body.decode()))
    local = conn.sock.getsockname()
    conn.close()
    assert [scope["http_version"] for scope in scopes] == ["1.1", "1.0", "1.1", "1.1"]
    assert {scope["client"] for scope in scopes} == {local}
    assert {scope["server"] for scope in scopes} == {("127.0.0.1", server.port)}
    assert {scope["scheme"] for scope in scopes} == {"http"}


def test_client_is_peer_host_and_int_port(server: ServerProcess) -> None:
    """Rule: client is (host str, port int) of the peer: the raw socket's own address. Broken:
    None, a port as str, or another address."""
    conn = server.raw()
    conn.send(request_bytes("GET", "/"))
    scope = ast.literal_eval(conn.read_response().body.decode())
    local_host, local_port = conn.sock.getsockname()
    conn.close()
    assert scope["client"] == (local_host, local_port)
    assert isinstance(scope["client"][1], int)


def test_server_is_listen_address(server: ServerProcess) -> None:
    """Rule: server is (host, port) the server listens on. Broken: None, port 0 (the requested
    port, not the real one) or a str port."""
    assert scope_of(server)["server"] == ("127.0.0.1", server.port)


def test_root_path_defaults_to_empty(server: ServerProcess) -> None:
    """Rule: root_path is "" without --root-path. Broken: missing (the app sees "<missing>")
    or None."""
    assert scope_of(server)["root_path"] == ""


def test_root_path_from_option() -> None:
    """Rule: --root-path sets scope["root_path"] on every request. Broken: the option is
    ignored (root_path "") or refused at the command line."""
    with running_server("scope_app:app", "--root-path", "/mounted") as srv:
        scope = scope_of(srv, "/mounted/page")
    assert scope["root_path"] == "/mounted"


def test_state_key_is_a_dict_from_lifespan(server: ServerProcess) -> None:
    """Rule: the request scope has "state" with what lifespan startup stored. Broken: no
    "state" key, or it lacks the startup's "token"."""
    assert scope_of(server)["state"] == ["token"]


def test_headers_reach_app_with_a_body(server: ServerProcess) -> None:
    """Rule: a POST's scope carries Content-Length and its own headers like a GET. Broken:
    content-length dropped from scope["headers"] when the server reads the body itself."""
    scope = scope_of(server, "/", method="POST", content=b"12345")
    assert (b"content-length", b"5") in scope["headers"]
    assert scope["method"] == "POST"
