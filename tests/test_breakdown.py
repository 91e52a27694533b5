"""Storage tags of `capture --no-gpu` and `analysis.breakdown`: the bytes at a policy's peak by
category (parameters, buffers, gradients, optimizer state, activations, allocator cache).

The expected bytes come from the model the script builds (its parameters' and buffers' sizes,
written by the script itself), not from the engine: a tagged storage is one allocation request
of the storage's bytes, which PyTorch's caching allocator rounds up to 512-byte multiples.
The capture test needs the real torch: without it it is skipped locally and FAILS under
CI=true (as tests/test_nogpu.py); the test of a trace without tags needs nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import allocreplay
from allocreplay import analysis
from conftest import TRACES, real_torch, run_clirunner


def _need_torch() -> None:
    if real_torch():
        return
    if os.environ.get("CI") == "true":
        pytest.fail("torch is not installed: CI must install it (.ci/run's TEST_EXTRAS) to test capture --no-gpu", pytrace=False)
    pytest.skip("torch is not installed here: capture --no-gpu is tested where it is (CI installs it)")


def _rounded(n: int) -> int:
    # c10/cuda/CUDACachingAllocator.cpp, round_size: multiples of kMinBlockSize (512).
    return max(512, (n + 511) // 512 * 512)


SCRIPT = """
import json
import torch
from torch import nn

def main():
    model = nn.Sequential(nn.Linear(1024, 2048), nn.BatchNorm1d(2048), nn.GELU(), nn.Linear(2048, 1000), nn.Linear(1000, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(2):
        opt.zero_grad(set_to_none=True)   # the gradients of step 1 are freed, step 2 makes new ones
        x = torch.randn(512, 1024, device="cuda")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
    with open("model.json", "w") as f:
        json.dump(
            {
                "parameters": [p.numel() * p.element_size() for p in model.parameters()],
                "buffers": [b.numel() * b.element_size() for b in model.buffers()],
            },
            f,
        )

main()   # the model is gone at exit: tags come from what was seen during the run
"""


@pytest.fixture(scope="module")
def tagged(tmp_path_factory: pytest.TempPathFactory) -> tuple[allocreplay.Trace, dict[str, list[int]], Path]:
    _need_torch()
    tmp = tmp_path_factory.mktemp("tags")
    (tmp / "train.py").write_text(textwrap.dedent(SCRIPT))
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--no-gpu", "-o", "run.arrow", "--", sys.executable, "train.py"]
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    p = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr
    model = json.loads((tmp / "model.json").read_text())
    return allocreplay.load(tmp / "run.arrow"), model, tmp / "run.arrow"


def _rows(bd: pl.DataFrame) -> dict[str, dict]:
    return {r["category"]: r for r in bd.iter_rows(named=True)}


def _before_exit(trace: allocreplay.Trace) -> int:
    """The event right before main() returned: the one before the model's first free (the
    buffers go first, with the model; the optimizer holds the parameters a little longer)."""
    cats = trace.metadata["extra"]["capture"]["storage_tags"]["categories"]
    model = cats["parameters"]["addrs"] + cats["buffers"]["addrs"]
    ev = trace.events.with_row_index("event")
    first = ev.filter((pl.col("action") == "free_requested") & pl.col("addr").is_in(model))["event"].min()
    assert isinstance(first, int) and first > 0
    return first - 1


def test_the_capture_tags_parameters_buffers_gradients_and_optimizer_state(tagged):
    trace, model, _ = tagged
    params, buffers = model["parameters"], model["buffers"]
    assert len(params) == 8 and len(buffers) == 3  # 3 Linear + BatchNorm (weight, bias; mean, var, count)
    tags = trace.metadata["extra"]["capture"]["storage_tags"]
    assert tags["keyed_by"] == "addr" and tags["rest"] == "activations"
    assert tags["order"] == ["parameters", "buffers", "gradients", "optimizer_state", "activations"]
    cats = tags["categories"]
    assert all(c["how"] for c in cats.values())
    allocs = set(trace.events.filter(pl.col("action") == "alloc")["addr"].to_list())
    for name in ("parameters", "buffers", "gradients", "optimizer_state"):
        assert all(isinstance(a, int) and a in allocs for a in cats[name]["addrs"]), name
    assert len(cats["parameters"]["addrs"]) == len(params)
    assert len(cats["buffers"]["addrs"]) == len(buffers)
    # Two steps, new gradients each (zero_grad(set_to_none=True)): twice as many allocations.
    assert len(cats["gradients"]["addrs"]) == 2 * len(params)
    # AdamW: exp_avg and exp_avg_sq per parameter; its `step` counters live on the CPU.
    assert len(cats["optimizer_state"]["addrs"]) == 2 * len(params)
    assert cats["activations"]["addrs"] == []


def test_breakdown_after_the_last_step_counts_each_category_from_the_model(tagged):
    trace, model, _ = tagged
    params, buffers = model["parameters"], model["buffers"]
    end = _before_exit(trace)
    bd = analysis.breakdown(trace, "pytorch", at=end)
    assert bd.columns == ["policy", "device", "event", "category", "bytes", "requested_bytes", "allocations", "share", "how_tagged"]
    assert bd["category"].to_list() == ["parameters", "buffers", "gradients", "optimizer_state", "activations", "allocator_cache"]
    r = _rows(bd)
    assert r["parameters"]["requested_bytes"] == sum(params)
    assert r["parameters"]["bytes"] == sum(map(_rounded, params))
    assert r["parameters"]["allocations"] == len(params)
    assert r["buffers"]["requested_bytes"] == sum(buffers)
    assert r["buffers"]["bytes"] == sum(map(_rounded, buffers))
    # After the last step the gradients are still held (zero_grad comes at the next step).
    assert r["gradients"]["requested_bytes"] == sum(params)
    assert r["gradients"]["allocations"] == len(params)
    assert r["gradients"]["bytes"] >= sum(map(_rounded, params))  # a cached block may be larger
    assert r["optimizer_state"]["requested_bytes"] == 2 * sum(params)
    assert r["optimizer_state"]["bytes"] >= 2 * sum(map(_rounded, params))
    assert all(h for h in bd["how_tagged"].to_list())
    # The rows add up to what the policy reserves then.
    reserved = analysis.state(trace, "pytorch", at=end).summary["reserved_bytes"][0]
    assert bd["bytes"].sum() == reserved
    assert r["allocator_cache"]["bytes"] == reserved - analysis.live_allocations(trace, "pytorch", at=end)["size"].sum()
    assert abs(bd["share"].sum() - 1.0) < 1e-9


def test_breakdown_at_the_peak(tagged):
    trace, model, _ = tagged
    params = model["parameters"]
    for policy in ("pytorch", "pytorch:expandable_segments:True", "cuda-async"):
        bd = analysis.breakdown(trace, policy)
        r = _rows(bd)
        summary = analysis.state(trace, policy).summary
        assert bd["event"].unique().to_list() == [summary["event"][0]]
        assert bd["bytes"].sum() == summary["reserved_bytes"][0], policy
        # The parameters live from the start to the end: all of them are there at the peak.
        assert r["parameters"]["requested_bytes"] == sum(params), policy
        assert r["gradients"]["requested_bytes"] <= sum(params)
        assert r["activations"]["bytes"] > 0
    # pytorch: blocks of the 512-byte rounding (each parameter split off a fresh segment).
    r = _rows(analysis.breakdown(trace, "pytorch"))
    assert r["parameters"]["bytes"] == sum(map(_rounded, params))


def test_breakdown_on_the_command_line_and_in_the_report(tagged):
    trace, _, path = tagged
    out = run_clirunner("breakdown", path, "-p", "pytorch", "--at", str(_before_exit(trace)))
    assert out.code == 0, out.err
    lines = out.out.splitlines()
    assert f"at event {_before_exit(trace):,}:" in lines[0]
    assert [ln.split()[0] for ln in lines[3:]] == ["parameters", "buffers", "gradients", "optimizer_state", "activations", "allocator_cache"]
    js = run_clirunner("breakdown", path, "--json")
    rows = json.loads(js.out)
    assert {r["category"] for r in rows} >= {"parameters", "allocator_cache"}
    if importlib.util.find_spec("plotly") is None:
        return
    from allocreplay.report import build_report

    html = build_report(trace, allocreplay.replay(trace, ["pytorch"]), title="tags")
    assert "What the memory is made of" in html and "optimizer_state" in html and 'id="chart-breakdown"' in html


def test_a_trace_without_tags_is_untagged_and_allocator_cache():
    trace = allocreplay.load(TRACES / "two_streams__default.pickle.xz")
    assert analysis.storage_tags(trace) is None
    for at in ("peak", "end"):
        bd = analysis.breakdown(trace, "pytorch", at=at)
        assert bd["category"].to_list() == ["untagged", "allocator_cache"]
        live = analysis.live_allocations(trace, "pytorch", at=at)
        st = analysis.state(trace, "pytorch", at=at).summary
        r = _rows(bd)
        assert r["untagged"]["bytes"] == live["size"].sum()
        assert r["untagged"]["requested_bytes"] == live["requested_bytes"].sum()
        assert r["untagged"]["allocations"] == live.height
        assert r["allocator_cache"]["bytes"] == st["reserved_bytes"][0] - live["size"].sum()
        assert r["allocator_cache"]["allocations"] == 0
    # No OOM: no event to look at, no rows.
    assert analysis.breakdown(trace, "pytorch", at="oom").is_empty()
    # A synthetic trace: one live allocation of 1,000 bytes at the end, one freed.
    synthetic = allocreplay.Trace.from_events(
        pl.DataFrame({"action": ["alloc", "alloc", "free_completed"], "size": [1000, 3 << 20, 3 << 20], "addr": [0x1000, 0x200000, 0x200000]})
    )
    r = _rows(analysis.breakdown(synthetic, "pytorch", at="end"))
    assert r["untagged"]["bytes"] == 1024 and r["untagged"]["requested_bytes"] == 1000
    assert r["untagged"]["bytes"] + r["allocator_cache"]["bytes"] == analysis.state(synthetic, "pytorch", at="end").summary["reserved_bytes"][0]
    # The command line says so.
    out = run_clirunner("breakdown", TRACES / "two_streams__default.pickle.xz")
    assert out.code == 0 and "untagged" in out.out and "allocator_cache" in out.out
