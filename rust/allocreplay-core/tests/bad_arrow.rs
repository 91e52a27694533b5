//! docs/bad-inputs.md, `.arrow` traces: values are checked on load, and a mutated file is an
//! error naming the file, never a panic, an abort or an allocation of what the file claims.

mod common;
use common::Scratch;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::policy::PolicyContext;
use allocreplay_core::registry::build;
use allocreplay_core::Error;
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch, UInt32Array, UInt64Array};

fn oom_trace() -> PathBuf {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces/torch_oom.arrow"));
    assert!(p.is_file(), "missing fixture {}", p.display());
    p
}

fn tmp(name: &str) -> Scratch {
    Scratch::file("bad-arrow", name)
}

/// torch_oom.arrow with column `col` replaced by `f(column)`, written to a temporary file.
fn rewritten(name: &str, col: usize, f: impl FnOnce(&ArrayRef) -> ArrayRef) -> Scratch {
    let t = load(&oom_trace(), &ImportOptions::default()).unwrap();
    let b = t.batch();
    let mut cols = b.columns().to_vec();
    cols[col] = f(&cols[col]);
    let batch = RecordBatch::try_new(b.schema(), cols).unwrap();
    let out = tmp(name);
    let mut w = arrow_ipc::writer::FileWriter::try_new(std::fs::File::create(&out).unwrap(), &b.schema()).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    out
}

fn allocs(path: &Path) -> Vec<bool> {
    let t = load(path, &ImportOptions::default()).unwrap();
    t.columns().action.iter().map(|&a| a == allocreplay_core::Action::Alloc as u8).collect()
}

#[test]
fn garbage_under_a_null_alloc_id_is_ignored_not_allocated_for() {
    // Arrow leaves values under nulls undefined: a writer may put 2^40 there. Before, every
    // policy indexed a vector by it (a 1 TB allocation).
    let p = rewritten("garbage_under_null.arrow", 1, |c| {
        let ids = c.as_primitive::<UInt64Type>();
        let values: Vec<u64> = ids.iter().map(|v| v.unwrap_or(1 << 40)).collect();
        Arc::new(UInt64Array::new(values.into(), ids.nulls().cloned()))
    });
    let t = load(&p, &ImportOptions::default()).unwrap();
    assert!(t.columns().alloc_id.iter().all(|&v| v < t.num_events() as u64));
    let ctx = PolicyContext { metadata: &t.metadata, device: None, capacity: None };
    let mut policy = build("pytorch", &ctx).unwrap();
    let r = allocreplay_core::engine::replay_device(&t, 0, policy.as_mut(), &Default::default());
    assert!(r.stats.peak_reserved < 2 << 30, "{:?}", r.stats);
}

#[test]
fn an_undeclared_pool_names_the_event_and_lenient_skips_it() {
    let is_alloc = allocs(&oom_trace());
    let k = is_alloc.iter().position(|&a| a).unwrap();
    let orig = load(&oom_trace(), &ImportOptions::default()).unwrap();
    let id = orig.columns().alloc_id[k];
    let frees =
        (0..orig.num_events()).filter(|&i| !is_alloc[i] && orig.columns().alloc_id_valid(i) && orig.columns().alloc_id[i] == id).count();
    let p = rewritten("undeclared_pool.arrow", 6, |c| {
        let mut v: Vec<u32> = c.as_primitive::<UInt32Type>().values().to_vec();
        v[k] = u32::MAX;
        Arc::new(UInt32Array::from(v))
    });
    match load(&p, &ImportOptions::default()) {
        Err(e @ Error::Format { .. }) => {
            let m = e.to_string();
            assert!(
                m.starts_with(&format!(
                    "{}: event {k} (alloc): pool 4294967295 is not declared in the trace metadata's pools; pass --lenient",
                    p.display()
                )),
                "{m}"
            );
        }
        other => panic!("{:?}", other.map(|t| t.num_events())),
    }
    let t = load(&p, &ImportOptions { lenient: true, ..Default::default() }).unwrap();
    // The alloc is skipped, and so are its frees (now frees before its alloc).
    assert_eq!(t.metadata.extra["lenient_skipped"], serde_json::json!(1 + frees));
    assert_eq!(t.num_events(), orig.num_events() - 1 - frees);
    assert!(t.columns().pool.iter().all(|&x| x == 0));
}

#[test]
fn a_size_of_2_pow_56_is_a_format_error_even_lenient() {
    let p = rewritten("huge_size.arrow", 2, |c| {
        let mut v: Vec<u64> = c.as_primitive::<UInt64Type>().values().to_vec();
        v[5] = 1 << 56;
        Arc::new(UInt64Array::from(v))
    });
    for lenient in [false, true] {
        let e = load(&p, &ImportOptions { lenient, ..Default::default() }).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e:?}");
        assert!(e.to_string().contains(": event 5 ("), "{e}");
        assert!(e.to_string().contains("size 72057594037927936 is not below 2^56 bytes"), "{e}");
    }
}

#[test]
fn a_buffer_beyond_its_body_is_a_format_error_not_a_panic() {
    // Grow the first record batch's first buffer length in its message (the panic arrow-buffer
    // raised: "the offset of the new Buffer cannot exceed the existing length").
    let mut bytes = std::fs::read(oom_trace()).unwrap();
    let n = bytes.len();
    let footer_len = i32::from_le_bytes(bytes[n - 10..n - 6].try_into().unwrap()) as usize;
    let footer = arrow_ipc::root_as_footer(&bytes[n - 10 - footer_len..n - 10]).unwrap();
    let block = footer.recordBatches().unwrap().get(0);
    let off = block.offset() as usize + 8;
    let len = i32::from_le_bytes(bytes[off - 4..off].try_into().unwrap()) as usize;
    let msg = arrow_ipc::root_as_message(&bytes[off..off + len]).unwrap();
    let body = msg.bodyLength();
    let buf = msg.header_as_record_batch().unwrap().buffers().unwrap().get(1);
    // Find the buffer's (offset, length) pair in the message bytes and make the length huge.
    let pair: Vec<u8> = [buf.offset().to_le_bytes(), buf.length().to_le_bytes()].concat();
    let at = bytes[off..off + len].windows(16).position(|w| w == pair.as_slice()).unwrap() + off + 8;
    bytes[at..at + 8].copy_from_slice(&(body * 4).to_le_bytes());
    let p = tmp("buffer_beyond_body.arrow");
    std::fs::write(&p, &bytes).unwrap();
    let e = load(&p, &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
    assert_eq!(e.to_string(), format!("{}: corrupt Arrow IPC file: block 0: buffer 1 lies beyond its message body", p.display()));
}

#[test]
fn mutated_and_truncated_arrow_files_are_errors_or_load() {
    // Every 41st byte set to two values, and truncations: each loads or is an error; a panic
    // (caught by read_arrow's last line of defence) would say "the Arrow reader failed".
    let good = std::fs::read(oom_trace()).unwrap();
    let p = tmp("mutated.arrow");
    let mut caught = Vec::new();
    for i in (0..good.len()).step_by(41) {
        for v in [0x00u8, 0xff] {
            if good[i] == v {
                continue;
            }
            let mut m = good.clone();
            m[i] = v;
            std::fs::write(&p, &m).unwrap();
            if let Err(e) = load(&p, &ImportOptions::default()) {
                if e.to_string().contains("the Arrow reader failed") {
                    caught.push(i);
                }
            }
        }
    }
    for cut in (0..good.len()).step_by(97) {
        std::fs::write(&p, &good[..cut]).unwrap();
        assert!(load(&p, &ImportOptions::default()).is_err(), "cut at {cut}");
    }
    assert!(caught.is_empty(), "panics inside the Arrow reader at bytes {caught:?}");
}

#[test]
fn a_dictionary_buffer_that_panics_arrow_is_a_format_error() {
    // Found by the arrow fuzz target: arrow's own validation panics (typed_data's alignment
    // assert: an offsets buffer whose length is not a multiple of 4) reading the action
    // dictionary. First caught by read_arrow's catch_unwind (under libFuzzer the panic hook
    // aborts before it); now refused before arrow-ipc reads anything: no panic at all.
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/fuzz_unaligned_dictionary.arrow"));
    let e = load(&p, &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, Error::Format { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!("{}: corrupt Arrow IPC file: block 1: buffer 1 holds 41 bytes, not a whole number of 4-byte values", p.display())
    );
}

#[test]
fn a_null_in_a_required_column_is_a_format_error_not_the_bytes_under_it() {
    // Issue 28, class 1: a writer that declares `size` nullable and leaves a null (2^40 under
    // it) made the replay allocate whatever bytes sat there.
    let t = load(&oom_trace(), &ImportOptions::default()).unwrap();
    let b = t.batch();
    let fields: Vec<arrow_schema::Field> = b.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    let schema = Arc::new(arrow_schema::Schema::new_with_metadata(fields, b.schema().metadata().clone()));
    for (col, name) in [(2, "size"), (4, "stream"), (5, "device"), (6, "pool")] {
        let mut cols = b.columns().to_vec();
        let data = cols[col].to_data();
        let mut valid = vec![true; b.num_rows()];
        valid[3] = false;
        let data = data.into_builder().nulls(Some(arrow_buffer::NullBuffer::from(valid))).build().unwrap();
        cols[col] = arrow_array::make_array(data);
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let out = tmp(&format!("null_{name}.arrow"));
        let mut w = arrow_ipc::writer::FileWriter::try_new(std::fs::File::create(&out).unwrap(), &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        for lenient in [false, true] {
            match load(&out, &ImportOptions { lenient, ..Default::default() }) {
                Err(e @ Error::Format { .. }) => assert_eq!(
                    e.to_string(),
                    format!("{}: column {name} is null at row 3 (1 nulls): a required column may hold no nulls", out.display())
                ),
                other => panic!("{name}: {:?}", other.map(|t| t.num_events())),
            }
        }
        // The streamed reader checks the same.
        let e = allocreplay_core::trace::MappedTrace::open(&out).and_then(|m| m.batches()?.try_for_each(|b| b.map(|_| ()))).unwrap_err();
        assert!(e.to_string().contains(&format!("column {name} is null at row 3")), "{e}");
    }
}
