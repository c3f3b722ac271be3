"""``ferrule APP`` / ``python -m ferrule APP``: uvicorn's option names where the option exists."""

from __future__ import annotations

import argparse
import os
import platform
import sys

from ferrule.config import Config
from ferrule.settings import GROUPS, KEY_PASSWORD_ENV, SETTINGS, Setting


def version_line() -> str:
    """What ``--version`` prints, in uvicorn's shape."""
    from ferrule import __version__

    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"ferrule {__version__} with {python} on {platform.system()}"


def parser() -> argparse.ArgumentParser:
    """The command line, made from the settings table: an option per setting, its help with
    its default, grouped as ``docs/settings.md`` is."""
    p = argparse.ArgumentParser(
        prog="ferrule",
        description="Serve an ASGI app with ferrule, an ASGI server whose Rust core drives "
        "Python coroutines itself. Options take uvicorn's names.",
        # Options not given stay out of the result: Config fills in the table's defaults.
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("app", help='the ASGI app, as "module:attribute"')
    p.add_argument("--version", action="version", version=version_line())
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for setting in SETTINGS:
        if setting.python_only:
            continue
        _add_option(groups[setting.group], setting)
    return p


def _add_option(group: argparse._ArgumentGroup, setting: Setting) -> None:
    if setting.hidden:
        text = argparse.SUPPRESS
    else:
        text = f"{setting.help} [default: {setting.describe_default()}]".replace("%", "%%")
    names = {"dest": setting.name, "help": text}
    if setting.form == "switch":
        group.add_argument(setting.option, action=argparse.BooleanOptionalAction, **names)
    elif setting.form == "flag":
        group.add_argument(setting.option, action="store_true", **names)
    else:
        group.add_argument(
            setting.option,
            action="append" if setting.form == "list" else "store",
            type=setting.type,
            choices=setting.choices,
            metavar=setting.metavar,
            **names,
        )


def main(argv: list[str] | None = None) -> None:
    cli = parser()
    args = vars(cli.parse_args(argv))
    app = args.pop("app")
    # Taken out of the environment before the app is imported: the app has no use for it.
    from_env = os.environ.pop(KEY_PASSWORD_ENV, None)
    if args.get("ssl_keyfile_password") is None and from_env is not None:
        args["ssl_keyfile_password"] = from_env
    try:
        # Values argparse lets through but the server refuses (``--workers 0``): a usage
        # error naming the option, exit 2, as for any other bad option.
        Config(app=app, **args)
    except ValueError as exc:
        cli.error(str(exc))
    from ferrule.server import run

    sys.exit(run(app, **args))


if __name__ == "__main__":
    main()
