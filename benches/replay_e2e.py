"""End-to-end replay throughput from Python: `allocreplay.replay(trace, [policy],
placements=False)` on a real trace, tiled (fresh ids and shifted addresses per copy), best of
ROUNDS per policy, one policy (one core) at a time; then all of them in one call (one thread per
policy).

Run: `.venv/bin/python benches/replay_e2e.py [--trace PATH] [--tile N] [--rounds R] [POLICY ...]`.
Default trace: the real 3.3 M-entry qwen2_generate capture in traces/large, tiled twice
(6,641,496 events). Results: benches/README.md and benches/RESULTS.md. For a ratio to an older
build, run the same command with `PYTHONPATH` pointing at a copy of `python/allocreplay` that
holds the older `_core.abi3.so`, alternating the two.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import allocreplay
from allocreplay import _core

HERE = Path(__file__).resolve().parent
TRACE = HERE.parent / "traces" / "large" / "qwen2_generate_long__nostacks.pickle.xz"
POLICIES = ["ideal", "pytorch", "pytorch:expandable_segments:True", "bfc", "cuda-malloc", "cuda-async", "managed", "offline"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("policies", nargs="*", default=POLICIES)
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--tile", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    trace = allocreplay.load(a.trace)
    if a.tile > 1:
        trace = allocreplay.Trace(_core.tile(trace._inner, a.tile))
    n = len(trace)
    print(f"allocreplay from {os.path.dirname(allocreplay.__file__)}; {a.trace} x {a.tile}: {n:,} events; load average {os.getloadavg()[0]:.1f}")
    for spec in a.policies:
        best = float("inf")
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            allocreplay.replay(trace, [spec], placements=False)
            best = min(best, time.perf_counter() - t0)
        print(f"{spec:40s} {n / best / 1e6:8.2f} M events/s  ({best:.3f} s)", flush=True)
    online = [p for p in a.policies if p not in ("ideal", "offline")]
    if len(online) > 1:
        t0 = time.perf_counter()
        allocreplay.replay(trace, online, placements=False)
        s = time.perf_counter() - t0
        print(f"{len(online)} policies in one call ({os.cpu_count()} cores): {s:.3f} s, {len(online) * n / s / 1e6:.1f} M policy-events/s")


if __name__ == "__main__":
    main()
