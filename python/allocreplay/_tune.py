"""`allocreplay tune`: which allocator settings make a run fit, with the least memory and the
fewest device calls.

The search space comes from the policy registry: every option of the framework's policy that
declares search values (`allocreplay policies` lists them), each option either left at its
default or set to one of them. The whole grid when it fits the budget; else the defaults, each
option changed alone, and a seeded random sample of the grid. The sweep itself runs in Rust
(`_api.sweep`: all cores, GIL released, traces shared) or on Ray (`_tune_ray`); the ranking is
Polars here, so both backends rank the same rows the same way.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from allocreplay import _api
from allocreplay._api import Trace, load
from allocreplay.errors import InvalidArgumentError

FRAMEWORKS = ("pytorch", "tf", "jax")
OBJECTIVES = ("peak_reserved", "device_calls", "retries")
BACKENDS = ("local", "ray")

Progress = Callable[[int, int], None]


def framework_of(trace: Trace, name: str = "trace") -> str:
    """The framework whose allocator a trace recorded: PyTorch snapshots, JAX or TF profiler captures."""
    md = trace.metadata
    settings = md.get("allocator_settings") or {}
    if md.get("source") == "pytorch":
        return "pytorch"
    fw = settings.get("framework") if isinstance(settings, dict) else None
    if fw in ("jax", "tf"):
        return str(fw)
    allocator = settings.get("allocator_name", "") if isinstance(settings, dict) else ""
    if str(allocator).startswith("xla_"):
        return "jax"
    raise InvalidArgumentError(f"{name}: cannot tell which framework recorded it (source '{md.get('source')}'); pass --framework pytorch, tf or jax")


def _entry(framework: str) -> _api.PolicyInfo:
    for p in _api.policies():
        if p.framework == framework:
            return p
    raise InvalidArgumentError(f"unknown framework '{framework}'; frameworks: {', '.join(FRAMEWORKS)}")


def search_space(framework: str, budget: int = 256, seed: int = 0) -> list[str]:
    """The specs `tune` replays for a framework: the defaults first, then the grid of the
    registry's search values (or, over `budget`, each option alone plus a seeded sample)."""
    if budget < 1:
        raise InvalidArgumentError(f"budget must be at least 1, got {budget}")
    entry = _entry(framework)
    sep = ":" if entry.syntax == "conf" else "="
    axes: list[tuple[str, list[str | None]]] = [(o.name, [None, *o.search]) for o in entry.options if o.search]

    def spec(choice: Sequence[str | None]) -> str:
        items = [f"{name}{sep}{v}" for (name, _), v in zip(axes, choice) if v is not None]
        return entry.name + (":" + ",".join(items) if items else "")

    sizes = [len(values) for _, values in axes]
    index = {name: k for k, (name, _) in enumerate(axes)}
    excluded = [(index[a], index[b]) for a, b in entry.search_excludes]

    def allowed(digits: Sequence[int]) -> bool:
        return not any(digits[a] and digits[b] for a, b in excluded)

    grid = math.prod(sizes)
    if grid <= budget:
        combos = itertools.product(*(range(n) for n in sizes))
        return [spec([axes[k][1][d] for k, d in enumerate(c)]) for c in combos if allowed(c)]
    chosen: list[tuple[int, ...]] = [tuple(0 for _ in axes)]
    for i, n in enumerate(sizes):
        for j in range(1, n):
            chosen.append(tuple(j if k == i else 0 for k in range(len(axes))))
    seen = set(chosen)
    rng = random.Random(seed)
    for flat in rng.sample(range(grid), min(grid, budget * 4)):
        if len(chosen) >= budget:
            break
        digits = []
        for n in reversed(sizes):
            flat, d = divmod(flat, n)
            digits.append(d)
        c = tuple(reversed(digits))
        if c not in seen and allowed(c):
            seen.add(c)
            chosen.append(c)
    return [spec([axes[k][1][d] for k, d in enumerate(c)]) for c in chosen[:budget]]


def grid_size(framework: str) -> int:
    """Settings in the framework's grid (before `search_excludes`)."""
    return math.prod(1 + len(o.search) for o in _entry(framework).options if o.search)


def _sweep_local(traces: list[Trace], specs: list[str], capacity: str | float | None, threads: int, progress: Progress | None) -> pl.DataFrame:
    if progress is None or len(specs) <= 16:
        return _api.sweep(traces, specs, capacity, threads)
    # Chunks of several settings per core, so the bar moves and the threads stay busy.
    cores = threads or os.cpu_count() or 1
    step = max(4 * cores, math.ceil(len(specs) / 20))
    parts = []
    for start in range(0, len(specs), step):
        part = _api.sweep(traces, specs[start : start + step], capacity, threads)
        parts.append(part.with_columns(pl.col("setting") + start))
        progress(min(start + step, len(specs)), len(specs))
    return pl.concat(parts)


def rank(rows: pl.DataFrame, specs: list[str], objective: str = "peak_reserved") -> pl.DataFrame:
    """One row per setting, best first: settings that fit every trace (no OOM) first, those that
    fit without freeing their cache and retrying before those that need to, then by the
    objective. Aggregated over traces and devices: peak = the largest, retries / OOMs / device
    calls = the sums, margin = the smallest capacity minus peak reserved. `pareto`: not beaten on
    both peak reserved and device calls by another setting that fits. A setting whose policy
    cannot run on a trace (`error`: the reason, from its replay's summary row) does not fit, has
    no numbers and is ranked last, after those that run out of memory."""
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(f"unknown objective '{objective}'; objectives: {', '.join(OBJECTIVES)}")
    agg = rows.group_by("setting").agg(
        pl.col("peak_reserved_bytes").max(),
        pl.col("peak_allocated_bytes").max(),
        pl.col("num_alloc_retries").sum(),
        pl.col("num_ooms").sum(),
        pl.col("fits").fill_null(False).all().alias("_fits_everywhere"),
        (pl.col("num_device_alloc") + pl.col("num_device_free")).sum().alias("device_calls"),
        (pl.col("capacity_bytes").cast(pl.Int64) - pl.col("peak_reserved_bytes").cast(pl.Int64)).min().alias("margin_bytes"),
        pl.col("trace").n_unique().alias("traces"),
        pl.col("error").drop_nulls().first().alias("error"),
    )
    agg = agg.with_columns(
        pl.col("setting").map_elements(lambda i: specs[i], return_dtype=pl.String).alias("policy"),
        # No OOM, and cuda-async's peak range within the limit at its high end (issue 29).
        (pl.col("_fits_everywhere") & pl.col("error").is_null()).alias("fits"),
    )
    envs = {s: _api.policy_env(s) for s in specs}
    agg = agg.with_columns(pl.col("policy").replace_strict(envs, return_dtype=pl.String).alias("env"))
    keys = {
        "peak_reserved": ["peak_reserved_bytes", "device_calls", "num_alloc_retries"],
        "device_calls": ["device_calls", "peak_reserved_bytes", "num_alloc_retries"],
        "retries": ["num_alloc_retries", "peak_reserved_bytes", "device_calls"],
    }[objective]
    # A setting that cannot run has no numbers: none of a replay that ran on another trace.
    numbers = ["peak_reserved_bytes", "peak_allocated_bytes", "num_alloc_retries", "num_ooms", "device_calls", "margin_bytes"]
    agg = agg.with_columns(pl.when(pl.col("error").is_null()).then(pl.col(c)).alias(c) for c in numbers)
    agg = agg.with_columns(
        pl.col("error").is_not_null().alias("_failed"), (~pl.col("fits")).alias("_nofit"), (pl.col("num_alloc_retries") > 0).alias("_retries")
    )
    agg = agg.sort(["_failed", "_nofit", "_retries", *keys, "setting"], nulls_last=True).drop("_failed", "_nofit", "_retries")
    # Pareto front of (peak reserved, device calls) among the settings that fit.
    front: set[int] = set()
    best_calls = None
    for r in agg.filter(pl.col("fits")).sort(["peak_reserved_bytes", "device_calls", "setting"]).iter_rows(named=True):
        if best_calls is None or r["device_calls"] < best_calls:
            front.add(r["setting"])
            best_calls = r["device_calls"]
    base = specs[0].split(":", 1)[0]
    default = agg.filter(pl.col("policy") == base)
    default_peak = default["peak_reserved_bytes"][0] if len(default) else None
    agg = agg.with_columns(
        pl.col("setting").is_in(list(front)).alias("pareto"),
        (pl.col("policy") == base).alias("is_default"),
        (pl.col("peak_reserved_bytes").cast(pl.Int64) - pl.lit(default_peak, dtype=pl.Int64)).alias("peak_vs_default_bytes"),
        pl.int_range(1, pl.len() + 1).alias("rank"),
    )
    return agg.select(
        "rank",
        "policy",
        "env",
        "fits",
        "peak_reserved_bytes",
        "margin_bytes",
        "num_alloc_retries",
        "num_ooms",
        "device_calls",
        "peak_allocated_bytes",
        "pareto",
        "is_default",
        "peak_vs_default_bytes",
        "traces",
        "error",
        "setting",
    )


def tune(
    traces: Trace | str | os.PathLike[str] | Sequence[Trace | str | os.PathLike[str]],
    capacity: str | int | None = None,
    *,
    framework: str | None = None,
    objective: str = "peak_reserved",
    budget: int = 256,
    seed: int = 0,
    backend: str = "local",
    address: str | None = None,
    threads: int = 0,
    specs: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> pl.DataFrame:
    """Searches the allocator settings of ``framework`` (default: the one that recorded the
    first trace) for those that fit ``capacity`` on every trace, and returns them ranked best
    first as a Polars DataFrame: ``policy`` (a spec ``replay`` accepts), ``env`` (the text to
    paste), ``fits``, ``peak_reserved_bytes``, ``margin_bytes``, ``num_alloc_retries``,
    ``num_ooms``, ``device_calls``, ``pareto`` (peak vs device calls), ``is_default``,
    ``peak_vs_default_bytes``... ``backend="ray"`` runs the sweep on a Ray cluster (``address``;
    default: the running one, else a local one)."""
    if isinstance(traces, (Trace, str, os.PathLike)):
        traces = [traces]
    loaded = [t if isinstance(t, Trace) else load(t) for t in traces]
    if not loaded:
        raise InvalidArgumentError("tune: no trace given")
    names = [str(t) if not isinstance(t, Trace) else f"trace {i}" for i, t in enumerate(traces)]
    if objective not in OBJECTIVES:
        raise InvalidArgumentError(f"unknown objective '{objective}'; objectives: {', '.join(OBJECTIVES)}")
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"unknown backend '{backend}'; backends: {', '.join(BACKENDS)}")
    cap = capacity
    if specs is None:
        framework = framework or framework_of(loaded[0], names[0])
        specs = search_space(framework, budget, seed)
    specs = list(specs)
    if backend == "ray":
        from allocreplay._tune_ray import sweep_ray

        rows = sweep_ray(loaded, specs, cap, address=address, progress=progress)
    else:
        rows = _sweep_local(loaded, specs, cap, threads, progress)
    return rank(rows, specs, objective)


def summary(ranked: pl.DataFrame) -> dict[str, Any]:
    """The defaults' row as a dict (or None), for the report's header."""
    d = ranked.filter(pl.col("is_default"))
    return d.row(0, named=True) if len(d) else {}
