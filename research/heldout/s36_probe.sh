#!/bin/bash
# Session 36: session 35's probe ran its workloads 5 s each, which the model's construction
# (transformers' import alone: 7.5 s) used up before a request was answered. The same questions,
# S seconds each (the clock starts before the model is built): requests a plain decoding loop
# (workloads_s35.py) answers plain and under `_record_memory_history(context=None)` alone, each
# with a cProfile of where the Python thread's time went, and `generate` (workloads_s34.py) plain.
# Usage (device tool): S=45 bash research/heldout/s36_probe.sh
set -u
cd "$(dirname "$0")/../.."
S=${S:-45}
run() { echo "== $1 ($2)"; python3 -c "
import sys, runpy, torch, cProfile, pstats
sys.path.insert(0, 'research/heldout')
$3
sys.argv = ['w', '$2', '$S']
cProfile.run(\"runpy.run_path('research/heldout/$4', run_name='__main__')\", '/tmp/prof')
pstats.Stats('/tmp/prof').sort_stats('tottime').print_stats(12)" 2>&1 | grep -v "^$" | grep -v "Ordered by\|List reduced" | tail -16; }
nvidia-smi --query-gpu=name,driver_version,utilization.gpu --format=csv,noheader
run "loop, plain" llama_serve_loop "pass" workloads_s35.py
run "loop, history" llama_serve_loop "torch.cuda.memory._record_memory_history(context=None, max_entries=50000000)" workloads_s35.py
run "generate, plain" llama_serve_many "pass" workloads_s34.py
run "generate, history" llama_serve_many "torch.cuda.memory._record_memory_history(context=None, max_entries=50000000)" workloads_s34.py
