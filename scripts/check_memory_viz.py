"""Checks that PyTorch's own snapshot tools read what `allocreplay export-snapshot` writes.

Run where PyTorch is installed (it needs no GPU), on exported files:

    allocreplay export-snapshot traces/two_streams__default.pickle.xz --policy pytorch -o sim.pickle
    python scripts/check_memory_viz.py sim.pickle [more.pickle ...]

For each file it runs `torch.cuda._memory_viz`'s `segments`, `memory` (their flamegraph
lines; the flamegraph.pl step downloads a script, so it is left out), `trace`, `stats`
(`segsum`, which asserts that every segment's blocks add up), `trace_plot` and
`segment_plot`, and the module's own command line for `stats` and `trace`. Exit code 1 when
any of them fails. The pickles are our own exports, so Python's pickle may read them.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import traceback


def check(path: str) -> bool:
    from torch.cuda import _memory_viz as mv

    with open(path, "rb") as f:
        data = pickle.load(f)
    ok = True
    lines = lambda text: text  # noqa: E731  (format_flamegraph: keep the flamegraph input)
    steps = {
        "segments": lambda: mv.segments(data, format_flamegraph=lines),
        "memory": lambda: mv.memory(data, format_flamegraph=lines),
        "trace": lambda: mv.trace(data),
        "stats": lambda: mv.segsum(data),
        "trace_plot": lambda: mv.trace_plot(data),
        "segment_plot": lambda: mv.segment_plot(data),
    }
    entries = sum(len(d) for d in data["device_traces"])
    print(f"{path}: {len(data['segments'])} segments, {entries} trace entries, policy {data.get('allocreplay_policy')}")
    for name, fn in steps.items():
        try:
            out = fn()
            print(f"  {name}: ok ({len(out):,} characters; {out.count(chr(10)):,} lines)")
            if name == "stats":
                print("    " + "\n    ".join(out.splitlines()[-12:-9]))
        except Exception:
            ok = False
            print(f"  {name}: FAILED\n" + traceback.format_exc())
    for cmd in ("stats", "trace"):
        p = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", cmd, path], capture_output=True, text=True)
        print(f"  python -m torch.cuda._memory_viz {cmd}: exit {p.returncode}, {len(p.stdout):,} characters")
        if p.returncode != 0:
            ok = False
            print(p.stderr[-2000:])
    return ok


def main(paths: list[str]) -> int:
    import torch

    print(f"torch {torch.__version__}")
    results = [check(p) for p in paths]
    print("ALL OK" if all(results) else "FAILURES")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
