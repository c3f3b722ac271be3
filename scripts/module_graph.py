"""The module graphs of the Rust core and the Python package, checked for what the layout
promises: in `crates/ferrule/src`, folders in layers (transports over protocols over `asgi`
over `metrics`, `compress` and `statics` over `bridge`) with no arrow upward, and in both, no
file importing another that imports it back, directly or round a circle.

    python3 scripts/module_graph.py          # check; exit 1 naming each offending arrow
    python3 scripts/module_graph.py --print  # print both graphs as `file -> file, ...`

Rust arrows come from `crate::` and `super::` paths (in `use` lines and in code), test modules
left out; a folder's `mod.rs` is its index, so a file that takes a name from its own `mod.rs`
(`use super::Name`) makes a circle through it. Python arrows come from every `import` of
`ferrule.*`, inside functions too.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUST = ROOT / "crates" / "ferrule" / "src"
PYTHON = ROOT / "python" / "ferrule"

#: Each folder's layer: an arrow may only point to a lower layer, or across one layer
#: without making a circle.
LAYERS = {
    "tcp": 4,
    "h3": 4,
    "http": 3,
    "ws": 3,
    "asgi": 2,
    "metrics": 1,
    "compress": 1,
    "statics": 1,
    "logs": 1,
    "bridge": 0,
}

PATH = re.compile(r"\b(crate|super)((?:::\w+)+)(::\{)?")


def rust_sources() -> dict[str, str]:
    """Each file's source (test modules cut off), by node: `folder/file` or `folder/mod`."""
    sources = {}
    for path in sorted(RUST.glob("*/*.rs")):
        text = path.read_text()
        cut = re.search(r"^#\[cfg\(test\)\]\s*\n\s*mod \w+ \{", text, re.M)
        if cut:
            text = text[: cut.start()]
        text = re.sub(r"//.*", "", text)
        sources[f"{path.parent.name}/{path.stem}"] = text
    return sources


def rust_target(node: str, root: str, segments: list[str], nodes: set[str]) -> str | None:
    """The file a path names: `folder/file` when its first segment under the folder is a
    file there, else the folder's index."""
    folder = node.split("/")[0]
    if root == "crate":
        if not segments or segments[0] not in LAYERS:
            return None
        folder, segments = segments[0], segments[1:]
    elif segments and segments[0] == "super":
        return None  # a nested module reaching its file's siblings: too rare to resolve
    if segments and f"{folder}/{segments[0]}" in nodes:
        return f"{folder}/{segments[0]}"
    return f"{folder}/mod"


def rust_graph() -> dict[str, set[str]]:
    sources = rust_sources()
    nodes = set(sources)
    graph: dict[str, set[str]] = {node: set() for node in nodes}
    for node, text in sources.items():
        if node.endswith("/mod"):
            folder = node.split("/")[0]
            for child in re.findall(r"^\s*(?:pub(?:\([\w:]+\))? )?mod (\w+);", text, re.M):
                graph[node].add(f"{folder}/{child}")
        for match in PATH.finditer(text):
            root, rest, brace = match.groups()
            segments = [s for s in rest.split("::") if s]
            if brace:
                # `super::{a, b::C}`: each item names its own target.
                body = text[match.end() : text.index("}", match.end())]
                items = [item.strip().split("::")[0] for item in body.split(",")]
                targets = [rust_target(node, root, segments + [i], nodes) for i in items if i]
            else:
                targets = [rust_target(node, root, segments, nodes)]
            for target in targets:
                if target and target != node and not (node.endswith("/mod") and root == "super"):
                    graph[node].add(target)
    return graph


def python_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    names = {path.stem for path in PYTHON.glob("*.py")}
    for path in sorted(PYTHON.glob("*.py")):
        edges = graph.setdefault(path.stem, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "ferrule":
                    edges.update(a.name for a in node.names if a.name in names)
                elif node.module.startswith("ferrule."):
                    edges.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("ferrule."):
                        edges.add(alias.name.split(".")[1])
        edges.discard(path.stem)
    # The package's `__init__` re-exports; a module importing `ferrule` itself is a circle.
    return {node: {e for e in edges if e in names} for node, edges in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Arrows from a folder to a folder of a higher layer."""
    wrong = []
    for node, targets in sorted(graph.items()):
        for target in sorted(targets):
            source, dest = node.split("/")[0], target.split("/")[0]
            if LAYERS[source] < LAYERS[dest]:
                wrong.append(f"{node} -> {target}")
    return wrong


def folders(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    result: dict[str, set[str]] = {}
    for node, targets in graph.items():
        folder = node.split("/")[0]
        result.setdefault(folder, set()).update(
            t.split("/")[0] for t in targets if t.split("/")[0] != folder
        )
    return result


def main() -> int:
    rust, python = rust_graph(), python_graph()
    if "--print" in sys.argv:
        for name, graph in (("rust folders", folders(rust)), ("rust", rust), ("python", python)):
            print(f"# {name}")
            for node in sorted(graph):
                print(f"{node} -> {', '.join(sorted(graph[node])) or '(nothing)'}")
    problems = [f"upward: {arrow}" for arrow in upward(rust)]
    problems += [f"circle in crates/ferrule/src: {' <-> '.join(c)}" for c in circles(rust)]
    problems += [f"circle between folders: {' <-> '.join(c)}" for c in circles(folders(rust))]
    problems += [f"circle in python/ferrule: {' <-> '.join(c)}" for c in circles(python)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
