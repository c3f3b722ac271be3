"""What ``--reload`` watches: the source files under some directories, found by globs, and
what changed between two looks. Polling with ``os.scandir`` and ``stat``, as uvicorn's
StatReload does; no dependency."""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable

#: uvicorn's defaults: ``--reload-include`` and ``--reload-exclude`` add to these (a default
#: named by the other option is dropped: ``--reload-exclude '*.py'``, ``--reload-include '.*'``).
DEFAULT_RELOAD_INCLUDES = ("*.py",)
DEFAULT_RELOAD_EXCLUDES = (".*", ".py[cod]", ".sw.*", "~*")


class WatchedFiles:
    """The files ``--reload`` watches: under ``dirs``, those matching an include glob and no
    exclude glob. A glob matches the file's name or, if it has a ``/``, its path relative to
    the watched directory. Directories matching an exclude glob (``.git``, ``.venv``) are not
    entered, nor ``__pycache__``, a virtualenv (holding ``pyvenv.cfg``), a cache directory
    (holding ``CACHEDIR.TAG``: cargo's ``target``, ``.pytest_cache``) or a symbolic link."""

    def __init__(self, dirs: Iterable[str], includes: list[str], excludes: list[str]) -> None:
        roots = sorted({os.path.abspath(d) for d in dirs})
        # A directory inside another is watched as part of it.
        self.dirs = [d for d in roots if not any(_under(d, other) for other in roots)]
        self.includes = _Globs([p for p in DEFAULT_RELOAD_INCLUDES if p not in excludes] + includes)
        self.excludes = _Globs([p for p in DEFAULT_RELOAD_EXCLUDES if p not in includes] + excludes)

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """(mtime in ns, size) of each watched file, by absolute path: one stat per file,
        none per directory (``os.scandir`` tells files from directories), nothing read."""
        found: dict[str, tuple[int, int]] = {}
        included, excluded = self.includes, self.excludes
        for root in self.dirs:
            start = len(os.path.join(root, ""))
            pending = [root]
            while pending:
                directory = pending.pop()
                try:
                    with os.scandir(directory) as listing:
                        entries = list(listing)
                except OSError:  # removed meanwhile, or unreadable
                    continue
                if directory != root and any(e.name in SKIPPED_IF_HOLDING for e in entries):
                    continue
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name != "__pycache__" and not excluded(entry, start):
                                pending.append(entry.path)
                        elif included(entry, start) and not excluded(entry, start):
                            stat = entry.stat()
                            found[entry.path] = (stat.st_mtime_ns, stat.st_size)
                    except OSError:  # removed meanwhile, or a dangling symbolic link
                        continue
        return found

    def describe(self, paths: list[str], most: int = 10) -> str:
        """``'app.py', 'pkg/models.py'``: relative to the current directory when under it (as
        uvicorn shows them), else to the watched directory."""
        shown = []
        for path in paths[:most]:
            for base in [os.getcwd(), *self.dirs]:
                if _under(path, base):
                    path = os.path.relpath(path, base)
                    break
            shown.append(f"'{path}'")
        if len(paths) > most:
            shown.append(f"and {len(paths) - most} more")
        return ", ".join(shown)


#: A directory holding one of these is not watched: a virtualenv, a cache directory.
SKIPPED_IF_HOLDING = frozenset(("pyvenv.cfg", "CACHEDIR.TAG"))


def changed_files(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> list[str]:
    """The paths modified, created or deleted between two snapshots, sorted."""
    return sorted(
        path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
    )


def _under(path: str, directory: str) -> bool:
    return path != directory and path.startswith(os.path.join(directory, ""))


class _Globs:
    """Globs without ``/`` matched against a directory entry's name, the others against its
    path relative to the watched directory (``path[start:]``)."""

    def __init__(self, globs: list[str]) -> None:
        unique = dict.fromkeys(globs)
        self.name = _regex([g for g in unique if "/" not in g])
        self.path = _regex([g for g in unique if "/" in g])

    def __call__(self, entry: os.DirEntry[str], start: int) -> bool:
        if self.name is not None and self.name.match(entry.name):
            return True
        return self.path is not None and self.path.match(entry.path[start:]) is not None


def _regex(globs: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(map(fnmatch.translate, globs))) if globs else None
