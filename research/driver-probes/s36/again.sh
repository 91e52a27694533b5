#!/bin/bash
# Session 36 (prepared for the next device call): the three workloads whose captures still miss
# `validate --no-addresses` in traces/ (emptycache_lm, vit_b32_train, densenet121_train),
# recorded again with the hook that now also notes the host's ranges at each change of the
# driver's own memory (`host_va.driver_changes`, capture's _hostva.py), the same scripts and
# arguments as session 24's again.sh. Each recording comes back in caps.tar with its .json.
# Usage (device tool, no carry; about 4 minutes): bash research/driver-probes/s36/again.sh
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C=research/driver-probes/s23/cap.sh; export CAPS_TAR=1
bash $C emptycache_lm_s36=research/driver-probes/midrun.py:emptycache,/tmp/midrun_out \
        vit_b32_train_s36=research/band/band_workloads.py:vit_b32_train \
        densenet121_train_s36=scripts/nogpu_heldout.py:densenet121_train,6
python3 - <<'PY'
import json, tarfile, os
out = os.environ["OUT"]
with tarfile.open(f"{out}/caps.tar") as t:
    for m in t.getmembers():
        if m.name.endswith(".json"):
            h = json.load(t.extractfile(m)).get("host_va") or {}
            print(m.name, "driver_changes", len(h.get("driver_changes", [])), h.get("driver_changes_error"), "changes", len(h.get("changes", [])))
PY
ls -la $OUT
