# Issue 30's table on the GPU host (run by the device tool from the repository root), builds side
# by side in one run: each `D/NAME.so.xz` (a release extension, `_core.abi3.so` of a wheel, xz'd
# into the git-ignored folder D, carried to the host) is one build. Session 25: D=device/s25 with
# base (2351a7a's `pip install .` of a fresh clone), new (offline split, 4 sides at most) and new8
# (8 sides at most, what was committed).
# Usage: D=device/s25 BUILDS="base new new8" ROUNDS=3 bash benches/gpu_host_side_by_side.sh
set -u
D="${D:-device/s25}"
BUILDS="${BUILDS:-base new new8}"
for b in $BUILDS; do rm -f $D/$b.so; xz -dk $D/$b.so.xz; done
TRACES="${TRACES:-opt350_serve_h__default phi_sample_hv__default opt350_serve__default gemma_generate_h__default}"
for t in $TRACES; do [ -f /tmp/$t.pickle ] || xz -T8 -dc traces/large/$t.pickle.xz > /tmp/$t.pickle; done
nproc; uptime; free -g | head -2
python3 benches/core_side_by_side.py ${ROUNDS:-3} $(for b in $BUILDS; do echo $b=$D/$b.so; done) -- $(for t in $TRACES; do echo /tmp/$t.pickle; done) 2>&1 | tee ${OUT:-/tmp}/final.txt
uptime
