"""The Markdown report of scripts/autobahn.sh, from the fuzzing client's results.

Reads the OUT/NAME/reports/**/index.json of each server NAME the script ran (and the per-case
JSON files next to them for details), plus what the script left beside them (versions.txt,
NAME/command.txt, NAME/status.txt), and writes the report to stdout. With --summary, only the
count per server, as plain text. With --gate, the cases a ferrule server FAILED (its behaviour
or its close), and exit status 1 if there is one or no ferrule case ran at all.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

#: scripts/autobahn.sh's servers, in column order; ferrule's variants first.
ORDER = [
    "ferrule-uvloop-deflate",
    "ferrule-uvloop-nodeflate",
    "ferrule-asyncio-deflate",
    "ferrule-asyncio-nodeflate",
    "uvicorn",
    "hypercorn",
    "granian",
]
BEHAVIOURS = ["OK", "NON-STRICT", "INFORMATIONAL", "FAILED", "UNIMPLEMENTED"]
#: Close behaviours that are no fault of the server's.
CLOSE_FINE = {"OK", "INFORMATIONAL", "UNIMPLEMENTED"}


def case_key(case_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in case_id.split("."))


def load(out: Path) -> dict[str, dict[str, dict]]:
    """{server: {case id: index entry}} for every server with an index."""
    found: dict[str, dict[str, dict]] = {}
    # One index per wstest run: reports/N/index.json for the script's Nth chunk of cases.
    for index in sorted(out.glob("*/reports/**/index.json")):
        agents = json.loads(index.read_text())
        for agent, cases in agents.items():
            for entry in cases.values():
                entry["reportfile"] = str(index.parent / entry["reportfile"])
            found.setdefault(agent, {}).update(cases)

    def rank(server: str) -> tuple[int, str]:
        return (ORDER.index(server) if server in ORDER else len(ORDER), server)

    return {server: found[server] for server in sorted(found, key=rank)}


def case_report(out: Path, server: str, entry: dict) -> dict:
    try:
        return json.loads(Path(entry["reportfile"]).read_text())
    except (OSError, ValueError):
        return {}


def plain(html: str) -> str:
    """A case description on one line, without its HTML tags."""
    return " ".join(re.sub(r"<[^>]+>", "", re.sub(r"<br\s*/?>", " ", html)).split())


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    behaviour = entry["behavior"]
    text = "**FAILED**" if behaviour == "FAILED" else behaviour
    close = entry.get("behaviorClose")
    if close not in CLOSE_FINE:
        text += f" (close: {close}, {entry.get('remoteCloseCode')})"
    return text


def counts(cases: dict[str, dict]) -> dict[str, int]:
    result = {b: 0 for b in BEHAVIOURS}
    result["other"] = 0
    result["close"] = 0
    for entry in cases.values():
        behaviour = entry["behavior"]
        result[behaviour if behaviour in result else "other"] += 1
        if entry.get("behaviorClose") not in CLOSE_FINE:
            result["close"] += 1
    return result


def summary_rows(out: Path, servers: dict[str, dict[str, dict]]) -> list[list[str]]:
    rows = []
    for server, cases in servers.items():
        c = counts(cases)
        status = read(out / server / "status.txt").split(" ", 2)
        took = status[1] if len(status) > 1 else "-"
        rows.append(
            [server, str(len(cases))]
            + [str(c[b]) for b in BEHAVIOURS]
            + [str(c["other"]), str(c["close"]), took]
        )
    return rows


SUMMARY_HEADER = ["server", "cases"] + BEHAVIOURS + ["other", "close not OK", "wstest time"]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def interesting(entry: dict | None) -> bool:
    if entry is None:
        return False
    return (
        entry["behavior"] not in ("OK", "UNIMPLEMENTED")
        or entry.get("behaviorClose") not in CLOSE_FINE
    )


def details(out: Path, servers: dict[str, dict[str, dict]], prefix: str) -> str:
    """What the client reported for each case a server named PREFIX* did not pass, the
    variants with the same outcome together."""
    blocks = []
    chosen = [s for s in servers if s.startswith(prefix)]
    all_ids = sorted({c for s in chosen for c in servers[s]}, key=case_key)
    for case_id in all_ids:
        outcomes: dict[tuple, list[str]] = {}
        description = ""
        for server in chosen:
            entry = servers[server].get(case_id)
            if not interesting(entry):
                continue
            report = case_report(out, server, entry)
            description = description or plain(report.get("description", ""))
            key = (
                entry["behavior"],
                entry.get("behaviorClose"),
                report.get("result"),
                report.get("resultClose"),
                report.get("wasClean"),
                report.get("remoteCloseCode"),
                report.get("remoteCloseReason"),
                report.get("wasNotCleanReason"),
            )
            outcomes.setdefault(key, []).append(server)
        if not outcomes:
            continue
        lines = [f"**{case_id}**: {description}", ""]
        for key, names in outcomes.items():
            behaviour, close, result, result_close, clean, code, reason, unclean = key
            lines.append(
                f"- {', '.join(names)}: **{behaviour}**, close {close}; result: {result}; "
                f"close: {result_close}; wasClean={clean}, remoteCloseCode={code}, "
                f"remoteCloseReason={reason!r}"
                + (f", wasNotCleanReason={unclean!r}" if unclean else "")
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else f"Every case of {prefix}* is OK."


def section9(out: Path, servers: dict[str, dict[str, dict]]) -> str:
    ids = sorted(
        {c for cases in servers.values() for c in cases if c.startswith("9.")}, key=case_key
    )
    if not ids:
        return "Section 9 was not run."
    rows = []
    totals = {s: 0 for s in servers}
    for case_id in ids:
        description = ""
        row = [case_id]
        for server, cases in servers.items():
            entry = cases.get(case_id)
            if entry is None:
                row.append("-")
                continue
            if not description:
                description = plain(case_report(out, server, entry).get("description", ""))
            totals[server] += entry["duration"]
            ok = entry["behavior"] == "OK"
            row.append(str(entry["duration"]) + ("" if ok else f" ({entry['behavior']})"))
        rows.append(row[:1] + [description.replace("|", "/")] + row[1:])
    rows.append(["total", ""] + [str(totals[s]) for s in servers])
    return table(["case", "what", *servers], rows)


def gate(servers: dict[str, dict[str, dict]]) -> int:
    """Prints each case a ferrule server FAILED; 1 if any, or if no ferrule case ran."""
    ran = failed = 0
    for server, cases in servers.items():
        if not server.startswith("ferrule"):
            continue
        for case_id in sorted(cases, key=case_key):
            entry = cases[case_id]
            ran += 1
            if "FAILED" in (entry.get("behavior"), entry.get("behaviorClose")):
                failed += 1
                print(f"{server} {case_id}: {cell(entry)}")
    print(f"autobahn gate: {ran} ferrule cases, {failed} FAILED")
    return 1 if failed or not ran else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="scripts/autobahn.sh's --out directory")
    parser.add_argument("--summary", action="store_true", help="only the count per server")
    parser.add_argument("--gate", action="store_true", help="fail on a case ferrule FAILED")
    args = parser.parse_args()
    out: Path = args.out
    servers = load(out)
    if not servers:
        raise SystemExit(f"no reports/index.json under {out}")
    if args.gate:
        raise SystemExit(gate(servers))
    if args.summary:
        rows = [SUMMARY_HEADER] + summary_rows(out, servers)
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
        return

    ids = sorted({c for cases in servers.values() for c in cases}, key=case_key)
    names = list(servers)
    print("# Autobahn|Testsuite (scripts/autobahn.sh)\n")
    print("```\n" + read(out / "versions.txt") + "\n```\n")
    print("Servers (run from benches/, serving autobahn_app:app; OUT is --out):\n")
    for server in names:
        status = read(out / server / "status.txt").split(" ", 2)
        command = read(out / server / "command.txt").replace(str(out), "OUT")
        print(f"- {server}: `{command}` ({' '.join(status[1:])})")
    print("\n## Summary\n")
    print("Behaviour per case as the client judged it; *close not OK*: cases whose closing")
    print("handshake the client judged WRONG CODE, UNCLEAN, FAILED BY CLIENT or FAILED.\n")
    print(table(SUMMARY_HEADER, summary_rows(out, servers)))
    print("\n## Cases not OK on some server\n")
    print("Cells: behaviour, then the close behaviour and close code if that is not OK.")
    print(
        "Rows where the only non-OK is UNIMPLEMENTED (permessage-deflate declined) are left out.\n"
    )
    rows = [
        [c] + [cell(servers[s].get(c)) for s in names]
        for c in ids
        if any(interesting(servers[s].get(c)) for s in names)
    ]
    print(table(["case", *names], rows) if rows else "None.")
    print("\n## What the client reported for ferrule's cases that are not OK\n")
    print(details(out, servers, "ferrule"))
    print("\n## Section 9 (limits and performance): duration per case, ms\n")
    print(section9(out, servers))
    print("\n## Every case\n")
    print("<details><summary>" + f"{len(ids)} cases" + "</summary>\n")
    print(table(["case", *names], [[c] + [cell(servers[s].get(c)) for s in names] for c in ids]))
    print("\n</details>")


if __name__ == "__main__":
    main()
