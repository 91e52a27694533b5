#!/bin/bash
# Session 13, issue 29 item 3: each of band_workloads.NAMES captured once under the native
# allocator (allocreplay capture's hook, stacks none), 5 at a time, then run REPEATS times under
# backend:cudaMallocAsync one at a time on the otherwise idle GPU. Everything into $OUT/band.tgz.
set -u
D=device/band; R=${REPEATS:-3}
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; src=open("python/allocreplay/capture/_runner.py").read(); print(" ".join(ast.literal_eval(src.split("HOOK_FILES = ",1)[1].split("\n",1)[0])))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
printf 'from _allocreplay_capture import _hook\n_hook.boot()\n' > $H/sitecustomize.py
N=$(mktemp -d)
names=$(python3 -c "import sys; sys.path.insert(0,'$D'); import band_workloads as b; print(' '.join(b.NAMES))" 2>/dev/null || grep -o '^NAMES = .*' $D/band_workloads.py | python3 -c "import ast,sys; print(' '.join(ast.literal_eval(sys.stdin.read().split('=',1)[1])))")
cap() {
  T=$(mktemp -d)
  PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$T\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $D/band_workloads.py $1 > $N/$1__default.log 2>&1
  echo "rc=$?" >> $N/$1__default.log
  p=$(ls $T/torch-*.pickle | head -1); j=$(ls $T/torch-*-dev0.json | head -1)
  xz -6 -c $p > $N/$1__default.pickle.xz; cp $j $N/$1__default.json
}
i=0; for w in $names; do cap $w & i=$((i+1)); [ $((i % 5)) = 0 ] && wait; done; wait
echo "native done $(date +%T)"; (cd $N && tar czf $OUT/band.tgz *)
for r in $(seq 1 $R); do for w in $names; do
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 60 python3 $D/band_workloads.py $w $N/${w}__async_r$r.json >> $N/async.log 2>&1 || echo "$w r$r failed" >> $N/async.log
done; echo "round $r done $(date +%T)"; (cd $N && tar czf $OUT/band.tgz *); done
grep -v -i warn $N/async.log | tail -40; tail -n1 $N/*__default.log | grep -B1 "rc=[^0]" || true
(cd $N && tar czf $OUT/band.tgz *)
ls -la $OUT
