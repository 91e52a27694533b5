"""The ranks of a distributed ``--no-gpu`` capture merged into one raw capture: one PyTorch
snapshot whose ``device_traces[R]`` is rank R's requests, with one metadata file for every rank,
which ``_convert`` imports as one trace of N devices. Used by ``_ranks`` (``--all-ranks``: one
raw directory per rank) and by ``_runner`` (a ``torchrun`` command: every worker's capture in one
raw directory).
"""

from __future__ import annotations

import glob
import json
import os
import pickle
from typing import Any

from allocreplay.capture._convert import ALL_DEVICES
from allocreplay.errors import CaptureError


def rank_artifacts(raw_dir: str) -> list[tuple[str, dict[str, Any], str, str]]:
    """(raw directory, artifact, device, metadata file) of every ``--no-gpu`` PyTorch capture of a
    rank (its metadata's ``no_gpu.world_size``) in ``raw_dir``."""
    out = []
    for mpath in sorted(glob.glob(os.path.join(raw_dir, "manifest-*.json"))):
        try:
            with open(mpath) as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            continue
        for a in manifest.get("artifacts", []):
            if a.get("kind") != "pytorch_snapshot":
                continue
            for dev, meta_name in (a.get("devices") or {}).items():
                try:
                    with open(os.path.join(raw_dir, meta_name)) as f:
                        ng = json.load(f).get("no_gpu") or {}
                except (OSError, ValueError):
                    continue
                if ng.get("world_size"):
                    out.append((raw_dir, a, dev, meta_name))
    return out


def merge_raw(raw_dirs: list[str], dest: str) -> None:
    """One raw capture (``torch-merged.pickle`` + ``torch-merged-devall.json`` + a manifest)
    from the ranks' (each a ``--no-gpu`` capture of one rank, its requests at device R): the
    snapshot's ``device_traces[R]`` is rank R's, the metadata rank 0's with every rank's
    storage tags and values read as zeros."""
    snaps: dict[int, list[Any]] = {}
    metas: dict[int, dict[str, Any]] = {}
    settings: Any = None
    for d, a, dev, meta_name in [x for raw in raw_dirs for x in rank_artifacts(raw)]:
        with open(os.path.join(d, a["raw"]), "rb") as f:
            snap = pickle.load(f)  # our own hook's file (a dict of lists), not the user's
        with open(os.path.join(d, meta_name)) as f:
            metas[int(dev)] = json.load(f)
        snaps[int(dev)] = snap["device_traces"][int(dev)]
        settings = settings or snap.get("allocator_settings")
    if not snaps:
        raise CaptureError("no rank recorded an allocation")
    n = max(snaps) + 1
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "torch-merged.pickle"), "wb") as f:
        pickle.dump({"segments": [], "device_traces": [snaps.get(r, []) for r in range(n)], "allocator_settings": settings}, f)
    meta = merged_meta(metas)
    with open(os.path.join(dest, "torch-merged-devall.json"), "w") as f:
        json.dump(meta, f, indent=1)
    manifest = {
        "pid": 0,
        "finished": True,
        "frameworks": {"pytorch": {"imported": True, "gpu": False, "recording": False, "reason": None, "no_gpu": True}},
        "artifacts": [{"framework": "pytorch", "kind": "pytorch_snapshot", "raw": "torch-merged.pickle", "devices": {ALL_DEVICES: "torch-merged-devall.json"}}],
    }
    with open(os.path.join(dest, "manifest-0.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def merged_meta(metas: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's (the lowest's) metadata, for every rank: ``no_gpu.ranks``, the values read as
    zeros (by rank) and every rank's storage tags (their addresses are apart: ``_nogpu``'s
    ``RANK_ADDR_STRIDE``)."""
    first = metas[min(metas)]
    meta = dict(first)
    meta.pop("device", None)
    ng: dict[str, Any] = dict(first.get("no_gpu") or {})
    ng.pop("rank", None)
    ng["ranks"] = sorted(metas)
    ng["values_read_as_zeros"] = {str(r): m.get("no_gpu", {}).get("values_read_as_zeros", {}) for r, m in sorted(metas.items())}
    meta["no_gpu"] = ng
    meta["trace_entries"] = sum(int(m.get("trace_entries") or 0) for m in metas.values())
    meta["pid"] = {str(r): m.get("pid") for r, m in sorted(metas.items())}
    tags: list[dict[str, Any]] = [m["storage_tags"] for _, m in sorted(metas.items()) if isinstance(m.get("storage_tags"), dict)]
    if tags:
        merged = dict(tags[0])
        merged.pop("device", None)
        cats: dict[str, Any] = {}
        for t in tags:
            for name, c in (t.get("categories") or {}).items():
                into = cats.setdefault(name, {k: v for k, v in c.items() if k != "addrs"} | {"addrs": []})
                into["addrs"] = into["addrs"] + list(c.get("addrs", []))
        merged["categories"] = cats
        meta["storage_tags"] = merged
    return meta
