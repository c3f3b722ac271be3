"""A real browser against the real server: headless Chromium (Debian's ``chromium``) loads a page
from ferrule over TLS, and the page's script opens a WebSocket back. Skipped, saying why, where
Chromium is not installed (``.ci/run`` installs it)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from support.certs import Certs
from support.serverutil import poll, running_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"
)


def test_chromium_opens_its_websocket_over_the_pages_http2_connection(
    certs: Certs, tmp_path: Path
) -> None:
    """Rule: a page served over TLS with ALPN h2 opens its WebSocket on the same HTTP/2
    connection (RFC 8441: the scope says ``http_version`` "2") and negotiates
    permessage-deflate (``ws.extensions`` in the page). Broken: Chromium opened a second,
    HTTP/1.1 connection for the WebSocket ("1.1"), and the extension was declined (empty), as
    seen before the server announced extended CONNECT and took permessage-deflate."""
    with running_server(
        "browser_app:app",
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
    ) as srv:
        assert CHROMIUM is not None
        browser = subprocess.Popen(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--ignore-certificate-errors",
                f"--user-data-dir={tmp_path / 'profile'}",
                f"https://localhost:{srv.port}/",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:

            def recorded() -> dict | None:
                trust = ssl.create_default_context(cafile=str(certs.ca))
                with srv.client(timeout=2, verify=trust) as client:
                    response = client.get("/_record?key=browser")
                return response.json() if response.status_code == 200 else None

            seen = poll(recorded, timeout=30, what="the page's WebSocket to reach the app")
        finally:
            browser.kill()
            browser.wait(10)
    assert seen["http_version"] == "2", seen
    assert "permessage-deflate" in seen["offered"], seen
    assert (seen["extensions"] or "").startswith("permessage-deflate"), seen
