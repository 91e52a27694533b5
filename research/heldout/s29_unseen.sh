#!/bin/bash
# Prepared in session 29, not yet run (no GPU machine came that session): two held-out workloads
# recorded with capture's hook (workloads_s29.py), then issue 30's side by side on them with
# core_side_by_side.py: 16 cores every policy, then offline on one core and on two. The builds are
# release extensions xz'd into the carried, git-ignored folder D: D/before.so.xz (a3a3430, the
# issue's baseline) and D/after.so.xz (the build under test). A workload that records nothing is
# replaced by session 25's of its kind. Comes back: NAME.pickle.xz, meta.tar.xz (json, logs),
# results.txt.
# Usage (device tool, carry D): D=device/s29 SECS=60 bash research/heldout/s29_unseen.sh
# (W="falcon_serve" for one workload, ROUNDS / ROUNDS1 rounds at 16 cores / one and two, SKIP2=1
# skips two cores, IDLE=60 waits a minute before timing; session 33: WF=research/heldout/
# workloads_s33.py W="mixtral_serve bart_beam" records another file's workloads, with no
# fallback; EXTRA adds carried recordings.)
set -u
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; uptime
D=${D:-device/s29}; SECS=${SECS:-60}; W="${W:-gptj_sample falcon_serve}"; WF=${WF:-research/heldout/workloads_s29.py}
for b in before after; do xz -dkf $D/$b.so.xz; done
bash research/driver-probes/s23/cap.sh $(for w in $W; do echo $w=$WF:$w,$SECS; done) > /tmp/cap.txt 2>&1
cat /tmp/cap.txt
# A workload that recorded nothing (a model family missing from this transformers) is replaced
# by session 25's held-out one of its kind.
W2=""
for n in $W; do
  if [ -s $OUT/$n.pickle.xz ]; then W2="$W2 $n"; continue; fi
  if [ $WF != research/heldout/workloads_s29.py ]; then echo "$n recorded nothing"; continue; fi
  alt=$([ $n = gptj_sample ] && echo gpt2_beam || echo mistral_serve); echo "$n failed: $alt instead"
  rm -f $OUT/$n.pickle.xz
  bash research/driver-probes/s23/cap.sh $alt=research/heldout/workloads_s25.py:$alt,$SECS 2>&1 | tail -5
  W2="$W2 $alt"
done
W=$W2
for n in $W; do xz -T16 -dc $OUT/$n.pickle.xz > /tmp/$n.pickle; done
# Session 33: EXTRA="D/NAME.pickle.xz ..." adds recordings made by an earlier call (carried) to
# the side by side.
for x in ${EXTRA:-}; do n=$(basename $x .pickle.xz); xz -T16 -dc $x > /tmp/$n.pickle; W="$W $n"; done
tar -C $OUT -cJf $OUT/meta.tar.xz $(cd $OUT; ls *.json *.log) && (cd $OUT; rm -f *.json *.log)
R=$OUT/results.txt
# Session 32: the first side by side began with the load at 2.6 (the recordings' compression just
# done); IDLE seconds of nothing first (default 0).
sleep ${IDLE:-0}
run() { echo "== $*" | tee -a $R; uptime | tee -a $R; "$@" 2>&1 | tee -a $R; }
A="before=$D/before.so after=$D/after.so -- $(for n in $W; do echo /tmp/$n.pickle; done)"
run python3 benches/core_side_by_side.py ${ROUNDS:-3} $A
CORE_SIDE_BY_SIDE_POLICIES=offline run taskset -c 2 python3 benches/core_side_by_side.py ${ROUNDS1:-2} $A
[ -n "${SKIP2:-}" ] || CORE_SIDE_BY_SIDE_POLICIES=offline run taskset -c 2,3 python3 benches/core_side_by_side.py ${ROUNDS1:-2} $A
uptime | tee -a $R
ls -la $OUT
# Session 31: where the driver's own memory goes in vit_b32_train (issue 29: the model misplaces
# its 12 MiB segments, docs/driver-address-space.md): watch.py's full output (every driver event
# with the host mappings that changed), run only when the script has time left.
if [ $SECONDS -lt ${PROBE_BEFORE:-430} ]; then
  (cd research/driver-probes/s23 && timeout $(( 560 - SECONDS )) python3 watch.py vit_b32_train > $OUT/vit_b32_watch.txt 2>&1; echo "watch rc=$?" >> $OUT/vit_b32_watch.txt)
  tail -3 $OUT/vit_b32_watch.txt
fi
