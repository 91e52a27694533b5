#!/bin/bash
# Session 34 (issue 29 item 1): serving runs of hundreds of thousands of requests
# (workloads_s34.py), recorded with capture's hook (cap.sh: host_va and driver_memory noted,
# stacks none), then validated on the device itself with and without recorded addresses
# (s34_validate.py, through the release extension D/after.so.xz: the device has no Polars).
# Comes back: results.txt (the validation lines), meta.tar.xz (json, logs), and each recording
# xz'd in parts of at most 15 MiB (NAME.pickle.xz.part_aa, ...: `cat` them back together).
# Usage (device tool, carry D; as run in session 34): D=device/s34 W="llama_serve_many:210 neox_serve_many:90" N=250000 bash research/heldout/s34_serve_many.sh
# Session 35: WL names the workloads' script (default workloads_s34.py); KEEP=0 brings no
# recording back (the validation lines and the capture's json only), for runs too large to carry.
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
D=${D:-device/s34}; N=${N:-250000}; WL=${WL:-research/heldout/workloads_s34.py}
xz -dc $D/after.so.xz > /tmp/core.so
R=$OUT/results.txt
for spec in ${W:-llama_serve_many:300 neox_serve_many:170}; do
  n=${spec%%:*}; secs=${spec#*:}
  KEEP_RAW=1 XZ="${XZ:--3 -T16}" bash research/driver-probes/s23/cap.sh $n=$WL:$n,$secs,$N 2>&1 | tee -a $R
  cat $OUT/$n.log | tee -a $R
  python3 research/heldout/s34_validate.py /tmp/core.so /tmp/$n.pickle:$OUT/$n.json 2>&1 | tee -a $R
  ls -la $OUT/$n.pickle.xz | tee -a $R
  if [ "${KEEP:-1}" = 0 ]; then rm $OUT/$n.pickle.xz; else split -b 15M $OUT/$n.pickle.xz $OUT/$n.pickle.xz.part_ && rm $OUT/$n.pickle.xz; fi
  rm -f /tmp/$n.pickle
  echo "at ${SECONDS}s" | tee -a $R
done
tar -C $OUT -cJf $OUT/meta.tar.xz $(cd $OUT; ls *.json *.log) && (cd $OUT; rm -f *.json *.log)
ls -la $OUT
