"""The layers of the Python package (docs/architecture.md, "Python package"), checked from the
source with ``ast``: nothing of the package is imported, so a broken build cannot hide a
violation, and a violation cannot break the check.

What counts as an import of module M by module X (the *import graph*):

- every ``import`` / ``from ... import`` statement of X, wherever it stands: at the top, inside a
  function, under ``if TYPE_CHECKING:`` (a type-only import is a dependency too);
- ``import a.b.c`` imports the longest prefix that is a module of the package (``a.b.c``);
  ``from a.b import x`` imports the module ``a.b.x`` when there is one, else ``a.b`` (a name
  defined there); relative imports are resolved against X's package first;
- importing ``a.b.c`` also runs the ``__init__`` of each package ``a.b`` around it: that counts
  as importing ``a.b``, except where X itself is inside ``a.b``. So a package ``__init__`` that
  re-exports its children, with children that import each other (``from . import _tags``), is
  no cycle; a child that takes a name from its package's ``__init__`` is one. The top package
  ``allocreplay`` encloses every module, so its ``__init__`` (the public façade) is never
  counted this way: a module that imports it by name (``from allocreplay import load``) does
  import it.

The rules:

1. Only the modules of ``allocreplay._api`` import the compiled extension ``allocreplay._core``.
2. No module outside ``allocreplay._api`` reads or writes an attribute ``_inner`` (the
   extension's object inside a ``Trace`` or a ``ReplayResult``).
3. The import graph has no cycle, other than those listed in ``ALLOWED_CYCLES`` with the reason.
4. Every module belongs to one layer of ``LAYERS``, and every import points to a module of its
   own layer or of a layer below (listed before it).
5. The recording hook's modules (the lowest layer) are exactly the ``.py`` files that
   ``capture._runner.HOOK_FILES`` copies into the recorded process: they run there as a
   package of their own, so they may import each other and the standard library only.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

PACKAGE = "allocreplay"
ROOT = Path(__file__).resolve().parent.parent / "python" / PACKAGE
CORE = "allocreplay._core"
API = "allocreplay._api"

# Lowest first. A module may import modules of its own layer and of the layers before it.
# Patterns are fnmatch patterns on dotted module names.
LAYERS: list[tuple[str, list[str]]] = [
    ("the compiled extension", [CORE]),
    (
        "the recording hook: runs inside the recorded process, standard library only",
        [
            "allocreplay.capture._hook",
            "allocreplay.capture._recorder",
            "allocreplay.capture._pytorch",
            "allocreplay.capture._jax",
            "allocreplay.capture._tf",
            "allocreplay.capture._tags",
            "allocreplay.capture._hostva",
            "allocreplay.capture._driver_memory",
            "allocreplay.capture._nogpu",
            "allocreplay.capture._nogpu_extras",
            "allocreplay.capture._nogpu_dist",
            "allocreplay.capture._devices",
        ],
    ),
    ("foundations: errors and the output writer", ["allocreplay.errors", "allocreplay._output"]),
    ("the API: the one door to the extension", [API, API + ".*"]),
    (
        "analyses: views of traces and replays",
        [
            "allocreplay.analysis",
            "allocreplay.plot",
            "allocreplay.progress",
            "allocreplay._registry",
            "allocreplay._catalogue",
            "allocreplay.capture",
            "allocreplay.capture._convert",
            "allocreplay.capture._runner",
            "allocreplay.capture._ranks",
            "allocreplay.capture._merge",
        ],
    ),
    (
        "workflows: reports, exports, searches",
        ["allocreplay.report", "allocreplay.export", "allocreplay._tune", "allocreplay._tune_ray", "allocreplay._fit", "allocreplay._fit.*"],
    ),
    ("front ends: the command line and the package's façade", ["allocreplay.cli", "allocreplay.cli.*", PACKAGE, "allocreplay.__main__"]),
]

HOOK_LAYER = 1  # the index in LAYERS of the recording hook

# Cycles the graph may keep, each with why it is harmless: {frozenset of modules: reason}.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    line: int
    statement: str
    implicit: bool = False

    def __str__(self) -> str:
        how = f" (runs {self.target}'s __init__)" if self.implicit else ""
        return f"{self.source} -> {self.target}: {self.source_file()}:{self.line}: {self.statement}{how}"

    def source_file(self) -> str:
        return str(_modules()[self.source].relative_to(ROOT.parent.parent))


@cache
def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name; a package is its ``__init__.py``."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known() -> set[str]:
    return set(_modules()) | {CORE}


def _is_package(name: str) -> bool:
    return name in _modules() and _modules()[name].name == "__init__.py"


def _resolve(name: str) -> str | None:
    """The longest prefix of ``name`` that is a module of the package (None: not ours)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in _known():
            return prefix
    return None


def _enclosing(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts))]


@cache
def _imports(source: str) -> list[Import]:
    path = _modules()[source]
    tree = ast.parse(path.read_text(), str(path))
    package = source if _is_package(source) else source.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [_resolve(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = []
            for a in node.names:
                full = f"{base}.{a.name}"
                targets.append(full if full in _known() else _resolve(base))
        else:
            continue
        statement = ast.get_source_segment(path.read_text(), node) or ast.unparse(node)
        statement = " ".join(statement.split())
        for target in dict.fromkeys(t for t in targets if t is not None):
            found.append(Import(source, target, node.lineno, statement))
            for pkg in _enclosing(target):
                inside = source == pkg or source.startswith(pkg + ".")
                if pkg in _modules() and not inside:
                    found.append(Import(source, pkg, node.lineno, statement, implicit=True))
    return found


def _graph() -> list[Import]:
    return [i for m in _modules() for i in _imports(m) if i.target != i.source]


def _layer_of(name: str) -> int:
    hits = [k for k, (_, patterns) in enumerate(LAYERS) if any(fnmatch.fnmatchcase(name, p) for p in patterns)]
    assert len(hits) == 1, f"{name}: in {len(hits)} layers of LAYERS (tests/test_architecture.py); put it in exactly one"
    return hits[0]


def test_the_graph_sees_the_package():
    # A parser that finds nothing would pass every rule.
    mods = _modules()
    assert {PACKAGE, API, "allocreplay.cli", "allocreplay.analysis", "allocreplay.capture._hook"} <= set(mods)
    targets = {(i.source, i.target) for i in _graph()}
    assert (PACKAGE, API) in targets
    assert any(t == CORE for _, t in targets)


def test_only_the_api_imports_the_extension():
    bad = [str(i) for i in _graph() if i.target == CORE and not (i.source == API or i.source.startswith(API + "."))]
    if bad:
        pytest.fail("only allocreplay._api may import allocreplay._core (add what you need to _api):\n" + "\n".join(bad), pytrace=False)


def test_only_the_api_touches_inner():
    bad = []
    for name, path in _modules().items():
        if name == API or name.startswith(API + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "_inner":
                bad.append(f"{path.relative_to(ROOT.parent.parent)}:{node.lineno}: {ast.unparse(node)}")
    if bad:
        pytest.fail("only allocreplay._api may reach into ._inner (add a function to _api):\n" + "\n".join(bad), pytrace=False)


def _cycles(edges: list[Import]) -> list[tuple[frozenset[str], list[Import]]]:
    """Each strongly connected component of more than one module, with one cycle through it
    (as its imports)."""
    succ: dict[str, list[Import]] = {}
    for e in edges:
        succ.setdefault(e.source, []).append(e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for e in succ.get(v, []):
            w = e.target
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(_known()):
        if v not in index:
            visit(v)
    out = []
    for comp in comps:
        # A path back to the start inside the component (breadth first: the shortest).
        start = min(comp)
        prev: dict[str, Import] = {}
        queue = [start]
        while queue:
            v = queue.pop(0)
            for e in succ.get(v, []):
                if e.target in comp and e.target not in prev:
                    prev[e.target] = e
                    queue.append(e.target)
        path = [prev[start]]
        while path[-1].source != start:
            path.append(prev[path[-1].source])
        out.append((frozenset(comp), path[::-1]))
    return out


def test_no_import_cycles():
    found = _cycles(_graph())
    bad = [(comp, path) for comp, path in found if comp not in ALLOWED_CYCLES]
    if bad:
        text = "\n\n".join(f"between {', '.join(sorted(comp))}, e.g.:\n" + "\n".join(map(str, path)) for comp, path in bad)
        pytest.fail(f"import cycles (move the shared piece down, or list the cycle in ALLOWED_CYCLES with why):\n{text}", pytrace=False)
    stale = set(ALLOWED_CYCLES) - {comp for comp, _ in found}
    assert not stale, f"ALLOWED_CYCLES lists cycles that no longer exist: {stale}"


def test_every_module_has_one_layer():
    for name in _known():
        _layer_of(name)


def test_imports_point_down():
    bad = []
    for i in _graph():
        src, dst = _layer_of(i.source), _layer_of(i.target)
        if dst > src:
            bad.append(f"{i}\n    ({LAYERS[src][0]} may not import {LAYERS[dst][0]})")
    if bad:
        pytest.fail("imports pointing up a layer (LAYERS in tests/test_architecture.py):\n" + "\n".join(bad), pytrace=False)


def test_the_hook_layer_is_what_the_runner_copies():
    runner = _modules()["allocreplay.capture._runner"]
    copied = None
    for node in ast.walk(ast.parse(runner.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HOOK_FILES" for t in node.targets):
            copied = ast.literal_eval(node.value)
    assert copied is not None, "capture/_runner.py defines no HOOK_FILES"
    files = {"allocreplay.capture." + f.removesuffix(".py") for f in copied if f.endswith(".py")}
    hook = {m for m in _modules() if _layer_of(m) == HOOK_LAYER}
    assert files == hook, f"HOOK_FILES copies {sorted(files)}, the hook layer holds {sorted(hook)}"
    # Inside the copy the package is `_allocreplay_capture`, not allocreplay.capture: absolute
    # imports of allocreplay would load the installed package instead (or fail).
    absolute = [str(i) for m in hook for i in _imports(m) if i.statement.startswith(("import allocreplay", "from allocreplay"))]
    if absolute:
        pytest.fail("the hook's modules import each other relatively (from . import _x):\n" + "\n".join(absolute), pytrace=False)
