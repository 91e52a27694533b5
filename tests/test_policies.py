"""The policy registry seen from Python: `allocreplay.policies()`, `allocreplay policies`,
docs/policies.md generated from it, and the errors it makes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import allocreplay
from allocreplay import _core, errors
from allocreplay._registry import docs_markdown
from conftest import REPO, TRACES

TWO = TRACES / "two_streams__default.pickle.xz"
TYPES = {"bool", "integer", "bytes", "fraction", "float", "choice", "list"}


def test_policies_are_the_registry_and_typed():
    infos = allocreplay.policies()
    assert [p.name for p in infos] == list(allocreplay.POLICY_NAMES)
    by = {p.name: p for p in infos}
    assert by["ideal"].kind == by["offline"].kind == "offline-bound"
    assert by["pytorch"].kind == "online" and by["pytorch"].env == "PYTORCH_CUDA_ALLOC_CONF" and by["pytorch"].syntax == "conf"
    assert {p.framework for p in infos} >= {"pytorch", "tf", "jax"}
    for p in infos:
        assert p.summary and p.models, p.name
        for o in p.options:
            assert o.type in TYPES and o.help, (p.name, o.name)
            assert (o.type == "choice") == bool(o.choices), (p.name, o.name)
    opts = {o.name: o for o in by["jax"].options}
    assert opts["mem_fraction"].default == "0.75" and opts["mem_fraction"].env == "XLA_PYTHON_CLIENT_MEM_FRACTION"
    assert "platform" in opts["allocator"].choices
    split = {o.name: o for o in by["pytorch"].options}["max_split_size_mb"]
    assert split.unset and split.default == "unlimited" and "128" in split.search
    assert 'PolicyInfo(name="bfc"' in repr(by["bfc"]) and "allow_growth" in repr(by["bfc"])
    assert repr(by["bfc"].options[0]).startswith('PolicyOption(name="allow_growth", type="bool"')
    with pytest.raises(AttributeError):
        by["bfc"].name = "x"  # type: ignore[misc]


def test_every_search_value_replays():
    # The values `tune` searches must be specs `replay` accepts (the Rust test builds them; this
    # checks the Python surface gives the same strings back).
    trace = allocreplay.load(TWO)
    specs = []
    for p in allocreplay.policies():
        sep = ":" if p.syntax == "conf" else "="
        specs += [f"{p.name}:{o.name}{sep}{v}" for o in p.options for v in o.search]
    assert len(specs) > 20
    rows = allocreplay.replay(trace, specs, capacity="16GiB", placements=False, timeline_points=0).summary
    assert sorted(set(rows["policy"])) == sorted(specs)


def test_env_text():
    assert _core.policy_env("pytorch:expandable_segments:true") == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    assert _core.policy_env("tf:allow_growth=1") == "TF_FORCE_GPU_ALLOW_GROWTH=true"
    assert _core.policy_env("jax") == ""
    with pytest.raises(errors.PolicySpecError, match="unknown option 'x' for jax; options: preallocate, mem_fraction"):
        _core.policy_env("jax:x=1")


def test_cli_lists_every_policy_and_option(run_cli):
    r = run_cli("policies")
    assert r.code == 0, r.err
    for p in allocreplay.policies():
        assert f"{p.name}: {p.summary}" in r.out
        for o in p.options:
            assert o.name in r.out
    r = run_cli("policies", "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert [d["name"] for d in data] == list(allocreplay.POLICY_NAMES)
    bfc = next(d for d in data if d["name"] == "bfc")
    assert {o["name"] for o in bfc["options"]} == {"allow_growth", "garbage_collection", "fragmentation_fraction", "memory_limit"}
    assert set(bfc["options"][0]) == {"name", "type", "default", "unset", "help", "choices", "search", "aliases", "env"}


def test_replay_help_names_the_registry(run_cli):
    r = run_cli("replay", "--help")
    assert r.code == 0
    flat = " ".join(r.out.split())
    for name in allocreplay.POLICY_NAMES:
        assert name in flat


def test_docs_are_up_to_date():
    text = (REPO / "docs" / "policies.md").read_text()
    assert text == docs_markdown(), "docs/policies.md is out of date: run python scripts/policy_docs.py"
    for p in allocreplay.policies():
        assert f"## `{p.name}`" in text
        for o in p.options:
            assert f"`{o.name}`" in text, (p.name, o.name)
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "policy_docs.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_unknown_option_and_policy_messages():
    trace = allocreplay.load(TWO)
    with pytest.raises(
        errors.PolicySpecError, match=r"^unknown option 'foo' for bfc; options: allow_growth, garbage_collection, fragmentation_fraction, memory_limit$"
    ):
        allocreplay.replay(trace, ["bfc:foo=1"])
    with pytest.raises(errors.PolicySpecError, match=r"^unknown policy 'x'; known policies: pytorch, bfc, "):
        allocreplay.replay(trace, ["x"])


def test_an_offline_bound_is_not_called_unknown():
    # Before the registry: "unknown policy 'ideal' ... known policies: ..., ideal".
    with pytest.raises(errors.PolicySpecError) as e:
        allocreplay.validate_bfc(TRACES / "jax_train.arrow", policy="ideal")  # a BFC capture
    assert "unknown" not in str(e.value) and "offline bound" in str(e.value)
    row = allocreplay.replay(TWO, ["ideal"], placements=False).summary.row(0, named=True)
    assert row["policy"] == "ideal" and row["peak_reserved_bytes"] > 0
