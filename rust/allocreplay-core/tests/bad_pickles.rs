//! docs/bad-inputs.md, crafted pickles: each case is refused with the error class and message
//! shape the catalogue gives, without a panic, a stack overflow or an unbounded allocation.

use std::path::Path;

use allocreplay_core::import::pytorch::import_snapshot;
use allocreplay_core::import::ImportOptions;
use allocreplay_core::Error;

/// SHORT_BINUNICODE.
fn s(text: &str) -> Vec<u8> {
    let mut v = vec![0x8c, text.len() as u8];
    v.extend_from_slice(text.as_bytes());
    v
}

/// A protocol-4 snapshot dict `{'device_traces': <traces>, 'allocator_settings': <settings>}`
/// from the pickled bytes of its two values.
fn snapshot(traces: &[u8], settings: &[u8]) -> Vec<u8> {
    let mut v = b"\x80\x04}(".to_vec();
    v.extend(s("device_traces"));
    v.extend_from_slice(traces);
    v.extend(s("allocator_settings"));
    v.extend_from_slice(settings);
    v.extend_from_slice(b"u.");
    v
}

/// One history entry dict with the given pickled `size` value.
fn entry(action: &str, addr: &[u8], size: &[u8]) -> Vec<u8> {
    let mut v = b"}(".to_vec();
    v.extend(s("action"));
    v.extend(s(action));
    v.extend(s("addr"));
    v.extend_from_slice(addr);
    v.extend(s("size"));
    v.extend_from_slice(size);
    v.extend(s("stream"));
    v.extend_from_slice(b"K\x00");
    v.extend_from_slice(b"u");
    v
}

fn import(bytes: &[u8]) -> Result<allocreplay_core::Trace, Error> {
    import_snapshot(Path::new("crafted.pickle"), bytes, &ImportOptions::default())
}

fn format_error(bytes: &[u8]) -> String {
    match import(bytes) {
        Err(e @ Error::Format { .. }) => e.to_string(),
        Err(other) => panic!("expected a format error, got {other:?}"),
        Ok(_) => panic!("expected a format error, the pickle loaded"),
    }
}

/// `device_traces = [[entry]]` with the entry's size.
fn traces_with_size(size: &[u8]) -> Vec<u8> {
    let mut t = b"](](".to_vec();
    t.extend(entry("alloc", b"J\x00\x02\x00\x00", size));
    t.extend_from_slice(b"eae");
    t
}

#[test]
fn a_well_formed_crafted_snapshot_loads() {
    let t = import(&snapshot(&traces_with_size(b"M\x00\x02"), b"}")).unwrap();
    assert_eq!(t.num_events(), 1);
    assert_eq!(t.columns().size, &[512]);
}

#[test]
fn nesting_20000_deep_is_refused_not_a_stack_overflow() {
    let depth = 20_000;
    let mut nested = vec![b']'; depth];
    nested.extend(vec![b'a'; depth - 1]);
    let m = format_error(&snapshot(b"]", &nested));
    assert!(m.starts_with("crafted.pickle: 'allocator_settings': a value nests containers deeper than 64 levels"), "{m}");
    // 64 levels (the limit) still load.
    let mut ok = vec![b']'; 64];
    ok.extend(vec![b'a'; 63]);
    assert!(import(&snapshot(b"]", &ok)).is_ok());
}

#[test]
fn a_list_that_contains_itself_is_refused() {
    // l = []; l.append(l)
    let m = format_error(&snapshot(b"]", b"]\x94h\x00a"));
    assert!(m.contains("deeper than 64 levels (or in a cycle)"), "{m}");
}

#[test]
fn billion_laughs_of_memo_references_is_refused_not_expanded() {
    // memo[k] = [memo[k-1]] * 10, 30 levels: 10^30 values from about 1.6 KB.
    // Each level is memoized and popped; the last stays on the stack as the value.
    let mut v = b"](K\x01K\x01e\x940".to_vec();
    let first = 2u32; // memo keys 0 and 1 hold the two strings before it
    for k in 0..30u32 {
        v.extend_from_slice(b"](");
        for _ in 0..10 {
            v.push(b'j');
            v.extend_from_slice(&(first + k).to_le_bytes());
        }
        v.extend_from_slice(if k < 29 { b"e\x940" } else { b"e\x94" });
    }
    // Memoize the two key strings too so the keys above are right.
    let mut bytes = b"\x80\x04}(".to_vec();
    bytes.extend(s("device_traces"));
    bytes.push(0x94);
    bytes.push(b']');
    bytes.extend(s("allocator_settings"));
    bytes.push(0x94);
    bytes.extend_from_slice(&v);
    bytes.extend_from_slice(b"u.");
    let m = format_error(&bytes);
    assert!(m.contains("a value expands to more than 4× the pickle's"), "{m}");
    assert!(m.contains("(shared memo references)"), "{m}");
}

#[test]
fn history_lists_shared_by_reference_are_refused() {
    // device_traces = [L] * 2000, L = [entry] * 2000: 4 million entries from about 30 KB.
    let mut t = b"](](".to_vec();
    t.extend(entry("alloc", b"J\x00\x02\x00\x00", b"M\x00\x02"));
    t.push(0x94); // memo 1: the entry (memo 0: the key)
    for _ in 0..1999 {
        t.extend_from_slice(b"h\x01");
    }
    t.extend_from_slice(b"e\x94"); // memo 2: L
    for _ in 0..1999 {
        t.extend_from_slice(b"h\x02");
    }
    t.extend_from_slice(b"e");
    let mut bytes = b"\x80\x04}(".to_vec();
    bytes.extend(s("device_traces"));
    bytes.push(0x94);
    bytes.extend_from_slice(&t);
    bytes.extend_from_slice(b"u.");
    let m = format_error(&bytes);
    assert!(m.starts_with("crafted.pickle: device_traces hold 4000000 entries, more than the file's"), "{m}");
}

#[test]
fn truncated_frames_are_refused_as_cpython_does() {
    // FRAME declaring 255 bytes, 4 follow: CPython's load_frame raises "pickle data was truncated".
    let m = format_error(b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00}\x94.");
    assert_eq!(m, "crafted.pickle: FRAME at byte 2 declares 255 bytes but only 3 follow (truncated file?)");
    // A frame that starts inside the previous one.
    let m = format_error(b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00\x95\x01\x00\x00\x00\x00\x00\x00\x00}.");
    assert!(m.contains("FRAME at byte 11 begins before the previous frame ends"), "{m}");
}

#[test]
fn sizes_that_are_not_sizes_name_the_entry() {
    for (value, shown) in [
        (b"J\xfb\xff\xff\xff".to_vec(), "is -5,"),
        (b"G@\x04\x00\x00\x00\x00\x00\x00".to_vec(), "is the float 2.5,"),
        (s("512"), "is the string \"512\","),
        // 2**70: LONG1 with 9 bytes.
        (b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40".to_vec(), "is 1180591620717411303424,"),
        // 2**56, the first size refused.
        (b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x01".to_vec(), "is 72057594037927936,"),
        (b"N".to_vec(), "is a None,"),
    ] {
        let m = format_error(&snapshot(&traces_with_size(&value), b"}"));
        assert_eq!(
            m,
            format!("crafted.pickle: device_traces[0][0]: 'size' {shown} not a size (an integer from 0 to 2^56 - 1)"),
            "{value:?}"
        );
    }
    // 2**56 - 1 is a size.
    assert!(import(&snapshot(&traces_with_size(b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x00"), b"}")).is_ok());
}

#[test]
fn negative_addresses_are_refused() {
    let mut t = b"](](".to_vec();
    t.extend(entry("alloc", b"J\x00\x00\x00\x80", b"K\x10"));
    t.extend_from_slice(b"eae");
    let m = format_error(&snapshot(&t, b"}"));
    assert_eq!(m, "crafted.pickle: device_traces[0][0]: 'addr' is -2147483648, not an address (a non-negative integer)");
}

/// `{'device_traces': [], 'segments': [{segment}]}` with the given total_size and address.
fn with_segment(address: &[u8], total_size: &[u8]) -> Vec<u8> {
    let mut v = b"\x80\x04}(".to_vec();
    v.extend(s("device_traces"));
    v.extend_from_slice(b"]");
    v.extend(s("segments"));
    v.extend_from_slice(b"](}(");
    for (k, val) in
        [("device", b"K\x00".to_vec()), ("address", address.to_vec()), ("total_size", total_size.to_vec()), ("stream", b"K\x00".to_vec())]
    {
        v.extend(s(k));
        v.extend_from_slice(&val);
    }
    v.extend(s("blocks"));
    v.extend_from_slice(b"]ueu.");
    v
}

#[test]
fn negative_segment_sizes_and_addresses_are_refused() {
    assert!(import(&with_segment(b"J\x00\x00\x10\x00", b"J\x00\x00\x20\x00")).is_ok());
    let m = format_error(&with_segment(b"J\x00\x00\x10\x00", b"J\x00\x00\xe0\xff"));
    assert_eq!(m, "crafted.pickle: segment 0: 'total_size' is -2097152, not a size (an integer from 0 to 2^56 - 1)");
    let m = format_error(&with_segment(b"J\x00\x00\xf0\xff", b"J\x00\x00\x20\x00"));
    assert_eq!(m, "crafted.pickle: segment 0: 'address' is -1048576, not an address (a non-negative integer)");
}

#[test]
fn an_oom_entry_asking_for_petabytes_loads_and_is_an_oom_in_every_policy() {
    // Issue 28, class 7: upstream's test_out_of_memory asks for 8 * 10^18 bytes; the snapshot
    // records an `oom` entry of that size (`_dump_snapshot` writes the size_t as an int64, so
    // 2^63 and more come back negative). The snapshot loads; the request is held at 2^56 - 1.
    use allocreplay_core::import::pytorch::{CLAMPED_OOMS, OOM_BEYOND_MAX_SIZE};
    let big = 8_000_000_000u64 * (1 << 30);
    let mut traces = b"](".to_vec();
    traces.extend(entry("alloc", b"J\x00\x10\x00\x00", b"J\x00\x02\x00\x00"));
    let mut size = vec![0x8a, 8];
    size.extend_from_slice(&big.to_le_bytes());
    traces.extend(entry("oom", b"K\x00", &size));
    let mut neg = vec![0x8a, 8];
    neg.extend_from_slice(&(-5i64).to_le_bytes());
    traces.extend(entry("oom", b"K\x00", &neg));
    traces.extend_from_slice(b"e");
    let mut all = b"](".to_vec();
    all.extend(traces);
    all.extend_from_slice(b"e");
    let t = import(&snapshot(&all, b"}")).unwrap();
    let c = t.columns();
    let ooms: Vec<u64> = (0..t.num_events()).filter(|&i| c.action[i] == allocreplay_core::Action::Oom as u8).map(|i| c.size[i]).collect();
    assert_eq!(ooms, vec![OOM_BEYOND_MAX_SIZE, OOM_BEYOND_MAX_SIZE]);
    let recorded: Vec<u64> = t.metadata.extra[CLAMPED_OOMS].as_array().unwrap().iter().map(|x| x["size"].as_u64().unwrap()).collect();
    assert_eq!(recorded, vec![big, (-5i64) as u64]);
    for spec in ["pytorch", "pytorch:expandable_segments:True", "bfc", "jax:allocator=platform", "cuda-async", "cuda-malloc", "managed"] {
        let ctx = allocreplay_core::policy::PolicyContext { metadata: &t.metadata, device: None, capacity: Some(80 << 30) };
        let mut p = allocreplay_core::registry::build(spec, &ctx).unwrap();
        let r = allocreplay_core::engine::replay_device(&t, 0, p.as_mut(), &Default::default());
        assert_eq!(r.stats.num_ooms, 2, "{spec}: {:?}", r.stats);
    }
}

#[test]
fn entries_missing_a_required_key_name_it_instead_of_reading_0() {
    // Issue 28, class 1: an alloc without 'addr' or 'size' became an allocation at 0 of 0 bytes.
    let mut no_addr = b"}(".to_vec();
    no_addr.extend(s("action"));
    no_addr.extend(s("alloc"));
    no_addr.extend(s("size"));
    no_addr.extend_from_slice(b"K\x08u");
    let mut all = b"](](".to_vec();
    all.extend(no_addr);
    all.extend_from_slice(b"ee");
    assert_eq!(
        format_error(&snapshot(&all, b"}")),
        "crafted.pickle: device_traces[0][0] (alloc) has no 'addr': every alloc entry records it"
    );
}

/// A history of `n` entries (alloc and free_completed of 512 bytes at 0x20000, in turn) with
/// the entries at `bad` replaced by an alloc without 'addr'.
fn long_history(n: usize, bad: &[usize]) -> Vec<u8> {
    let mut no_addr = b"}(".to_vec();
    no_addr.extend(s("action"));
    no_addr.extend(s("alloc"));
    no_addr.extend(s("size"));
    no_addr.extend_from_slice(b"M\x00\x02u");
    let (alloc, free) = (entry("alloc", b"J\x00\x00\x02\x00", b"M\x00\x02"), entry("free_completed", b"J\x00\x00\x02\x00", b"M\x00\x02"));
    let mut t = b"](](".to_vec();
    for i in 0..n {
        t.extend_from_slice(if bad.contains(&i) {
            &no_addr
        } else if i % 2 == 0 {
            &alloc
        } else {
            &free
        });
    }
    t.extend_from_slice(b"eae");
    snapshot(&t, b"}")
}

#[test]
fn a_long_history_decoded_on_threads_names_its_first_bad_entry() {
    // 300,000 entries: more than the 2^18 from which the entries are decoded on several threads
    // (one per core), each its own run of them.
    let t = import(&long_history(300_000, &[])).unwrap();
    assert_eq!(t.num_events(), 300_000);
    assert!(t.columns().size.iter().all(|&s| s == 512));
    for (bad, first) in [(&[290_001usize][..], 290_001), (&[290_001, 20_001][..], 20_001), (&[150_001, 149_999][..], 149_999)] {
        assert_eq!(
            format_error(&long_history(300_000, bad)),
            format!("crafted.pickle: device_traces[0][{first}] (alloc) has no 'addr': every alloc entry records it")
        );
    }
}
