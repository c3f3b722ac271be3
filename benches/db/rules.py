"""What the six test types ask of an app, shared by raw_app.py and fastapi_app.py: the query
count's parsing, the random row ids, the JSON encoder and the fortunes page's template.

Not run by itself; the apps import it as ``db.rules`` (with benches/ on the path).
"""

from __future__ import annotations

import functools
import random

try:
    import orjson

    def dumps(value: object) -> bytes:
        return orjson.dumps(value)

except ImportError:  # the standard library's encoder: slower, same bytes for these values
    import json

    def dumps(value: object) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


HELLO = b"Hello, World!"
WORLD_ROWS = 10_000
MAX_QUERIES = 500
ADDITIONAL_FORTUNE = "Additional fortune added at request time."

SELECT_WORLD = "SELECT id, randomnumber FROM world WHERE id = $1"
UPDATE_WORLD = "UPDATE world SET randomnumber = $2 WHERE id = $1"
SELECT_FORTUNES = "SELECT id, message FROM fortune"

FORTUNES_TEMPLATE = (
    "<!DOCTYPE html><html><head><title>Fortunes</title></head><body><table>"
    "<tr><th>id</th><th>message</th></tr>"
    "{% for id, message in fortunes %}<tr><td>{{ id }}</td><td>{{ message }}</td></tr>"
    "{% endfor %}</table></body></html>"
)


@functools.cache
def fortunes_page():
    """The compiled template, made on first use: run.py imports this module (for the checks)
    before it has installed Jinja2."""
    import jinja2

    # Autoescaping is what the fortunes test checks: a message's markup must arrive as text.
    return jinja2.Environment(autoescape=True).from_string(FORTUNES_TEMPLATE)


def random_id() -> int:
    return random.randint(1, WORLD_ROWS)


def random_number() -> int:
    return random.randint(1, WORLD_ROWS)


def query_count(value: str | bytes | None) -> int:
    """The `queries` parameter: a missing or unreadable one counts as 1; clamped to 1..500."""
    try:
        count = int(value) if value is not None else 1
    except ValueError:
        return 1
    return min(max(count, 1), MAX_QUERIES)


def queries_param(query_string: bytes) -> bytes | None:
    """The raw value of `queries` in a query string, or None."""
    for part in query_string.split(b"&"):
        name, _, value = part.partition(b"=")
        if name == b"queries":
            return value
    return None


def render_fortunes(rows: list[tuple[int, str]]) -> bytes:
    """The page for the fortunes read plus the one added now, sorted by message."""
    fortunes = [*rows, (0, ADDITIONAL_FORTUNE)]
    fortunes.sort(key=lambda fortune: fortune[1])
    return fortunes_page().render(fortunes=fortunes).encode()


def world_json(rows: list[tuple[int, int]]) -> bytes:
    return dumps([{"id": id_, "randomNumber": number} for id_, number in rows])
