"""Which of CI's conditional stages a run needs, from what changed in their inputs.

Every change passes the gate (`.ci/run`). The stages below prove things only some changes can
break, so CI runs each one when its inputs differ from the last inputs it passed on:

    python3 scripts/ci_plan.py decide            one line a stage: run or skip, and why
    python3 scripts/ci_plan.py decide --shell    also `CI_RUN_<STAGE>=0|1` lines for bash,
                                                 the lines above going to stderr
    python3 scripts/ci_plan.py record STAGE      after STAGE passed: remember its inputs

The record (`FERRULE_CI_RECORD`, default /var/cache/ferrule-ci/record) keeps, for each stage, the
git blob id of every input file it last passed on (of pyproject.toml, only the tables a wheel is
built from), so a stage is skipped only when its inputs are what it proved, whichever commits
brought them. A machine with no record for a stage cannot know what was proven, so it runs the
stage only if the commits of the last `WINDOW_HOURS` before HEAD (one session's work, with a stop
that did not land before it) changed its inputs. `FERRULE_CI_STAGES=all` (or a comma list of
stage names) runs stages whatever changed.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_RECORD = Path("/var/cache/ferrule-ci/record")
WINDOW_HOURS = 6

# What every wheel is built from: a change here can break a platform the gate only compiles.
BUILD_INPUTS = (
    "Cargo.toml",
    "Cargo.lock",
    "crates/*/Cargo.toml",
    "crates/*/build.rs",
    "vendor/**",
    "pyproject.toml",
    "rust-toolchain*",
    "scripts/build-wheels.sh",
    "scripts/check_wheel.py",
    "scripts/check_macos_wheel.py",
    "scripts/musl-python.sh",
    "scripts/test-arm64.sh",
    "scripts/chroot.sh",
)
# The bridge and the task factory: the code whose behaviour hangs on the interpreter's asyncio
# and the processor's memory order, which the smoke tests and CPython's task suites prove.
BRIDGE_INPUTS = (
    "crates/ferrule/src/bridge/**",
    "crates/ferrule-python/src/**",
    "python/ferrule/_bridge.py",
    "tests/bridge/**",
    "scripts/task_suites.py",
    "scripts/task_suites/**",
    "Cargo.lock",
)


@dataclass(frozen=True)
class Stage:
    name: str
    what: str
    inputs: tuple[str, ...]


STAGES = (
    Stage(
        "matrix",
        "the whole wheel matrix (every interpreter on every platform) with its proofs: "
        "auditwheel, the musl CPython, arm64 under qemu, 3.13 and 3.14 in the sid chroot",
        BUILD_INPUTS,
    ),
    Stage(
        "bridge",
        "the bridge on other interpreters and processors: CPython's task suites with the task "
        "factory on both loops (3.11 and 3.14), the smoke tests under 3.13 and on arm64 (qemu)",
        BRIDGE_INPUTS + BUILD_INPUTS,
    ),
)
STAGE_NAMES = tuple(stage.name for stage in STAGES)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(REPO), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def matches(path: str, patterns: tuple[str, ...]) -> bool:
    # fnmatch's `*` crosses `/`: `vendor/**` is the whole tree, and `crates/*/Cargo.toml` any
    # manifest under crates/ (the workspace has them one level down).
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns)


def input_digests(stage: Stage, commit: str = "HEAD") -> dict[str, str]:
    """Every tracked file of the stage's inputs in COMMIT, with a digest of what of it counts."""
    digests = {}
    for line in git("ls-tree", "-r", commit).splitlines():
        meta, path = line.split("\t", 1)
        if matches(path, stage.inputs):
            digests[path] = meta.split()[2]
    if "pyproject.toml" in digests:
        digests["pyproject.toml"] = pyproject_digest(git("show", f"{commit}:pyproject.toml"))
    return digests


def pyproject_digest(text: str) -> str:
    # Only what a wheel is built from: the build backend, the metadata and maturin's settings;
    # not pytest's or ruff's.
    data = tomllib.loads(text)
    built_from = {
        "build-system": data.get("build-system"),
        "project": data.get("project"),
        "maturin": data.get("tool", {}).get("maturin"),
    }
    return hashlib.sha1(json.dumps(built_from, sort_keys=True).encode()).hexdigest()


def record_file(record: Path, stage: Stage) -> Path:
    return record / f"{stage.name}.inputs"


def read_record(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return dict(line.split("\t", 1)[::-1] for line in text.splitlines() if "\t" in line)


def window_base() -> str | None:
    """The newest commit older than WINDOW_HOURS before HEAD's, if the history reaches so far."""
    head_time = int(git("log", "-1", "--format=%ct", "HEAD").strip())
    base = git("rev-list", "-1", f"--before={head_time - WINDOW_HOURS * 3600}", "HEAD").strip()
    return base or None


def differing(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))


def describe(paths: list[str]) -> str:
    shown = ", ".join(paths[:4])
    return shown + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")


def decide(stage: Stage, record: Path, forced: set[str]) -> tuple[bool, str]:
    if stage.name in forced or "all" in forced:
        return True, "asked for by FERRULE_CI_STAGES"
    current = input_digests(stage)
    proven = read_record(record_file(record, stage))
    if proven is None:
        base = window_base()
        if base is None:
            return True, f"no record on this machine, nor a commit {WINDOW_HOURS} h before HEAD"
        touched = differing(current, input_digests(stage, base))
        if touched:
            return True, (
                f"no record on this machine, and the last {WINDOW_HOURS} h of commits "
                f"changed its inputs: {describe(touched)}"
            )
        return False, (
            f"no record on this machine, and the last {WINDOW_HOURS} h of commits "
            "left its inputs alone"
        )
    differ = differing(current, proven)
    if differ:
        return True, f"its inputs changed since it last passed here: {describe(differ)}"
    return False, "its inputs are what it last passed on here"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", type=Path, default=None, help="the record's folder")
    sub = parser.add_subparsers(dest="command", required=True)
    decide_p = sub.add_parser("decide", help="say which stages this run needs")
    decide_p.add_argument("--shell", action="store_true", help="print CI_RUN_<STAGE>=0|1 lines")
    record_p = sub.add_parser("record", help="remember the inputs a stage just passed on")
    record_p.add_argument("stage", choices=STAGE_NAMES)
    args = parser.parse_args()
    record = args.record or Path(os.environ.get("FERRULE_CI_RECORD", DEFAULT_RECORD))

    if args.command == "record":
        stage = next(s for s in STAGES if s.name == args.stage)
        record.mkdir(parents=True, exist_ok=True)
        lines = "".join(f"{blob}\t{path}\n" for path, blob in sorted(input_digests(stage).items()))
        tmp = record_file(record, stage).with_suffix(".tmp")
        tmp.write_text(lines)
        tmp.replace(record_file(record, stage))
        return 0

    forced = {s.strip() for s in os.environ.get("FERRULE_CI_STAGES", "").split(",") if s.strip()}
    unknown = forced - set(STAGE_NAMES) - {"all"}
    if unknown:
        print(
            f"ci_plan: unknown stage in FERRULE_CI_STAGES: {', '.join(sorted(unknown))}",
            file=sys.stderr,
        )
        return 2
    said = sys.stderr if args.shell else sys.stdout
    for stage in STAGES:
        run, why = decide(stage, record, forced)
        print(f"{stage.name}: {'run' if run else 'skip'} ({why})", file=said)
        print(f"    {stage.what}", file=said)
        if args.shell:
            print(f"CI_RUN_{stage.name.upper()}={int(run)}")
            print(f"CI_WHY_{stage.name.upper()}={quote(why)}")
    return 0


def quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
