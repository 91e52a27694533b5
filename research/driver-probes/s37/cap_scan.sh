#!/bin/bash
# Session 37 (issue 29): research/driver-probes/s23/cap.sh's recordings, plus scanlib.py's list of
# the driver's allocations at each change of its memory and at exit ($OUT/NAME.scan.json, added
# to caps.tar). Run from the repository root: bash research/driver-probes/s37/cap_scan.sh NAME=SCRIPT:ARGS ...
set -u
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
H=$(mktemp -d); mkdir -p $H/_allocreplay_capture
for f in $(python3 -c 'import ast; t=ast.parse(open("python/allocreplay/capture/_runner.py").read()); print(" ".join(next(ast.literal_eval(n.value) for n in t.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "HOOK_FILES")))'); do cp python/allocreplay/capture/$f $H/_allocreplay_capture/; done
touch $H/_allocreplay_capture/__init__.py
cp research/driver-probes/s37/scanlib.py $H/
cat > $H/sitecustomize.py <<'PY'
import atexit
import scanlib
from _allocreplay_capture import _hostva
_orig = _hostva.HostVA.note_driver_change
def _note(self, index):
    _orig(self, index)
    scanlib.note(index)
_hostva.HostVA.note_driver_change = _note
from _allocreplay_capture import _hook
_hook.boot()
atexit.register(scanlib.dump)
PY
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; script=${rest%%:*}; args=${rest#*:}
  IFS=, read -r -a a <<< "$args"
  R=$(mktemp -d); t0=$(date +%s.%N)
  SCAN_OUT=$OUT/$name.scan.json PYTHONPATH=$H ALLOCREPLAY_CAPTURE="{\"dir\": \"$R\", \"frameworks\": [\"pytorch\"], \"max_entries\": 50000000, \"stacks\": \"none\"}" python3 $script "${a[@]}" > $OUT/$name.log 2>&1
  echo "$name rc=$? $(python3 -c "import time; print(round(time.time()-$t0, 1))")s" | tee -a $OUT/$name.log
  p=$(ls $R/torch-*.pickle | head -1); j=$(ls $R/torch-*-dev0.json | head -1)
  cp $j $OUT/$name.json
  python3 -c "import json; j=json.load(open('$j')); d=j.get('driver_memory'); s=json.load(open('$OUT/$name.scan.json')); print('$name driver_memory', d and d['changes'][:12], 'scans', len(s['scans']), 'final', len(s.get('final', [])), 'segments', len(s.get('segments', [])), s.get('error'))"
  xz -6 -T8 -c $p > $OUT/$name.pickle.xz
  tar -rf $OUT/caps.tar -C $OUT $name.json $name.pickle.xz $name.log $name.scan.json && rm $OUT/$name.json $OUT/$name.pickle.xz $OUT/$name.log $OUT/$name.scan.json
done
ls -la $OUT
