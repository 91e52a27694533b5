"""Times `_core.load` of one file N times in one process (ms, in order): the first load in a fresh
process against the later ones. Usage: python s34_load_spread.py CORE.so FILE N"""
import sys, time, importlib.util, gc
spec = importlib.util.spec_from_file_location("allocreplay._core", sys.argv[1])
core = importlib.util.module_from_spec(spec); spec.loader.exec_module(core)
out = []
for k in range(int(sys.argv[3])):
    gc.collect(); t = time.perf_counter(); tr = core.load(sys.argv[2]); out.append(time.perf_counter() - t); del tr
print(" ".join(f"{x*1000:.0f}" for x in out))
