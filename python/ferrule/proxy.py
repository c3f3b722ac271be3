"""``--proxy-headers``: trust X-Forwarded-For / X-Forwarded-Proto from the proxies listed in
``--forwarded-allow-ips`` (default 127.0.0.1), as uvicorn does."""

from __future__ import annotations

from typing import Any


class ProxyHeadersMiddleware:
    def __init__(self, app: Any, trusted: list[str]) -> None:
        self.app = app
        self.trust_all = "*" in trusted
        self.trusted = set(trusted)

    def _trusted(self, host: str | None) -> bool:
        return self.trust_all or host in self.trusted

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            client = scope.get("client")
            if self._trusted(client[0] if client else None):
                headers = dict(scope["headers"])
                proto = headers.get(b"x-forwarded-proto")
                if proto is not None:
                    scheme = proto.decode("latin-1").strip().lower()
                    if scheme in ("http", "https", "ws", "wss"):
                        if scope["type"] == "websocket":
                            scheme = scheme.replace("http", "ws")
                        scope["scheme"] = scheme
                forwarded_for = headers.get(b"x-forwarded-for")
                if forwarded_for is not None:
                    hosts = [h.strip() for h in forwarded_for.decode("latin-1").split(",")]
                    host = next((h for h in reversed(hosts) if not self._trusted(h)), hosts[0])
                    scope["client"] = (host, 0)
        return await self.app(scope, receive, send)
