#!/bin/bash
# Session 32 (issue 29, item 1): one held-out serving workload (workloads_s29.py falcon_serve, a
# Falcon-style fp16 server, REQUESTS requests, the same ones in every run) recorded under four
# allocator settings with capture's hook: the defaults, roundup_power2_divisions:4, expandable
# segments, and garbage_collection_threshold:0.6 under a cap (memory fraction FRACTION).
# Locally: each recording must validate without addresses, and the default recording's what-ifs
# must give the other runs' real peaks.
# Usage (device tool): REQUESTS=150 FRACTION=0.015 bash research/heldout/s32_whatif.sh
# Session 33: WL=SCRIPT:FUNCTION another workload (e.g. research/heldout/workloads_s33.py:
# mixtral_serve), its recordings named P_default... (P=mixtral), SECS its time bound (default 120).
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; uptime
N=${REQUESTS:-150}; P=${P:-falcon}; W=${WL:-research/heldout/workloads_s29.py:falcon_serve},${SECS:-120},$N
bash research/driver-probes/s23/cap.sh ${P}_default=$W
PYTORCH_CUDA_ALLOC_CONF=roundup_power2_divisions:4 bash research/driver-probes/s23/cap.sh ${P}_pow2div4=$W
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True bash research/driver-probes/s23/cap.sh ${P}_expandable=$W
WORKLOAD_MEMORY_FRACTION=${FRACTION:-0.015} PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6 bash research/driver-probes/s23/cap.sh ${P}_gc06_capped=$W
tail -n 2 $OUT/*.log
tar -C $OUT -cJf $OUT/meta32.tar.xz $(cd $OUT; ls *.json *.log) && (cd $OUT; rm -f *.json *.log)
ls -la $OUT; uptime
