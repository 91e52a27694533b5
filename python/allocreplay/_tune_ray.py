"""`tune --backend ray`: the same sweep as the local backend, spread over a Ray cluster.

Each trace goes into Ray's object store once, as a pyarrow table (Arrow buffers: workers on the
node map them without copying) and is rebuilt in each task with `_api.trace_from_table`, which
imports the buffers through the Arrow C stream interface. Each task replays one chunk of the
settings on one core with `_api.sweep` and returns its rows as a pyarrow table; the rows are
then ranked by the same Polars code as the local backend's. Install with `allocreplay[ray]`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import polars as pl

from allocreplay import _api
from allocreplay.errors import InvalidArgumentError


def _replay_chunk(offset: int, specs: list[str], capacity: str | None, *tables: Any) -> Any:
    traces = [_api.trace_from_table(t, "<ray object store>") for t in tables]
    rows = _api.sweep(traces, specs, capacity, 1)
    return rows.with_columns(pl.col("setting") + offset).to_arrow()


def sweep_ray(
    traces: list[_api.Trace],
    specs: list[str],
    capacity: str | float | None,
    *,
    address: str | None = None,
    chunk: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> pl.DataFrame:
    """One row per (setting, trace, device), as `_api.sweep` gives locally."""
    try:
        # Typed as Any: Ray's own annotations differ between versions (the check must not
        # depend on which one is installed).
        ray: Any = importlib.import_module("ray")
    except ImportError as e:
        raise InvalidArgumentError("--backend ray needs Ray: pip install 'allocreplay[ray]'") from e
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    refs = [ray.put(t.to_arrow()) for t in traces]
    workers = max(1, int(ray.available_resources().get("CPU", 1)))
    # A few chunks per worker: balanced, without a task per setting.
    size = chunk or max(1, math.ceil(len(specs) / (4 * workers)))
    task = ray.remote(num_cpus=1)(_replay_chunk)
    pending = {task.remote(start, specs[start : start + size], capacity, *refs): start for start in range(0, len(specs), size)}
    done_tables = []
    finished = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for r in ready:
            start = pending.pop(r)
            done_tables.append((start, ray.get(r)))
            finished += min(size, len(specs) - start)
            if progress is not None:
                progress(finished, len(specs))
    done_tables.sort(key=lambda x: x[0])
    frames = [pl.DataFrame(pl.from_arrow(t)) for _, t in done_tables]
    return pl.concat(frames)
