#!/bin/bash
# Session 23 (2026-12-06, one H100): recordings with allocreplay capture's own hook (host_va and
# driver_memory noted), stacks none, one at a time (the driver-memory note reads the GPU's free
# memory: a second process on the GPU would count as the driver's). NAME=SCRIPT:ARG1,ARG2,...
# STACKS=python records Python stacks (default none); CAPS_TAR=1 (session 24) appends each capture to
# $OUT/caps.tar, since only a few files come back from the device.
# Run: bash research/driver-probes/s23/cap.sh gpt2_small_train=research/band/band_workloads.py:gpt2_small_train ...
set -u
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; t=ast.parse(open("python/allocreplay/capture/_runner.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HOOK_FILES")))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; script=${rest%%:*}; args=${rest#*:}
  IFS=, read -r -a a <<< "$args"
  R=$(mktemp -d); t0=$(date +%s.%N)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"${STACKS:-none}\"}" python3 $script "${a[@]}" > $OUT/$name.log 2>&1
  echo "$name rc=$? $(python3 -c "import time; print(round(time.time()-$t0, 1))")s" | tee -a $OUT/$name.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $OUT/$name.json
  python3 -c "import json; j=json.load(open('$j')); d=j.get('driver_memory'); h=j.get('host_va'); print('$name wall_s', round(j.get('wall_s', 0), 1), 'host_va', None if h is None else (len(h['changes']), h['error']), 'driver_memory', d and (d['changes'][:12], d['error']))"
  # Session 34: KEEP_RAW=1 keeps the plain pickle in /tmp/NAME.pickle (validated there); XZ sets xz's level and threads.
  [ -n "${KEEP_RAW:-}" ] && cp $p /tmp/$name.pickle
  xz ${XZ:--6 -T8} -c $p > $OUT/$name.pickle.xz
  if [ -n "${CAPS_TAR:-}" ]; then tar -rf $OUT/caps.tar -C $OUT $name.json $name.pickle.xz $name.log && rm $OUT/$name.json $OUT/$name.pickle.xz $OUT/$name.log; fi
done
