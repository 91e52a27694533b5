"""fit's accuracy against real GPU runs: for every case of docs/data/fit_truth_h200.json (the
real largest value that runs 3 steps without OOM on the H200 under a memory cap, found by
scripts/fit/gpu_truth.py), run `allocreplay fit` without a GPU at the same cap and compare;
and replay every value the GPU run probed, to count wrong verdicts ("fits" where the real run
went out of memory is the one that must never happen).

    python scripts/fit/accuracy.py [--write] [--cache-dir DIR] [--jobs 2] [--only SUBSTRING]

--write puts the table into docs/fit.md between its markers."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import allocreplay

REPO = Path(__file__).resolve().parent.parent.parent
TRUTH = REPO / "docs" / "data" / "fit_truth_h200.json"
DOC = REPO / "docs" / "fit.md"
EXPANDABLE = "pytorch:expandable_segments:True"


def cases() -> dict[tuple[str, str, float, tuple[tuple[str, int], ...]], dict[str, dict]]:
    """(workload, param, cap, fixed) -> {"default": case, "expandable": case}."""
    data = json.loads(TRUTH.read_text())
    out: dict = {}
    for c in data["cases"]:
        key = (c["workload"], c["param"], c["cap_gib"], tuple(sorted(c["fixed"].items())))
        conf = "expandable" if c["alloc_conf"] == "expandable_segments:True" else "default"
        out.setdefault(key, {})[conf] = c
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--cache-dir", default=str(REPO / "scratch" / "fit-cache"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", action="append", default=[])
    args = ap.parse_args()
    rows = []
    for (workload, param, cap_gib, fixed), confs in cases().items():
        name = f"{workload} {param} at {cap_gib:g} GiB" + "".join(f", {k}={v}" for k, v in fixed)
        if args.only and not any(s in name for s in args.only):
            continue
        d, e = confs["default"], confs["expandable"]
        step = 64 if param == "seq_len" else 1
        cmd = [sys.executable, str(REPO / "scripts" / "fit" / f"{workload}.py")]
        for k, v in fixed:
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        cmd += [f"--{param.replace('_', '-')}", "{" + param + "}"]
        cap = int(cap_gib * (1 << 30))

        def say(msg: str, name: str = name) -> None:
            print(f"[{time.strftime('%H:%M:%S')}] {name}: {msg}", flush=True)

        t0 = time.monotonic()
        found = allocreplay.fit(
            cmd, {param: (step, d["max"])}, step=step, capacity=cap, settings=[EXPANDABLE], tune=False, jobs=args.jobs, cache_dir=args.cache_dir, progress=say
        )
        seconds = time.monotonic() - t0
        captures = found.table.unique(subset=[param])
        capture_s = [float(x) for x in captures["capture_seconds"].to_list()]
        # Every value the GPU probed, replayed: the verdicts against the real runs.
        probed = sorted({p["value"] for c in (d, e) for p in c["probes"]})
        every = allocreplay.fit(cmd, {param: probed}, capacity=cap, settings=[EXPANDABLE], tune=False, jobs=args.jobs, cache_dir=args.cache_dir, progress=say)
        wrong_fits = wrong_oom = checked = 0
        for conf, case in (("pytorch", d), (EXPANDABLE, e)):
            real = {p["value"]: p["result"] == "ok" for p in case["probes"]}
            pred = {r[param]: r["fits"] for r in every.table.filter(every.table["setting"] == conf).iter_rows(named=True)}
            for v, ok in real.items():
                checked += 1
                wrong_fits += int(pred[v] and not ok)
                wrong_oom += int(ok and not pred[v])
        row = {
            "case": name,
            "real_default": d["boundary"],
            "real_expandable": e["boundary"],
            "fit_default": found.largest["pytorch"],
            "fit_expandable": found.largest[EXPANDABLE],
            "checked": checked,
            "wrong_fits": wrong_fits,
            "wrong_oom": wrong_oom,
            "candidates": len(captures),
            "capture_s_median": sorted(capture_s)[len(capture_s) // 2] if capture_s else 0.0,
            "fit_seconds": seconds,
            "all_cached": bool(captures["cached"].all()),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    table = [
        '| workload, varied parameter, cap | real largest: defaults / expandable | `fit --no-gpu`: defaults / expandable | GPU-probed values replayed | wrong "fits" | wrong "OOM" | candidates captured (median capture) |',
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        same = "=" if (r["real_default"], r["real_expandable"]) == (r["fit_default"], r["fit_expandable"]) else "≠"
        table.append(
            f"| {r['case']} | {r['real_default']} / {r['real_expandable']} | {r['fit_default']} / {r['fit_expandable']} ({same}) | {r['checked']} | {r['wrong_fits']} | {r['wrong_oom']} | {r['candidates']} ({r['capture_s_median']:.0f} s) |"
        )
    text = "\n".join(table)
    print(text)
    if args.write:
        doc = DOC.read_text()
        new = re.sub(r"(<!-- accuracy.py: begin -->\n).*?(<!-- accuracy.py: end -->)", lambda m: m.group(1) + text + "\n" + m.group(2), doc, flags=re.S)
        DOC.write_text(new)
    bad = [r for r in rows if r["wrong_fits"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
