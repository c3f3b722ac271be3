"""An app that counts the garbage collector's collections: the benchmark app named by the
``GC_COUNTING_APP`` environment variable (``module:attribute``, default ``apps:app``), and
``GET /__gc`` answered with JSON, the collections of each generation since the process started
(``gc.callbacks``) and ``gc.get_count()``. Served by ``gc_collections.py``."""

from __future__ import annotations

import gc
import importlib
import json
import os

module_name, _, attribute = os.environ.get("GC_COUNTING_APP", "apps:app").partition(":")
inner = getattr(importlib.import_module(module_name), attribute)
collections = [0, 0, 0]


def _count(phase: str, info: dict) -> None:
    if phase == "start":
        collections[info["generation"]] += 1


gc.callbacks.append(_count)


async def app(scope, receive, send):
    if scope["type"] == "http" and scope["path"] == "/__gc":
        body = json.dumps({"collections": collections, "count": gc.get_count()}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await inner(scope, receive, send)
