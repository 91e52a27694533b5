"""The type stubs of the compiled module name exactly what it exports, and the package's
`__all__` names only what exists."""

from __future__ import annotations

import ast
from pathlib import Path

import allocreplay
from allocreplay import _core


def stub_names() -> set[str]:
    tree = ast.parse((Path(allocreplay.__file__).parent / "_core.pyi").read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_stubs_match_the_extension_module():
    # `_debug_panic`: the one private function, for the tests (tests/test_internal_error.py).
    assert hasattr(_core, "_debug_panic")
    exported = {n for n in dir(_core) if not n.startswith("_")} | {"__version__", "_debug_panic"}
    assert stub_names() == exported


def test_stub_classes_declare_the_extension_methods():
    tree = ast.parse((Path(allocreplay.__file__).parent / "_core.pyi").read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            declared = {f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name not in ("__init__", "__new__")}
            actual = {n for n in dir(getattr(_core, node.name)) if not n.startswith("_") or n in ("__arrow_c_stream__", "__len__", "__getitem__")}
            assert declared == actual, node.name


def test_all_names_exist():
    for name in allocreplay.__all__:
        assert hasattr(allocreplay, name), name
