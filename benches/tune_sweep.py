"""Benchmark (not a test): `tune`'s sweep, 256 PyTorch settings over a >= 1 M-event trace.

    allocreplay synth --tile 20 ../shared/traces/pytorch/gpt2_train__default.pickle.xz -o /tmp/gpt2x20.arrow
    python benches/tune_sweep.py /tmp/gpt2x20.arrow [--ray]

Times `_core.sweep` with 1 and 2 threads (the local backend), and with `--ray` the Ray backend
on a local cluster of 1 and 2 CPUs; the extension should be a release build (`maturin develop
--release` or `pip install .`). Results: benches/RESULTS.md.
"""

from __future__ import annotations

import sys
import time

import allocreplay
from allocreplay._tune import search_space


def main() -> None:
    path = sys.argv[1]
    use_ray = "--ray" in sys.argv[2:]
    trace = allocreplay.load(path)
    specs = search_space("pytorch", budget=256, seed=0)
    events = len(trace)
    print(f"{path}: {events:,} events; {len(specs)} settings = {events * len(specs) / 1e6:,.0f} M event replays")
    best = None
    for threads in (2, 1):
        t0 = time.perf_counter()
        ranked = allocreplay.tune(trace, specs=specs, threads=threads)
        dt = time.perf_counter() - t0
        print(f"local  threads={threads}: {dt:6.1f} s  ({events * len(specs) / dt / 1e6:5.1f} M events/s)")
        top = ranked.row(0, named=True)
        assert best is None or best == top, "rankings differ between thread counts"
        best = top
    if use_ray:
        import ray

        for cpus in (2, 1):
            ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
            try:
                t0 = time.perf_counter()
                ranked = allocreplay.tune(trace, specs=specs, backend="ray")
                dt = time.perf_counter() - t0
            finally:
                ray.shutdown()
            print(f"ray    workers={cpus}: {dt:6.1f} s  ({events * len(specs) / dt / 1e6:5.1f} M events/s)")
            assert ranked.row(0, named=True) == best, "Ray ranks differently"
    assert best is not None
    print(f"best: {best['env'] or '(defaults)'}: peak reserved {best['peak_reserved_bytes']:,}, retries {best['num_alloc_retries']}")


if __name__ == "__main__":
    main()
