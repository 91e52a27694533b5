#!/bin/bash
# On the GPU machine. Phase "native": each workload once under the native allocator, recorded
# by allocreplay capture's own hook (as `allocreplay capture` injects it), 4 at a time; the raw
# snapshots and metadata go into $OUT/native.tar. Phase "async": REPEATS real runs of each under
# backend:cudaMallocAsync, one at a time on an idle GPU; memory_stats lines into $OUT/async.jsonl.
set -u
D=device/asyncheld
phase=$1; shift
specs="opt_generate:4 gptneox_generate:4 mistral_generate:4 qwen2_generate:4 efficientnet_train:8 t5_train:8 mobilenet_train:8 swin_train:8"
python3 -c 'import torch, transformers, torchvision; print(torch.__version__, transformers.__version__, torchvision.__version__, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=driver_version,memory.total --format=csv
if [ "$phase" = native ]; then
  H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
  for f in _hook.py _pytorch.py _jax.py _tf.py; do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
  touch $H/_allocreplay_capture/__init__.py
  printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
  N=$(mktemp -d)
  run_one() {
    IFS=: read w s <<< "$1"; R=$(mktemp -d)
    PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $D/workloads.py $w $s > $N/$w.log 2>&1
    echo "$w native rc=$?" >> $N/$w.log
    p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
    xz -6 -c $p > $N/${w}__default.pickle.xz; cp $j $N/${w}__default.json
  }
  i=0
  for spec in $specs; do run_one $spec & i=$((i+1)); [ $((i % 4)) = 0 ] && wait; done; wait
  cat $N/*.log | grep -v Warning | tail -40
  (cd $N && tar cf $OUT/native.tar *.pickle.xz *.json *.log)
else
  repeats=$1; shift
  export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  for r in $(seq 1 $repeats); do
    for spec in ${*:-$specs}; do
      IFS=: read w s <<< "$spec"; J=$(mktemp)
      t0=$(date +%s); python3 $D/workloads.py $w $s $J 2>/dev/null | tail -1
      python3 -c "import json,sys; d=json.load(open('$J')); m=d['memory_stats']; print(json.dumps({'workload': d['workload'], 'run': $r, 'steps': d['steps'], 'wall_s': d['wall_s'], 'reserved_peak': m['reserved_bytes.all.peak'], 'allocated_peak': m['allocated_bytes.all.peak'], 'alloc_conf': d['alloc_conf']}))" >> $OUT/async.jsonl
      echo "  $w run $r $(( $(date +%s)-t0 ))s"
    done
  done
fi
