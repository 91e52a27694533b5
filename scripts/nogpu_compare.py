"""Runs each workload through `allocreplay capture --no-gpu` and compares the trace with the
real GPU capture of the same program (the truth): request count and total requested bytes
against the real snapshot's, and the peak reserved of a replay under `pytorch` and
`pytorch:expandable_segments:True` against the real runs' `reserved_bytes.all.peak`.

    python scripts/nogpu_compare.py                 # print the table
    python scripts/nogpu_compare.py --write         # and put it into docs/no-gpu.md
    python scripts/nogpu_compare.py gpt2_train      # some workloads only

Needs torch, torchvision and transformers (the versions of the real runs: torch 2.11.0) and
../shared (the real captures of gpt2_train). Takes about 10 minutes on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import allocreplay

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "traces", "pytorch")
DOC = os.path.join(ROOT, "docs", "no-gpu.md")
BEGIN, END = "<!-- nogpu_compare.py: begin -->", "<!-- nogpu_compare.py: end -->"


@dataclass
class Case:
    name: str
    steps: int
    real: str  # the real default run: REAL.pickle.xz + REAL.json
    expandable: str | None  # the real expandable_segments run's .json
    held_out: bool
    unknown: str = "error"
    note: str = ""


CASES = [
    Case("gpt2_train", 12, f"{SHARED}/gpt2_train__default", f"{SHARED}/gpt2_train__expandable.json", False),
    Case("resnet50_train", 8, f"{ROOT}/traces/cuda/resnet50_train__default", f"{ROOT}/traces/cuda/resnet50_train__expandable.json", False),
    Case("llama_generate", 8, f"{ROOT}/traces/cuda/llama_generate__default", f"{ROOT}/traces/cuda/llama_generate__expandable.json", False, unknown="zero"),
    Case("densenet121_train", 6, f"{ROOT}/traces/nogpu/densenet121_train__default", f"{ROOT}/traces/nogpu/densenet121_train__expandable.json", True),
    Case("qwen2_train", 8, f"{ROOT}/traces/nogpu/qwen2_train__default", f"{ROOT}/traces/nogpu/qwen2_train__expandable.json", True),
    Case("convnext_train", 6, f"{ROOT}/traces/cuda/convnext_train__default", f"{ROOT}/traces/cuda/convnext_train__expandable.json", True),
    # Captured for issue 13 (research/driver-probes/asyncheld); among the models whose convolutions
    # research/nogpu/probe_cudnn.py measured, otherwise not looked at.
    Case("efficientnet_train", 8, f"{ROOT}/traces/cuda/efficientnet_train__default", None, False, note="convolutions in the cuDNN table"),
    Case("mobilenet_train", 8, f"{ROOT}/traces/cuda/mobilenet_train__default", None, False, note="convolutions in the cuDNN table, autocast bfloat16"),
]


def real_requests(stem: str) -> tuple[int, int]:
    ev = allocreplay.load(stem + ".pickle.xz").events
    ev = ev.filter(ev["action"] == "alloc")
    return len(ev), int(ev["size"].sum())


def peak_reserved(path: str) -> int:
    with open(path) as f:
        meta = json.load(f)
    stats = meta.get("memory_stats") or meta["memory_stats_per_device"]["0"]
    return int(stats["reserved_bytes.all.peak"])


def run(case: Case, tmp: str) -> dict[str, object]:
    out = os.path.join(tmp, case.name + ".arrow")
    cmd = [sys.executable, "-m", "allocreplay", "capture", "--no-gpu", "--unknown-values", case.unknown, "-o", out, "--"]
    cmd += [sys.executable, os.path.join(ROOT, "scripts", "nogpu_workload.py"), case.name, str(case.steps)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0 or not os.path.exists(out):
        raise SystemExit(f"{case.name}: capture --no-gpu failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
    trace = allocreplay.load(out)
    ev = trace.events.filter(trace.events["action"] == "alloc")
    n, total = len(ev), int(ev["size"].sum())
    rn, rtotal = real_requests(case.real)
    policies = ["pytorch", "pytorch:expandable_segments:True"]
    summary = allocreplay.replay(trace, policies).summary
    peaks = dict(zip(summary["policy"].to_list(), summary["peak_reserved_bytes"].to_list()))
    row: dict[str, object] = {
        "name": case.name,
        "held_out": case.held_out,
        "unknown": case.unknown,
        "note": case.note,
        "count": (n, rn),
        "bytes": (total, rtotal),
        "default": (peaks["pytorch"], peak_reserved(case.real + ".json")),
        "expandable": (peaks["pytorch:expandable_segments:True"], peak_reserved(case.expandable) if case.expandable else None),
    }
    zeros = trace.metadata.get("extra", {}).get("capture", {}).get("no_gpu", {}).get("values_read_as_zeros", {})
    row["zeros"] = sum(zeros.values()) if isinstance(zeros, dict) else 0
    return row


def pct(a: int, b: int | None) -> str:
    return "-" if not b else f"{(a / b - 1) * 100:+.1f}%"


def gib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f}"


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| workload | tuned on | requests: no-gpu / real | total requested | peak reserved `pytorch` (GiB): no-gpu / real | `expandable_segments:True` (GiB): no-gpu / real |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        (n, rn), (b, rb), (d, rd), (e, re_) = r["count"], r["bytes"], r["default"], r["expandable"]  # type: ignore[misc]
        name = f"`{r['name']}`" + (" (values read as zeros: `--unknown-values zero`)" if r["unknown"] == "zero" else "")
        tuned = "no (held out)" if r["held_out"] else (str(r["note"]) if r["note"] else "yes")
        lines.append(
            f"| {name} | {tuned} | {n:,} / {rn:,} ({pct(n, rn)}) | {pct(b, rb)} | {gib(d)} / {gib(rd)} ({pct(d, rd)}) | {gib(e)} / {gib(re_)} ({pct(e, re_)}) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("workloads", nargs="*")
    ap.add_argument("--write", action="store_true", help=f"replace the table in {DOC}")
    a = ap.parse_args()
    cases = [c for c in CASES if not a.workloads or c.name in a.workloads]
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for c in cases:
            rows.append(run(c, tmp))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    text = table(rows)
    print(text)
    if a.write:
        with open(DOC) as f:
            doc = f.read()
        head, rest = doc.split(BEGIN, 1)
        old, tail = rest.split(END, 1)
        # Rows of the workloads not run this time stay as they were.
        fresh = {r["name"] for r in rows}
        kept = [line for line in old.strip().splitlines()[2:] if line.split("`")[1] not in fresh]
        lines = text.splitlines()
        order = {c.name: i for i, c in enumerate(CASES)}
        body = sorted(kept + lines[2:], key=lambda line: order.get(line.split("`")[1], len(order)))
        with open(DOC, "w") as f:
            f.write(head + BEGIN + "\n" + "\n".join(lines[:2] + body) + "\n" + END + tail)


if __name__ == "__main__":
    main()
