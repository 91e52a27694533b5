#!/bin/bash
# Session 17 on the H200: three held-out recordings with allocreplay capture's own hook (as
# `allocreplay capture` injects it), stacks none. Usage (repo root): bash research/heldout/capture_s17.sh SECONDS
set -u
D=research/heldout
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; t=ast.parse(open("python/allocreplay/capture/_runner.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HOOK_FILES")))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d)
cap() { # name seconds
  R=$(mktemp -d); t0=$(date +%s)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $D/workloads_s17.py $1 $2 > $N/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s" >> $N/$1.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $OUT/$1.json; cp $p /tmp/$1.pickle; ls -la $p >> $N/$1.log
  xz -6 -T4 -c $p > $OUT/$1.pickle.xz
}
for n in ${NAMES:-gptneox_serve phi_sample bloom_beam}; do cap $n $1 & done
wait
cat $N/*.log | grep -v -i warn | tail -30
ls -la $OUT /tmp/*.pickle
