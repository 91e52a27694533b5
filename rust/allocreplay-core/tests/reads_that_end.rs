//! Issue 28, class 4 (docs/bad-inputs.md, *Reads that do not end*), the core's part: a file
//! truncated by another process while it is streamed is an error, never a SIGBUS; a call run
//! under a cancellation token (`cancel::Cancel`, what the Python bindings set on Ctrl-C) stops
//! within milliseconds with `Error::Cancelled`.

mod common;
use common::Scratch;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use allocreplay_core::cancel::Cancel;
use allocreplay_core::import::{load, ImportOptions};
use allocreplay_core::replay::{self, ReplayRequest};
use allocreplay_core::trace::{read_arrow, tile, tile_to_file, Columns, MappedTrace};
use allocreplay_core::Error;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join(rel)
}

#[test]
fn a_file_truncated_while_it_streams_is_an_error_and_the_batches_read_stay_valid() {
    // Before: the batches were views of a memory map; once another process truncated the file,
    // touching a page beyond its new end (the next batch, or a batch still held) killed the
    // process with SIGBUS.
    let t = load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let path = Scratch::file("reads", "shrinks.arrow");
    tile_to_file(&t, 20, &path, 1000).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let m = MappedTrace::open(&path).unwrap();
    assert!(m.num_batches() > 10);
    let mut pass = m.batches().unwrap();
    let (_, first) = pass.next().unwrap().unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
    // The batch already read is the process's own copy.
    let c = Columns::of(&first);
    assert_eq!(c.size.len(), 1000);
    assert!(c.size.iter().any(|&s| s > 0));
    // The pass goes on to the batches before the new end, then says what happened.
    let e = pass.find_map(|b| b.err()).expect("a batch beyond the new end");
    let shrank = |e: &Error| {
        matches!(e, Error::Format { .. })
            && e.to_string()
                .starts_with(&format!("{}: the file changed (shrank) while it was read: it had {len} bytes when opened", path.display()))
    };
    assert!(shrank(&e), "{e}");
    // A new pass, a replay: the same error at once.
    assert!(shrank(&m.batches().err().unwrap()));
    let req = ReplayRequest { policies: vec!["pytorch".into(), "bfc".into()], ..Default::default() };
    assert!(shrank(&replay::replay(&m, &req).unwrap_err()));
    // Opened again, the truncated file is corrupt (no footer), not a crash.
    assert!(matches!(MappedTrace::open(&path), Err(Error::Format { .. })));
    assert!(matches!(load(&path, &ImportOptions::default()), Err(Error::Format { .. })));
}

#[test]
fn a_file_that_grew_while_it_streams_is_an_error_too() {
    let t = load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let path = Scratch::file("reads", "grows.arrow");
    tile_to_file(&t, 2, &path, 1000).unwrap();
    let m = MappedTrace::open(&path).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len + 4096).unwrap();
    let e = m.batches().err().unwrap().to_string();
    assert!(e.contains(&format!("the file changed while it was read: it had {len} bytes when opened and has {} now", len + 4096)), "{e}");
}

#[test]
fn a_streamed_pass_reads_what_the_loaded_trace_holds() {
    // The batches are read (pread) into buffers reused from batch to batch: the columns are
    // those of the file, batch after batch, whatever the buffer held before.
    let t = load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).unwrap();
    let path = Scratch::file("reads", "reuse.arrow");
    tile_to_file(&t, 5, &path, 777).unwrap();
    let whole = read_arrow(&path).unwrap();
    let c = whole.columns();
    let m = MappedTrace::open(&path).unwrap();
    let mut rows = 0;
    for b in m.batches().unwrap() {
        let (base, batch) = b.unwrap();
        let bc = Columns::of(&batch);
        assert_eq!(bc.size, &c.size[base..base + batch.num_rows()]);
        assert_eq!(bc.alloc_id, &c.alloc_id[base..base + batch.num_rows()]);
        assert_eq!(bc.action, &c.action[base..base + batch.num_rows()]);
        rows += batch.num_rows();
    }
    assert_eq!(rows, whole.num_events());
}

#[test]
fn a_cancelled_call_returns_cancelled_in_every_long_entry_point() {
    let path = repo("traces/torch_train.arrow");
    let t = load(&path, &ImportOptions::default()).unwrap();
    let token = Cancel::new();
    token.cancel();
    let cancelled = |r: allocreplay_core::Result<()>, what: &str| assert!(matches!(r, Err(Error::Cancelled)), "{what}: {r:?}");
    token.run(|| {
        for policy in ["pytorch", "bfc", "offline", "ideal"] {
            let req = ReplayRequest { policies: vec![policy.into()], ..Default::default() };
            cancelled(replay::replay(&t, &req).map(|_| ()), policy);
        }
        cancelled(allocreplay_core::offline::plan_trace(&t, 0, 0).map(|_| ()), "plan_trace");
        cancelled(allocreplay_core::offline::ideal_peak(&t, 0, 0, None).map(|_| ()), "ideal_peak");
        cancelled(load(&path, &ImportOptions::default()).map(|_| ()), "load .arrow");
        cancelled(load(&repo("traces/two_streams__default.pickle.xz"), &ImportOptions::default()).map(|_| ()), "load .pickle.xz");
        cancelled(MappedTrace::open(&path).map(|_| ()), "MappedTrace::open");
        cancelled(allocreplay_core::validate::validate_trace(&t).map(|_| ()), "validate");
        cancelled(allocreplay_core::tune::sweep(&[&t], &["pytorch".into(), "bfc".into()], None, 2).map(|_| ()), "sweep");
        let req = allocreplay_core::analysis::StateRequest {
            policy: "pytorch".into(),
            capacity: None,
            at: allocreplay_core::analysis::At::PeakReserved,
            history: false,
        };
        cancelled(allocreplay_core::analysis::state_at(&t, &req).map(|_| ()), "state_at");
    });
    // The token is the call's: the same calls without it give their answers.
    assert!(replay::replay(&t, &ReplayRequest { policies: vec!["offline".into()], ..Default::default() }).is_ok());
}

#[test]
fn cancelling_from_another_thread_stops_a_long_replay_within_milliseconds() {
    // torch_train tiled 300 times (890 K events): `offline` plans for about a second or more,
    // the online policies replay for longer together.
    let t = tile(&read_arrow(&repo("traces/torch_train.arrow")).unwrap(), 300).unwrap();
    for policies in [vec!["offline"], vec!["pytorch", "bfc", "cuda-async", "ideal"]] {
        let progress = std::sync::Arc::new(allocreplay_core::cancel::Progress::default());
        let req = ReplayRequest {
            policies: policies.iter().map(|p| p.to_string()).collect(),
            timeline_points: 10,
            placements: false,
            threads: 2,
            progress: Some(progress.clone()),
            ..Default::default()
        };
        let token = Cancel::new();
        let canceller = token.clone();
        // Cancel once the online replays have walked their first rows (a few hundred
        // microseconds in: they finish in well under 100 ms on a quiet machine, which a fixed
        // sleep once missed), or after 100 ms (`offline` counts its rows only when it is done).
        let stopper = std::thread::spawn(move || {
            let start = Instant::now();
            while progress.done.load(std::sync::atomic::Ordering::Relaxed) == 0 && start.elapsed() < Duration::from_millis(100) {
                std::thread::sleep(Duration::from_micros(200));
            }
            canceller.cancel();
            Instant::now()
        });
        let r = token.run(|| replay::replay(&t, &req));
        let returned = Instant::now();
        let sent = stopper.join().unwrap();
        assert!(matches!(r, Err(Error::Cancelled)), "{policies:?}: the replay ended before the cancellation (make the trace longer)");
        let late = returned.saturating_duration_since(sent);
        assert!(late < Duration::from_millis(500), "{policies:?}: returned {late:?} after the cancellation");
    }
}
