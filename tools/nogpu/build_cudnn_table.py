"""Builds capture --no-gpu's table of cuDNN convolution workspaces from probe_cudnn.py's output.

    python tools/nogpu/build_cudnn_table.py tools/nogpu/cudnn_h200_probe.json.xz \
        python/allocreplay/capture/_cudnn_h200.json

The table maps each measured convolution (direction, input and weight shapes, dtype, layout,
stride, padding, dilation, transposed, groups) to the workspaces it requested, in order; and,
for convolutions not in it, a share of the input's bytes per kind of convolution (direction,
kernel 1 / 3 / larger, strided or not, grouped or not): the ratio of the measured workspaces'
total bytes to their inputs' total bytes, with the share of convolutions of that kind that
requested none. See docs/no-gpu.md.
"""

from __future__ import annotations

import json
import lzma
import math
import statistics
import sys
from collections import defaultdict


def key(c: dict) -> str:
    return "|".join(
        str(v)
        for v in (
            c["direction"],
            ",".join(map(str, c["x"])),
            ",".join(map(str, c["w"])),
            c["dtype"],
            int(c["channels_last"]),
            ",".join(map(str, c["stride"])),
            ",".join(map(str, c["padding"])),
            ",".join(map(str, c["dilation"])),
            int(c["transposed"]),
            c["groups"],
        )
    )


def kind(direction: str, w: list[int], stride: list[int], groups: int) -> str:
    k = max(w[2:]) if len(w) > 2 else 1
    kc = 1 if k == 1 else 3 if k <= 3 else 7
    return f"{direction}|{kc}|{int(any(s != 1 for s in stride))}|{int(groups > 1)}"


def workspaces(requests: list[list]) -> list[int]:
    """The requests freed inside the call, in order (the others are the outputs). Sizes identify
    them: inside one call a workspace is freed before the next request."""
    pending = [s for a, s in requests if a != "alloc"]
    out = []
    for a, s in requests:
        if a == "alloc" and s in pending:
            pending.remove(s)
            out.append(s)
    return out


def main() -> None:
    src, dst = sys.argv[1:3]
    opener = lzma.open if src.endswith(".xz") else open
    with opener(src, "rt") as f:
        probe = json.load(f)
    table: dict[str, list[int]] = {}
    ratios: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for c in probe["convolutions"]:
        ws = workspaces(c["requests"])
        table[key(c)] = ws
        k = kind(c["direction"], c["w"], c["stride"], c["groups"])
        elem = 2 if c["dtype"] in ("float16", "bfloat16") else 8 if c["dtype"] == "float64" else 4
        counts[k][0] += 1
        if ws:
            counts[k][1] += 1
            ratios[k].append(sum(ws) / (math.prod(c["x"]) * elem))
    # The median (not the mean: a few engines take workspaces many times the usual one).
    share = {
        k: {"share": round(statistics.median(ratios[k]), 4) if ratios[k] else 0.0, "with_workspace": round(n1 / n, 3), "n": n}
        for k, (n, n1) in sorted(counts.items())
    }
    out = {"meta": probe["meta"], "share": share, "table": table}
    with open(dst, "w") as f:
        json.dump(out, f, separators=(",", ":"), sort_keys=True)
    print(f"{len(table)} convolutions, {len(share)} kinds -> {dst}")


if __name__ == "__main__":
    main()
