"""``docs/settings.md``, made from the settings table (``scripts/settings_doc.py`` writes it)."""

from __future__ import annotations

from ferrule.settings import GROUPS, SETTINGS, Setting


def markdown() -> str:
    """``docs/settings.md``: every setting that is not hidden, by group."""
    lines = [
        "# Settings",
        "",
        "<!-- Made by `python scripts/settings_doc.py` from `python/ferrule/settings.py`; "
        "a test fails when the two differ. -->",
        "",
        "Every setting is a command-line option of `ferrule APP` and a keyword of "
        "`ferrule.run(app, ...)` and `ferrule.Config(app, ...)`, with uvicorn's name where "
        "uvicorn has the option. With `--workers` or `--reload`, each worker process gets the "
        "parent's settings.",
        "",
    ]
    for group, title in GROUPS.items():
        members = [s for s in SETTINGS if s.group == group and not s.hidden]
        if not members:
            continue
        lines += [f"## {title}", ""]
        for setting in members:
            lines += _markdown_entry(setting)
    return "\n".join(lines).rstrip() + "\n"


def _markdown_entry(setting: Setting) -> list[str]:
    anchor = setting.option.lstrip("-")
    usage = setting.option if setting.python_only else _usage(setting)
    default = setting.describe_default()
    if setting.default_text is None and setting.default not in (None, [], True, False):
        default = f"`{default}`"
    facts = [f"Default: {default}.", f"Python: `{setting.name}`."]
    if not setting.uvicorn:
        facts.append("Not in uvicorn.")
    if setting.choices:
        facts.insert(0, "One of " + ", ".join(f"`{c}`" for c in setting.choices) + ".")
    return [f'<a id="{anchor}"></a>', f"### `{usage}`", "", setting.help, "", " ".join(facts), ""]


def _usage(setting: Setting) -> str:
    if setting.form == "switch":
        return f"{setting.option} / --no-{setting.option[2:]}"
    if setting.form == "flag":
        return setting.option
    metavar = setting.metavar or setting.name.upper()
    if setting.choices and not setting.metavar:
        metavar = "{" + ",".join(str(c) for c in setting.choices) + "}"
    return f"{setting.option} {metavar}"
