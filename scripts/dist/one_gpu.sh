#!/bin/sh
# The real one-GPU runs of traces/dist/ (one H200, torch 2.11.0+cu130), from the repository root
# with ../shared beside it; OUT: where the captures go. torch_multi.py writes its own snapshot
# (OUT/ddp1gpu__CONF_rank0.pickle + .json); record.py wraps the FSDP2 job.
set -e
OUT=${OUT:-traces/dist}
for conf in default expandable; do
  if [ "$conf" = expandable ]; then export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; else unset PYTORCH_CUDA_ALLOC_CONF; fi
  python3 -m torch.distributed.run --standalone --nproc_per_node 1 ../shared/capture/torch_multi.py ddp --out "$OUT/ddp1gpu__$conf"
  python3 -m torch.distributed.run --standalone --nproc_per_node 1 scripts/dist/record.py "$OUT/fsdp2toy1gpu__$conf" scripts/dist/fsdp2_toy.py
done
xz -T0 "$OUT"/*.pickle
