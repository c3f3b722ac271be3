"""The database benchmark's report: its Markdown tables, made from the samples run.py measured.

Not run by itself: run.py calls `report_lines` and writes benches/results/db-<timestamp>.md.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from db.contention import LIMIT

ALONE = "alone"  # the row key of the app alone's samples
RUST_ONLY = "ferrule-rust"


@dataclass
class Sample:
    """One measured run: a server's under wrk, or the app alone's (no errors possible)."""

    cpu_us: float  # CPU time (user + system, all the server's processes) a request
    rps: float  # requests/s (the app alone: calls/s)
    errors: int = 0  # wrk's socket errors
    non_2xx: int = 0
    others: float = 0.0  # the share of the server core other processes took meanwhile


# (app, server or ALONE, test) -> the samples of the rounds
Samples = dict[tuple[str, str, str], list[Sample]]


def median(samples: Samples, key: tuple[str, str, str], field: str) -> float | None:
    values = [getattr(s, field) for s in samples.get(key, [])]
    return statistics.median(values) if values else None


def cell(samples: Samples, key: tuple[str, str, str], field: str, digits: int = 1) -> str:
    """The median, marked * if a run behind it found the server core contended."""
    contended = any(s.others > LIMIT for s in samples.get(key, []))
    return num(median(samples, key, field), digits) + ("*" if contended else "")


def trouble(samples: Samples, key: tuple[str, str, str]) -> str:
    """A note of wrk's socket errors and non-2xx responses, summed over the rounds, if any."""
    return trouble_of(*samples.get(key, []))


def trouble_of(*samples: Sample) -> str:
    errors = sum(s.errors for s in samples)
    non_2xx = sum(s.non_2xx for s in samples)
    if not errors and not non_2xx:
        return ""
    return f" ({errors} errors, {non_2xx} non-2xx)"


def num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def cpu_table(
    samples: Samples, app: str, tests: Sequence[str], servers: Sequence[str]
) -> list[str]:
    """CPU a request, each server's and the app alone's, and each server's overhead (its CPU a
    request less the app alone's)."""
    header = ["test", *servers, "the app alone"]
    header += [f"{s}'s overhead" for s in servers]
    ratio = "ferrule" in servers and "granian" in servers
    if ratio:
        header.append("ferrule overhead / granian overhead")
    lines = table_head(header, first_left=True)
    for test in tests:
        alone = median(samples, (app, ALONE, test), "cpu_us")
        cpu = {s: median(samples, (app, s, test), "cpu_us") for s in servers}
        over = {s: None if cpu[s] is None or alone is None else cpu[s] - alone for s in servers}
        row = [test, *(cell(samples, (app, s, test), "cpu_us") for s in servers)]
        row.append(cell(samples, (app, ALONE, test), "cpu_us"))
        row += [num(over[s]) for s in servers]
        if ratio:
            f, g = over["ferrule"], over["granian"]
            row.append("-" if f is None or not g else f"{f / g:.2f}")
        lines.append(table_row(row))
        rust = median(samples, (app, RUST_ONLY, test), "cpu_us")
        if rust is not None:
            cells = ["-"] * (len(header) - 1)
            if "ferrule" in servers:
                cells[servers.index("ferrule")] = cell(samples, (app, RUST_ONLY, test), "cpu_us")
            lines.append(table_row([f"{test}, ferrule's Rust-only route", *cells]))
    return lines


def overhead_ratio(samples: Samples, app: str, server: str, top: str, bottom: str) -> str:
    """A server's overhead on test `top` divided by its overhead on test `bottom`."""
    values = []
    for test in (top, bottom):
        cpu = median(samples, (app, server, test), "cpu_us")
        alone = median(samples, (app, ALONE, test), "cpu_us")
        values.append(None if cpu is None or alone is None else cpu - alone)
    if values[0] is None or not values[1]:
        return "-"
    return f"{values[0] / values[1]:.2f}"


def rps_table(
    samples: Samples, app: str, tests: Sequence[str], servers: Sequence[str]
) -> list[str]:
    """Requests/s, with wrk's errors and non-2xx responses noted where there were any."""
    rows = [*servers, ALONE]
    lines = table_head(["test", *servers, "the app alone (calls/s)"], first_left=True)
    for test in tests:
        cells = [
            cell(samples, (app, r, test), "rps", 0) + trouble(samples, (app, r, test)) for r in rows
        ]
        lines.append(table_row([test, *cells]))
        if (app, RUST_ONLY, test) in samples:
            key = (app, RUST_ONLY, test)
            cells = ["-"] * len(rows)
            if "ferrule" in servers:
                cells[servers.index("ferrule")] = cell(samples, key, "rps", 0) + trouble(
                    samples, key
                )
            lines.append(table_row([f"{test}, ferrule's Rust-only route", *cells]))
    return lines


def workers_table(
    samples: Samples, app: str, tests: Sequence[str], servers: Sequence[str]
) -> list[str]:
    """Requests/s with two workers, and ferrule's over granian's."""
    ratio = "ferrule" in servers and "granian" in servers
    header = ["test", *servers] + (["ferrule / granian"] if ratio else [])
    lines = table_head(header, first_left=True)
    for test in tests:
        rps = {s: median(samples, (app, s, test), "rps") for s in servers}
        row = [test, *(num(rps[s], 0) + trouble(samples, (app, s, test)) for s in servers)]
        if ratio:
            f, g = rps["ferrule"], rps["granian"]
            row.append("-" if f is None or not g else f"{f / g:.2f}")
        lines.append(table_row(row))
    return lines


def table_head(header: Sequence[str], first_left: bool) -> list[str]:
    aligns = [("---" if first_left and i == 0 else "---:") for i in range(len(header))]
    return [table_row(header), table_row(aligns)]


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def app_section(
    one: Samples, two: Samples, app: str, title: str, tests: Sequence[str], servers: Sequence[str]
) -> list[str]:
    """One app's tables: CPU a request, requests/s with one worker, requests/s with two."""
    lines = [f"## {title}", ""]
    lines += ["CPU time a request, microseconds (median over the rounds; one worker, pinned):", ""]
    lines += cpu_table(one, app, tests, servers)
    if "db" in tests and "json" in tests:
        lines += [""]
        for server in servers:
            ratio = overhead_ratio(one, app, server, "db", "json")
            lines.append(f"- {server}'s overhead on /db ÷ on /json: {ratio}")
    lines += ["", "Requests/s (median; one worker pinned, wrk on the other core):", ""]
    lines += rps_table(one, app, tests, servers)
    if any(key[0] == app for key in two):
        lines += ["", "Requests/s with two workers (unpinned, wrk -t2 unpinned; median):", ""]
        lines += workers_table(two, app, tests, servers)
    return [*lines, ""]
