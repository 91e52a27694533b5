#!/bin/bash
# Session 35: where session 34's decoding steps paused (S seconds each: s34_capture_cost.sh,
# then a profile of the plain `generate` run), and how many requests the plain decoding loop of
# workloads_s35.py answers in S seconds, plain and under capture's hook.
# Usage (device tool): S=10 bash research/heldout/s35_probe.sh
set -u
cd "$(dirname "$0")/../.."
S=${S:-10}
S=$S bash research/heldout/s34_capture_cost.sh
echo "== s35 loop, plain"; python3 research/heldout/workloads_s35.py llama_serve_loop $S 2>&1 | tail -1
echo "== s35 loop, capture's hook"; bash research/driver-probes/s23/cap.sh loop_cost=research/heldout/workloads_s35.py:llama_serve_loop,$S 2>&1 | tail -2; cat $OUT/loop_cost.log
echo "== profile, s34 generate, plain"
python3 -c "
import sys, runpy, cProfile, pstats
sys.argv = ['w', 'llama_serve_many', '$S']
cProfile.run(\"runpy.run_path('research/heldout/workloads_s34.py', run_name='__main__')\", '/tmp/prof')
pstats.Stats('/tmp/prof').sort_stats('tottime').print_stats(15)" 2>&1 | grep -v "^$" | tail -22
rm -f $OUT/*.pickle.xz
