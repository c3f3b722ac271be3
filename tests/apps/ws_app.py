"""WebSockets (ASGI websocket spec 2.4): one behaviour per path, for ``test_websocket``
and ``test_frames``.

Websocket routes (dispatch on ``scope["path"]``; ``?key=K`` names what the route records, read
back with ``GET /_record?key=K``):

- ``/echo``: accept, send back every text and bytes message as received (same type) until the
  client goes; record the ``websocket.disconnect`` message (``code``, ``reason``) under ``key``.
- ``/scope...`` (any path under it): receive the first message, accept, then send one text
  message: ``repr`` of ``{"scope": describe(scope), "first": first}`` (read back with
  ``ast.literal_eval``, so the test sees the exact Python types); then echo like ``/echo``.
- ``/subprotocol``: accept choosing the first subprotocol the client offered (none if none),
  with an extra response header ``x-ws: yes``; then echo like ``/echo``.
- ``/reject``: ``websocket.close`` before accepting (the server answers 403).
- ``/reject-listing``: ``websocket.close`` before accepting with a list as its ``reason``, as
  FastAPI sends its validation errors.
- ``/deny``: the denial response extension: 401, ``content-type: text/plain``, ``x-denied:
  yes`` and the body ``b"no entry"`` sent in two ``websocket.http.response.body`` messages.
- ``/close-with``: accept, then ``websocket.close`` with code 4001 and reason ``"bye"``.
- ``/close-listing``: accept, then ``websocket.close`` with code 4002 and a list as its
  ``reason``; record whether ``send`` raised under ``key``.
- ``/raise-before?token=T``: raise ``RuntimeError("ws failure before accept T")`` before
  accepting.
- ``/raise-after?token=T``: accept, send ``"accepted"``, raise
  ``RuntimeError("ws failure after accept T")``.
- ``/return-before``: return without accepting.
- ``/return-after``: accept, send ``"accepted"``, return without closing.
- ``/burst?n=N``: accept, wait for one message, send the texts ``"0"`` to ``"N-1"`` one after
  another without yielding to the loop, then echo like ``/echo``.
- ``/send-after-disconnect``: accept, wait for ``websocket.disconnect``, then try to send; record
  ``{"disconnect": message, "raised": bool, "exception": name, "oserror": bool}``.

HTTP routes: ``/_record?key=K`` (404 until recorded), ``/_last`` (JSON of the last disconnect
message and the last websocket scope seen, JSON-safe), ``/ok`` (``ok``). Any other HTTP request,
including a websocket upgrade the server handed over as plain HTTP (``--ws none``), gets JSON
``{"type": scope type, "path": ..., "http_version": ...}``.

Lifespan startup puts ``token`` in the state so the websocket scope's ``state`` can be checked.
"""

from __future__ import annotations

from typing import Any

from asgi_helpers import RECORDS, describe_scope, query, send_json, send_response, serve_record

LAST: dict[str, Any] = {"disconnect": None, "scope": None}

SCOPE_KEYS = (
    "type",
    "asgi",
    "http_version",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "client",
    "server",
    "subprotocols",
)


def describe(scope: dict[str, Any]) -> dict[str, Any]:
    """The standard keys with their Python types kept (for ``repr``)."""
    info = describe_scope(scope, SCOPE_KEYS)
    if isinstance(info["subprotocols"], (list, tuple)):
        info["subprotocols_container"] = type(info["subprotocols"]).__name__
        info["subprotocols"] = list(info["subprotocols"])
    info["state"] = dict(scope["state"]) if isinstance(scope.get("state"), dict) else "<missing>"
    extensions = scope.get("extensions")
    info["extensions"] = sorted(extensions) if isinstance(extensions, dict) else extensions
    return info


def jsonable(value: Any) -> Any:
    """``value`` with bytes as latin-1 text and tuples as lists (for JSON)."""
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    return value


async def echo_until_disconnect(receive: Any, send: Any) -> dict[str, Any]:
    """Echo text and bytes messages; return the disconnect message."""
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return message
        if message["type"] != "websocket.receive":
            continue
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})


def record_disconnect(key: str | None, message: dict[str, Any]) -> None:
    summary = jsonable(dict(message))
    LAST["disconnect"] = summary
    if key:
        RECORDS[key] = summary


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    params = query(scope)
    key = params.get("key")
    LAST["scope"] = jsonable(describe(scope))

    if path.startswith("/scope"):
        first = await receive()
        await send({"type": "websocket.accept"})
        text = repr({"scope": describe(scope), "first": dict(first)})
        await send({"type": "websocket.send", "text": text})
        record_disconnect(key, await echo_until_disconnect(receive, send))
        return

    first = await receive()
    assert first["type"] == "websocket.connect", first

    if path == "/echo":
        await send({"type": "websocket.accept"})
        record_disconnect(key, await echo_until_disconnect(receive, send))
    elif path == "/subprotocol":
        offered = scope.get("subprotocols") or []
        await send(
            {
                "type": "websocket.accept",
                "subprotocol": offered[0] if offered else None,
                "headers": [(b"x-ws", b"yes")],
            }
        )
        record_disconnect(key, await echo_until_disconnect(receive, send))
    elif path == "/reject":
        await send({"type": "websocket.close"})
    elif path == "/reject-listing":
        errors = [{"type": "missing", "loc": ["query", "token"], "msg": "Field required"}]
        await send({"type": "websocket.close", "code": 1008, "reason": errors})
    elif path == "/deny":
        headers = [(b"content-type", b"text/plain"), (b"x-denied", b"yes")]
        await send({"type": "websocket.http.response.start", "status": 401, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": b"no ", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"entry", "more_body": False})
    elif path == "/close-with":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4001, "reason": "bye"})
    elif path == "/close-listing":
        await send({"type": "websocket.accept"})
        try:
            await send({"type": "websocket.close", "code": 4002, "reason": ["not", "a", "str"]})
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            RECORDS[key or "close-listing"] = {"raised": type(exc).__name__}
        else:
            RECORDS[key or "close-listing"] = {"raised": None}
    elif path == "/raise-before":
        raise RuntimeError(f"ws failure before accept {params.get('token')}")
    elif path == "/raise-after":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "accepted"})
        raise RuntimeError(f"ws failure after accept {params.get('token')}")
    elif path == "/return-before":
        return
    elif path == "/return-after":
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": "accepted"})
    elif path == "/burst":
        await send({"type": "websocket.accept"})
        await receive()
        for i in range(int(params.get("n", "100"))):
            await send({"type": "websocket.send", "text": str(i)})
        record_disconnect(key, await echo_until_disconnect(receive, send))
    elif path == "/send-after-disconnect":
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                break
        outcome: dict[str, Any] = {"disconnect": jsonable(dict(message))}
        try:
            await send({"type": "websocket.send", "text": "too late"})
        except Exception as exc:  # noqa: BLE001 - recorded for the test
            outcome.update(raised=True, exception=type(exc).__name__)
            outcome["oserror"] = isinstance(exc, OSError)
        else:
            outcome.update(raised=False, exception=None, oserror=False)
        if key:
            RECORDS[key] = outcome
    else:
        await send({"type": "websocket.close", "code": 1008})


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/_last":
        await send_json(send, LAST)
    elif path == "/ok":
        await send_response(send, b"ok")
    else:
        await send_json(
            send,
            {
                "type": scope["type"],
                "path": path,
                "http_version": scope.get("http_version"),
                "upgrade": dict(scope["headers"]).get(b"upgrade", b"").decode("latin-1"),
            },
        )


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope.get("state", {})["token"] = "from-lifespan"
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    elif scope["type"] == "websocket":
        await websocket(scope, receive, send)
    elif scope["type"] == "http":
        await http(scope, receive, send)
