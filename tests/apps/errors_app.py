"""App errors: exceptions before and after the response starts, no response, bad headers,
a second ``http.response.start``."""

from __future__ import annotations

from typing import Any

from asgi_helpers import RECORDS, query, send_response, serve_record

BAD_CHARS = {"cr": b"\r", "lf": b"\n", "nul": b"\x00", "crlf": b"\r\n"}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    params = query(scope)
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/raise-before":
        raise RuntimeError(f"failure before start {params['token']}")
    elif path == "/raise-after":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError(f"failure after start {params['token']}")
    elif path == "/raise-after-content-length":
        headers = [(b"content-length", b"100")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"0123456789", "more_body": True})
        raise RuntimeError(f"failure after start {params['token']}")
    elif path == "/return-after":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        return
    elif path == "/no-response":
        return
    elif path == "/bad-header":
        bad = BAD_CHARS[params["char"]]
        if params["where"] == "name":
            header = (b"x-evil" + bad + b"injected", b"1")
        else:
            header = (b"x-evil", b"ok" + bad + b"injected: yes")
        await send({"type": "http.response.start", "status": 200, "headers": [header]})
        await send({"type": "http.response.body", "body": b"should not be sent"})
    elif path == "/double-start":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            await send({"type": "http.response.start", "status": 201, "headers": []})
        except Exception as exc:
            RECORDS[params["key"]] = {"raised": type(exc).__name__, "message": str(exc)}
            raise
        RECORDS[params["key"]] = {"raised": None}
        await send({"type": "http.response.body", "body": b"second start accepted"})
    elif path == "/body-before-start":
        try:
            await send({"type": "http.response.body", "body": b"no start"})
        except Exception as exc:
            RECORDS[params["key"]] = {"raised": type(exc).__name__, "message": str(exc)}
            raise
        RECORDS[params["key"]] = {"raised": None}
    else:
        await send_response(send, b"ok")
