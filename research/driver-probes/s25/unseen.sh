#!/bin/bash
# Session 25: two workloads the project never recorded (research/heldout/workloads_s25.py),
# recorded with allocreplay capture's hook (s23/cap.sh), then issue 30's side by side on them:
# base = 2351a7a's release extension, new8 = this session's (offline split), from device/s25
# (carried). Each capture comes back as NAME.{json,log,pickle.xz}, the table in unseen.txt.
cd "$(dirname "$0")/../../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SECS=${SECS:-75}
bash research/driver-probes/s23/cap.sh mistral_serve=research/heldout/workloads_s25.py:mistral_serve,$SECS \
        gpt2_beam=research/heldout/workloads_s25.py:gpt2_beam,$SECS
for b in base new8; do rm -f device/s25/$b.so; xz -dk device/s25/$b.so.xz; done
for n in mistral_serve gpt2_beam; do xz -T8 -dc $OUT/$n.pickle.xz > /tmp/$n.pickle; done
uptime
python3 benches/core_side_by_side.py ${ROUNDS:-3} base=device/s25/base.so new8=device/s25/new8.so -- /tmp/mistral_serve.pickle /tmp/gpt2_beam.pickle 2>&1 | tee $OUT/unseen.txt
uptime
ls -la $OUT
