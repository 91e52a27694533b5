#!/bin/bash
# Session 34 (issue 30): which of the GPU host's CPUs share a physical core, and `offline` on
# two CPUs that do (taskset -c 2,3, as sessions 26-33 measured "two cores") against two that do
# not, and on one; then the spread of a first `_core.load` from process to process. Builds:
# D/before.so.xz (a3a3430, the issue's baseline) and D/after.so.xz; recordings carried in
# device/s33 (never tuned on). Usage (device tool, carry D and device/s33):
# D=device/s34 bash research/heldout/s34_cores.sh
set -u
cd "$(dirname "$0")/../.."
D=${D:-device/s34}
lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA node'
for c in 0 1 2 3 4 8 9 10; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list) core_id $(cat /sys/devices/system/cpu/cpu$c/topology/core_id)"; done
for b in before after; do xz -dc $D/$b.so.xz > /tmp/$b.so; done
T=""; for x in device/s33/*.pickle.xz; do n=$(basename $x .pickle.xz); xz -T16 -dc $x > /tmp/$n.pickle; T="$T /tmp/$n.pickle"; done
# The first CPU that is not 2 nor 2's sibling.
S=$(cat /sys/devices/system/cpu/cpu2/topology/thread_siblings_list)
B=$(python3 -c "
s=set();
for p in '$S'.split(','):
    a,_,b=p.partition('-'); s.update(range(int(a), int(b or a)+1))
print(next(c for c in range(4, 64) if c not in s))")
echo "cpu2 siblings: $S; the other CPU of the unshared pair: $B"
sleep 20; uptime
A="before=/tmp/before.so after=/tmp/after.so --$T"
export CORE_SIDE_BY_SIDE_POLICIES=offline CORE_SIDE_BY_SIDE_CALLS=3
for cpus in 2,3 2,$B 2; do echo "== taskset -c $cpus"; taskset -c $cpus python3 benches/core_side_by_side.py 2 $A 2>&1 | grep -v '^{'; done
uptime
for t in $T; do echo "== load spread $t (ms: first load in a fresh process, then two more)"; for i in 1 2 3 4 5 6; do python3 research/heldout/s34_load_spread.py /tmp/after.so $t 3; done; done
