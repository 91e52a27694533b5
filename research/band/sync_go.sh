#!/bin/bash
# Issue 29 item 3: does when frees complete (stream synchronisation) explain cudaMallocAsync's
# run-to-run spread? Each workload 3x as is and 3x with CUDA_LAUNCH_BLOCKING=1 (every kernel done
# before the host goes on, so every free's stream work is complete when the next request comes),
# one run at a time on the otherwise idle GPU.
set -u
cd research/band; N=$(mktemp -d)
for w in resnet18_train vit_b32_train convnext_tiny_train; do for r in 1 2 3; do
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 python3 band_workloads.py $w $N/${w}__async_r$r.json > /dev/null 2>&1 || echo "$w r$r failed"
  CUDA_LAUNCH_BLOCKING=1 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 120 python3 band_workloads.py $w $N/${w}__asyncblock_r$r.json > /dev/null 2>&1 || echo "$w block r$r failed"
done; done
for f in $N/*.json; do python3 -c "import json,sys; d=json.load(open('$f')); print('$(basename $f .json)', d['memory_stats']['reserved_bytes.all.peak'], round(d['wall_s'],1))"; done
(cd $N && tar czf $OUT/sync.tgz *.json)
