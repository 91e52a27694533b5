"""Validates captures with and without their recorded addresses through a release extension
loaded by path (no Polars or click needed: the device machine has neither), printing one line
per capture and mode. Usage: python s34_validate.py CORE.so NAME.pickle[:NAME.json] ..."""
import importlib.util, json, sys, time

spec = importlib.util.spec_from_file_location("allocreplay._core", sys.argv[1])
core = importlib.util.module_from_spec(spec); spec.loader.exec_module(core)
KEYS = ["ok", "allocs", "segment_events_recorded", "segment_events_replayed", "first_segment_mismatch",
        "peak_reserved_recorded", "peak_reserved_replayed", "peak_allocated_recorded", "peak_allocated_replayed",
        "num_alloc_retries_recorded", "num_alloc_retries_replayed", "num_ooms_recorded", "num_ooms_replayed", "address_match"]
for arg in sys.argv[2:]:
    path, _, meta = arg.partition(":")
    t = time.perf_counter(); tr = core.load(path, meta or None); load_s = time.perf_counter() - t
    for no_addr in (False, True):
        t = time.perf_counter(); reps = core.validate(tr, no_addr); s = time.perf_counter() - t
        for r in reps:
            d = r.to_dict()
            print(json.dumps({"trace": path, "events": len(tr), "load_s": round(load_s, 2), "no_addresses": no_addr, "validate_s": round(s, 2),
                              **{k: d.get(k) for k in KEYS}, "assumed": d.get("assumed")}), flush=True)
