#!/usr/bin/env python3
"""Fails when a crate's top-level modules import each other in a circle.

Inside a crate, modules form layers: a module may use the ones below it,
never one above it, so that each layer can be read (and tested) knowing
only what is under it. An import circle is the sign that a layer reaches
upward. This reads every `crate::` (and, from a top-level file, `super::`)
path in each crate's non-test code, draws an edge from the top-level
module that holds it to the top-level module it names, and prints every
circle (strongly connected set of modules) with one place each edge
comes from.

    scripts/check-layers.py [CRATE_DIR...]   (default: every workspace member)

Test code (`#[cfg(test)]` modules at the end of a file, and `tests/`,
`benches/`, `examples/`) may reach anywhere and is not read.
"""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A path that starts at the crate root or, from a top-level module, at its
# parent (the root): `crate::a::b`, `crate::{a, b::c}`, `super::a`.
PATH = re.compile(r"\b(crate|super)::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)")
IDENT = re.compile(r"(?:^|[{,])\s*([A-Za-z_][A-Za-z0-9_]*)")
# Where a file's tests begin: everything after it is test code.
TESTS = re.compile(r"^\s*#\[cfg\(test\)\]\s*\n\s*(pub(\([^)]*\))?\s+)?mod\s+\w+", re.M)
LINE_COMMENT = re.compile(r"//.*")


def members() -> list[Path]:
    manifest = tomllib.loads((ROOT / "Cargo.toml").read_text())
    return [ROOT / m for m in manifest["workspace"]["members"]]


def top_module(src: Path, file: Path) -> tuple[str | None, bool]:
    """The top-level module `file` belongs to (None for the crate root),
    and whether `file` is that module's own file (where `super::` is the
    root)."""
    parts = file.relative_to(src).parts
    if len(parts) == 1:
        name = parts[0].removesuffix(".rs")
        if name in ("lib", "main"):
            return None, False
        return name, True
    own = len(parts) == 2 and parts[1] == "mod.rs"
    return parts[0], own


def code_of(file: Path) -> str:
    text = file.read_text()
    tests = TESTS.search(text)
    if tests:
        text = text[: tests.start()]
    return "\n".join(LINE_COMMENT.sub("", line) for line in text.splitlines())


def edges_of(crate: Path) -> tuple[set[str], dict[tuple[str, str], str]]:
    src = crate / "src"
    files = [f for f in src.rglob("*.rs") if "bin" not in f.relative_to(src).parts[:1]]
    modules = {m for f in files if (m := top_module(src, f)[0]) is not None}
    edges: dict[tuple[str, str], str] = {}
    for file in sorted(files):
        module, own = top_module(src, file)
        if module is None:
            continue
        for number, line in enumerate(code_of(file).splitlines(), 1):
            for start, target in PATH.findall(line):
                if start == "super" and not own:
                    continue
                names = IDENT.findall(target) if target.startswith("{") else [target]
                for name in names:
                    if name in modules and name != module:
                        place = f"{file.relative_to(ROOT)}:{number}"
                        edges.setdefault((module, name), place)
    return modules, edges


def circles(modules: set[str], edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan)."""
    graph: dict[str, list[str]] = {m: [] for m in modules}
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    crates = [Path(a).resolve() for a in sys.argv[1:]] or members()
    failed = False
    for crate in crates:
        if not (crate / "src").is_dir():
            continue
        modules, edges = edges_of(crate)
        for group in circles(modules, edges):
            failed = True
            print(f"{crate.relative_to(ROOT)}: import circle among {', '.join(group)}:")
            for (a, b), place in sorted(edges.items()):
                if a in group and b in group:
                    print(f"  {a} -> {b}  ({place})")
    if failed:
        print("layers: FAIL (a module imports one above it; see docs/architecture.md, Layers)")
        return 1
    print(f"layers: ok ({len(crates)} crates, no import circle between top-level modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
