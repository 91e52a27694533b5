#!/usr/bin/env bash
# Captures the example traces shipped in traces/ on a GPU machine with PyTorch and JAX, each with
# `allocreplay capture` (or `allocreplay.capture()` in-process), and validates every one: the
# replay under the settings the capture recorded must reproduce the real allocator's decisions.
#
#   scripts/capture_examples.sh [DEST]      # DEST: where the traces go (default: traces)
#
# Needs allocreplay installed (pip install .) in the Python that has torch and jax ($PYTHON,
# default python3). Exit code 1 when a capture or a validation failed.
set -u -o pipefail
cd "$(dirname "$0")/.."
DEST=${1:-traces}
PY=${PYTHON:-python3}
AR=("$PY" -m allocreplay)
EX=scripts/examples
status=0
mkdir -p "$DEST" "$DEST/multi"

step() {
    echo "== $*"
    "$@"
    local rc=$?
    if [ "$rc" -ne 0 ]; then echo "!! exit code $rc: $*"; status=1; fi
}

check() {  # validate a capture, readable and as JSON
    step "${AR[@]}" validate "$1"
    "${AR[@]}" validate "$1" --json > "${1%.arrow}.validate.json" 2>&1
}

# PyTorch: the default caching allocator, then expandable segments.
step "${AR[@]}" capture -o "$DEST/torch_train.arrow" -- "$PY" $EX/torch_train.py
check "$DEST/torch_train.arrow"
step env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${AR[@]}" capture -o "$DEST/torch_train__expandable.arrow" -- "$PY" $EX/torch_train.py
check "$DEST/torch_train__expandable.arrow"

# PyTorch out of memory under a 1 GiB cap: the script fails (exit code 1), the trace is written.
echo "== capture of a run that runs out of memory (exit code 1 expected)"
"${AR[@]}" capture -o "$DEST/torch_oom.arrow" --stacks none -- "$PY" $EX/torch_oom.py > "$DEST/torch_oom.log" 2>&1
rc=$?
tail -n 4 "$DEST/torch_oom.log"
if [ "$rc" -ne 1 ]; then echo "!! expected exit code 1 from the OOM run, got $rc"; status=1; fi
check "$DEST/torch_oom.arrow"

# JAX: BFC with its default preallocation, then growing on demand; XLA's dumps come along.
step "${AR[@]}" capture -o "$DEST/jax_train.arrow" -- "$PY" $EX/jax_train.py
check "$DEST/jax_train.arrow"
step env XLA_PYTHON_CLIENT_PREALLOCATE=false "${AR[@]}" capture -o "$DEST/jax_train__noprealloc.arrow" -- "$PY" $EX/jax_train.py
check "$DEST/jax_train__noprealloc.arrow"

# In-process, around a block.
step env PYTHONPATH="$EX${PYTHONPATH:+:$PYTHONPATH}" "$PY" $EX/torch_inprocess.py "$DEST/torch_inprocess.arrow"
check "$DEST/torch_inprocess.arrow"
step env PYTHONPATH="$EX${PYTHONPATH:+:$PYTHONPATH}" "$PY" $EX/jax_inprocess.py "$DEST/jax_inprocess.arrow"
check "$DEST/jax_inprocess.arrow"

# Several GPUs (when the machine has them): one trace per device. DistributedDataParallel, one
# process per GPU under torchrun; JAX data-parallel in one process (one BFC allocator per GPU).
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "$NGPU" -ge 2 ]; then
    step "${AR[@]}" capture -o "$DEST/multi/torch_ddp.arrow" -- "$PY" -m torch.distributed.run --nproc_per_node "$NGPU" $EX/torch_ddp.py
    step "${AR[@]}" capture -o "$DEST/multi/jax_2gpu.arrow" -- "$PY" $EX/jax_2gpu.py
    for f in "$DEST"/multi/*.arrow; do check "$f"; done
fi

for f in "$DEST"/*.arrow; do "${AR[@]}" info "$f" | sed -n '1,3p;/recorded peak/p'; done
echo "status: $status"
exit $status
