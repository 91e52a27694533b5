"""Issue 28, classes 5 and 6: one limit everywhere, and policies that cannot run.

5. Every command and analysis replays at the limit the core's one rule gives
   (``replay::default_limit``, read by ``analysis.limits``): the recorded cap, else for a PyTorch
   trace the device's memory minus the CUDA context's share, else the device's memory. A
   capture with a recorded cap goes through replay, compare, report, analysis.oom and tune;
   all of them name the cap, and agree on which policy runs out of memory and where.
6. A policy that cannot run (its summary row's ``error``) is a row with its reason, ranked last,
   in compare, compare --json, report, export-perfetto and tune; never a traceback, never
   dropped.

Expected values come from the inputs: the caps the captures recorded (the trace's metadata,
the sidecar's ``cap_bytes``), the real runs' ``memory_stats`` in the sidecars.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import polars as pl
import pytest

import allocreplay
from allocreplay import _core, analysis
from conftest import TRACES, run_clirunner, run_subprocess, shared, sidecar

CAPPED = shared("gpt2_train__default_capped.pickle.xz")
TORCH_OOM = TRACES / "torch_oom.arrow"
TWO = TRACES / "two_streams__default.pickle.xz"


def _recorded_cap(path) -> int:
    (device,) = allocreplay.load(path).metadata["devices"]
    assert device["memory_cap"], f"{path} records no cap"
    return int(device["memory_cap"])


def _text(page: str) -> str:
    """The report's text, tags removed, entities decoded, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


# ---- 5. one limit -----------------------------------------------------------------------


def test_the_capped_fixtures_record_their_caps():
    # The premise of the tests below: the sidecar's cap is the trace's, and torch_oom's run
    # recorded its OOM.
    assert _recorded_cap(CAPPED) == sidecar(CAPPED)["cap_bytes"] == 16927914803
    assert _recorded_cap(TORCH_OOM) == 1 << 30
    assert allocreplay.load(TORCH_OOM).info().ooms >= 1


@pytest.mark.parametrize("path", [CAPPED, TORCH_OOM], ids=["gpt2_capped", "torch_oom"])
def test_limits_is_the_recorded_cap_and_capacity_wins(path):
    t = allocreplay.load(path)
    assert analysis.limits(t).rows() == [(0, _recorded_cap(path), "recorded_cap")]
    assert analysis.limits(t, "2GiB").rows() == [(0, 2 << 30, "--capacity")]
    # The replay's summary says the same, for every policy.
    s = allocreplay.replay(t, ["pytorch", "jax", "cuda-async"], placements=False).summary
    assert set(s.select("capacity_bytes", "capacity_source").rows()) == {(_recorded_cap(path), "recorded_cap")}


def test_the_capped_gpt2_run_replays_as_recorded_at_its_cap(run_cli):
    stats = sidecar(CAPPED)["memory_stats"]
    r = run_cli("replay", CAPPED, "-p", "pytorch", "--json")
    assert r.code == 0, r.err
    (row,) = json.loads(r.out)
    assert (row["capacity_bytes"], row["capacity_source"]) == (sidecar(CAPPED)["cap_bytes"], "recorded_cap")
    assert row["num_alloc_retries"] == stats["num_alloc_retries"] == 3
    assert row["num_ooms"] == stats["num_ooms"] == 0
    assert row["peak_reserved_bytes"] == stats["reserved_bytes.all.peak"]


@pytest.mark.parametrize("path", [CAPPED, TORCH_OOM], ids=["gpt2_capped", "torch_oom"])
def test_analysis_replays_at_the_recorded_cap_and_agrees_with_replay(path):
    t = allocreplay.load(path)
    cap = _recorded_cap(path)
    specs = ["pytorch", "jax"]
    s = allocreplay.replay(t, specs, placements=False).summary
    for spec in specs:
        st = analysis.state(t, spec).summary
        assert st["capacity_bytes"].to_list() == [cap], spec
        oom = analysis.oom(t, spec)
        row = s.filter(pl.col("policy") == spec).row(0, named=True)
        # Both OOM or both not, at the same event, under the same capacity.
        assert oom["event"].to_list() == ([row["first_oom_event"]] if row["num_ooms"] else []), spec
        assert oom["capacity_bytes"].to_list() == ([cap] if row["num_ooms"] else []), spec
    # What the real runs recorded: gpt2 under its cap did not run out of memory; torch_oom did.
    assert analysis.oom(t, "pytorch").height == (0 if path == CAPPED else 1)
    if path == TORCH_OOM:
        # At the event where the run's allocator recorded its OOM (the failed request).
        recorded_oom = t.events.with_row_index("i").filter(pl.col("action") == "oom")["i"].to_list()
        assert analysis.oom(t, "pytorch")["event"].to_list() == recorded_oom[:1]


def test_capped_jax_runs_out_under_the_cap_everywhere(run_cli, tmp_path):
    # Under the 15.77 GiB cap JAX's preallocation (75% of it) cannot hold gpt2's 14.34 GiB
    # peak of live bytes; under the device's 139.80 GiB it could. Every output must say OOM.
    stats = sidecar(CAPPED)["memory_stats"]
    assert 0.75 * sidecar(CAPPED)["cap_bytes"] < stats["allocated_bytes.all.peak"] < 0.75 * sidecar(CAPPED)["device_total_bytes"]
    r = run_cli("compare", CAPPED, "-p", "pytorch", "-p", "jax", "--json")
    assert r.code == 0, r.err
    rows = {x["policy"]: x for x in json.loads(r.out)}
    assert rows["jax"]["oom"] is True and rows["pytorch"]["oom"] is False
    assert {(x["capacity_bytes"], x["capacity_source"]) for x in rows.values()} == {(sidecar(CAPPED)["cap_bytes"], "recorded_cap")}
    assert rows["jax"]["first_oom_event"] == analysis.oom(allocreplay.load(CAPPED), "jax")["event"][0]
    r = run_cli("compare", CAPPED, "-p", "pytorch", "-p", "jax")
    assert r.code == 0, r.err
    head = r.out.splitlines()[0]
    assert _core.format_bytes(sidecar(CAPPED)["cap_bytes"]) in head and "recorded run's cap" in head


@pytest.mark.parametrize("path", [CAPPED, TORCH_OOM], ids=["gpt2_capped", "torch_oom"])
def test_report_names_the_cap_and_lists_the_ooms_of_its_table(path, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    r = run_subprocess("report", path, "-p", "pytorch", "-p", "jax", "-o", out, "-q")
    assert r.code == 0, r.err
    text = _text(out.read_text())
    cap = _recorded_cap(path)
    assert f"{cap:,} bytes" in text and "the recorded run's cap" in text
    t = allocreplay.load(path)
    s = allocreplay.replay(t, ["pytorch", "jax"], placements=False).summary
    ooms = s.filter(pl.col("num_ooms") > 0)
    assert ooms.height, "jax runs out of memory under both caps"
    assert "No policy ran out of memory" not in text
    oom_section = text.split("Out of memory", 1)[1]
    for r_ in ooms.iter_rows(named=True):
        assert re.search(rf"\b{re.escape(r_['policy'])} 0 {r_['first_oom_event']:,} ", oom_section), (r_["policy"], oom_section[:400])


@pytest.mark.parametrize("path", [CAPPED, TORCH_OOM], ids=["gpt2_capped", "torch_oom"])
def test_tune_prints_the_limit_it_replays_at(path):
    cap = _recorded_cap(path)
    r = run_subprocess("tune", path, "--budget", "4", "--top", "1")
    assert r.code == 0, r.err
    head = r.out.splitlines()[0]
    assert f"capacity {_core.format_bytes(cap)} — the recorded run's cap" in head, head
    total = allocreplay.load(path).metadata["devices"][0]["total_memory"]
    assert _core.format_bytes(total) not in head
    ranked = allocreplay.tune(path, budget=4)
    d = ranked.filter(pl.col("is_default")).row(0, named=True)
    if path == CAPPED:  # the real capped run: 3 retries, no OOM
        stats = sidecar(CAPPED)["memory_stats"]
        assert (d["num_alloc_retries"], d["num_ooms"]) == (stats["num_alloc_retries"], stats["num_ooms"])
        assert d["margin_bytes"] == cap - stats["reserved_bytes.all.peak"]
    else:  # torch_oom's run hit an OOM under its 1 GiB cap
        assert d["num_ooms"] >= 1 and not d["fits"]


COMMANDS_WITH_CAPACITY = ["replay", "compare", "breakdown", "report", "export-snapshot", "export-perfetto", "tune"]


@pytest.mark.parametrize("command", COMMANDS_WITH_CAPACITY)
def test_every_capacity_help_describes_the_default_used(command):
    r = run_clirunner(command, "--help")
    assert r.code == 0
    text = " ".join(r.out.split())
    assert "set_per_process_memory_fraction cap" in text and "minus the CUDA context's share" in text, text
    assert "recorded device's total memory" not in text


def test_analysis_agrees_with_replay_below_the_context_share():
    # A PyTorch trace without a cap whose one request fits the device's memory but not the
    # memory left beside the CUDA context.
    gib = 1 << 30
    t = allocreplay.Trace.from_events(
        pl.DataFrame({"action": ["alloc", "free_completed"], "size": [gib * 7 // 2] * 2, "addr": [0, 0]}),
        metadata={"source": "pytorch", "devices": [{"index": 0, "total_memory": 4 * gib}]},
    )
    (row,) = allocreplay.replay(t, ["pytorch"]).summary.iter_rows(named=True)
    assert row["capacity_source"] == "device_total_minus_cuda_context" and row["num_ooms"] == 1
    assert analysis.oom(t, "pytorch")["event"].to_list() == [row["first_oom_event"]]
    assert analysis.state(t, "pytorch").summary["capacity_bytes"].to_list() == [row["capacity_bytes"]]


# ---- 6. policies that cannot run --------------------------------------------------------


@pytest.fixture
def bare(tmp_path):
    """two_streams without its .json: the trace records no device memory, so `jax` (a fraction
    of the device's memory) cannot run, and neither can PyTorch's garbage collection (only
    under a cap)."""
    p = tmp_path / TWO.name
    shutil.copy(TWO, p)
    assert allocreplay.load(p).metadata["devices"][0]["total_memory"] is None
    return p


def test_compare_ranks_a_policy_that_cannot_run_last_with_its_reason(run_cli, bare):
    r = run_cli("compare", bare, "-p", "jax", "-p", "pytorch", "-p", "cuda-malloc")
    assert r.code == 0, r.err
    assert "Traceback" not in r.err + r.out
    lines = r.out.splitlines()
    last = lines[-1]
    assert last.split()[:2] == ["3", "jax"] and "cannot run" in last and "device's memory" in last
    for line in lines[3:-1]:
        assert "cannot run" not in line and "fits" in line


def test_compare_json_ranks_it_last_with_its_reason_and_no_numbers(run_cli, bare):
    r = run_cli("compare", bare, "-p", "jax", "-p", "pytorch", "--json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [x["policy"] for x in rows] == ["pytorch", "jax"]
    assert [x["rank"] for x in rows] == [1, 2]
    assert rows[0]["error"] is None and rows[0]["oom"] is False
    assert "device's memory" in rows[1]["error"]
    assert rows[1]["oom"] is None and rows[1]["peak_reserved_bytes"] is None


def test_analysis_compare_ranks_fits_then_ooms_then_cannot_run(bare):
    t = allocreplay.load(bare)
    oom = allocreplay.replay(t, ["pytorch"], capacity="1GiB", placements=False).summary  # 2.18 GiB live: OOM
    runs = allocreplay.replay(t, ["jax", "cuda-malloc"], placements=False).summary
    ranked = analysis.compare(t, SimpleNamespace(summary=pl.concat([runs, oom])))  # type: ignore[arg-type]
    assert ranked.select("policy", "oom").rows() == [("cuda-malloc", False), ("pytorch", True), ("jax", None)]
    assert ranked["error"].is_null().to_list() == [True, True, False]


def test_report_keeps_a_policy_that_cannot_run_as_a_row_with_its_reason(bare, tmp_path):
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    r = run_subprocess("report", bare, "-p", "jax", "-p", "pytorch", "-o", out, "-q")
    assert r.code == 0, r.err
    text = _text(out.read_text())
    table = text.split("Policies, best first", 1)[1].split("Policies that could not run", 1)[0]
    assert re.search(r"\b1 pytorch 0 .* fits\b", table) and re.search(r"\b2 jax 0 .* cannot run .*device's memory", table), table
    assert "Policies that could not run jax (device 0): jax:" in text


def test_export_perfetto_keeps_a_policy_that_cannot_run(run_cli, bare, tmp_path):
    out = tmp_path / "m.json"
    r = run_cli("export-perfetto", bare, "-p", "pytorch", "-p", "jax", "-o", out)
    assert r.code == 0, r.err
    data = json.loads(out.read_text())
    instant = [e for e in data["traceEvents"] if e["ph"] == "i"]
    assert [e["name"] for e in instant] == ["jax: cannot run"] and "device's memory" in instant[0]["args"]["error"]
    assert [(f["policy"], f["device"]) for f in data["otherData"]["policies_that_cannot_run"]] == [("jax", 0)]
    assert {e["name"] for e in data["traceEvents"] if e["ph"] == "C"} == {"pytorch"}
    assert "jax cannot run on device 0" in r.err and "device's memory" in r.err


def test_tune_ranks_settings_that_cannot_run_last_with_their_reason(bare):
    specs = ["pytorch", "pytorch:garbage_collection_threshold:0.8", "pytorch:expandable_segments:True"]
    # torch_oom: its defaults run out of memory under its 1 GiB cap, expandable segments fit;
    # the bare two_streams records no memory, so garbage collection (only under a cap) cannot run.
    ranked = allocreplay.tune([TORCH_OOM, bare], specs=specs)
    assert ranked["policy"].to_list() == [specs[2], specs[0], specs[1]]
    assert ranked["fits"].to_list() == [True, False, False]
    last = ranked.row(2, named=True)
    assert "garbage_collection_threshold" in last["error"] and last["peak_reserved_bytes"] is None and last["num_ooms"] is None


def test_tune_cli_shows_why_a_setting_cannot_run(bare):
    r = run_subprocess("tune", bare, "--top", "1000")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert "why it cannot run" in lines[2]
    failing = [line for line in lines if "cannot run" not in line and "only acts under a memory cap" in line]
    assert failing and all(" no " in line for line in failing)
    r = run_subprocess("tune", bare, "--json")
    rows = json.loads(r.out)
    errors = [x["rank"] for x in rows if x["error"]]
    ok = [x["rank"] for x in rows if not x["error"]]
    assert errors and ok and max(ok) < min(errors)


def test_import_allocreplay_exposes_analysis():
    p = subprocess.run(
        [sys.executable, "-c", "import allocreplay; print(allocreplay.analysis.oom.__name__, allocreplay.analysis.limits.__name__)"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["oom", "limits"]
    assert "analysis" in allocreplay.__all__
