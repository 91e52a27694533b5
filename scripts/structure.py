"""The structure drawing of the Rust core: which file uses which, and the rules it must keep.

Reads every ``.rs`` file of ``rust/allocreplay-core/src`` (code only: comments, strings and
``#[cfg(test)]`` modules are left out — a unit test may reach any layer) and resolves each path
it uses (``use crate::a::b``, ``super::x``, ``crate::a::f(...)`` inline) to the file defining the
module. ``mod x;`` declarations are ownership and ``pub use`` re-exports a module's public face, not
uses. Then it checks what
``docs/architecture.md`` states:

- layers: every use from a top-level module points to a lower layer (``LAYERS``), never up and
  never sideways to another module of the same layer;
- no loops between files (strongly connected components of the use graph of size > 1).

``python scripts/structure.py`` prints the violations (exit 1 if any); ``--dot`` prints the
graph of top-level modules for Graphviz; ``--files`` prints every file's uses.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "rust" / "allocreplay-core" / "src"

# Bottom first. A module may use modules of lower layers only (docs/architecture.md says why).
LAYERS: list[list[str]] = [
    ["error", "test_rng"],
    ["units", "huge_pages", "prefault", "magic", "cancel", "max_tree", "cores"],
    ["trace"],
    ["device", "import"],
    ["offline"],
    ["policy"],
    ["engine"],
    ["registry"],
    ["replay"],
    ["validate", "analysis", "tune"],
    ["export"],
]


def layer_of(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if module in names:
            return i
    raise KeyError(f"top-level module '{module}' is in no layer of scripts/structure.py")


def module_path(file: Path) -> tuple[str, ...]:
    rel = file.relative_to(SRC).with_suffix("")
    parts = rel.parts
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


# One pass, so that a `//` inside a string is not a comment and a quote inside a comment is not
# a string: raw strings, strings, char literals (not lifetimes), line and block comments.
_TOKENS = re.compile(
    r'(?P<s>r(?P<h>#*)"(?:.|\n)*?"(?P=h)|b?"(?:\\.|[^"\\])*")'
    r"|(?P<c>b?'(?:\\.|[^'\\\n])')"
    r"|(?P<x>//[^\n]*|/\*.*?\*/)",
    re.S,
)


def _blank(m: re.Match[str]) -> str:
    return '""' if m.group("s") else "' '" if m.group("c") else ""


def code_only(text: str) -> str:
    """The text without comments, string and char literals and ``#[cfg(test)]`` items."""
    text = _TOKENS.sub(_blank, text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def _expand(tree: str) -> list[str]:
    """``a::{b, c::{d, e}}`` -> ``a::b``, ``a::c::d``, ``a::c::e``."""
    tree = tree.strip()
    start = tree.find("{")
    if start < 0:
        return [tree.split(" as ")[0].strip()] if tree else []
    prefix, inner = tree[:start], tree[start + 1 : tree.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [prefix + p2 for p in parts for p2 in _expand(p)]


_REEXPORT = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;")


def reexported_paths(code: str) -> list[str]:
    return [p for m in _REEXPORT.finditer(code) for p in _expand(re.sub(r"^pub(?:\([^)]*\))?\s+use\s+", "", m.group(0)).rstrip(";"))]


def used_paths(code: str) -> list[str]:
    """The paths a file uses, ``pub use`` re-exports apart (see [`graph`])."""
    code = _REEXPORT.sub("", code)
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        paths += _expand(m.group(1))
    paths += re.findall(r"(?<![\w:])(?:crate|super|self)(?:::\w+)+", code)
    return paths


def resolve(path: str, here: tuple[str, ...], modules: dict[tuple[str, ...], Path], is_mod_file: bool) -> tuple[str, ...] | None:
    parts = [p for p in path.split("::") if p]
    if not parts:
        return None
    if parts[0] == "crate":
        base: tuple[str, ...] = ()
        parts = parts[1:]
    elif parts[0] in ("super", "self"):
        # In a.rs or a/mod.rs, `self` is a and `super` its parent.
        base = here
        while parts and parts[0] in ("super", "self"):
            if parts[0] == "super":
                base = base[:-1]
            parts = parts[1:]
    else:
        # A path from a child module declared here (`use child::X` in a mod.rs or lib.rs).
        base = here
        if (*base, parts[0]) not in modules:
            return None
    best = base
    for p in parts:
        if (*best, p) in modules:
            best = (*best, p)
        else:
            break
    return best


_TEST_MOD_FILE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


def test_module_files(files: list[Path]) -> set[Path]:
    """Files of ``#[cfg(test)] mod name;`` declarations: unit tests kept out of line, left out
    like the inline ones (with everything below them)."""
    out: set[Path] = set()
    for f in files:
        base = f.parent if f.name in ("mod.rs", "lib.rs") else f.parent / f.stem
        for name in _TEST_MOD_FILE.findall(_TOKENS.sub(_blank, f.read_text())):
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    out.add(cand)
    return {f for f in files if any(f == t or (t.name == "mod.rs" and t.parent in f.parents) for t in out)}


def graph() -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    files = sorted(SRC.rglob("*.rs"))
    tests = test_module_files(files)
    files = [f for f in files if f not in tests]
    modules = {module_path(f): f for f in files}
    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
    for f in files:
        here = module_path(f)
        code = code_only(f.read_text())
        for path in used_paths(code):
            target = resolve(path, here, modules, f.name in ("mod.rs", "lib.rs"))
            if target is not None and target != here and target != ():
                edges[here].add(target)
        # A re-export of a descendant's item is the module's public face (a mod.rs naming what
        # its children define), not a use; a re-export of anything else is a use.
        for path in reexported_paths(code):
            target = resolve(path, here, modules, f.name in ("mod.rs", "lib.rs"))
            if target is not None and target != here and target != () and target[: len(here)] != here:
                edges[here].add(target)
        edges.setdefault(here, set())
    return edges


def loops(edges: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[tuple[str, ...]]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index: dict[tuple[str, ...], int] = {}
    low: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...]] = []
    on: set[tuple[str, ...]] = set()
    out: list[list[tuple[str, ...]]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: tuple[str, ...]) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations() -> list[str]:
    edges = graph()
    found = []
    for src, targets in sorted(edges.items()):
        for dst in sorted(targets):
            a, b = src[0] if src else "lib", dst[0]
            if a == b or a == "lib":
                continue
            if layer_of(b) >= layer_of(a):
                how = "up" if layer_of(b) > layer_of(a) else "sideways"
                found.append(f"{'::'.join(src)} uses {'::'.join(dst)}: {a} (layer {layer_of(a)}) points {how} to {b} (layer {layer_of(b)})")
    for comp in loops(edges):
        found.append("loop between files: " + " -> ".join("::".join(c) for c in comp))
    return found


def dot() -> str:
    edges = graph()
    top = sorted({(s[0], d[0]) for s, ds in edges.items() for d in ds if s and s[0] != d[0]})
    lines = ["digraph allocreplay_core {", "  rankdir=BT;"] + [f'  "{a}" -> "{b}";' for a, b in top] + ["}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dot", action="store_true", help="print the top-level module graph (Graphviz)")
    parser.add_argument("--files", action="store_true", help="print every file's uses")
    args = parser.parse_args()
    if args.dot:
        print(dot())
        return 0
    if args.files:
        for src, targets in sorted(graph().items()):
            print("::".join(src) or "lib", "->", ", ".join("::".join(t) for t in sorted(targets)))
        return 0
    found = violations()
    for v in found:
        print(v)
    print(f"{len(found)} violations of the layering (docs/architecture.md)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
