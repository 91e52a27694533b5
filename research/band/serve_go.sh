#!/bin/bash
# Session 13 on the H200: new recordings with allocreplay capture's own hook (as `allocreplay
# capture` injects it; the hook files of python/allocreplay/capture/_runner.HOOK_FILES), stacks
# none, and three real runs of the serving workload under backend:cudaMallocAsync.
# Usage (repo root): bash device/new/go.sh  -> $OUT
set -u
D=device/new
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast,sys; src=open("python/allocreplay/capture/_runner.py").read(); print(" ".join(ast.literal_eval(src.split("HOOK_FILES = ",1)[1].split("\n",1)[0])))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d)
cap() { # name workload steps alloc_conf
  R=$(mktemp -d); t0=$(date +%s)
  PYTORCH_CUDA_ALLOC_CONF="$4" PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $D/workloads_new.py $2 $3 > $N/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s" >> $N/$1.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $N/$1.json; xz -7 -T4 -c $p > $OUT/$1.pickle.xz
}
real() { # name workload steps alloc_conf  (no hook)
  PYTORCH_CUDA_ALLOC_CONF="$4" python3 $D/workloads_new.py $2 $3 $N/$1.json > $N/$1.log 2>&1; echo "$1 rc=$?" >> $N/$1.log
}
cap gemma_generate__default gemma_generate ${GEN_STEPS:-20} "" &
cap opt350_serve__default opt350_serve ${SERVE_STEPS:-60} "" &
cap opt350_serve__pow2div4 opt350_serve ${SERVE_STEPS:-60} "roundup_power2_divisions:4" &
wait
for i in 1 2 3; do real opt350_serve__async_r$i opt350_serve ${SERVE_STEPS:-60} "backend:cudaMallocAsync"; done
cat $N/*.log | grep -v -i warn | tail -30
(cd $N && tar czf $OUT/meta.tgz *.json *.log)
ls -la $OUT
