"""`_core.load` of one file by two or more release extensions, alternated round by round, each
round in a child process per build (best of 3 loads in it); prints each build's ms per round.
For the GPU host, where one cell moves by 2x with the window: only rounds run side by side
compare.

Usage: python benches/load_side_by_side.py TRACE.pickle NAME=SO[,NAME=SO...] [ROUNDS]"""

import subprocess
import sys

CHILD = r"""
import gc, importlib.util, sys, time
spec = importlib.util.spec_from_file_location("allocreplay._core", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
best = 1e9
for _ in range(3):
    gc.collect()
    t0 = time.perf_counter()
    t = m.load(sys.argv[2])
    best = min(best, time.perf_counter() - t0)
    del t
print(best)
"""


def main() -> None:
    trace = sys.argv[1]
    builds = dict(b.split("=", 1) for b in sys.argv[2].split(","))
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    res: dict[str, list[float]] = {n: [] for n in builds}
    for _ in range(rounds):
        for name, so in builds.items():
            out = subprocess.run([sys.executable, "-c", CHILD, so, trace], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{name}: {out.stderr[-2000:]}")
            res[name].append(float(out.stdout.strip()) * 1e3)
    for name, ms in res.items():
        print(name, " ".join(f"{x:.0f}" for x in ms), "ms")


main()
