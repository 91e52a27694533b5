#!/bin/bash
# Session 23: watch.py on the failing workloads, lazy (default) and eager module loading.
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, torchvision; print(torch.__version__, transformers.__version__, torchvision.__version__)'
for spec in "$@"; do
  name=${spec%%:*}; mode=${spec#*:}
  if [ "$mode" = eager ]; then export CUDA_MODULE_LOADING=EAGER; else unset CUDA_MODULE_LOADING; fi
  t0=$(date +%s)
  SNAPSHOT=$OUT/$name.$mode.pickle timeout 200 python3 watch.py $name > $OUT/$name.$mode.txt 2>&1; xz -T4 $OUT/$name.$mode.pickle
  echo "$name $mode rc=$? $(( $(date +%s)-t0 ))s $(grep -c DRIVER $OUT/$name.$mode.txt) driver events"
done
