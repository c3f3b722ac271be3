"""``--gc-freeze`` (on by default): once lifespan startup is done, what the app made so far is
moved out of the collector's generations, so collections while serving walk only what requests
made (``gc_app``)."""

from __future__ import annotations

import pytest
from support.serverutil import running_server


@pytest.mark.parametrize("workers", [None, "2"])
def test_what_startup_made_is_frozen_before_serving(workers: str | None) -> None:
    """Rule: by default the objects that exist once lifespan startup is done, including what
    startup itself made, are frozen (``gc.freeze()``), in a worker process as in a single one.
    Broken (seen on the build before the setting): freeze count 0 and the startup state still
    in a generation; frozen before lifespan startup, the startup state would be in one too."""
    args = ["--lifespan", "on"] + (["--workers", workers] if workers else [])
    with running_server("gc_app:app", *args) as server:
        answer = server.get("/").json()
    assert answer["freeze_count"] > 1000, answer
    assert answer["startup_state_collected_over"] is False, answer


def test_no_gc_freeze_leaves_the_collector_alone() -> None:
    """Rule: ``--no-gc-freeze`` freezes nothing: every object stays in the collector's
    generations. Broken: the freeze count is not 0, or the startup state is not seen by
    ``gc.get_objects()``."""
    with running_server("gc_app:app", "--lifespan", "on", "--no-gc-freeze") as server:
        answer = server.get("/").json()
    assert answer == {"freeze_count": 0, "startup_state_collected_over": True}, answer
