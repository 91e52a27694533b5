# Issue 30: how steady the GPU host's CPUs are. The same replay binary (`cargo build --release
# -p allocreplay-core --bench replay`, copied to device/s18/replay.xz) and release extension
# (device/s18/core.so.xz), three rounds of five CPU pinnings: unpinned, one CPU, two
# neighbouring CPUs, two apart, eight. Run on the device (carry device/s18):
#     bash benches/host_spread.sh
set -u
cd "$(dirname "$0")/.."
xz -dk device/s18/core.so.xz device/s18/replay.xz; chmod +x device/s18/replay
lscpu | egrep -i "model name|socket|core|thread|numa|mhz|cache|flags" | cut -c1-200
ls /sys/devices/system/node/ 2>&1 | head; cat /sys/devices/system/node/node*/cpulist 2>&1
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag 2>&1
uptime; nproc; free -g | head -2; which perf numactl
xz -dc traces/large/opt350_serve__default.pickle.xz > /tmp/o.pickle
cat > /tmp/ld.py <<'PY'
import importlib.util, pickle, time, gc, sys
spec = importlib.util.spec_from_file_location("allocreplay._core", "device/s18/core.so")
core = importlib.util.module_from_spec(spec); spec.loader.exec_module(core)
plain = open("/tmp/o.pickle", "rb").read()
for _ in range(2):
    gc.collect(); t = time.perf_counter(); tr = core.load("/tmp/o.pickle"); a = time.perf_counter() - t
    gc.collect(); t = time.perf_counter(); o = pickle.loads(plain); b = time.perf_counter() - t; del o
    print(f"load {a*1e3:.0f} ms  pickle.loads {b*1e3:.0f} ms  ratio {b/a:.2f}", flush=True)
PY
for round in 1 2 3; do
  for pin in "" "taskset -c 2" "taskset -c 2,3" "taskset -c 2,9" "taskset -c 0-7"; do
    echo "== round $round pin '$pin' load $(cut -d' ' -f1 /proc/loadavg)"
    ALLOCREPLAY_BENCH_POLICIES="pytorch;cuda-malloc;bfc" $pin device/s18/replay /tmp/o.pickle | tail -3
    $pin python3 /tmp/ld.py
  done
done
