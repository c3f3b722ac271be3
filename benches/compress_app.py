"""The compression benchmark's apps (benches/compress.py): one FastAPI JSON endpoint answering
about 20 KB, without and with Starlette's GZipMiddleware.

    plain    GET /items  the JSON list, uncompressed (for the server's --compress, or the floor)
    gzipped  the same app wrapped in GZipMiddleware(minimum_size=500), at its default
             compresslevel (9)

The data is deterministic (a seeded generator) and built once, at import; FastAPI serializes
it on every request (jsonable_encoder, then JSONResponse), as a real endpoint would.
"""

from __future__ import annotations

import random

from fastapi import FastAPI
from starlette.middleware.gzip import GZipMiddleware

ITEM_COUNT = 100
MINIMUM_SIZE = 500

_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november"
    " oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber"
    " basalt cobalt dune ember fjord granite harbor iris jasper kelp lagoon meadow nectar"
).split()
_CATEGORIES = ("tools", "garden", "books", "kitchen", "toys", "outdoor", "office", "audio")


def make_items(count: int = ITEM_COUNT, seed: int = 20240611) -> list[dict]:
    """`count` product-like records: ids, names, text, numbers, booleans, nested lists."""
    rng = random.Random(seed)

    def words(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    return [
        {
            "id": 10_000 + i,
            "sku": f"SKU-{rng.randrange(16**6):06X}",
            "name": words(3).title(),
            "description": words(rng.randint(2, 5)).capitalize() + ".",
            "category": rng.choice(_CATEGORIES),
            "price": round(rng.uniform(1, 500), 2),
            "stock": rng.randrange(0, 1000),
            "active": rng.random() < 0.8,
            "tags": sorted({rng.choice(_WORDS) for _ in range(rng.randint(1, 3))}),
            "variants": [
                {
                    "color": rng.choice(_WORDS),
                    "size": rng.choice("SMLX"),
                    "in_stock": rng.random() < 0.5,
                }
                for _ in range(rng.randint(0, 1))
            ],
        }
        for i in range(count)
    ]


ITEMS = make_items()


def make_app() -> FastAPI:
    app = FastAPI()

    @app.get("/items")
    async def items() -> list[dict]:
        return ITEMS

    return app


plain = make_app()
gzipped = make_app()
gzipped.add_middleware(GZipMiddleware, minimum_size=MINIMUM_SIZE)
