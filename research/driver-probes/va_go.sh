# One batched device call: VA probes (raw cudaMalloc, fresh processes), the same sequences inside
# PyTorch processes, the context footprint, and two captures (mid-run recording, empty_cache).
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1
R=/tmp/r; mkdir -p $R/log
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvcc -O2 -o va va.cu -lcuda || exit 1
python3 synth.py synth
# seq/: python3 extract_seq.py seq, run where ../shared/traces is (it is not on the device machine)
./va info > $R/log/info.txt
./va vmm > $R/log/vmm.txt 2>&1
for f in synth/*.seq seq/*.seq; do n=$(basename $f .seq); ./va seq $f > $R/log/raw__$n.txt 2>&1; done
for n in gpt2_train__default_capped.dev0 gpt2_train__gc06_capped.dev0 two_streams__default.dev0 resnet50_train__default.dev0; do timeout 60 python3 torch_probe.py seq seq/$n.seq > $R/log/torch__$n.txt 2>&1; done
timeout 90 python3 torch_probe.py footprint > $R/log/footprint.txt 2>&1
cp $OUT/footprint.json $R/log/ 2>/dev/null
timeout 120 python3 midrun.py midrun $OUT/midrun_lm
timeout 120 python3 midrun.py emptycache $OUT/emptycache_lm
(cd $R && tar cJf $OUT/va_probes.tar.xz log)
ls -la $OUT
