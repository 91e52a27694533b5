cd "$(dirname "$0")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
nvcc -O2 -o probe probe.cu || exit 1
R=/tmp/r; mkdir -p $R
./probe probes 2>&1 | tee $R/probes.txt
export PYTHONUNBUFFERED=1 A=backend:cudaMallocAsync
python3 w.py gpt2_train 12 $R/gpt2_train__default
python3 w.py two_streams 12 $R/two_streams__default
for w in gpt2_train__default two_streams__default; do ./probe async $R/$w.req $R/${w}_async.txt; ./probe malloc $R/$w.req $R/${w}_malloc.txt; done
PYTORCH_CUDA_ALLOC_CONF=$A python3 w.py gpt2_train 12 $R/gpt2_train__async
PYTORCH_CUDA_ALLOC_CONF=$A python3 w.py two_streams 12 $R/two_streams__async
for w in resnet50_train llama_generate; do python3 w.py $w 8 $R/${w}__default; ./probe async $R/${w}__default.req $R/${w}__default_async.txt; PYTORCH_CUDA_ALLOC_CONF=$A python3 w.py $w 8 $R/${w}__async; done
ls -la $R
