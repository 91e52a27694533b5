#!/bin/bash
# Session 35, one device call: the plain decoding loop of workloads_s35.py recorded with
# capture's hook until N requests or SECS seconds and validated on the device with and without
# recorded addresses (s34_serve_many.sh; no recording comes back, KEEP=0), then, in what time
# is left, the probe of session 34's pauses (s35_probe.sh, S seconds a run; $OUT/probe.txt).
# Usage (device tool, carry device/s34): S=5 SECS=100 N=250000 bash research/heldout/s35_go.sh
set -u
cd "$(dirname "$0")/../.."
WL=research/heldout/workloads_s35.py W="llama_serve_loop:${SECS:-100}" N=${N:-250000} KEEP=0 XZ="-0 -T16" bash research/heldout/s34_serve_many.sh 2>&1 | tail -30
echo "serve done at ${SECONDS}s"
S=${S:-5} bash research/heldout/s35_probe.sh > $OUT/probe.txt 2>&1
echo "all done at ${SECONDS}s"; cat $OUT/probe.txt
