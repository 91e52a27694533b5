#!/bin/bash
# Session 18 on the H200: recordings with allocreplay capture's own hook (as `allocreplay
# capture` injects it, now with `_hostva.py`: the host ranges freed while the model moves to the
# GPU, issue 29 item 1), stacks none. Each argument is NAME=SCRIPT:WORKLOAD:ARG (SCRIPT's usage:
# python SCRIPT WORKLOAD ARG). Writes NAME.pickle.xz to $OUT and every NAME.json into
# $OUT/json.tar.xz. Usage (repo root): bash research/heldout/capture_s18.sh NAME=SCRIPT:WORKLOAD:ARG...
set -u
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; t=ast.parse(open("python/allocreplay/capture/_runner.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HOOK_FILES")))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d); J=$(mktemp -d)
cap() { # NAME SCRIPT WORKLOAD ARG
  R=$(mktemp -d); t0=$(date +%s)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $2 $3 $4 > $N/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s" >> $N/$1.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $J/$1.json; ls -la $p >> $N/$1.log
  python3 -c "import json,sys; h=json.load(open('$j')).get('host_va'); print('$1 host_va', None if h is None else (len(h['changes']), h['error'], hex(h['mmap_base'] or 0), hex(h['context_top'] or 0)))" >> $N/$1.log
  xz -6 -T4 -c $p > $OUT/$1.pickle.xz
}
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; IFS=: read -r script wl arg <<< "$rest"
  cap $name $script $wl $arg &
done
wait
tar -C $J -cJf $OUT/json.tar.xz .
cat $N/*.log | grep -v -i warn | tail -40
ls -la $OUT
