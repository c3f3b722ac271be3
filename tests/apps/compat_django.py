"""A Django 5.2 project in one module, for ``tests/compat/test_django.py``: the ASGI handler
from ``get_asgi_application()``, async and sync views, JSON in and out, forms and multipart
uploads (a large one spills to a temporary file), ``StreamingHttpResponse`` from an async
iterator (plain, as server-sent events, and endless until the client leaves), percent-encoded
paths and queries, cookies, a redirect, ``request.META`` as the server
fills it, and a view that raises (500). Settings: ``compat_django_settings``; this module is
also the URLconf. Django has no lifespan: it refuses the lifespan scope, which the server must
take quietly (uvicorn logs "ASGI 'lifespan' protocol appears unsupported." at INFO)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "compat_django_settings")

from django.core.asgi import get_asgi_application  # noqa: E402
from django.http import (  # noqa: E402
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    JsonResponse,
    StreamingHttpResponse,
)
from django.urls import path  # noqa: E402


async def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse("hello django", content_type="text/plain")


async def item(request: HttpRequest, item_id: int) -> JsonResponse:
    return JsonResponse({"item_id": item_id, "q": request.GET.get("q"), "method": request.method})


async def echo_json(request: HttpRequest) -> JsonResponse:
    if request.method != "POST":
        return JsonResponse({"error": "POST only"}, status=405)
    data = json.loads(request.body)
    return JsonResponse({"received": data, "keys": sorted(data)}, status=201)


def form(request: HttpRequest) -> JsonResponse:
    """A sync view (Django runs it in a thread): fields and files of a form post."""
    files = {}
    for name, upload in request.FILES.items():
        digest = hashlib.sha256()
        for chunk in upload.chunks():
            digest.update(chunk)
        files[name] = {
            "filename": upload.name,
            "size": upload.size,
            "sha256": digest.hexdigest(),
            "on_disk": hasattr(upload, "temporary_file_path"),
        }
    return JsonResponse(
        {
            "name": request.POST.get("name"),
            "tags": request.POST.getlist("tags"),
            "files": files,
            "thread": threading.current_thread().name,
        }
    )


async def stream(request: HttpRequest) -> StreamingHttpResponse:
    count = int(request.GET.get("n", "10"))

    async def parts() -> AsyncIterator[bytes]:
        for i in range(count):
            yield f"part {i}\n".encode()
            await asyncio.sleep(0.001)

    return StreamingHttpResponse(parts(), content_type="text/plain")


async def events(request: HttpRequest) -> StreamingHttpResponse:
    count = int(request.GET.get("n", "5"))

    async def feed() -> AsyncIterator[str]:
        for i in range(count):
            yield f"event: tick\nid: {i}\ndata: {json.dumps({'n': i})}\n\n"
            await asyncio.sleep(0.01)

    response = StreamingHttpResponse(feed(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    return response


#: Per key: "streaming" while an endless feed runs, "closed" once its iterator ended.
FEEDS: dict[str, str] = {}


async def endless(request: HttpRequest, key: str) -> StreamingHttpResponse:
    """An endless event stream; Django stops iterating when the server reports the client
    gone (``http.disconnect``), which ends the generator (its ``finally`` records it)."""

    async def feed() -> AsyncIterator[str]:
        FEEDS[key] = "streaming"
        try:
            i = 0
            while True:
                yield f"data: {i}\n\n"
                i += 1
                await asyncio.sleep(0.02)
        finally:
            FEEDS[key] = "closed"

    return StreamingHttpResponse(feed(), content_type="text/event-stream")


async def feed_state(request: HttpRequest, key: str) -> JsonResponse:
    return JsonResponse({"state": FEEDS.get(key)})


async def echo_path(request: HttpRequest, name: str) -> JsonResponse:
    return JsonResponse(
        {
            "name": name,
            "path": request.path,
            "full": request.get_full_path(),
            "q": request.GET.getlist("q"),
        }
    )


async def cookies(request: HttpRequest) -> JsonResponse:
    response = JsonResponse({"seen": dict(request.COOKIES)})
    response.set_cookie("first", "1", httponly=True)
    response.set_cookie("second", "2", samesite="Lax")
    return response


async def old(request: HttpRequest) -> HttpResponseRedirect:
    return HttpResponseRedirect("/items/7?q=moved")


async def meta(request: HttpRequest) -> JsonResponse:
    keys = ("REMOTE_ADDR", "SERVER_NAME", "SERVER_PORT", "SCRIPT_NAME", "QUERY_STRING")
    return JsonResponse(
        {
            "meta": {key: request.META.get(key) for key in keys},
            "absolute": request.build_absolute_uri("/x"),
            "secure": request.is_secure(),
            "host": request.get_host(),
            "path": request.path,
            "user_agent": request.headers.get("User-Agent"),
        }
    )


async def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("compat_django: this view always fails")


urlpatterns = [
    path("", index),
    path("items/<int:item_id>", item),
    path("json", echo_json),
    path("form", form),
    path("stream", stream),
    path("events", events),
    path("endless/<str:key>", endless),
    path("feeds/<str:key>", feed_state),
    path("names/<str:name>", echo_path),
    path("cookies", cookies),
    path("old", old),
    path("meta", meta),
    path("boom", boom),
]

app = get_asgi_application()
