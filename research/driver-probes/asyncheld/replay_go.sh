set -u
cd device/asyncreplay
xz -d *.req.xz; nvcc -O2 -o probe probe.cu || exit 1
for f in *.req; do w=${f%.req}; ./probe async $f ${w}_async.txt | tail -1; done
xz -T8 -6 *_async.txt; tar cf $OUT/replays.tar *_async.txt.xz; ls -la $OUT
