#!/bin/bash
# Session 23: does moving the driver's local memory (and placing the driver's own allocations) at
# the points watch.py saw explain the first misses of gpt2_small_train and vit_b32_train?
# Applies lmem_and_driver_allocs.patch (session 20's local-memory model, plus a `[allocs, bytes,
# 1]` change = a driver cudaMalloc of `bytes`, an experiment only) to a worktree, writes the
# changes into copies of the two H100 captures (recorded by research/driver-probes/s20_cap.sh with
# the capture's hook), and lists the segments at the recorded relative address with and without.
set -eu
here=$(cd "$(dirname "$0")" && pwd); repo=$(cd "$here/../../.." && pwd)
w=$(mktemp -d); git -C "$repo" worktree add -q "$w/wt" 64f2fda;  # the commit it was written for (the patch predates the model of 0a15270)
trap 'git -C "$repo" worktree remove --force "$w/wt"' EXIT
git -C "$w/wt" apply "$here/lmem_and_driver_allocs.patch"
(cd "$w/wt" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$w/target} cargo build -q --release -p allocreplay-core --example address_agreement)
bin=${CARGO_TARGET_DIR:-$w/target}/release/examples/address_agreement
M=$((1 << 20))
# watch.py's events in the same workloads (alloc indices of its run; the hook's run counts a few
# fewer): gpt2 +2@77 +90@78 +66@90 +2@102 +64@268; vit +2@153 +90@155 +10@159 +64@170 +2@182.
# 1373 bytes of stack x 270,336 threads + 150 MiB = 504 MiB, the 414 MiB buffer + 90 MiB.
declare -A CH=(
  [gpt2_small_train_hv]="[[75, $((2*M)), 1], [78, 1373], [88, $((64*M)), 1], [88, $((2*M)), 1], [90, $((2*M)), 1]]"
  [vit_b32_train_hv]="[[155, 1373], [168, $((64*M)), 1]]"
)
for n in gpt2_small_train_hv vit_b32_train_hv; do
  cp "$here/captures/$n.pickle.xz" "$w/"; cp "$here/captures/$n.json" "$w/"
  echo "== $n, as recorded:"; "$bin" "$w/$n.pickle.xz" | head -1
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); j['local_memory']={'threads':132*2048,'stack_start':1024,'changes':json.loads(sys.argv[2])}; json.dump(j,open(sys.argv[1],'w'))" "$w/$n.json" "${CH[$n]}"
  echo "== $n, with ${CH[$n]}:"; "$bin" "$w/$n.pickle.xz" | head -1
done
