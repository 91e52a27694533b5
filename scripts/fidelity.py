#!/usr/bin/env python3
"""Regenerate docs/fidelity.md: every policy measured against the ground truth of the real
captures in ../shared/traces (their README and each run's .json).

    python scripts/fidelity.py [--shared ../shared] [-o docs/fidelity.md]

Runs the installed `allocreplay` CLI (`pip install .` first) with --json, so the table shows
exactly what users get.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str) -> object:
    out = subprocess.run(["allocreplay", *args, "--json"], capture_output=True, text=True)
    # `validate` exits 1 when the replay differs, with its report on stdout: a table row too.
    if out.returncode != 0 and not (out.returncode == 1 and args[0] == "validate" and out.stdout.strip()):
        raise SystemExit(f"allocreplay {' '.join(args)} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def gib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**30:.3f}"


def pct(a: int, b: int) -> str:
    return f"{100.0 * (a - b) / b:+.3f}%"


def pytorch_section(shared: Path) -> list[str]:
    lines = [
        "## `pytorch` — validate (same config, recorded segment addresses)",
        "",
        "`allocreplay validate TRACE --json` on every PyTorch capture: share of allocations at the",
        "recorded address, segment events identical (order, sizes), peak reserved against the run's",
        "`memory_stats()` (ring20k: the full run's), retries and OOMs under the recorded cap.",
        "",
        "| capture | allocs | address_match | segment events | peak reserved recorded | replayed | retries rec/rep | OOMs rec/rep | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pickle in sorted((shared / "traces/pytorch").glob("*.pickle.xz")):
        report = cli("validate", str(pickle))
        assert isinstance(report, dict)
        # One report per device under "devices" (a single device's is also the top level).
        for v in report["devices"]:
            name = pickle.name.removesuffix(".pickle.xz")
            if len(report["devices"]) > 1:
                name += f" (device {v['device']})"
            lines.append(
                f"| {name} | {v['allocs']} | {v['address_match']:.4f} | "
                f"{'identical' if v['segment_events_match'] else 'differ'} ({v['segment_events_recorded']}) | "
                f"{v['peak_reserved_recorded']} | {v['peak_reserved_replayed']} | "
                f"{v.get('num_alloc_retries_recorded')}/{v['num_alloc_retries_replayed']} | "
                f"{v.get('num_ooms_recorded')}/{v['num_ooms_replayed']} | {'✅' if v['ok'] else '❌'} |"
            )
    return lines


def no_addresses_section(shared: Path) -> list[str]:
    lines = [
        "## `pytorch` — validate --no-addresses (the modelled driver address space)",
        "",
        "`allocreplay validate TRACE --no-addresses --json`: the same replay at the recorded cap, but",
        "every segment placed by the model of the CUDA driver's address space",
        "(docs/driver-address-space.md), as in any what-if replay. The run's peak reserved, peak",
        "allocated, retries and OOMs and its segment events (order, sizes) must come out exactly.",
        "Held out: the model's rules were fitted on synthetic driver probes and on the raw driver",
        "replay of gpt2_train__gc06_capped's segment sequence (and, for the reuse of ranges freed",
        "inside a live region, of traces/emptycache_lm's); none of these replays was run while",
        "fitting. Below the shared captures: the project's own (`traces/`), which include allocations",
        "no snapshot sees (NCCL's under torchrun, a large range freed outside PyTorch).",
        "",
        "| capture | limit | segment events | peak reserved recorded | replayed | peak allocated rec / rep | retries rec/rep | OOMs rec/rep | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    paths = sorted((shared / "traces/pytorch").glob("*.pickle.xz"))
    own = sorted((ROOT / "traces").glob("*.pickle.xz")) + sorted((ROOT / "traces").glob("torch_*.arrow"))
    own += sorted((ROOT / "traces/cuda").glob("*.pickle.xz"))
    # Long generate/serving runs (issue 29 item 1) and histories that start mid-run (item 2).
    own += sorted((ROOT / "traces/large").glob("*.pickle.xz")) + sorted((ROOT / "traces/truncated").glob("*.pickle.xz"))
    # H100 captures whose .json notes the driver's own memory (issue 29 item 1).
    own += sorted((ROOT / "traces/h100").glob("*.pickle.xz"))
    for path in paths + own:
        report = cli("validate", str(path), "--no-addresses")
        assert isinstance(report, dict)
        for v in report.get("devices", [report]):
            name = path.name.removesuffix(".pickle.xz") if path in paths else f"traces/{path.relative_to(ROOT / 'traces')}"
            if len(report.get("devices", [])) > 1:
                name += f" (device {v['device']})"
            limit = "cap" if v.get("capacity_source") == "recorded_cap" else "device − context"
            lines.append(
                f"| {name} | {limit} | {'identical' if v['segment_events_match'] else 'differ'} ({v['segment_events_recorded']}) | "
                f"{v['peak_reserved_recorded']} | {v['peak_reserved_replayed']} | "
                f"{v.get('peak_allocated_recorded')} / {v['peak_allocated_replayed']} | "
                f"{v.get('num_alloc_retries_recorded')}/{v['num_alloc_retries_replayed']} | "
                f"{v.get('num_ooms_recorded')}/{v['num_ooms_replayed']} | {'✅' if v['ok'] else '❌'} |"
            )
        if path == paths[-1]:
            lines.append("| *the project's own captures* | | | | | | | | |")
    return lines


def cross_config_section(shared: Path) -> list[str]:
    pt = shared / "traces/pytorch"
    cases = [
        ("gpt2_train__default", "pytorch:expandable_segments:True", "gpt2_train__expandable"),
        ("gpt2_train__default", "pytorch:max_split_size_mb:128", "gpt2_train__split128"),
        ("gpt2_train__default", "pytorch:roundup_power2_divisions:4", "gpt2_train__pow2div4"),
        ("two_streams__default", "pytorch:expandable_segments:True", "two_streams__expandable"),
        ("two_streams__expandable", "pytorch", "two_streams__default"),
    ]
    lines = [
        "## `pytorch` — cross-config predictions (simulated addresses)",
        "",
        "One run's requests replayed under another configuration, against the peak reserved that a",
        "real run under that configuration recorded.",
        "",
        "| requests of | policy | predicted peak reserved | real run | real peak reserved | error |",
        "|---|---|---|---|---|---|",
    ]
    for src, spec, real in cases:
        rows = cli("replay", str(pt / f"{src}.pickle.xz"), "--policy", spec)
        predicted = rows[0]["peak_reserved_bytes"]
        truth = json.loads((pt / f"{real}.json").read_text())["memory_stats"]["reserved_bytes.all.peak"]
        lines.append(f"| {src} | `{spec}` | {predicted} | {real} | {truth} | {pct(predicted, truth)} |")
    return lines


def bfc_section(shared: Path) -> list[str]:
    lines = [
        "## `bfc` / `tf` / `jax` — validate on TensorFlow and JAX profiler captures",
        "",
        "`allocreplay validate TRACE --json`: each event's replayed chunk size and bytes in use",
        "against the recorded `allocation_bytes` / `bytes_allocated`, peak in use and pool bytes",
        "against the run's `.json` (`memory_stats()`).",
        "",
        "| capture | allocator | settings | events | chunk match | in-use match | peak in use rec / rep | pool bytes rec / rep | ok |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for path in sorted((shared / "traces").glob("*/*.xplane.pb*")):
        run = subprocess.run(["allocreplay", "validate", str(path), "--json"], capture_output=True, text=True)
        name = path.name.split(".")[0]
        if run.returncode == 2:
            lines.append(f"| {name} | — | — | — | — | — | — | — | {run.stderr.strip().split(': ')[-1]} |")
            continue
        v = json.loads(run.stdout)
        lines.append(
            f"| {name} | {v.get('allocator')} | `{v.get('policy')}` | {v['events']} | {v['chunk_match']:.4f} | {v['in_use_match']:.4f} | "
            f"{v.get('peak_in_use_recorded')} / {v['peak_in_use_replayed']} | {v.get('pool_bytes_recorded')} / {v.get('pool_bytes_replayed')} | {'✅' if v['ok'] else '❌'} |"
        )
    return lines


# memory_analysis() of jaxlm's train_step, as recorded in ../shared/traces/README.md.
JAXLM_MEMORY_ANALYSIS = {"temp": 15_586_593_552, "argument": 533_757_952, "output": 533_725_460}


def xla_section(shared: Path) -> list[str]:
    rows = cli("plan", str(shared / "traces/jax/jaxlm_xla_dump"))
    lines = [
        "## XLA's heap planner — `allocreplay plan` on an XLA dump",
        "",
        "Planned preallocated-temp size against the dump's own buffer assignment and the program's",
        "`memory_analysis()` (../shared/traces/README.md).",
        "",
        "| program | recorded temp | planned temp | memory_analysis temp | arguments (analysis) | outputs (analysis) | lower bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ma = JAXLM_MEMORY_ANALYSIS if "train_step" in r["program"] else {}
        lines.append(
            f"| {r['program']} | {r['recorded_temp_bytes']} | {r['planned_temp_bytes']} | {ma.get('temp', '—')} | "
            f"{r['argument_bytes']} ({ma.get('argument', '—')}) | {r['output_bytes']} ({ma.get('output', '—')}) | {r['lower_bound_bytes']} |"
        )
    return lines


def real_async_runs(name: str = "realruns-h200-580.159.txt") -> dict[str, list[int]]:
    """Peak reserved of every real backend:cudaMallocAsync run of a file of tests/data (the
    calibration workloads' realruns-…: the same program and seed, run 3-7 times; heldout-…)."""
    runs: dict[str, list[int]] = {}
    for line in (ROOT / "tests/data" / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            workload, _run, peak, *_ = line.split()
            runs.setdefault(workload, []).append(int(peak))
    return runs


def cuda_section(shared: Path) -> list[str]:
    pt = shared / "traces/pytorch"
    truth = json.loads((pt / "gpt2_train__async.json").read_text())["memory_stats"]["reserved_bytes.all.peak"]
    rows = {r["policy"]: r for r in cli("replay", str(pt / "gpt2_train__default.pickle.xz"), "--policy", "cuda-async", "--policy", "cuda-malloc")}
    predicted = rows["cuda-async"]["peak_reserved_bytes"]
    return [
        "## `cuda-async` / `cuda-malloc`",
        "",
        "gpt2_train's requests under the cudaMallocAsync model against the real `backend:cudaMallocAsync`",
        "run (gpt2_train__async.json). Calibration and held-out workloads: docs/cuda-policies.md.",
        "",
        "| requests of | policy | predicted peak reserved | real peak reserved | error |",
        "|---|---|---|---|---|",
        f"| gpt2_train__default | `cuda-async` | {predicted} | {truth} | {pct(predicted, truth)} |",
        *held_out_async(shared),
        f"| gpt2_train__default | `cuda-malloc` | {rows['cuda-malloc']['peak_reserved_bytes']} | — (no real run; see docs/cuda-policies.md) | — |",
        "",
        *repeated_async_runs(shared),
        "",
        *out_of_sample_async(),
    ]


ASYNC_CASES = [
    ("gpt2_train", "shared/traces/pytorch/gpt2_train__default.pickle.xz"),
    ("resnet50_train", "traces/cuda/resnet50_train__default.pickle.xz"),
    ("two_streams", "shared/traces/pytorch/two_streams__default.pickle.xz"),
    ("llama_generate", "traces/cuda/llama_generate__default.pickle.xz"),
    ("bert_finetune", "traces/cuda/bert_finetune__default.pickle.xz"),
    ("vit_train", "traces/cuda/vit_train__default.pickle.xz"),
    ("t5_generate", "traces/cuda/t5_generate__default.pickle.xz"),
    ("gpt2_generate", "traces/cuda/gpt2_generate__default.pickle.xz"),
    ("convnext_train", "traces/cuda/convnext_train__default.pickle.xz"),
]


def _requests(shared: Path, rel: str) -> Path:
    return shared / rel.removeprefix("shared/") if rel.startswith("shared/") else ROOT / rel


def held_out_async(shared: Path) -> list[str]:
    """Workloads captured on the H200 for the cuda-async calibration (traces/cuda/): the default
    run's requests against the real backend:cudaMallocAsync run of the same workload."""
    cases = [
        (_requests(shared, rel), ROOT / f"traces/cuda/{name}__async.json")
        for name, rel in ASYNC_CASES
        if name != "gpt2_train"  # the calibration target: its row comes first, from shared/
    ]
    out = []
    for requests, real in cases:
        predicted = cli("replay", str(requests), "--policy", "cuda-async")[0]["peak_reserved_bytes"]
        truth = json.loads(real.read_text())["memory_stats"]["reserved_bytes.all.peak"]
        out.append(f"| {requests.name.split('.')[0]} (held out) | `cuda-async` | {predicted} | {truth} | {pct(predicted, truth)} |")
    return out


def repeated_async_runs(shared: Path) -> list[str]:
    """The driver's own result varies from run to run (how far the GPU runs behind the host
    decides which frees it can reuse): the model against every repeated real run."""
    runs = real_async_runs()
    lines = [
        "Repeated real runs (same program and seed; tests/data/realruns-h200-580.159.txt):",
        "the model against their median, and how many runs it is within 3% of.",
        "",
        "| workload | real runs | min | median | max | `cuda-async` | vs median | runs within 3% | band (low – high) | runs inside the band |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rel in ASYNC_CASES:
        peaks = sorted(runs[name])
        median = statistics.median(peaks)
        row = cli("replay", str(_requests(shared, rel)), "--policy", "cuda-async")[0]
        predicted, low, high = row["peak_reserved_bytes"], row["peak_reserved_low_bytes"], row["peak_reserved_high_bytes"]
        within = sum(abs(predicted - p) <= 0.03 * p for p in peaks)
        inside = sum(low <= p <= high for p in peaks)
        lines.append(
            f"| {name} | {len(peaks)} | {peaks[0]} | {int(median)} | {peaks[-1]} | {predicted} | "
            f"{100.0 * (predicted - median) / median:+.2f}% | {within}/{len(peaks)} | {low} – {high} | {inside}/{len(peaks)} |"
        )
    return [*lines, "", *band_held_out()]


def band_held_out() -> list[str]:
    """The band (docs/cuda-async-band.md) on the workloads held out from its calibration
    (tests/data/heldout-async-h200-580.159.txt, three real runs each)."""
    runs = real_async_runs("heldout-async-h200-580.159.txt")
    lines = [
        "The band, on workloads held out from its calibration (tests/data/heldout-async-h200-580.159.txt;",
        "docs/cuda-async-band.md): every real run against the replay's range.",
        "",
        "| workload | real runs | `cuda-async` | band (low – high) | runs inside |",
        "|---|---|---|---|---|",
    ]
    for name, peaks in sorted(runs.items()):
        capture = next(p for p in (ROOT / f"traces/cuda/{name}__default.pickle.xz", ROOT / f"traces/large/{name}__default.pickle.xz") if p.exists())
        row = cli("replay", str(capture), "--policy", "cuda-async")[0]
        low, high = row["peak_reserved_low_bytes"], row["peak_reserved_high_bytes"]
        inside = sum(low <= p <= high for p in peaks)
        lines.append(f"| {name} | {' / '.join(map(str, peaks))} | {row['peak_reserved_bytes']} | {low} – {high} | {inside}/{len(peaks)} |")
    return lines


# Captured on 2026-12-01, after the model was chosen (research/driver-probes/asyncheld/workloads.py,
# which declared the DEV / HOLDOUT split before any ran): issue 13, item 2.
OUT_OF_SAMPLE = [
    ("opt_generate", "dev"),
    ("gptneox_generate", "dev"),
    ("efficientnet_train", "dev"),
    ("t5_train", "dev"),
    ("mistral_generate", "holdout"),
    ("qwen2_generate", "holdout"),
    ("mobilenet_train", "holdout"),
    ("swin_train", "holdout"),
]


def out_of_sample_async() -> list[str]:
    """The model on eight workloads it was never fitted on, against the median of three real
    runs each, with the driver's own result for the same requests on an idle GPU."""
    runs = real_async_runs()
    replays = (ROOT / "tests/data/replays-h200-580.159.txt").read_text()
    lines = [
        "Out of sample (issue 13): eight workloads captured on 2026-12-01 after the model was chosen,",
        "three real runs each (none was used to fit it; `dev` / `holdout` is the split declared for",
        "refitting, see docs/cuda-policies.md). GPU replay: the same requests through `cudaMallocAsync` on an idle GPU.",
        "",
        "| workload | set | real runs | median | GPU replay | `cuda-async` | vs median |",
        "|---|---|---|---|---|---|---|",
    ]
    errors = []
    for name, split in OUT_OF_SAMPLE:
        peaks = sorted(runs[name])
        median = statistics.median(peaks)
        replay = next(int(line.split("peak_reserved=")[1].split()[0]) for line in replays.splitlines() if f"/{name}__default" in line)
        predicted = cli("replay", str(ROOT / f"traces/cuda/{name}__default.pickle.xz"), "--policy", "cuda-async")[0]["peak_reserved_bytes"]
        err = 100.0 * (predicted - median) / median
        errors.append(abs(err))
        lines.append(f"| {name} | {split} | {' / '.join(map(str, peaks))} | {int(median)} | {replay} | {predicted} | {err:+.2f}% |")
    lines += ["", f"Mean |error| {sum(errors) / len(errors):.2f}%, worst {max(errors):.2f}% (issue 13 asks for <= 2% and <= 5%)."]
    return lines


def offline_section(shared: Path) -> list[str]:
    lines = [
        "## `ideal` / `offline` — bounds for every PyTorch capture",
        "",
        "ideal = max live bytes (XLA's NoFragmentationStatsHeap); offline = XLA's best-fit plan knowing",
        "every lifetime. Must hold: ideal ≤ offline ≤ the real run's peak reserved.",
        "",
        "| capture | device | ideal | offline | offline vs ideal | real peak reserved |",
        "|---|---|---|---|---|---|",
    ]
    for pickle in sorted((shared / "traces/pytorch").glob("*.pickle.xz")):
        rows = cli("replay", str(pickle), "--policy", "ideal", "--policy", "offline")
        meta = json.loads(pickle.with_name(pickle.name.split(".")[0] + ".json").read_text())
        for dev in sorted({r["device"] for r in rows}):
            by = {r["policy"]: r["peak_reserved_bytes"] for r in rows if r["device"] == dev}
            stats = meta["memory_stats_per_device"][str(dev)] if "memory_stats_per_device" in meta else meta["memory_stats"]
            lines.append(
                f"| {pickle.name.split('.')[0]} | {dev} | {by['ideal']} | {by['offline']} | {pct(by['offline'], by['ideal'])} | {stats['reserved_bytes.all.peak']} |"
            )
    return lines


def project_traces_section(shared: Path) -> list[str]:
    lines = [
        "## The project's own captures (`traces/`, made with `allocreplay capture` on an H200)",
        "",
        "`allocreplay validate` on each: PyTorch traces against their recorded segment events and",
        "memory_stats, JAX traces event by event against the BFC allocator's recorded chunks.",
        "",
        "| trace | allocations at recorded address | segment events / chunks | peak recorded | peak replayed | retries / OOMs rec→rep | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in sorted((ROOT / "traces").glob("*.arrow")):
        report = cli("validate", str(path))
        assert isinstance(report, dict)
        for v in report["devices"]:
            lines.append(_project_row(path.name if len(report["devices"]) == 1 else f"{path.name} (device {v['device']})", v))
    return lines


def _project_row(name: str, v: dict) -> str:
    if "chunk_match" in v:
        detail, rec, rep, extra = (
            f"chunks {v['chunk_match']:.4f}, in use {v['in_use_match']:.4f}",
            v.get("peak_in_use_recorded"),
            v["peak_in_use_replayed"],
            "—",
        )
    else:
        detail = "identical" if v["segment_events_match"] else "differ"
        rec, rep = v["peak_reserved_recorded"], v["peak_reserved_replayed"]
        extra = f"{v.get('num_alloc_retries_recorded')}/{v.get('num_ooms_recorded')} → {v['num_alloc_retries_replayed']}/{v['num_ooms_replayed']}"
    return f"| {name} | {v['address_match']:.4f} | {detail} | {rec} | {rep} | {extra} | {'✅' if v['ok'] else '❌'} |"


SECTIONS = [pytorch_section, no_addresses_section, cross_config_section, bfc_section, xla_section, cuda_section, offline_section, project_traces_section]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "docs/fidelity.md")
    args = ap.parse_args()
    if not (args.shared / "traces").is_dir():
        sys.exit(f"no traces under {args.shared}: pass --shared")
    lines = [
        "# Fidelity against real runs",
        "",
        f"Generated by `python scripts/fidelity.py` on {datetime.date.today()} from the captures in",
        "`../shared/traces` (ground truth: their README and each run's `.json`). Regenerate it when",
        "a policy's behaviour changes.",
        "",
    ]
    for section in SECTIONS:
        lines += [*section(args.shared), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
