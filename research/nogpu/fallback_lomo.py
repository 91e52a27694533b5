"""Chooses capture --no-gpu's rule for convolutions the cuDNN table does not hold, by leaving each
measured model out in turn (its convolutions predicted from the other nine models' table), then
reports the chosen rules on densenet121 and convnext_tiny, measured apart and never used to
choose, on the bytes and counts of workspaces. (The rule was then chosen on peaks, which this
does not measure: docs/no-gpu.md.) Run from the repo root: python research/nogpu/fallback_lomo.py
"""

import collections
import json
import lzma
import math
import statistics
import sys

sys.path.insert(0, "research/nogpu")
import build_cudnn_table as b

with lzma.open("research/nogpu/cudnn_h200_probe.json.xz", "rt") as f:
    dev = json.load(f)["convolutions"]
with lzma.open("research/nogpu/cudnn_h200_heldout_probe.json.xz", "rt") as f:
    held = json.load(f)["convolutions"]


def xb(c):
    return math.prod(c["x"]) * (2 if c["dtype"] in ("float16", "bfloat16") else 4)


def feats(c):
    return (math.log2(c["x"][1]), math.log2(c["w"][0]), math.log2(max(1, c["x"][2])), math.log2(c["x"][0]))


def predictor(train, variant):
    table = {b.key(c): b.workspaces(c["requests"]) for c in train}
    byshape = collections.defaultdict(list)
    for c in train:
        k = b.key(c).split("|")
        bs = int(k[1].split(",")[0])
        k[1] = ",".join(k[1].split(",")[1:])
        byshape["|".join(k)].append((bs, b.workspaces(c["requests"])))
    kinds = collections.defaultdict(list)
    for c in train:
        kinds[b.kind(c["direction"], c["w"], c["stride"], c["groups"])].append(c)

    def pred(c):
        k = b.key(c)
        if k in table:
            return table[k], "exact"
        p = k.split("|")
        bs = int(p[1].split(",")[0])
        p[1] = ",".join(p[1].split(",")[1:])
        near = byshape.get("|".join(p))
        if near:
            b0, ws = min(near, key=lambda e: (abs(e[0] - bs), e[0]))
            return [max(1, s * bs // b0) for s in ws], "batch"
        if variant == "none":
            return [], "fb"
        kk = kinds.get(b.kind(c["direction"], c["w"], c["stride"], c["groups"]), [])
        if not kk:
            return [], "none"
        if variant == "median":
            with_ws = [cc for cc in kk if b.workspaces(cc["requests"])]
            if len(with_ws) / len(kk) < 0.5:
                return [], "fb"
            r = statistics.median(sum(b.workspaces(cc["requests"])) / xb(cc) for cc in with_ws)
            return ([int(r * xb(c))] if int(r * xb(c)) > 0 else []), "fb"
        if variant == "mean":
            r = sum(sum(b.workspaces(cc["requests"])) for cc in kk) / sum(xb(cc) for cc in kk)
            return ([int(r * xb(c))] if r > 0 else []), "fb"
        if variant.startswith("nn"):
            kn = int(variant[2:])
            f = feats(c)
            ds = sorted(kk, key=lambda cc: sum((a - bb) ** 2 for a, bb in zip(f, feats(cc))))[:kn]
            wss = [b.workspaces(cc["requests"]) for cc in ds]
            n_with = sum(1 for w in wss if w)
            if n_with * 2 < len(wss):
                return [], "fb"
            r = statistics.median(sum(w) / xb(cc) for w, cc in zip(wss, ds) if w)
            return [max(1, int(r * xb(c)))], "fb"

    return pred


def evaluate(train, test, variant):
    p = predictor(train, variant)
    T = P = nT = nP = 0
    FT = FP = 0
    for c in test:
        t = b.workspaces(c["requests"])
        w, src = p(c)
        T += sum(t)
        P += sum(w)
        nT += len(t)
        nP += len(w)
        if src in ("fb", "none"):
            FT += sum(t)
            FP += sum(w)
    return T, P, nT, nP, FT, FP


models = sorted({m for c in dev for m in c["models"]})
for variant in ("none", "median", "mean", "nn1", "nn3", "nn5"):
    errs = []
    tot = [0] * 6
    for m in models:
        train = [c for c in dev if any(mm != m for mm in c["models"])]
        test = [c for c in dev if m in c["models"]]
        r = evaluate(train, test, variant)
        tot = [a + bb for a, bb in zip(tot, r)]
        errs.append(abs(r[1] / r[0] - 1) if r[0] else 0)
    h = evaluate(dev, held, variant)
    print(
        f"{variant:7} LOMO per-model |bytes err| mean {statistics.mean(errs) * 100:5.1f}% max {max(errs) * 100:5.1f}%  total bytes {tot[1] / tot[0] - 1:+.1%} count {tot[3] / tot[2] - 1:+.1%} (fallback part {tot[5] / 1e9:.1f}/{tot[4] / 1e9:.1f} GB) | held-out bytes {h[1] / h[0] - 1:+.1%} count {h[3] / h[2] - 1:+.1%}"
    )
