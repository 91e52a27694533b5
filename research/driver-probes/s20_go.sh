# Session 20 (2026-12-06, one H100, driver 580.159.04): the segment sequences of six captures
# that fail `validate --no-addresses` replayed with raw cudaMalloc/cudaFree in fresh processes
# (tests/data/va-h100-580.159.txt), each also with /proc/self/maps after every call.
# seq/: research/driver-probes/extract_seq_s20.py's lines ('a ID SIZE RECADDR' / 'f ID') of
# traces/emptycache_lm, traces/cuda/{gpt2_small_train,llama_generate_b,t5_generate,
# efficientnet_train,vit_b32_train}__default, written here before the call.
cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nvcc -O2 -o va2 va2.cu -lcuda || exit 1
mkdir -p $OUT/log
for f in seq/*.seq; do n=$(basename $f .seq); ./va2 $f > $OUT/log/raw__$n.txt 2>&1; ./va2 $f maps > $OUT/log/maps__$n.txt 2>&1; done
(cd $OUT && tar cJf logs.tar.xz log && rm -rf log)
