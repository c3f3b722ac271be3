"""The six test types (name, path measured) and the check each server's answer must pass before
it is measured: status 200, a content-length, the right content type and a body that parses
into what the test asks for.

    python3 benches/db/checks.py PORT [TEST ...]    # check a server already running on PORT
"""

from __future__ import annotations

import html
import http.client
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benches/, for the db package

from db.postgres import FORTUNES  # noqa: E402
from db.rules import ADDITIONAL_FORTUNE, MAX_QUERIES, WORLD_ROWS  # noqa: E402

QUERIES = 20  # the row count /queries and /updates are measured with


@dataclass(frozen=True)
class Test:
    name: str
    path: str  # what wrk requests
    content_type: str  # what the Content-Type must start with


TESTS = [
    Test("json", "/json", "application/json"),
    Test("plaintext", "/plaintext", "text/plain"),
    Test("db", "/db", "application/json"),
    Test("queries", f"/queries?queries={QUERIES}", "application/json"),
    Test("fortunes", "/fortunes", "text/html"),
    Test("updates", f"/updates?queries={QUERIES}", "application/json"),
]
TESTS_BY_NAME = {t.name: t for t in TESTS}

# The bodies ferrule's Rust-only route (--rust-hello-route) answers with: not the app's text.
RUST_HELLO = b"Hello, world!"


class CheckFailed(Exception):
    pass


def get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, headers, response.read()
    finally:
        conn.close()


def answer(port: int, path: str, content_type: str) -> bytes:
    """The body of a GET that must answer 200 with a content-length and the content type."""
    status, headers, body = get(port, path)
    if status != 200:
        raise CheckFailed(f"GET {path}: status {status}, not 200: {body[:200]!r}")
    if headers.get("content-length") != str(len(body)):
        raise CheckFailed(f"GET {path}: content-length {headers.get('content-length')!r}")
    if not headers.get("content-type", "").startswith(content_type):
        raise CheckFailed(f"GET {path}: content-type {headers.get('content-type')!r}")
    return body


def world_rows(path: str, body: bytes, count: int | None) -> None:
    """A JSON world row (count None) or a list of `count` of them."""
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise CheckFailed(f"GET {path}: not JSON ({exc}): {body[:200]!r}") from None
    rows = [value] if count is None else value
    if count is not None and (not isinstance(value, list) or len(value) != count):
        raise CheckFailed(f"GET {path}: not a list of {count} rows: {body[:200]!r}")
    for row in rows:
        ok = isinstance(row, dict) and set(row) == {"id", "randomNumber"}
        if not ok or not all(1 <= row[k] <= WORLD_ROWS for k in row):
            raise CheckFailed(f"GET {path}: not a world row: {row!r}")


def fortunes_page(path: str, body: bytes) -> None:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckFailed(f"GET {path}: not UTF-8") from None
    cells = re.findall(r"<tr><td>(\d+)</td><td>(.*?)</td></tr>", text, re.S)
    messages = [html.unescape(message) for _, message in cells]
    expected = sorted([*FORTUNES, ADDITIONAL_FORTUNE])
    if messages != expected:
        raise CheckFailed(
            f"GET {path}: {len(messages)} rows, not the {len(expected)} fortunes sorted:"
            f" {messages!r}"
        )
    if "<script>" in text or "&lt;script&gt;" not in text:
        raise CheckFailed(f"GET {path}: the script tag is not escaped")


def check(port: int, test: Test, rust_only: bool = False) -> None:
    """Raises CheckFailed unless the server on `port` answers `test` as it must; with
    `rust_only`, ferrule's Rust-only route (plaintext only) and its own text."""
    body = answer(port, test.path, test.content_type)
    if test.name == "plaintext":
        if body != (RUST_HELLO if rust_only else b"Hello, World!"):
            raise CheckFailed(f"GET {test.path}: {body[:200]!r}")
    elif test.name == "json":
        if json.loads(body) != {"message": "Hello, World!"}:
            raise CheckFailed(f"GET {test.path}: {body[:200]!r}")
    elif test.name == "db":
        world_rows(test.path, body, None)
    elif test.name in ("queries", "updates"):
        world_rows(test.path, body, QUERIES)
        # The count's clamping, and a bad value counting as 1.
        base = test.path.partition("?")[0]
        for value, count in (("0", 1), ("abc", 1), ("", 1), (str(MAX_QUERIES + 1), MAX_QUERIES)):
            path = f"{base}?queries={value}"
            world_rows(path, answer(port, path, test.content_type), count)
    elif test.name == "fortunes":
        fortunes_page(test.path, body)


def main() -> None:
    port = int(sys.argv[1])
    for name in sys.argv[2:] or list(TESTS_BY_NAME):
        check(port, TESTS_BY_NAME[name])
        print(f"{name}: ok")


if __name__ == "__main__":
    main()
