#!/bin/bash
# Multi-million-entry real captures for the speed benches (issue 12): qwen2_generate (workloads.py),
# recorded by allocreplay capture's own hook, without stack frames (16 steps) and with Python
# stacks (2 steps). xz -9; split into 15 MiB parts if larger.
set -u
D=device/asyncheld
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in _hook.py _pytorch.py _jax.py _tf.py; do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
one() {
  R=$(mktemp -d); t0=$(date +%s)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"$2\"}" python3 $D/workloads.py qwen2_generate $1 2>&1 | grep -v Warn | tail -2
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  ls -la $p; echo "capture $(( $(date +%s)-t0 ))s"
  xz -9 -T8 -c $p > /tmp/$3.pickle.xz; cp $j $OUT/$3.json; ls -la /tmp/$3.pickle.xz
  split -b 15M -d /tmp/$3.pickle.xz $OUT/$3.pickle.xz.part
}
one 16 none qwen2_generate_long__nostacks &
one 2 python qwen2_generate_long__python &
wait
ls -la $OUT
