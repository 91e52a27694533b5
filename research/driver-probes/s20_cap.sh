#!/bin/bash
# Session 20 (2026-12-06, one H100): recordings with allocreplay capture's own hook, stacks none, any arguments: NAME=SCRIPT:ARG1,ARG2,...
# (python SCRIPT ARGS). Run: bash research/driver-probes/s20_cap.sh gpt2_small_train_hv=research/band/band_workloads.py:gpt2_small_train ...
# (the seven of docs/driver-address-space.md, "The context's local memory").
set -u
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; t=ast.parse(open("python/allocreplay/capture/_runner.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HOOK_FILES")))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d); J=$(mktemp -d)
cap() { # NAME SCRIPT ARGS...
  name=$1; shift
  R=$(mktemp -d); t0=$(date +%s)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 "$@" > $N/$name.log 2>&1
  echo "$name rc=$? $(( $(date +%s)-t0 ))s" >> $N/$name.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $J/$name.json; ls -la $p >> $N/$name.log
  python3 -c "import json,sys; h=json.load(open('$j')).get('host_va'); print('$name host_va', None if h is None else (len(h['changes']), h['error'], hex(h['mmap_base'] or 0), hex(h['context_top'] or 0)))" >> $N/$name.log
  xz -6 -T4 -c $p > $OUT/$name.pickle.xz
}
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; script=${rest%%:*}; args=${rest#*:}
  IFS=, read -r -a a <<< "$args"
  cap $name $script "${a[@]}" &
done
wait
tar -C $J -cJf $OUT/json.tar.xz .
cat $N/*.log | grep -v -i warn | tail -60
ls -la $OUT
