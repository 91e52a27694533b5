#!/bin/bash
set -u
cd research/truncated; N=$(mktemp -d)
r() { python3 course.py $N "$@" > $N/log_$1_$2_$3_$4.txt 2>&1; echo "rc=$?" >> $N/log_$1_$2_$3_$4.txt; }
r forward fp32 1000000 large &
r forward bf16 1000000 large &
r train fp32 1000000 medium &
r train bf16 1000000 medium &
r train fp32 2000 medium &
r forward bf16 1500 xl &
wait
cat $N/log_* | grep -v -i warn
for f in $N/*.pickle; do xz -6 -T4 $f; done
(cd $N && tar czf $OUT/course.tgz *.pickle.xz *.json)
ls -la $OUT
