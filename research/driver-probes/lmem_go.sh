# Session 20 (2026-12-06, one H100 80GB, driver 580.159.04): does a kernel that needs more local
# memory per thread move the CUDA context's own allocations? Output: lmem-h100-580.159.txt.
cd "$(dirname "$0")"
nvcc -O2 -arch=sm_90 -o lmem lmem.cu || exit 1
./lmem
