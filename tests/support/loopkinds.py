"""The event loop kinds the tests run their scenarios on: ``asyncio`` and, when importable,
``uvloop`` (its cases skipped, saying so, where it is not)."""

from __future__ import annotations

import importlib.util

import pytest

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None

LOOP_KINDS = [
    pytest.param("asyncio", id="asyncio"),
    pytest.param(
        "uvloop",
        id="uvloop",
        marks=pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not importable"),
    ),
]
