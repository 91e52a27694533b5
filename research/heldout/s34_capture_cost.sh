#!/bin/bash
# Session 34: what recording costs the recorded program. The llama_serve_many run recorded by
# capture's hook answered 839 generate calls in 210 s (about 55 ms per decoding step, as
# mixtral_serve's steps of a model 20 times larger): the same workload for S seconds plain,
# with `_record_memory_history(context=None)` only, with the GPU trace activated as the hook's
# driver-memory note does (no callback; then with its per-allocation `cudaMemGetInfo`), and
# under the hook itself (cap.sh). Each prints the requests it answered in S seconds.
# Usage (device tool): S=15 bash research/heldout/s34_capture_cost.sh
set -u
cd "$(dirname "$0")/../.."
S=${S:-15}; W=research/heldout/workloads_s34.py
run() { echo "== $1"; python3 -c "
import sys, runpy, torch
$2
sys.argv = ['w', 'llama_serve_many', '$S']; runpy.run_path('$W', run_name='__main__')" 2>&1 | tail -2; }
run plain "pass"
run history "torch.cuda.memory._record_memory_history(context=None, max_entries=50000000)"
run "history + gpu trace" "torch.cuda.memory._record_memory_history(context=None, max_entries=50000000); torch._C._activate_gpu_trace()"
run "history + gpu trace + cudaMemGetInfo per allocation" "
torch.cuda.memory._record_memory_history(context=None, max_entries=50000000)
from torch.cuda import _gpu_trace
g = torch.cuda.cudart().cudaMemGetInfo
_gpu_trace.register_callback_for_memory_allocation(lambda p: g(0))
torch._C._activate_gpu_trace()"
echo "== capture's hook"; bash research/driver-probes/s23/cap.sh llama_cost=$W:llama_serve_many,$S 2>&1 | tail -3; cat $OUT/llama_cost.log
