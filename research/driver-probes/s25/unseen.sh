#!/bin/bash
# Session 25: workloads the project never recorded (research/heldout/workloads_s25.py), recorded
# with allocreplay capture's hook (s23/cap.sh), then issue 30's side by side on them: each build
# NAME in BUILDS is device/s25/NAME.so.xz (carried; base = 2351a7a's release extension). Each
# capture comes back as NAME.{json,log,pickle.xz}, the table in unseen.txt.
# Usage: SECS=70 WORKLOADS="mistral_serve gpt2_beam" BUILDS="base new8" bash research/driver-probes/s25/unseen.sh
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECS=${SECS:-75}
WORKLOADS="${WORKLOADS:-mistral_serve gpt2_beam}"
BUILDS="${BUILDS:-base new8}"
bash research/driver-probes/s23/cap.sh $(for w in $WORKLOADS; do echo $w=research/heldout/workloads_s25.py:$w,$SECS; done)
D=${D:-device/s25}
for b in $BUILDS; do xz -dkf $D/$b.so.xz; done
for n in $WORKLOADS; do xz -T8 -dc $OUT/$n.pickle.xz > /tmp/$n.pickle; done
uptime
python3 benches/core_side_by_side.py ${ROUNDS:-3} $(for b in $BUILDS; do echo $b=$D/$b.so; done) -- $(for n in $WORKLOADS; do echo /tmp/$n.pickle; done) 2>&1 | tee $OUT/unseen.txt
uptime
ls -la $OUT
