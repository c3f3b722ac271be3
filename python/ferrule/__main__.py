"""``ferrule APP`` / ``python -m ferrule APP``: uvicorn's option names where the option exists."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, NoReturn

from ferrule._ferrule import __version__
from ferrule.config import Config
from ferrule.server import run_config
from ferrule.settings import GROUPS, KEY_PASSWORD_ENV, SETTINGS, Setting, SettingError, boolean


def version_line() -> str:
    """What ``--version`` prints, in uvicorn's shape."""
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"ferrule {__version__} with {python} on {platform.system()}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """A usage error in three lines, as uvicorn's: the short usage, where help is, and the
        error; not the whole option list."""
        self.exit(2, f"usage: {self.usage}\nTry 'ferrule --help' for help.\n\nError: {message}\n")


def parser() -> argparse.ArgumentParser:
    """The command line, made from the settings table: an option per setting, its help with
    its default, grouped as ``docs/settings.md`` is."""
    p = _Parser(
        prog="ferrule",
        usage="ferrule [OPTIONS] APP",
        description="Serve an ASGI app with ferrule, an ASGI server whose Rust core drives "
        "Python coroutines itself. Options take uvicorn's names; each may also be set in the "
        "environment as FERRULE_NAME or UVICORN_NAME (FERRULE_PORT=8001), the command line "
        "winning.",
        # Options not given stay out of the result: Config fills in the table's defaults.
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument(
        "app",
        nargs="?",
        help='the ASGI app, as "module:attribute" (or $FERRULE_APP, $UVICORN_APP)',
    )
    p.add_argument("--version", action="version", version=version_line())
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    for setting in SETTINGS:
        if setting.python_only:
            continue
        _add_option(groups[setting.group], setting)
    return p


def from_environment(given: dict[str, Any]) -> dict[str, Any]:
    """The settings the command line did not give, from ``FERRULE_NAME`` or ``UVICORN_NAME``
    (uvicorn reads every option from ``UVICORN_*``), parsed as the option's value would be.
    Raises ``ValueError`` naming the variable for a value that does not parse."""
    found: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.name in given or setting.python_only:
            continue
        for prefix in ("FERRULE_", "UVICORN_"):
            variable = prefix + setting.name.upper()
            text = os.environ.get(variable)
            if text is None:
                continue
            try:
                found[setting.name] = _parse(setting, text)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                raise ValueError(f"environment variable {variable}: {exc}") from None
            break
    return found


def _parse(setting: Setting, text: str) -> Any:
    if setting.form in ("switch", "flag"):
        return boolean(text)
    if setting.form == "list":
        return [setting.type(item) for item in text.split()]
    value = setting.type(text)
    if setting.choices is not None and value not in setting.choices:
        raise ValueError(
            f"invalid choice {text!r} (choose from {', '.join(map(str, setting.choices))})"
        )
    return value


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
    app = args.pop("app", None) or os.environ.get("FERRULE_APP") or os.environ.get("UVICORN_APP")
    if not app:
        cli.error("Missing argument 'APP'.")
    # Taken out of the environment before the app is imported: the app has no use for it.
    key_password = os.environ.pop(KEY_PASSWORD_ENV, None)
    try:
        args.update(from_environment(args))
        if args.get("ssl_keyfile_password") is None and key_password is not None:
            args["ssl_keyfile_password"] = key_password
        # Values argparse lets through but the server refuses (``--workers 0``): a usage
        # error naming the option, exit 2, as for any other bad option.
        config = Config(app=app, **args)
    except SettingError as exc:
        cli.error(f"argument {exc.setting.option}: {exc.problem}")
    except ValueError as exc:
        cli.error(str(exc))
    sys.exit(run_config(config, args))


if __name__ == "__main__":
    main()
