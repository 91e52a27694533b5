//! Import speed: PyTorch snapshot pickle -> canonical trace, in events per second on one core.
//!
//! Run: `cargo bench -p allocreplay-core --bench import` (results: benches/RESULTS.md).
//!
//! 1. The largest real capture in shared/traces/pytorch, decompressed in memory first (the
//!    xz decoding is not timed): pickle parse alone, and the whole import.
//! 2. A synthetic multi-million-entry snapshot: the real capture's history replicated K times
//!    (each copy's addresses shifted apart and its times after the previous copy's, the last
//!    copy at the recorded addresses so that the final `segments` match it), re-pickled the
//!    way Python's pickler writes it (protocol 4, objects shared in the source shared through
//!    the memo; each copied entry written anew, and each copy's `frames` lists written anew
//!    and shared within the copy as in the capture: a block's alloc and frees share one).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use allocreplay_core::import::compression::decompress;
use allocreplay_core::import::pickle::{self, Pickle, Value};
use allocreplay_core::import::pytorch::import_snapshot;
use allocreplay_core::import::{load, ImportOptions};

/// The keys the PyTorch importer stores history entries under as records (its `ENTRY_KEYS`).
const ENTRY_KEYS: [&str; 8] = ["action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"];

fn shared_pytorch() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/pytorch"));
    assert!(p.is_dir(), "missing {} (shared/ must sit beside the repository)", p.display());
    p
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let out = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(out);
    }
    (best, last.unwrap())
}

/// Writes a `Pickle` value tree back as a protocol-4 pickle.
struct Writer<'p, 'a> {
    p: &'p Pickle<'a>,
    out: Vec<u8>,
    /// Memo ids of the source's shared objects, by (kind, arena index).
    memo: HashMap<(u8, u32), u32>,
    next_memo: u32,
    /// Memo ids of the `frames` lists written for the current copy: in a capture, an
    /// allocation and its frees share one frames list (one list per block, not per entry).
    copy_lists: HashMap<u32, u32>,
    copy: usize,
}

/// Identity of a shared object of the source pickle.
fn key(v: Value) -> Option<(u8, u32)> {
    match v {
        Value::Str(i) => Some((0, i)),
        Value::Bytes(i) => Some((1, i)),
        Value::List(i) => Some((2, i)),
        Value::Tuple(i) => Some((3, i)),
        Value::Dict(i) => Some((4, i)),
        _ => None,
    }
}

impl<'p, 'a> Writer<'p, 'a> {
    fn new(p: &'p Pickle<'a>) -> Self {
        Writer { p, out: vec![0x80, 4], memo: HashMap::new(), next_memo: 0, copy_lists: HashMap::new(), copy: 0 }
    }

    fn memoize(&mut self, v: Value) {
        self.out.push(0x94); // MEMOIZE
        if let Some(k) = key(v) {
            self.memo.insert(k, self.next_memo);
        }
        self.next_memo += 1;
    }

    /// BINGET / LONG_BINGET if `v` (a shared object of the source) was written before.
    fn get(&mut self, v: Value) -> bool {
        if let Some(&i) = key(v).and_then(|k| self.memo.get(&k)) {
            if i < 256 {
                self.out.extend([b'h', i as u8]);
            } else {
                self.out.push(b'j');
                self.out.extend(i.to_le_bytes());
            }
            true
        } else {
            false
        }
    }

    fn int(&mut self, i: i64) {
        if (0..256).contains(&i) {
            self.out.extend([b'K', i as u8]);
        } else if (0..65536).contains(&i) {
            self.out.push(b'M');
            self.out.extend((i as u16).to_le_bytes());
        } else if i32::try_from(i).is_ok() {
            self.out.push(b'J');
            self.out.extend((i as i32).to_le_bytes());
        } else {
            // LONG1: minimal little-endian two's complement.
            let bytes = i.to_le_bytes();
            let mut n = 8;
            while n > 1 && ((bytes[n - 1] == 0 && bytes[n - 2] & 0x80 == 0) || (bytes[n - 1] == 0xff && bytes[n - 2] & 0x80 != 0)) {
                n -= 1;
            }
            self.out.extend([0x8a, n as u8]);
            self.out.extend(&bytes[..n]);
        }
    }

    fn str(&mut self, s: &str) {
        if s.len() < 256 {
            self.out.extend([0x8c, s.len() as u8]);
        } else {
            self.out.push(b'X');
            self.out.extend((s.len() as u32).to_le_bytes());
        }
        self.out.extend(s.as_bytes());
    }

    fn value(&mut self, v: Value) {
        match v {
            Value::None => self.out.push(b'N'),
            Value::Bool(b) => self.out.push(if b { 0x88 } else { 0x89 }),
            Value::Int(i) => self.int(i),
            Value::BigInt(f) | Value::Float(f) => {
                self.out.push(b'G');
                self.out.extend(f.to_be_bytes());
            }
            Value::Str(_) | Value::Bytes(_) => {
                if !self.get(v) {
                    let s = self.p.str(v).unwrap_or("");
                    self.str(s);
                    self.memoize(v);
                }
            }
            Value::List(_) | Value::Tuple(_) => {
                if self.get(v) {
                    return;
                }
                let items = self.p.list(v).unwrap().to_vec();
                if matches!(v, Value::Tuple(_)) {
                    self.out.push(b'(');
                    for x in items {
                        self.value(x);
                    }
                    self.out.push(b't');
                    self.memoize(v);
                } else {
                    self.out.push(b']');
                    self.memoize(v);
                    self.list_items(&items, |w, x| w.value(x));
                }
            }
            Value::Dict(_) => {
                if self.get(v) {
                    return;
                }
                self.out.push(b'}');
                self.memoize(v);
                let items = self.p.dict(v).unwrap().to_vec();
                self.dict_items(&items, |w, x| w.value(x));
            }
        }
    }

    /// APPENDS in batches of 1000, as `pickle._Pickler._batch_appends` does.
    fn list_items<T: Copy>(&mut self, items: &[T], mut each: impl FnMut(&mut Self, T)) {
        for chunk in items.chunks(1000) {
            self.out.push(b'(');
            for &x in chunk {
                each(self, x);
            }
            self.out.push(b'e');
        }
    }

    fn dict_items(&mut self, items: &[(Value, Value)], mut each: impl FnMut(&mut Self, Value)) {
        for chunk in items.chunks(1000) {
            self.out.push(b'(');
            for &(k, x) in chunk {
                each(self, k);
                each(self, x);
            }
            self.out.push(b'u');
        }
    }

    /// A history entry written anew (a new dict, and a new frames list per copy, as a longer
    /// capture would hold), with its address and time shifted.
    fn entry(&mut self, e: Value, copy: usize, addr_shift: u64, time_shift: i64) {
        if copy != self.copy {
            self.copy = copy;
            self.copy_lists.clear();
        }
        self.out.push(b'}');
        self.next_memo += 1;
        self.out.push(0x94);
        let items = self.p.dict(e).unwrap().to_vec();
        self.out.push(b'(');
        for (k, v) in items {
            self.value(k);
            match (self.p.str(k), v) {
                (Some("addr"), Value::Int(a)) => {
                    let action = self.p.get(e, "action").and_then(|a| self.p.str(a)).unwrap_or("");
                    // `oom` entries hold the device's free bytes there, not an address.
                    self.int(if action == "oom" { a } else { a + addr_shift as i64 })
                }
                (Some("time_us"), Value::Int(t)) => self.int(t + time_shift),
                (Some("frames"), Value::List(l)) => {
                    if let Some(&m) = self.copy_lists.get(&l) {
                        self.out.push(b'j');
                        self.out.extend(m.to_le_bytes());
                        continue;
                    }
                    self.copy_lists.insert(l, self.next_memo);
                    self.out.push(b']');
                    self.next_memo += 1;
                    self.out.push(0x94);
                    let frames = self.p.list(v).unwrap().to_vec();
                    self.list_items(&frames, |w, x| w.value(x));
                }
                _ => self.value(v),
            }
        }
        self.out.push(b'u');
    }
}

/// The real snapshot with its device 0 history replicated `copies` times.
fn synthesize(data: &[u8], copies: usize) -> Vec<u8> {
    let p = pickle::parse(data).expect("real capture parses");
    let traces = p.list(p.get(p.root, "device_traces").unwrap()).unwrap().to_vec();
    let entries = p.list(traces[0]).unwrap().to_vec();
    let times: Vec<i64> = entries.iter().filter_map(|&e| p.get(e, "time_us").and_then(|t| p.int(t))).collect();
    let span = times.iter().max().unwrap() - times.iter().min().unwrap() + 1;
    let mut w = Writer::new(&p);
    w.out.push(b'}');
    w.memoize(p.root);
    w.out.push(b'(');
    for &(k, v) in p.dict(p.root).unwrap().iter() {
        w.value(k);
        if p.str(k) == Some("device_traces") {
            w.out.push(b']');
            w.memoize(v);
            w.out.push(b'(');
            for (d, &dev) in traces.iter().enumerate() {
                if d > 0 {
                    w.value(dev);
                    continue;
                }
                w.out.push(b']');
                w.memoize(dev);
                let all: Vec<(Value, usize)> = (0..copies).flat_map(|c| entries.iter().map(move |&e| (e, c))).collect();
                w.list_items(&all, |w, (e, c)| {
                    let back = (copies - 1 - c) as u64;
                    w.entry(e, c, back << 40, -(back as i64) * span)
                });
            }
            w.out.push(b'e');
        } else {
            w.value(v);
        }
    }
    w.out.push(b'u');
    w.out.push(b'.');
    w.out
}

/// The options for a tiled snapshot (the synthetic one, benches/make_big_snapshot.py's): its
/// history repeats a real one K times while its final `segments` describe one copy, which the
/// strict import refuses as a contradiction (issue 28, class 1); lenient, it imports with the
/// same work.
fn tiled_options() -> ImportOptions {
    ImportOptions { lenient: true, ..ImportOptions::default() }
}

/// One file: read, decompress, parse alone, import alone, and the whole `import::load` (which
/// adds the trace check), best of `runs` each.
fn bench_file(path: &Path, runs: usize) {
    let opts = tiled_options();
    if std::env::var("ALLOCREPLAY_BENCH_STAGES").is_ok_and(|s| s == "load") {
        // The whole load alone (for `perf record`).
        let (load_s, n) = best_of(runs, || load(path, &opts).unwrap().num_events());
        println!("{}: {n} events  load {:.0} ms  = {:.2} M events/s", path.display(), load_s * 1e3, n as f64 / load_s / 1e6);
        return;
    }
    if std::env::var("ALLOCREPLAY_BENCH_STAGES").is_ok_and(|s| s == "records") {
        // The importer's parse alone, the file already in memory (for `perf record`).
        let data = decompress(path, std::fs::read(path).unwrap()).unwrap();
        let (s, _) = best_of(runs, || pickle::parse_with_records(&data, &ENTRY_KEYS).map(|p| p.root).unwrap());
        println!("{}: parse (records) {:.0} ms", path.display(), s * 1e3);
        return;
    }
    let (read_s, raw) = best_of(runs, || std::fs::read(path).unwrap());
    let (dec_s, data) = best_of(runs, || decompress(path, raw.clone()).unwrap());
    drop(raw);
    let (parse_s, _) = best_of(runs, || pickle::parse(&data).map(|p| p.root).unwrap());
    // What the importer runs: the history entries stored as records (pytorch::ENTRY_KEYS).
    let (records_s, _) = best_of(runs, || pickle::parse_with_records(&data, &ENTRY_KEYS).map(|p| p.root).unwrap());
    let (import_s, t) = best_of(runs, || import_snapshot(path, &data, &opts).unwrap());
    let n = t.num_events();
    drop((t, data));
    let (load_s, _) = best_of(runs, || load(path, &opts).unwrap().num_events());
    println!(
        "{}: {n} events  read {:.0} ms  decompress(+copy) {:.0} ms  parse {:.0} ms  parse (records) {:.0} ms  import {:.0} ms  load {:.0} ms  = {:.2} M events/s",
        path.display(),
        read_s * 1e3,
        dec_s * 1e3,
        parse_s * 1e3,
        records_s * 1e3,
        import_s * 1e3,
        load_s * 1e3,
        n as f64 / load_s / 1e6
    );
}

fn main() {
    // `cargo test` builds benches and runs them without `--bench`: stay quick there.
    if !std::env::args().any(|a| a == "--bench") {
        println!("import bench: run with `cargo bench -p allocreplay-core --bench import`");
        return;
    }
    let dir = shared_pytorch();
    let largest = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".pickle.xz"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a capture");
    let raw = std::fs::read(&largest).unwrap();
    let data = decompress(&largest, raw).unwrap();
    let opts = ImportOptions::default();
    println!("{}: {} bytes decompressed", largest.display(), data.len());

    let (secs, p) = best_of(10, || pickle::parse(&data).unwrap().root);
    let _ = p;
    let (isecs, t) = best_of(10, || import_snapshot(&largest, &data, &opts).unwrap());
    let n = t.num_events();
    println!(
        "real   {:>9} events  parse {:>7.1} ms  import {:>7.1} ms  {:>6.2} M events/s",
        n,
        secs * 1e3,
        isecs * 1e3,
        n as f64 / isecs / 1e6
    );

    // Files named in ALLOCREPLAY_BENCH_FILES (':'-separated; e.g. the tiled snapshots
    // benches/make_big_snapshot.py writes): the stages of `import::load` timed apart.
    if let Ok(files) = std::env::var("ALLOCREPLAY_BENCH_FILES") {
        let runs: usize = std::env::var("ALLOCREPLAY_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
        for f in files.split(':').filter(|f| !f.is_empty()) {
            bench_file(Path::new(f), runs);
        }
        return;
    }
    let copies: usize = std::env::var("ALLOCREPLAY_BENCH_COPIES").ok().and_then(|s| s.parse().ok()).unwrap_or(40);
    let synth = synthesize(&data, copies);
    let fake = Path::new("synthetic.pickle");
    let tiled = tiled_options();
    let (secs, _) = best_of(3, || pickle::parse(&synth).unwrap().root);
    let (isecs, t) = best_of(3, || import_snapshot(fake, &synth, &tiled).unwrap());
    let n = t.num_events();
    println!(
        "synth  {:>9} events  parse {:>7.1} ms  import {:>7.1} ms  {:>6.2} M events/s  ({} copies, {:.0} MB pickle)",
        n,
        secs * 1e3,
        isecs * 1e3,
        n as f64 / isecs / 1e6,
        copies,
        synth.len() as f64 / 1e6
    );
}
