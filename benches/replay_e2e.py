"""End-to-end replay throughput from Python: `allocreplay.replay()` on a real trace tiled to
about a million events (fresh ids and shifted addresses per copy), best of 3 per policy.

Run: `.venv/bin/python benches/replay_e2e.py [COPIES] [POLICY ...]` (results: benches/RESULTS.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import allocreplay
from allocreplay import _core

TRACE = Path(__file__).resolve().parent.parent.parent / "shared" / "traces" / "pytorch" / "gpt2_train__default.pickle.xz"


def main() -> None:
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    policies = sys.argv[2:] or ["ideal", "pytorch", "pytorch:expandable_segments:True", "bfc", "cuda-malloc", "cuda-async"]
    trace = allocreplay.Trace(_core.tile(allocreplay.load(TRACE)._inner, copies))
    n = len(trace)
    for spec in policies:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            allocreplay.replay(trace, [spec], placements=False)
            best = min(best, time.perf_counter() - t0)
        print(f"{spec:40s} {n:>10,} events  {n / best / 1e6:8.1f} M events/s")


if __name__ == "__main__":
    main()
