"""`allocreplay tune` and `allocreplay.tune()`: the search space from the registry, the
ranking, the bar on a real capture, and Ray ranking exactly as the local backend does."""

from __future__ import annotations

import json

import polars as pl
import pytest

import allocreplay
from allocreplay import _core, errors
from allocreplay._tune import grid_size, search_space
from conftest import TRACES, shared, sidecar

TWO = TRACES / "two_streams__default.pickle.xz"
GPT2 = shared("gpt2_train__default.pickle.xz")
# The memory cap of the real capped run (gpt2_train__default_capped.json: cap_bytes); under it
# the default allocator needed 3 retries.
CAP = sidecar(shared("gpt2_train__default_capped.pickle.xz"))["cap_bytes"]
# The best real run in ../shared/traces/pytorch under that cap: expandable segments
# (gpt2_train__expandable.json and _capped.json: reserved_bytes.all.peak).
BEST_REAL_PEAK = sidecar(shared("gpt2_train__expandable.pickle.xz"))["memory_stats"]["reserved_bytes.all.peak"]


def test_the_bar_on_gpt2_at_the_real_cap():
    assert CAP == 16_927_914_803 and BEST_REAL_PEAK == 16_483_614_720
    ranked = allocreplay.tune(GPT2, CAP)
    best = ranked.row(0, named=True)
    assert best["fits"] and best["num_alloc_retries"] == 0 and best["num_ooms"] == 0
    assert best["peak_reserved_bytes"] <= BEST_REAL_PEAK, best
    assert best["env"].startswith("PYTORCH_CUDA_ALLOC_CONF=")
    # The winner replays to the same numbers on its own.
    row = allocreplay.replay(GPT2, [best["policy"]], capacity=str(CAP), placements=False).summary.row(0, named=True)
    assert row["peak_reserved_bytes"] == best["peak_reserved_bytes"] and row["num_alloc_retries"] == 0
    # The defaults are in the table, and they retry under this cap as the real run did.
    default = ranked.filter(pl.col("is_default")).row(0, named=True)
    assert default["policy"] == "pytorch" and default["num_alloc_retries"] > 0
    assert best["peak_vs_default_bytes"] == best["peak_reserved_bytes"] - default["peak_reserved_bytes"]
    assert len(ranked) == 256 and ranked["policy"].n_unique() == 256


def test_cli_prints_the_winner(run_cli):
    r = run_cli("tune", GPT2, "--capacity", str(CAP), "--budget", "24")
    assert r.code == 0, r.err
    assert "defaults: peak reserved" in r.out
    best = next(line for line in r.out.splitlines() if line.startswith("best: "))
    assert best.startswith("best: PYTORCH_CUDA_ALLOC_CONF=")
    r = run_cli("tune", GPT2, "--capacity", str(CAP), "--budget", "24", "--json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert len(rows) == 24
    for key in ("policy", "peak_reserved_bytes", "num_alloc_retries", "num_ooms", "fits", "env"):
        assert key in rows[0], key
    assert rows[0]["fits"] and rows[0]["num_alloc_retries"] == 0 and rows[0]["peak_reserved_bytes"] <= BEST_REAL_PEAK
    assert best.startswith(f"best: {rows[0]['env']}")
    # Every policy is a spec replay accepts.
    allocreplay.replay(TWO, [r["policy"] for r in rows], placements=False)


def test_where_no_setting_fits_it_says_which_limit_would(run_cli):
    # 14 GiB: below the real capped run's 16,927,914,803, under which the default allocator ran
    # to the end with 3 retries and no OOM (gpt2_train__default_capped.json).
    r = run_cli("tune", GPT2, "--capacity", "14GiB", "--budget", "24")
    assert r.code == 0, r.err
    assert "no setting fits" in r.out, r.out
    line = next(x for x in r.out.splitlines() if x.startswith("smallest limits that fit"))
    defaults = int(line.split("the defaults at ")[1].split("(")[1].split(" bytes")[0].replace(",", ""))
    assert defaults == allocreplay.analysis.smallest_fitting_capacity(GPT2, "pytorch", above=14 << 30)
    # The real capped run never reserved more than its recorded peak, so a limit at that peak
    # fits its requests: the limit found is no larger. It fits, and 2 MiB less (the
    # bisection's last failure) does not.
    capped_peak = sidecar(shared("gpt2_train__default_capped.pickle.xz"))["memory_stats"]["reserved_bytes.all.peak"]
    assert 14 << 30 < defaults <= capped_peak < CAP
    at = allocreplay.replay(GPT2, ["pytorch"], capacity=defaults, placements=False).summary.row(0, named=True)
    below = allocreplay.replay(GPT2, ["pytorch"], capacity=defaults - (2 << 20), placements=False).summary.row(0, named=True)
    assert at["fits"] and at["num_ooms"] == 0 and not below["fits"]
    # From the default `above` (0) as well: the same limit, found from further down.
    assert allocreplay.analysis.smallest_fitting_capacity(GPT2, "pytorch") == defaults
    # A resolution below one byte is refused.
    with pytest.raises(errors.InvalidArgumentError):
        allocreplay.analysis.smallest_fitting_capacity(GPT2, resolution=0)


def test_smallest_fitting_capacity_reads_the_verdict_of_every_trace_and_policy():
    # Several traces: the limit fits every one, and 2 MiB less fails at least one.
    both = [GPT2, TWO]
    cap = allocreplay.analysis.smallest_fitting_capacity(both, "pytorch", above=1 << 30)
    assert cap is not None

    def verdicts(limit: int, policy: str = "pytorch") -> list[bool]:
        return [bool(allocreplay.replay(t, [policy], capacity=limit, placements=False).summary["fits"].all()) for t in both]

    assert all(verdicts(cap)) and not all(verdicts(cap - (2 << 20)))
    # cuda-async: "fits" reads the predicted range's high end, so the limit found holds it.
    cap = allocreplay.analysis.smallest_fitting_capacity(GPT2, "cuda-async", above=1 << 30)
    assert cap is not None
    row = allocreplay.replay(GPT2, ["cuda-async"], capacity=cap, placements=False).summary.row(0, named=True)
    assert row["fits"] and row["peak_reserved_high_bytes"] <= cap
    below = allocreplay.replay(GPT2, ["cuda-async"], capacity=cap - (2 << 20), placements=False).summary.row(0, named=True)
    assert not below["fits"]


def test_search_space_comes_from_the_registry():
    # tf: allow_growth, garbage_collection (2 each) x memory_limit (unset + 3): the whole grid.
    assert grid_size("tf") == 16
    tf = search_space("tf")
    assert tf[0] == "tf" and len(tf) == 16 and len(set(tf)) == 16
    assert "tf:allow_growth=true,garbage_collection=false,memory_limit=0.9" in tf
    jax = search_space("jax")
    assert "jax:preallocate=false,mem_fraction=0.9" in jax and "jax:allocator=platform" in jax
    # pytorch's grid is larger than the budget: defaults, each option alone, then a seeded sample.
    pt = search_space("pytorch", budget=40, seed=1)
    searched = [o for o in {p.name: p for p in allocreplay.policies()}["pytorch"].options if o.search]
    singles = 1 + sum(len(o.search) for o in searched)
    assert pt[0] == "pytorch" and len(pt) == 40 and len(set(pt)) == 40
    assert pt[:singles] == search_space("pytorch", budget=41, seed=2)[:singles]
    assert "pytorch:expandable_segments:True" in pt[:singles]
    assert any("roundup_power2_divisions:[" in s for s in pt), "per-bucket lists are searched"
    assert pt == search_space("pytorch", budget=40, seed=1) != search_space("pytorch", budget=40, seed=2)
    with pytest.raises(errors.InvalidArgumentError):
        search_space("pytorch", budget=0)


def test_a_setting_must_fit_every_trace():
    small = allocreplay.load(TWO)
    big = allocreplay.Trace(_core.tile(small._inner, 3))
    specs = ["pytorch", "pytorch:expandable_segments:True", "pytorch:max_split_size_mb:64"]
    alone = {
        name: allocreplay.replay(t, specs, capacity="3GiB", placements=False).summary.select("policy", "num_ooms", "peak_reserved_bytes")
        for name, t in (("small", small), ("big", big))
    }
    ranked = allocreplay.tune([small, big], "3GiB", specs=specs)
    assert set(ranked["traces"]) == {2}
    for r in ranked.iter_rows(named=True):
        ooms = [d.filter(pl.col("policy") == r["policy"])["num_ooms"][0] for d in alone.values()]
        peaks = [d.filter(pl.col("policy") == r["policy"])["peak_reserved_bytes"][0] for d in alone.values()]
        assert r["fits"] == (sum(ooms) == 0) and r["num_ooms"] == sum(ooms)
        assert r["peak_reserved_bytes"] == max(peaks)
        assert r["margin_bytes"] == (3 << 30) - max(peaks)
    # Fitting settings rank first.
    fits = ranked["fits"].to_list()
    assert fits == sorted(fits, reverse=True)


def test_pareto_front_is_not_dominated():
    ranked = allocreplay.tune(TWO, "2.5GiB", framework="pytorch", budget=48)
    front = ranked.filter(pl.col("pareto"))
    assert len(front) >= 1 and front["fits"].all()
    ok = ranked.filter(pl.col("fits"))
    for p in front.iter_rows(named=True):
        better = ok.filter(
            (pl.col("peak_reserved_bytes") <= p["peak_reserved_bytes"])
            & (pl.col("device_calls") <= p["device_calls"])
            & ((pl.col("peak_reserved_bytes") < p["peak_reserved_bytes"]) | (pl.col("device_calls") < p["device_calls"]))
        )
        assert len(better) == 0, p
    by_calls = allocreplay.tune(TWO, "2.5GiB", framework="pytorch", budget=48, objective="device_calls")
    top = by_calls.row(0, named=True)
    assert top["device_calls"] == ok["device_calls"].min() or top["num_alloc_retries"] == 0


def test_framework_from_the_trace_and_bad_arguments(run_cli):
    jax = allocreplay.tune(TRACES / "jax_train.arrow", "8GiB")
    assert jax["policy"][0].startswith("jax") and jax["env"].str.contains("XLA_PYTHON_CLIENT_").any()
    r = run_cli("tune", TWO, "--objective", "nope")
    assert r.code == 2 and r.err.startswith("error: ")
    with pytest.raises(errors.InvalidArgumentError, match="objective"):
        allocreplay.tune(TWO, objective="nope")


def test_trace_from_arrow_and_synth(run_cli, tmp_path):
    t = allocreplay.load(TWO)
    back = allocreplay.Trace(_core.trace_from_arrow(t.to_arrow(), "<test>"))
    assert back.info().to_dict() == t.info().to_dict() and back.metadata == t.metadata
    import pyarrow as pa

    with pytest.raises(errors.SchemaError, match="not an allocreplay trace"):
        _core.trace_from_arrow(pa.table({"x": [1]}), "<test>")
    out = tmp_path / "long.arrow"
    r = run_cli("synth", TWO, "--tile", "4", "-o", out)
    assert r.code == 0, r.err
    long = allocreplay.load(out)
    assert len(long) == 4 * len(t) and long.info()["allocs"] == 4 * t.info()["allocs"]


def test_ray_ranks_exactly_as_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        traces = [allocreplay.load(TWO), allocreplay.load(TRACES / "two_streams__expandable.pickle.xz")]
        local = allocreplay.tune(traces, "2.5GiB", framework="pytorch", budget=40)
        remote = allocreplay.tune(traces, "2.5GiB", framework="pytorch", budget=40, backend="ray")
        assert remote.equals(local)
    finally:
        ray.shutdown()
