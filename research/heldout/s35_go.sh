#!/bin/bash
# Session 35, one device call: the probe of session 34's pauses (s35_probe.sh, S seconds a run),
# then the plain decoding loop recorded with capture's hook until N requests or SECS seconds and
# validated on the device with and without recorded addresses (s34_serve_many.sh; no recording
# comes back, KEEP=0). Usage (device tool, carry device/s34): S=8 SECS=200 N=250000 bash research/heldout/s35_go.sh
set -u
cd "$(dirname "$0")/../.."
S=${S:-8} bash research/heldout/s35_probe.sh 2>&1 | tee $OUT/probe.txt
echo "probe done at ${SECONDS}s"
WL=research/heldout/workloads_s35.py W="llama_serve_loop:${SECS:-200}" N=${N:-250000} KEEP=0 XZ="-0 -T16" bash research/heldout/s34_serve_many.sh 2>&1 | tail -30
echo "all done at ${SECONDS}s"
