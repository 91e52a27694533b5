#!/bin/bash
# Session 36, one device call: the wide-batch servers of workloads_s36.py recorded with
# capture's hook until N requests or SECS seconds each, validated on the device with and without
# recorded addresses (s34_serve_many.sh; the recordings come back in 15 MiB parts), then, if
# fewer than LEFT seconds have passed, the probe of where a decoding step's 70 ms go
# (s36_probe.sh, S seconds a run; $OUT/probe.txt).
# Usage (device tool, carry device/s34): S=40 SECS=180 N=250000 bash research/heldout/s36_go.sh
# (WS="llama_serve_wide:120": those workloads only; LEFT=0: no probe)
set -u
cd "$(dirname "$0")/../.."
WL=research/heldout/workloads_s36.py W="${WS:-llama_serve_wide:${SECS:-180} neox_serve_wide:${SECS:-180}}" N=${N:-250000} XZ="-6 -T16" bash research/heldout/s34_serve_many.sh 2>&1 | tail -40
echo "serve done at ${SECONDS}s"
if [ $SECONDS -lt ${LEFT:-380} ]; then S=${S:-40} bash research/heldout/s36_probe.sh > $OUT/probe.txt 2>&1; cat $OUT/probe.txt; fi
echo "all done at ${SECONDS}s"
