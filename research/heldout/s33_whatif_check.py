"""Session 33: the what-ifs of issue 29 item 1 on mixtral_serve (research/heldout/s32_whatif.sh with
P=mixtral WL=research/heldout/workloads_s33.py:mixtral_serve REQUESTS=40 SECS=150, FRACTION for
a 1.7e9-byte cap): the default recording replayed under the other runs' settings (the capped run's
cap from its json), each peak compared with that run's real memory_stats.
Usage: python research/heldout/s33_whatif_check.py DIR (the run's NAME.pickle.xz and NAME.json)"""
import json, sys, allocreplay
d = sys.argv[1]
t = allocreplay.load(f"{d}/mixtral_default.pickle.xz", meta=f"{d}/mixtral_default.json")
real = {n: json.load(open(f"{d}/mixtral_{n}.json")) for n in ["default", "pow2div4", "expandable", "gc06_capped"]}
cases = [("default", "pytorch", None), ("pow2div4", "pytorch:roundup_power2_divisions:4", None),
         ("expandable", "pytorch:expandable_segments:True", None),
         ("gc06_capped", "pytorch:garbage_collection_threshold:0.6", real["gc06_capped"]["cap_bytes"])]
for name, spec, cap in cases:
    r = allocreplay.replay(t, [spec], capacity=cap, placements=False).summary.row(0, named=True)
    ms = real[name]["memory_stats"]
    rp, rr = r["peak_reserved_bytes"], ms["reserved_bytes.all.peak"]
    print(f"| {spec}{' under ' + str(cap) if cap else ''} | {rp:,} | {rr:,} | {'exact' if rp == rr else f'{(rp - rr) / rr:+.2%}'} | {r['num_ooms']}/{r['num_alloc_retries']} vs {ms['num_ooms']}/{ms['num_alloc_retries']} | peak allocated {r['peak_allocated_bytes']:,} vs {ms['allocated_bytes.all.peak']:,} |")
