#!/bin/bash
# Session 18 on the H200: recordings with allocreplay capture's own hook (as `allocreplay
# capture` injects it, now with `_hostva.py`: the host ranges freed while the model moves to the
# GPU, issue 29 item 1), stacks none. Each argument is NAME=SCRIPT:WORKLOAD:ARG (SCRIPT's usage:
# python SCRIPT WORKLOAD ARG). Writes NAME.pickle.xz to $OUT and every NAME.json into
# $OUT/json.tar.xz. Usage (repo root): bash research/heldout/capture_s18.sh NAME=SCRIPT:WORKLOAD:ARG...
# The recording itself is research/driver-probes/s20_cap.sh's (which takes any arguments:
# NAME=SCRIPT:ARG1,ARG2,...): each spec is passed on as NAME=SCRIPT:WORKLOAD,ARG.
set -u
specs=()
for spec in "$@"; do
  name=${spec%%=*}; rest=${spec#*=}; IFS=: read -r script wl arg <<< "$rest"
  specs+=("$name=$script:$wl${arg:+,$arg}")
done
exec bash "$(dirname "$0")/../driver-probes/s20_cap.sh" "${specs[@]}"
