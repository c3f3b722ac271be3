"""Responses: framing (Content-Length, chunked, HTTP/1.0), HEAD, keep-alive, send() after
the client went away."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import RECORDS, query, read_body, send_response, serve_record


async def start(send: Any, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None):
    await send({"type": "http.response.start", "status": status, "headers": headers or []})


async def body(send: Any, data: bytes, more: bool = False) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    params = query(scope)
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/content-length":
        await start(send, 200, [(b"content-length", b"11")])
        await body(send, b"hello ", more=True)
        await body(send, b"world")
    elif path == "/length-then-empty-end":
        # As Starlette's FileResponse does when the file is a whole number of chunks: every
        # declared byte goes out with more_body, then an empty message ends the body.
        outcome: dict[str, Any] = {"sends": []}
        try:
            await start(send, 200, [(b"content-length", b"10")])
            await body(send, b"01234", more=True)
            outcome["sends"].append("first half")
            await body(send, b"56789", more=True)
            outcome["sends"].append("second half")
            # FileResponse reads the next (empty) chunk in a thread: hyper writes meanwhile.
            await asyncio.sleep(0.05)
            if params.get("extra"):
                await body(send, b"more")
                outcome["sends"].append("past the end")
            else:
                await body(send, b"")
                outcome["sends"].append("empty end")
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            outcome["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            RECORDS[params.get("key", "")] = outcome  # once the app is done
    elif path == "/chunked":
        await start(send, 200, [(b"content-type", b"text/plain")])
        await body(send, b"a", more=True)
        await body(send, b"bb", more=True)
        await body(send, b"ccc", more=True)
        await body(send, b"")
    elif path == "/head":
        await start(send, 200, [(b"content-length", b"5")])
        await body(send, b"hello")
    elif path == "/head-chunked":
        await start(send, 200)
        await body(send, b"part-1", more=True)
        await body(send, b"part-2")
    elif path == "/echo":
        data, _ = await read_body(receive)
        text = f"{scope['method']} {path}?{scope['query_string'].decode()} {data.decode()}"
        await send_response(send, text.encode())
    elif path == "/client-port":
        await send_response(send, str(scope["client"][1]).encode())
    elif path == "/status":
        await send_response(send, b"custom", status=int(params.get("code", "200")))
    elif path == "/multi-header":
        headers = [
            (b"set-cookie", b"a=1"),
            (b"x-custom", b"Value With Case"),
            (b"set-cookie", b"b=2"),
        ]
        await send_response(send, b"ok", headers=headers)
    elif path == "/header-shapes":
        # The same three headers in each shape the spec's iterable of pairs allows.
        pairs = [(b"set-cookie", b"a=1"), (b"x-custom", b"Value"), (b"set-cookie", b"b=2")]
        shapes = {
            "tuples": pairs,
            "lists": [list(pair) for pair in pairs],
            "tuple": tuple(pairs),
            "iterator": iter(pairs),
        }
        await start(send, 200, shapes[params["shape"]])
        await body(send, b"ok")
    elif path == "/pathsend":
        # The file named by ?file=, sent by the server (http.response.pathsend).
        assert "http.response.pathsend" in scope.get("extensions", {})
        await start(send, 200, [(b"content-type", b"application/octet-stream")])
        await send({"type": "http.response.pathsend", "path": params["file"]})
    elif path == "/trailers":
        # http.response.trailers: a checksum after the body, announced in a Trailer header.
        assert "http.response.trailers" in scope.get("extensions", {})
        headers = [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum")]
        await send(
            {"type": "http.response.start", "status": 200, "headers": headers, "trailers": True}
        )
        await body(send, b"part one, ", more=True)
        await body(send, b"part two")
        await send(
            {
                "type": "http.response.trailers",
                "headers": [(b"x-checksum", b"abc123")],
                "more_trailers": False,
            }
        )
    elif path == "/stream-until-error":
        await start(send, 200)
        chunk = b"x" * 16384
        try:
            for _ in range(1600):  # at most ~8 s of streaming
                await body(send, chunk, more=True)
                await asyncio.sleep(0.005)
        except BaseException as exc:
            RECORDS[params["key"]] = {
                "type": type(exc).__name__,
                "is_oserror": isinstance(exc, OSError),
                "mro": [cls.__name__ for cls in type(exc).__mro__],
            }
            if not isinstance(exc, Exception):
                raise
            return
        RECORDS[params["key"]] = {"type": None, "is_oserror": False, "mro": []}
        await body(send, b"")
    else:
        await send_response(send, b"hello")
