"""The example app the README serves: a plain ASGI app with two HTTP routes and a WebSocket
that echoes what it is sent."""


async def app(scope, receive, send):
    if scope["type"] == "websocket":
        await echo(receive, send)
        return
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        for i in range(5):
            await send({"type": "http.response.body", "body": b"chunk %d\n" % i, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": b"Hello from ferrule\n"})


async def echo(receive, send):
    """Accepts the WebSocket and sends each message back until the client closes."""
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
        elif message["type"] == "websocket.receive":
            await send(
                {"type": "websocket.send", **{k: v for k, v in message.items() if k != "type"}}
            )
        else:
            return
