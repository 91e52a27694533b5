"""Issue 30: the path users take, side by side with an earlier build in one run.

``allocreplay.replay(trace, [policy])`` with its defaults (placements on, timeline 2,000 points)
and with ``placements=False``, per policy, M events/s (best of ROUNDS); and ``allocreplay.load``
of the decompressed capture against ``pickle.loads`` of the same bytes. Each build is a folder holding an
``allocreplay`` package with its compiled ``_core`` (e.g. a release wheel unzipped); every
measurement runs in a child process with that folder first on ``PYTHONPATH``, the builds
alternated round by round so that both see the same machine.

    python benches/defaults_e2e.py --build before=DIR --build after=DIR \\
        [--trace PATH ...] [--rounds 3] [--policies a,b,...] [--no-import]

Default traces: the real captures of at least 1 M events the project ships
(``traces/large/qwen2_generate_long__nostacks.pickle.xz``). Prints one markdown table per trace.
Results: benches/RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import lzma
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACES = [HERE.parent / "traces" / "large" / "qwen2_generate_long__nostacks.pickle.xz"]
POLICIES = ["pytorch", "pytorch:expandable_segments:True", "bfc", "cuda-malloc", "cuda-async", "offline"]


def plain_bytes(path: str) -> bytes:
    raw = Path(path).read_bytes()
    if raw.startswith(b"\xfd7zXZ"):
        return lzma.decompress(raw)
    if raw.startswith(b"\x1f\x8b"):
        return gzip.decompress(raw)
    return raw


def child(trace_path: str, policies: list[str], imports: bool) -> None:
    """One round of one build: prints one JSON object per measurement."""
    import allocreplay

    trace = allocreplay.load(trace_path)
    n = len(trace)
    if imports:
        # The same bytes both ways: a compressed capture is decompressed to a file first, and
        # allocreplay.load reads that file (read, parse, events, frames, the check) while
        # pickle.loads gets its bytes.
        plain = plain_bytes(trace_path)
        with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
            f.write(plain)
            f.flush()
            gc.collect()
            t0 = time.perf_counter()
            loaded = allocreplay.load(f.name)
            load_s = time.perf_counter() - t0
            del loaded
        gc.collect()
        t0 = time.perf_counter()
        obj = pickle.loads(plain)
        pickle_s = time.perf_counter() - t0
        del obj
        print(json.dumps({"what": "import", "events": n, "load_s": load_s, "pickle_s": pickle_s}), flush=True)
    for policy in policies:
        for mode, kwargs in (("defaults", {}), ("no placements", {"placements": False})):
            gc.collect()
            t0 = time.perf_counter()
            r = allocreplay.replay(trace, [policy], **kwargs)
            s = time.perf_counter() - t0
            assert r.summary["error"].is_null().all(), r.summary
            print(json.dumps({"what": policy, "mode": mode, "events": n, "seconds": s}), flush=True)
            del r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", required=True, help="NAME=DIR: a folder holding the allocreplay package of a build")
    ap.add_argument("--trace", action="append", help="a real capture (default: the shipped ones of at least 1 M events)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--no-import", action="store_true")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        trace, policies, imports = a.child
        child(trace, [p for p in policies.split(",") if p], imports == "1")
        return
    builds = [b.split("=", 1) for b in a.build]
    traces = a.trace or [str(t) for t in TRACES]
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; builds: " + ", ".join(f"{n} = {d}" for n, d in builds))
    for trace in traces:
        best: dict[tuple[str, str, str], float] = {}
        ratios: dict[str, list[float]] = {}
        # (load, pickle.loads) seconds per round: the ratio moves with either.
        seconds: dict[str, list[tuple[float, float]]] = {}
        events = 0
        for rnd in range(a.rounds):
            for name, folder in builds:
                env = dict(os.environ, PYTHONPATH=folder)
                out = subprocess.run(
                    [sys.executable, __file__, "--build", "x=x", "--child", trace, a.policies, "0" if a.no_import else "1"],
                    env=env,
                    capture_output=True,
                    text=True,
                )
                if out.returncode != 0:
                    sys.exit(f"{name}: {out.stderr[-2000:]}")
                for line in out.stdout.splitlines():
                    m = json.loads(line)
                    events = m["events"]
                    if m["what"] == "import":
                        ratios.setdefault(name, []).append(m["pickle_s"] / m["load_s"])
                        seconds.setdefault(name, []).append((m["load_s"], m["pickle_s"]))
                        continue
                    rate = m["events"] / m["seconds"] / 1e6
                    key = (name, m["what"], m["mode"])
                    best[key] = max(best.get(key, 0.0), rate)
            print(f"  round {rnd + 1} done, load average {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
        names = [n for n, _ in builds]
        print(f"\n{Path(trace).name}: {events:,} events; M events/s, best of {a.rounds} rounds\n")
        print("| policy | " + " | ".join(f"{n}: defaults | {n}: placements=False" for n in names) + " |")
        print("|---|" + "---|---|" * len(names))
        for policy in a.policies.split(","):
            cells = [f"{best.get((n, policy, mode), float('nan')):.1f}" for n in names for mode in ("defaults", "no placements")]
            print(f"| {policy} | " + " | ".join(cells) + " |")
        if ratios:
            print("| import vs `pickle.loads` (rounds) | " + " | ".join(f"{' / '.join(f'{r:.2f}x' for r in ratios.get(n, []))} | " for n in names) + "|")
            for n in names:
                rounds = " / ".join(f"{load * 1e3:.0f} vs {pick * 1e3:.0f}" for load, pick in seconds.get(n, []))
                print(f"\n{n}: `load` vs `pickle.loads`, ms per round: {rounds}")


if __name__ == "__main__":
    main()
