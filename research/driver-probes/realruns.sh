# Real runs under backend:cudaMallocAsync with every cudaMallocAsync/cudaFreeAsync logged
# (shim.c), repeated to see how much the driver's result varies from run to run.
# Usage: bash realruns.sh OUTDIR "workload:steps:repeats ..."
cd "$(dirname "$0")"
O=${1:-/tmp/realruns}; mkdir -p "$O"
gcc -O2 -shared -fPIC -o /tmp/shim.so shim.c -ldl || exit 1
export PYTHONUNBUFFERED=1 PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
for spec in ${2:-two_streams:12:6}; do
  IFS=: read w steps n <<< "$spec"
  for i in $(seq 1 "$n"); do
    ALLOCLOG=$O/${w}__async_r$i.log LD_PRELOAD=/tmp/shim.so python3 w.py "$w" "$steps" "$O/${w}__async_r$i"
    xz -T0 -6 "$O/${w}__async_r$i.log"
  done
done
ls -la "$O"
