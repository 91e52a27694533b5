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
# The second round's held-out workloads (2026-11-29): one native run, three async runs each.
for spec in bert_finetune:8 vit_train:6 t5_generate:6; do
  IFS=: read w steps <<< "$spec"
  python3 w.py $w $steps $R/${w}__default; ./probe async $R/${w}__default.req $R/${w}__default_async.txt
  for i in 1 2 3; do PYTORCH_CUDA_ALLOC_CONF=$A python3 w.py $w $steps $R/${w}__async_r$i; done
done
# Repeated, logged real runs (the run-to-run spread): realruns.sh.
bash realruns.sh $R/realruns "two_streams:12:6 llama_generate:8:6 resnet50_train:8:3 gpt2_train:12:3"
ls -la $R
