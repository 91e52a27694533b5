"""Issue 30 side by side on the GPU host: the release extension of two builds (before/after),
each measurement in a child process that loads one build's `_core`, builds alternated round by
round. Per trace: `_core.load` of the decompressed pickle vs `pickle.loads` of the same bytes
(gc on, as CPython runs it), and `_core.replay(trace, [policy])` with its defaults (placements
on, built lazily) and with placements=False. M events/s, best of ROUNDS (processes) times
CORE_SIDE_BY_SIDE_CALLS (calls of each mode per process, alternating which mode goes first; 3: as
issue 30 measured, "best of 3" calls as a user makes them in one process).
Usage: python benches/core_side_by_side.py ROUNDS NAME=SO NAME=SO -- TRACE.pickle..."""

import gc
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import time

# `CORE_SIDE_BY_SIDE_POLICIES="offline;bfc"`: only those.
POLICIES = os.environ.get("CORE_SIDE_BY_SIDE_POLICIES", "pytorch;pytorch:expandable_segments:True;bfc;cuda-malloc;cuda-async;offline").split(";")


def child(so, path):
    spec = importlib.util.spec_from_file_location("allocreplay._core", so)
    core = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(core)
    with open(path, "rb") as f:
        plain = f.read()
    gc.collect()
    t = time.perf_counter()
    tr = core.load(path)
    load_s = time.perf_counter() - t
    gc.collect()
    t = time.perf_counter()
    obj = pickle.loads(plain)
    pickle_s = time.perf_counter() - t
    del obj
    gc.collect()
    n = len(tr)
    print(json.dumps({"what": "import", "events": n, "load_s": load_s, "pickle_s": pickle_s}), flush=True)
    # Session 33: each policy's calls alternate the two modes, CALLS of each (default 1, as
    # before), so that neither mode is always a process's first call of that policy.
    calls = int(os.environ.get("CORE_SIDE_BY_SIDE_CALLS", "1"))
    for p in POLICIES:
        for k in range(calls):
            for mode, placements in (("defaults", True), ("noplace", False))[:: 1 if k % 2 == 0 else -1]:
                gc.collect()
                t = time.perf_counter()
                r = core.replay(tr, [p], None, 2000, placements)
                s = time.perf_counter() - t
                del r
                print(json.dumps({"what": p, "mode": mode, "events": n, "seconds": s, "call": k}), flush=True)


def main():
    if sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3])
    rounds = int(sys.argv[1])
    k = sys.argv.index("--")
    builds = [a.split("=", 1) for a in sys.argv[2:k]]
    traces = sys.argv[k + 1 :]
    print(f"{os.cpu_count()} CPUs, load {os.getloadavg()}", flush=True)
    for tr in traces:
        best, ratio, secs = {}, {}, {}
        for _ in range(rounds):
            for name, so in builds:
                out = subprocess.run([sys.executable, __file__, "--child", so, tr], capture_output=True, text=True)
                if out.returncode:
                    print(name, out.stderr[-1500:])
                    continue
                for line in out.stdout.splitlines():
                    m = json.loads(line)
                    ev = m["events"]
                    if m["what"] == "import":
                        ratio.setdefault(name, []).append(m["pickle_s"] / m["load_s"])
                        secs.setdefault(name, []).append((m["load_s"], m["pickle_s"]))
                    else:
                        key = (name, m["what"], m["mode"])
                        best[key] = max(best.get(key, 0), ev / m["seconds"] / 1e6)
        calls = int(os.environ.get("CORE_SIDE_BY_SIDE_CALLS", "1"))
        print(f"\n{os.path.basename(tr)}: {ev:,} events, best of {rounds} processes x {calls} calls, load avg now {os.getloadavg()[0]:.1f}")
        names = [n for n, _ in builds]
        print("| policy | " + " | ".join(f"{n} defaults | {n} placements=False" for n in names) + " |")
        for p in POLICIES:
            print(f"| {p} | " + " | ".join(f"{best.get((n, p, md), float('nan')):.1f}" for n in names for md in ("defaults", "noplace")) + " |")
        for n in names:
            print(
                f"import {n}: "
                + " / ".join(f"{x:.2f}x" for x in ratio.get(n, []))
                + "  (ms load vs pickle: "
                + " / ".join(f"{a * 1e3:.0f} vs {b * 1e3:.0f}" for a, b in secs.get(n, []))
                + ")"
                + (f"; fastest load vs fastest pickle.loads: {min(b for _, b in secs[n]) / min(a for a, _ in secs[n]):.2f}x" if secs.get(n) else ""),
                flush=True,
            )


main()
