"""``allocreplay fit``: the largest batch size (or sequence length, or any integer the script
takes) that fits a given GPU, found without that GPU.

The user's command is captured once per candidate value (``capture --no-gpu`` by default: a
CPU run with fake CUDA tensors that records the requests the GPU run would make), and each
trace is replayed at the device's usable memory under PyTorch's default caching allocator,
under the settings the user names, and under the best setting ``tune`` finds for that
candidate. The search (:mod:`allocreplay._fit._search`) grows the value ×2 until a candidate
does not fit, then bisects; one capture serves every setting.

>>> import allocreplay
>>> result = allocreplay.fit(["python", "train.py", "--batch-size", "{batch_size}"], vary={"batch_size": (1, 1024)}, device="a100-40gb")
>>> print(result.answer)      # largest batch_size that fits on a100-40gb (...): 15 with the defaults; ...
>>> result.table              # Polars DataFrame: one row per candidate and setting
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from allocreplay import _api
from allocreplay._fit._candidates import WORLD_SIZE, Candidate, Capturer, default_cache_dir, substitute
from allocreplay._fit._search import Axis, Search, monotonicity_breaks, parse_values, parse_vary
from allocreplay.errors import InvalidArgumentError

__all__ = ["Axis", "FitResult", "default_cache_dir", "fit", "parse_vary", "substitute", "usable_capacity"]

DEFAULTS = "pytorch"
TUNED = "tuned"
"""The pseudo-setting for "the best setting tune finds for this candidate"."""

Progress = Callable[[str], None]


def usable_capacity(device: str | None, capacity: str | int | None) -> tuple[int, str, str]:
    """``(bytes, device key, how)``: ``capacity`` when given (bytes or a size), else the named
    device's total memory less the CUDA context's share (the device catalogue)."""
    from allocreplay.capture import _nogpu

    key = (device or _nogpu.DEFAULT_DEVICE).strip().lower()
    try:
        _nogpu.parse_device(key)
    except ValueError as e:
        raise InvalidArgumentError(str(e).replace("--device-memory", "--device")) from None
    if capacity is not None:
        c = _api.parse_capacity(capacity)
        if isinstance(c, float):
            total = _nogpu.parse_device(key)[1]
            c = int(total * c)
        return int(c), key, f"--capacity {_api.format_bytes(int(c))}"
    dev = _catalogue(key)
    if dev is not None:
        return (
            dev.usable_bytes,
            key,
            f"{dev.name}: {_api.format_bytes(dev.total_bytes)} less {_api.format_bytes(dev.context_bytes)} for the CUDA context and libraries "
            + ("(measured on an H200)" if dev.key == "h200" else "(the H200's measurement, as an estimate: `allocreplay devices` says why)"),
        )
    _, total, _, _ = _nogpu.parse_device(key)
    from allocreplay.capture._devices import H200_CONTEXT_BYTES as ctx

    return total - ctx, key, f"{_api.format_bytes(total)} less {_api.format_bytes(ctx)} for the CUDA context and libraries (measured on an H200)"


def _catalogue(key: str) -> Any:
    """The catalogue's card for ``key``; None for a size (``80GiB``: an H200-like device)."""
    from allocreplay.capture import _devices

    try:
        return _devices.lookup(key)
    except ValueError:
        return None


@dataclass
class FitResult:
    """What ``fit`` found.

    - ``answer``: the plain sentence (largest value that fits, per setting).
    - ``largest``: setting label -> the largest value that fits (None: not even the smallest),
      for one varied parameter; for a grid, ``frontier`` holds it per combination of the others.
    - ``table``: one row per candidate and setting (values, ``setting``, ``env``, ``fits``,
      ``peak_reserved_bytes``, ``peak_allocated_bytes``, ``margin_bytes``, ``num_alloc_retries``,
      ``num_ooms``, ``capture_seconds``, ``cached``, ``values_guessed`` and ``guessed_where``: the values computed on the GPU that the CPU run
      read as zeros, and the program lines that read them; ``trace``).
    - ``frontier``: one row per combination of the outer parameters and setting: ``largest``
      and ``first_failing``.
    - ``breakdown``: bytes by category at the peak of the smallest candidate that does not fit
      under the defaults (None when every candidate fit).
    - ``monotonicity_breaks``: candidates that fit above one that did not (same setting).
    - ``values_guessed`` / ``guessed_where``: the most values a candidate's CPU run read as zeros
      (``--unknown-values zero``), and where (``FILE:LINE (code) (N x)``).
    """

    parameters: list[str]
    device: str
    capacity_bytes: int
    capacity_how: str
    settings: dict[str, str]
    table: pl.DataFrame
    frontier: pl.DataFrame
    largest: dict[str, int | None]
    answer: str
    breakdown: pl.DataFrame | None = None
    breakdown_at: dict[str, int] | None = None
    monotonicity_breaks: list[dict[str, Any]] = field(default_factory=list)
    values_guessed: int = 0
    guessed_where: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters,
            "device": self.device,
            "capacity_bytes": self.capacity_bytes,
            "capacity": self.capacity_how,
            "settings": self.settings,
            "answer": self.answer,
            "largest": self.largest,
            "frontier": self.frontier.to_dicts(),
            "rows": self.table.drop("trace").to_dicts(),
            "breakdown_at": self.breakdown_at,
            "breakdown": None if self.breakdown is None else self.breakdown.to_dicts(),
            "monotonicity_breaks": self.monotonicity_breaks,
            "values_guessed": self.values_guessed,
            "guessed_where": self.guessed_where,
        }

    def __repr__(self) -> str:
        return f"<allocreplay.FitResult {self.answer!r}>"


def _label(spec: str) -> str:
    if spec == DEFAULTS:
        return "defaults"
    if spec == TUNED:
        return "tuned"
    env = _api.policy_env(spec)
    return env or spec


def _evaluate(cand: Candidate, specs: Sequence[str], capacity: int, tuned: bool) -> list[dict[str, Any]]:
    """One row per setting for a captured candidate, replayed at ``capacity``."""
    from allocreplay._api import load, replay

    trace = load(cand.trace_path)
    summary = replay(trace, list(specs), capacity, placements=False).summary
    rows = []
    for spec in specs:
        rows.append(_row(cand, spec, spec, _binding(summary.filter(pl.col("policy") == spec)), capacity))
    if tuned:
        from allocreplay._tune import tune

        ranked = tune(trace, capacity, framework="pytorch")
        best = ranked.row(0, named=True)
        r = {
            "peak_reserved_bytes": best["peak_reserved_bytes"],
            "peak_allocated_bytes": best["peak_allocated_bytes"],
            "num_alloc_retries": best["num_alloc_retries"],
            "num_ooms": best["num_ooms"],
            "fits": best["fits"],
            "error": best["error"],
        }
        rows.append(_row(cand, TUNED, best["policy"], r, capacity))
    return rows


def _binding(per_device: pl.DataFrame) -> dict[str, Any]:
    """A setting's row for a candidate: its device's, or for the ranks of a job (``--world-size``:
    one device each) the rank that decides whether the job fits: one that failed (an error, then
    an OOM), else the one with the largest peak reserved. ``peak_allocated_bytes`` and the
    retries are that rank's too."""
    rows = per_device.to_dicts()
    if len(rows) == 1:
        return rows[0]

    def worst(r: dict[str, Any]) -> tuple[int, int, int]:
        return (r.get("error") is not None, r.get("fits") is not True, int(r.get("peak_reserved_bytes") or 0))

    return max(rows, key=worst)


def _row(cand: Candidate, setting: str, spec: str, r: Mapping[str, Any], capacity: int) -> dict[str, Any]:
    error = r.get("error")
    peak = r.get("peak_reserved_bytes")
    # The summary's `fits`: no OOM, and for cuda-async the high end of its peak's range within
    # the limit (issue 29).
    fits = error is None and peak is not None and r["fits"] is True
    return {
        **cand.values,
        "setting": setting,
        "policy": spec,
        "env": _api.policy_env(spec) if error is None or setting != TUNED else "",
        "fits": fits,
        "peak_reserved_bytes": peak,
        "peak_allocated_bytes": r.get("peak_allocated_bytes"),
        "margin_bytes": None if peak is None else capacity - int(peak),
        "num_alloc_retries": r.get("num_alloc_retries"),
        "num_ooms": r.get("num_ooms"),
        "error": error,
        "capture_seconds": round(cand.capture_seconds, 3),
        "cached": cand.cached,
        "values_guessed": cand.values_guessed,
        "guessed_where": "; ".join(cand.guessed_where),
        "trace": cand.trace_path,
    }


def fit(
    command: Sequence[str],
    vary: Mapping[str, tuple[int, int] | Sequence[int]] | Sequence[str],
    *,
    device: str | None = None,
    capacity: str | int | None = None,
    settings: Sequence[str] = (),
    tune: bool = True,
    check: bool = True,
    values: Sequence[int] | None = None,
    step: int | None = None,
    env: Mapping[str, str] | None = None,
    gpu: bool = False,
    unknown_values: str = "zero",
    jobs: int = 1,
    backend: str = "local",
    address: str | None = None,
    cache_dir: str | None = None,
    use_cache: bool = True,
    cwd: str | None = None,
    progress: Progress | None = None,
    started: Callable[[dict[str, int]], None] | None = None,
    world_size: int | Sequence[int] | None = None,
) -> FitResult:
    """Finds the largest value of each varied parameter for which ``command`` fits the device.

    ``command``: the program, with ``{name}`` where a varied value goes (also in ``env``'s
    values). ``vary``: ``{"batch_size": (1, 1024)}`` (a range, searched) or ``{"seq_len": [512,
    1024]}`` (a list, all tried), or the CLI's strings (``"batch_size=1:1024"``); several make a
    grid whose last parameter is searched at each combination of the others. ``device``: a
    catalogue name (``a100-40gb``, ``h100-80gb``...; default ``h200``); ``capacity``: the limit
    instead of the device's usable memory (bytes or ``"24GiB"``). ``settings``: policy specs
    besides the defaults (``"pytorch:expandable_segments:True"``); ``tune``: also the best
    setting ``tune`` finds. ``check``: once the boundaries are found, also try the two values
    above each first failure, to check the monotonicity the search assumes. ``gpu``: capture on this machine's GPU instead of ``--no-gpu``.
    ``unknown_values``: what a CPU run reads for values computed on the GPU (``zero``: counted
    and reported; ``error``: stop). ``jobs``: captures at once; ``backend="ray"`` runs them on
    a Ray cluster (``address``). ``progress`` gets a line per candidate evaluated,
    ``started`` the values of each candidate as its capture begins. ``world_size``: the job is
    distributed (docs/distributed.md): each candidate captures its every rank without a GPU, at
    each of these world sizes (an outer axis ``world_size``, ``{world_size}`` in the command
    optional), and fits when every rank fits. Returns a :class:`FitResult`."""
    axes = _axes(vary, values, step)
    if world_size is not None:
        if any(a.name == WORLD_SIZE for a in axes):
            raise InvalidArgumentError("--world-size and --vary world_size=...: give the world sizes once, with --world-size")
        axes = [_world_size_axis(world_size, gpu), *axes]
    if jobs < 1:
        raise InvalidArgumentError(f"--jobs must be at least 1, got {jobs}")
    if backend not in ("local", "ray"):
        raise InvalidArgumentError(f"unknown backend '{backend}'; backends: local, ray")
    if unknown_values not in ("zero", "error"):
        raise InvalidArgumentError(f"unknown --unknown-values {unknown_values!r}: expected zero or error")
    cap, dev_key, how = usable_capacity(device, capacity)
    for spec in settings:
        if spec.split(":", 1)[0] != "pytorch":
            raise InvalidArgumentError(f"--setting {spec!r}: fit replays PyTorch captures; give a pytorch:... spec (pytorch:expandable_segments:True)")
        _api.policy_env(spec)  # a bad option fails here, before any capture
    specs = [DEFAULTS, *[s for s in dict.fromkeys(settings) if s != DEFAULTS]]
    labels = specs + ([TUNED] if tune else [])
    capturer = Capturer(
        command,
        env or {},
        device=dev_key,
        gpu=gpu,
        unknown_values=unknown_values,
        cache_dir=cache_dir,
        use_cache=use_cache,
        cwd=cwd,
        ranks=world_size is not None,
    )
    capturer.check([a.name for a in axes])
    search = Search(axes, labels, jobs=jobs, check=check)
    rows: list[dict[str, Any]] = []
    names = [a.name for a in axes]
    say = progress or (lambda _msg: None)

    def one(point: tuple[int, ...]) -> list[dict[str, Any]]:
        vals = dict(zip(names, point))
        if started is not None:
            started(vals)
        if backend == "ray":
            from allocreplay._fit._ray import capture_on_ray

            cand = capture_on_ray(capturer, vals, address)
        else:
            cand = capturer.capture(vals)
        got = _evaluate(cand, specs, cap, tune)
        verdict = "; ".join(f"{_label(r['setting'])} {'fits' if r['fits'] else 'does NOT fit'} ({_gib(r['peak_reserved_bytes'])})" for r in got)
        took = "cached" if cand.cached else f"captured in {cand.capture_seconds:.1f} s"
        say(f"{', '.join(f'{k}={v}' for k, v in vals.items())}: {took}: {verdict}")
        return got

    # Ctrl-C: the captures running get the signal too (same process group) and end; those
    # finished are already in the cache, so a rerun starts where this one stopped.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        while True:
            batch = search.next_round()
            if not batch:
                break
            futures: dict[Future[list[dict[str, Any]]], tuple[int, ...]] = {pool.submit(one, p): p for p in batch}
            pending = set(futures)
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    for fut in done:
                        got = fut.result()
                        rows.extend(got)
                        search.record(futures[fut], {r["setting"]: r["fits"] for r in got})
            except BaseException:
                for f in pending:
                    f.cancel()
                raise
    return _result(axes, labels, specs, search, rows, dev_key, cap, how)


def _gib(n: int | None) -> str:
    return "-" if n is None else _api.format_bytes(int(n))


def _axes(vary: Mapping[str, tuple[int, int] | Sequence[int]] | Sequence[str], values: Sequence[int] | None, step: int | None) -> list[Axis]:
    axes: list[Axis] = []
    if isinstance(vary, Mapping):
        for name, spec in vary.items():
            if isinstance(spec, tuple) and len(spec) == 2 and not values:
                axes.append(parse_vary(f"{name}={spec[0]}:{spec[1]}", step))
            else:
                axes.append(parse_vary(f"{name}={','.join(str(int(v)) for v in spec)}"))
    else:
        if isinstance(vary, str):
            vary = [vary]
        axes = [parse_vary(v, step) for v in vary]
    if values:
        if not axes:
            raise InvalidArgumentError("--values needs a --vary NAME to give them to")
        vals = parse_values(",".join(str(int(v)) for v in values), "--values")
        last = axes[-1]
        axes[-1] = Axis(last.name, vals[0], vals[-1], 1, vals)
    if not axes:
        raise InvalidArgumentError("fit: nothing to vary: give --vary NAME=LO:HI, e.g. --vary batch_size=1:1024")
    return axes


def _world_size_axis(world_size: int | Sequence[int], gpu: bool) -> Axis:
    """``--world-size N`` or ``V1,V2,...``: the values, tried each (an outer axis)."""
    if gpu:
        raise InvalidArgumentError("fit --world-size captures the ranks without a GPU: it does not go with --gpu")
    sizes = [int(world_size)] if isinstance(world_size, int) else [int(v) for v in world_size]
    if not sizes or min(sizes) < 1:
        raise InvalidArgumentError(f"--world-size: expected world sizes of at least 1, got {sizes}")
    vals = parse_values(",".join(map(str, sizes)), "--world-size")
    return Axis(WORLD_SIZE, vals[0], vals[-1], 1, vals)


def _result(axes: list[Axis], labels: list[str], specs: list[str], search: Search, rows: list[dict[str, Any]], dev_key: str, cap: int, how: str) -> FitResult:
    names = [a.name for a in axes]
    table = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    if len(table):
        order = {s: i for i, s in enumerate(labels)}
        table = table.with_columns(pl.col("setting").replace_strict(order, return_dtype=pl.Int32).alias("_o")).sort([*names, "_o"]).drop("_o")
    frontier_rows = []
    for outer, setting, ok, fail in search.answers():
        frontier_rows.append({**dict(zip(names[:-1], outer)), "setting": setting, "largest": ok, "first_failing": fail})
    frontier = pl.DataFrame(frontier_rows, infer_schema_length=None)
    # The tuned setting at the answer: what to paste.
    settings_env: dict[str, str] = {s: (_api.policy_env(s) if s != TUNED else "") for s in labels}
    largest: dict[str, int | None] = {}
    if len(axes) == 1:
        for _outer, setting, ok, _fail in search.answers():
            largest[setting] = ok
    breaks = []
    for setting in labels:
        for lo, hi in monotonicity_breaks(search.results, setting):
            breaks.append({"setting": setting, "does_not_fit": dict(zip(names, lo)), "fits": dict(zip(names, hi))})
    answer = _answer(axes, labels, search, table, dev_key, cap, how)
    breakdown, at = _breakdown(table, names, cap)
    guessed = 0
    where: list[str] = []
    if len(table) and "values_guessed" in table.columns:
        per = table.unique(subset=names)
        guessed = max(int(v or 0) for v in per["values_guessed"].to_list())
        # The lines (with their counts) of the candidate that guessed most.
        top = per.sort("values_guessed", descending=True).row(0, named=True)
        where = [w for w in str(top.get("guessed_where") or "").split("; ") if w]
    return FitResult(names, dev_key, cap, how, settings_env, table, frontier, largest, answer, breakdown, at, breaks, guessed, where)


def _tuned_env(table: pl.DataFrame, names: list[str], point: Mapping[str, int]) -> str:
    if not len(table):
        return ""
    cond = pl.col("setting") == TUNED
    for n, v in point.items():
        cond = cond & (pl.col(n) == v)
    got = table.filter(cond)
    return str(got["env"][0]) if len(got) else ""


def _answer(axes: list[Axis], labels: list[str], search: Search, table: pl.DataFrame, dev_key: str, cap: int, how: str) -> str:
    names = [a.name for a in axes]
    inner = axes[-1]
    # --capacity is a limit the user chose; otherwise the device's usable memory.
    where = f"{dev_key} at {_api.format_bytes(cap)}" if how.startswith("--capacity") else f"{dev_key} ({_api.format_bytes(cap)} usable)"
    lines = []
    by_outer: dict[tuple[int, ...], list[tuple[str, int | None, int | None]]] = {}
    for outer, setting, ok, fail in search.answers():
        by_outer.setdefault(outer, []).append((setting, ok, fail))
    for outer, entries in by_outer.items():
        parts = []
        for setting, ok, fail in entries:
            if ok is None:
                value = f"none (not even {inner.name}={fail})" if fail is not None else "none"
            elif fail is None and (ok >= inner.hi):
                value = f"{ok} (the largest tried: every candidate fits)"
            else:
                value = str(ok)
            if setting == DEFAULTS:
                who = "the defaults"
            elif setting == TUNED:
                env = _tuned_env(table, names, {**dict(zip(names[:-1], outer)), inner.name: ok}) if ok is not None else ""
                who = f"{env} (the best setting tune found)" if env else "the best setting tune found (the defaults)"
            else:
                who = _api.policy_env(setting) or setting
            parts.append(f"{value} with {who}")
        at = "" if not outer else " at " + ", ".join(f"{n}={v}" for n, v in zip(names[:-1], outer))
        lines.append(f"largest {inner.name}{at} that fits on {where}: " + "; ".join(parts))
    return "\n".join(lines)


def _breakdown(table: pl.DataFrame, names: list[str], cap: int) -> tuple[pl.DataFrame | None, dict[str, int] | None]:
    """Bytes by category at the peak of the smallest candidate that does not fit with the
    defaults (the first of the last parameter's failures, at the outer parameters' first
    combination)."""
    if not len(table):
        return None, None
    failing = table.filter((pl.col("setting") == DEFAULTS) & ~pl.col("fits")).sort(names)
    if not len(failing):
        return None, None
    row = failing.row(0, named=True)
    from allocreplay import analysis

    fn = getattr(analysis, "breakdown", None)
    if fn is None:
        return None, {n: row[n] for n in names}
    from allocreplay._api import load, policies

    # Replayed at the largest device memory pytorch models (its modelled CUDA address space,
    # 15 TiB; more is refused, not clamped): the whole peak the candidate needs, not where it
    # stopped.
    limit = next(p.max_capacity for p in policies() if p.name == "pytorch")
    df = fn(load(row["trace"]), "pytorch", capacity=limit)
    return df, {n: row[n] for n in names}
