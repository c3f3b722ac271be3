"""Writes ``docs/settings.md`` from the settings table (``ferrule.settings``); ``--check`` only
says whether the file is up to date (exit 1 if not)."""

from __future__ import annotations

import sys
from pathlib import Path

from ferrule.settings_markdown import markdown

DOC = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def main() -> int:
    text = markdown()
    if "--check" in sys.argv[1:]:
        if DOC.read_text() != text:
            print(f"{DOC} differs from the settings table: run python scripts/settings_doc.py")
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
