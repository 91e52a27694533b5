"""Builds capture --no-gpu's table of cuDNN convolution workspaces from probe_cudnn.py's output.

    python research/nogpu/build_cudnn_table.py research/nogpu/cudnn_h200_probe.json.xz \
        python/allocreplay/capture/_cudnn_h200.json.xz

The table maps each measured convolution (direction, input and weight shapes, dtype, layout,
stride, padding, dilation, transposed, groups) to the workspaces it requested, in order. A
convolution it does not hold takes its nearest measured batch size's, scaled, else none: the
rule for shapes no measured model has was chosen on peaks (research/nogpu/fallback_lomo.py and
docs/no-gpu.md). ``--without M1,M2`` leaves those models' own convolutions out (for that study).
"""

from __future__ import annotations

import json
import lzma
import sys


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
    # --without M1,M2: leave those models' convolutions out (those no other model also runs).
    without = set(sys.argv[4].split(",")) if len(sys.argv) > 4 and sys.argv[3] == "--without" else set()
    opener = lzma.open if src.endswith(".xz") else open
    with opener(src, "rt") as f:
        probe = json.load(f)
    table: dict[str, list[int]] = {}
    for c in probe["convolutions"]:
        if without and not set(c.get("models", [])) - without:
            continue
        table[key(c)] = workspaces(c["requests"])
    out = {"meta": probe["meta"], "table": table}
    with (lzma.open if dst.endswith(".xz") else open)(dst, "wt") as f:
        json.dump(out, f, separators=(",", ":"), sort_keys=True)
    print(f"{len(table)} convolutions -> {dst}")


if __name__ == "__main__":
    main()
