"""The settings table (``ferrule.settings``): one source for the command line, ``Config``,
``--help``, the workers' settings and ``docs/settings.md``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import ferrule
import pytest
from ferrule.settings import SETTINGS
from ferrule.settings_markdown import markdown
from support.serverutil import ferrule_command, run_to_exit, running_server

ROOT = Path(__file__).resolve().parents[2]
SHOWN = [s for s in SETTINGS if not s.hidden and not s.python_only]


def test_settings_doc_matches_the_table() -> None:
    """Rule: ``docs/settings.md`` is what the table makes. Broken: a setting added, removed or
    re-worded in the table without ``make docs`` (seen failing after editing one help text)."""
    written = (ROOT / "docs" / "settings.md").read_text()
    assert written == markdown(), "docs/settings.md is stale: run python scripts/settings_doc.py"


def test_help_explains_every_option_with_its_default() -> None:
    """Rule: ``ferrule --help`` shows each option with its help text and ``[default: ...]``, as
    uvicorn's does. Broken: an option listed bare (``--timeout-graceful-shutdown`` and
    ``--limit-concurrency`` were, before the table)."""
    result = run_to_exit(ferrule_command("--help"))
    assert result.returncode == 0, result.describe()
    text = " ".join(result.stdout.split())  # argparse wraps lines
    for setting in SHOWN:
        first_words = " ".join(setting.help.split()[:4])
        assert setting.option in text, setting.option
        entry = text[text.index(setting.option) :]
        assert first_words in entry, f"{setting.option}: no help text"
        default = f"[default: {' '.join(setting.describe_default().split())}]"
        assert default in entry, f"{setting.option}: no {default}"
    for hidden in (s for s in SETTINGS if s.hidden):
        assert hidden.option not in text, f"{hidden.option} is a hidden hook"


def test_every_setting_is_a_config_keyword_with_its_default() -> None:
    """Rule: each setting of the table is a ``Config`` attribute holding its default, and a
    keyword ``Config`` takes; an unknown keyword is a TypeError. Broken: a setting the table
    lists but ``Config`` lacks, or a typo accepted silently."""
    config = ferrule.Config("app:app", workers=1, forwarded_allow_ips="127.0.0.1")
    for setting in SETTINGS:
        if setting.name in ("workers", "forwarded_allow_ips"):
            continue
        assert getattr(config, setting.name) == setting.default, setting.name
    with pytest.raises(TypeError, match="timeout_keepalive"):
        ferrule.Config("app:app", timeout_keepalive=3)


def test_config_checks_values_naming_the_setting() -> None:
    """Rule: a value the server cannot use is refused when the ``Config`` is made, naming the
    setting. Broken: accepted, failing later inside the server."""
    for name, value in [("ws_max_queue", 0), ("loop", "trio"), ("reload_delay", 0)]:
        with pytest.raises(ValueError, match=name):
            ferrule.Config("app:app", **{name: value})


def test_uvicorn_value_aliases_are_normalised() -> None:
    """Rule: uvicorn's implementation names mean ferrule's choices (``--http h11`` is HTTP/1.1,
    ``--ws wsproto`` is on). Broken: the alias kept as given, which the server refuses."""
    config = ferrule.Config("app:app", http="h11", ws="wsproto")
    assert (config.http, config.ws) == ("1", "auto")


def test_workers_get_the_parents_settings_as_data_not_argv() -> None:
    """Rule: a worker process's command line carries no settings (they travel as data), and
    the worker serves with the parent's values: a ``--header``, ``--root-path`` and
    ``--no-server-header`` given to the parent hold in the worker's answers. Broken: a setting
    the parent forgot to hand over (the rebuilt argv omitted some before the table)."""
    args = ["--workers", "2", "--root-path", "/mounted", "--header", "x-from-parent:yes"]
    with running_server("hello_app:app", *args, "--no-server-header") as srv:
        response = srv.get("/mounted/scope")
        assert response.headers["x-from-parent"] == "yes", response.headers
        assert "server" not in response.headers, response.headers
        children = subprocess.run(
            ["pgrep", "-P", str(srv.proc.pid)], capture_output=True, text=True
        ).stdout.split()
        assert len(children) == 2, children
        for pid in children:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert cmdline[1:3] == [b"-m", b"ferrule.worker"], cmdline
            assert not any(b"mounted" in arg for arg in cmdline), cmdline


def test_worker_module_started_by_hand_says_how_to_run() -> None:
    """Rule: ``python -m ferrule.worker`` without a supervisor exits non-zero with a sentence,
    not a traceback. Broken: a KeyError traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "ferrule.worker"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode != 0
    assert "--workers" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_every_option_in_the_docs_has_an_anchor() -> None:
    """Rule: each shown option has an anchor named after it in ``docs/settings.md``, so other
    docs can link ``settings.md#timeout-keep-alive``. Broken: an anchor missing."""
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', markdown()))
    assert {s.option.lstrip("-") for s in SHOWN} <= anchors


def test_links_into_the_settings_doc_resolve() -> None:
    """Rule: every ``settings.md#anchor`` link in the README and docs names an anchor that
    ``docs/settings.md`` has. Broken: a link to an option renamed or never documented (seen
    with a link to ``settings.md#no-such-option``)."""
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', markdown()))
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for anchor in re.findall(r"settings\.md#([A-Za-z0-9_-]+)", doc.read_text()):
            assert anchor in anchors, f"{doc.name} links to settings.md#{anchor}"
