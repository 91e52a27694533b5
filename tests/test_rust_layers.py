"""The Rust core's layering (docs/architecture.md, "Rust core"): every use points down a layer, no
loop between files. scripts/structure.py reads the source; this test fails naming each use that
breaks a rule, so that a new module is given a layer and an upward import is caught in review."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _structure():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["structure"] = module
    spec.loader.exec_module(module)
    return module


def test_every_use_in_the_rust_core_points_down_and_no_file_loop():
    found = _structure().violations()
    assert not found, "\n".join(found)


def test_the_checker_sees_an_upward_use_and_a_loop(tmp_path, monkeypatch):
    # The rule is only as good as the parser: a use hidden from it would pass silently.
    s = _structure()
    src = tmp_path / "src"
    (src / "trace").mkdir(parents=True)
    (src / "engine").mkdir()
    (src / "lib.rs").write_text("pub mod trace;\npub mod engine;\n")
    (src / "trace" / "mod.rs").write_text('mod a;\n// use crate::engine::Fake;\nconst U: &str = "http://x"; use crate::engine::{x::{Y}};\n')
    (src / "trace" / "a.rs").write_text("fn f() { super::b::g() }\n")
    (src / "trace" / "b.rs").write_text("fn g() { crate::trace::a::f() }\n")
    (src / "engine" / "mod.rs").write_text('const S: &str = "crate::policy::X";\n#[cfg(test)]\nmod tests { use crate::replay::X; }\n')
    monkeypatch.setattr(s, "SRC", src)
    found = s.violations()
    assert any("trace uses engine" in f and "points up" in f for f in found), found
    assert any(f.startswith("loop between files: trace::a -> trace::b") for f in found), found
    # Comments, strings and test modules are not uses.
    assert not any("policy" in f or "replay" in f for f in found), found
