#!/bin/bash
# Session 14, issue 29 item 2 (+ item 1 host maps probe). Usage (repo root): bash device/trunc/go.sh -> $OUT
set -u
cd research/truncated; N=$(mktemp -d)
python3 -c 'import torch, transformers; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
r() { n=$1; shift; python3 trunc.py $N/$n "$@" > $N/$n.log 2>&1; echo "$n rc=$?" >> $N/$n.log; }
r trunc_fwd_fp32_medium --size medium --mode forward --dtype fp32 --max-entries 2000 &
r trunc_train_fp32_medium --size medium --mode train --dtype fp32 --max-entries 5000 &
r trunc_train_bf16_medium --size medium --mode train --dtype bf16 --max-entries 3000 &
r trunc_train_bf16_large_emptyeach --size large --mode train --dtype bf16 --max-entries 10000 --empty-every-step &
wait
r trunc_fwd_bf16_xl --size xl --mode forward --dtype bf16 --max-entries 1000 &
r trunc_train_fp32_2p7b --size 2.7B --mode train --dtype fp32 --max-entries 4000 &
r trunc_train_fp32_small_late --size small --mode train --dtype fp32 --max-entries 3000 --start after-warmup &
(cd ../driver-probes && python3 hostmaps.py $N/hostmaps_opt350 opt350 6 > $N/hostmaps_opt350.log 2>&1; python3 hostmaps.py $N/hostmaps_gemma gemma 0 > $N/hostmaps_gemma.log 2>&1) &
wait
cat $N/*.log | grep -v -i warn | tail -30
for f in $N/*.pickle; do xz -6 -T4 $f; done
(cd $N && tar czf $OUT/trunc.tgz *.pickle.xz *.json *.log)
ls -la $OUT
