# Turns a logged real cudaMallocAsync run (shim.c) into an allocreplay trace: the real run's
# own requests, streams, addresses and host times, to replay `cuda-async` with the timing of the
# run it is compared with. Usage: python log_to_trace.py RUN.log.xz ... (writes RUN.arrow).
import lzma, sys, pathlib, pyarrow as pa, pyarrow.ipc as ipc, allocreplay as ar
ROOT = pathlib.Path(__file__).resolve().parents[2]
tmpl = ar.load(ROOT / 'traces/two_streams__default.pickle.xz').to_arrow()
def convert(log, out):
    acts, ids, sizes, addrs, streams, times = [], [], [], [], [], []
    live = {}; n = 0
    for line in lzma.open(log, 'rt'):
        f = line.split()
        if f[0] == 'a':
            p, s, st, t = int(f[1]), int(f[2]), int(f[3]), int(f[5])
            live[p] = (n, s, st)
            acts.append('alloc'); ids.append(n); sizes.append(s); addrs.append(p); streams.append(st); times.append(t); n += 1
        else:
            p, st, t = int(f[1]), int(f[2]), int(f[4])
            i, s, ast = live.pop(p)
            for a in ('free_requested', 'free_completed'):
                acts.append(a); ids.append(i); sizes.append(s); addrs.append(p); streams.append(ast); times.append(t)
    names = tmpl.schema.field('action').type
    dict_vals = tmpl.column('action').chunk(0).dictionary
    code = {v.as_py(): k for k, v in enumerate(dict_vals)}
    m = len(acts)
    cols = {
        'action': pa.DictionaryArray.from_arrays(pa.array([code[a] for a in acts], pa.uint8()), dict_vals),
        'alloc_id': pa.array(ids, pa.uint64()), 'size': pa.array(sizes, pa.uint64()), 'addr': pa.array(addrs, pa.uint64()),
        'stream': pa.array(streams, pa.int64()), 'device': pa.array([0]*m, pa.int32()), 'pool': pa.array([0]*m, pa.uint32()),
        'time_ns': pa.array(times, pa.int64()), 'seed': pa.array([False]*m, pa.bool_()), 'stack_id': pa.array([None]*m, pa.uint32()),
    }
    schema = pa.schema([tmpl.schema.field(k) for k in cols], metadata=tmpl.schema.metadata)
    tbl = pa.table(list(cols.values()), schema=schema)
    with ipc.new_file(out, schema) as w: w.write_table(tbl)
for log in sys.argv[1:]:
    out = log.replace('.log.xz', '.arrow'); convert(log, out); print(out, len(ar.load(out)))
