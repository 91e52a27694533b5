"""The cuda-async band (issue 29 item 3): how far real ``backend:cudaMallocAsync`` runs land from
the ``cuda-async`` replay of the same program's requests.

The real driver's peak for one program varies from run to run (the pool's reuse depends on how
far the GPU runs behind the host), so ``replay`` reports cuda-async's peak reserved as a range:
``low = expected x LOW``, ``high = expected x HIGH``, where ``expected`` is the replay and the
factors are the smallest and largest ratio real / replay over every real run of the calibration
workloads (``tests/data/realruns-h200-580.159.txt``: 17 workloads, 2 to 7 real runs each, on an
NVIDIA H200, driver 580.159.04, torch 2.11.0+cu130; each replayed from its native capture).

    python scripts/cuda_async_band.py   # the calibration table, the factors, the held-out check

Held out: the real runs of ``tests/data/heldout-async-h200-580.159.txt`` (11 workloads never used
to calibrate, 3 runs each), each replayed from its native capture too.

``policy/cuda_async.rs`` holds the factors (``PEAK_BAND``); ``tests/test_cuda_async_band.py``
recomputes them from the same data and fails when they drift.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REALRUNS = ROOT / "tests" / "data" / "realruns-h200-580.159.txt"
HELDOUT = ROOT / "tests" / "data" / "heldout-async-h200-580.159.txt"


def capture_of(workload: str) -> Path:
    """The native capture whose requests the real runs made."""
    for d in (ROOT / "traces" / "cuda", ROOT / "traces" / "large", ROOT / "traces", ROOT.parent / "shared" / "traces" / "pytorch"):
        p = d / f"{workload}__default.pickle.xz"
        if p.exists() and not (workload == "two_streams" and d == ROOT / "traces"):
            return p
    raise SystemExit(f"{workload}: no native capture {workload}__default.pickle.xz in traces/cuda, traces or ../shared/traces/pytorch")


def real_runs(path: Path = REALRUNS) -> dict[str, list[int]]:
    runs: dict[str, list[int]] = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        w, _run, peak, *_ = line.split()
        runs.setdefault(w, []).append(int(peak))
    return runs


def expected(path: Path | str) -> int:
    import allocreplay

    s = allocreplay.replay(path, ["cuda-async"], placements=False).summary
    return int(s["peak_reserved_bytes"][0])


def calibration(path: Path = REALRUNS) -> list[tuple[str, int, list[int]]]:
    return [(w, expected(capture_of(w)), peaks) for w, peaks in sorted(real_runs(path).items())]


def factors(rows: list[tuple[str, int, list[int]]]) -> tuple[float, float]:
    ratios = [p / e for _, e, peaks in rows for p in peaks]
    return min(ratios), max(ratios)


def around(e: int, low: float, high: float) -> tuple[int, int]:
    """``PeakBand::around``: low rounded down, high up."""
    return math.floor(e * low), max(math.ceil(e * high), e)


def inside(e: int, peaks: list[int], low: float, high: float) -> bool:
    lo, hi = around(e, low, high)
    return all(lo <= p <= hi for p in peaks)


def table(rows: list[tuple[str, int, list[int]]], low: float, high: float) -> list[str]:
    out = ["| workload | replay (expected) | band low – high | real runs | ratios real / replay | inside |", "|---|---|---|---|---|---|"]
    for w, e, peaks in rows:
        lo, hi = around(e, low, high)
        out.append(
            f"| {w} | {e:,} | {lo:,} – {hi:,} | {' / '.join(f'{p:,}' for p in peaks)} | "
            f"{' / '.join(f'{p / e:.3f}' for p in peaks)} | {'yes' if inside(e, peaks, low, high) else 'NO'} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    cal = calibration()
    low, high = factors(cal)
    print(f"calibration: {len(cal)} workloads, {sum(len(p) for _, _, p in cal)} real runs; LOW = {low:.4f}, HIGH = {high:.4f}")
    print("\n".join(table(cal, low, high)))
    rows = calibration(HELDOUT)
    n_inside = sum(inside(e, peaks, low, high) for _, e, peaks in rows)
    print(f"\nheld out: {n_inside} of {len(rows)} workloads have every real run inside the band")
    print("\n".join(table(rows, low, high)))


if __name__ == "__main__":
    main()
