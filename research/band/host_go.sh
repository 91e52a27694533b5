#!/bin/bash
# Session 14, issue 29 item 1: captures with the hook then extended by capture/_hostmaps.py (now
# research/driver-probes/hostmaps_hook.py: it only added host_freed_ranges to the .json). Usage (repo root): bash research/band/host_go.sh -> $OUT
set -u
D=research/band
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; src=open("python/allocreplay/capture/_runner.py").read(); print(" ".join(ast.literal_eval(src.split("HOOK_FILES = ",1)[1].split("\n",1)[0])))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d)
cap() { # name workload steps alloc_conf
  R=$(mktemp -d); t0=$(date +%s)
  PYTORCH_CUDA_ALLOC_CONF="$4" PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $D/workloads_new.py $2 $3 > $N/$1.log 2>&1
  echo "$1 rc=$? $(( $(date +%s)-t0 ))s" >> $N/$1.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $OUT/$1.json; xz -7 -T4 -c $p > $OUT/$1.pickle.xz
}
cap opt350_serve_h__default opt350_serve 40 "" &
cap opt350_serve_h__pow2div4 opt350_serve 40 "roundup_power2_divisions:4" &
cap gemma_generate_h__default gemma_generate 5 "" &
wait
cat $N/*.log | grep -v -i warn | tail -12
python3 -c "import json,glob; [print(f, len((json.load(open(f)).get('host_freed_ranges') or {}).get('freed', [])), (json.load(open(f)).get('host_freed_ranges') or {}).get('error')) for f in glob.glob('$OUT/*.json')]"
ls -la $OUT
