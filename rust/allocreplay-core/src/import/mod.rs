//! Importers: one module per source format. `load` detects the format of a path and returns
//! the canonical trace.

pub mod compression;
mod growing;
pub mod pickle;
pub mod pytorch;
pub mod xla;
pub mod xplane;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::cancel::Progress;
use crate::error::{Error, Result};
use crate::trace::Trace;

/// Options shared by the importers; each uses what applies to its format.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Capture metadata (`NAME.json` beside our captures): total memory, memory cap, framework
    /// version, final memory stats. When `None`, a `.json` with the trace's stem is used if
    /// present.
    pub meta: Option<PathBuf>,
    /// xplane: which allocator's events to import (default: the device allocator with most
    /// events).
    pub allocator: Option<String>,
    /// Skip the events that break the trace's semantics (double free, free of an unknown id,
    /// backwards time, undeclared device or pool: `trace::check`) instead of refusing the
    /// trace; their number goes to `metadata.extra["lenient_skipped"]`.
    pub lenient: bool,
}

/// What kind of source a path holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Arrow,
    PytorchPickle,
    /// A TensorFlow / JAX profiler capture (`*.xplane.pb`).
    Xplane,
}

/// Loads a trace from an `.arrow` file or any supported raw source, and checks its events
/// (`trace::check`: strict unless `opts.lenient`).
pub fn load(path: &Path, opts: &ImportOptions) -> Result<Trace> {
    load_with_progress(path, opts, None)
}

/// [`load`], counting its progress into `progress` for a progress bar. The trace's semantics
/// are checked (`trace::check`) once loaded.
pub fn load_with_progress(path: &Path, opts: &ImportOptions, progress: Option<&Progress>) -> Result<Trace> {
    let trace = load_unchecked(path, opts, progress)?;
    crate::trace::check::check_trace(trace, path, opts.lenient)
}

fn load_unchecked(path: &Path, opts: &ImportOptions, progress: Option<&Progress>) -> Result<Trace> {
    if path.is_dir() {
        // An XLA dump directory (--xla_dump_to: the temps of every compiled program), or a
        // profiler log / run directory (plugins/profile/<run>/*.xplane.pb).
        let is_xla_dump = std::fs::read_dir(path)
            .map_err(|e| Error::io(path, e))?
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().contains("_after_optimizations"));
        if is_xla_dump {
            let programs = xla::load_dump(path)?;
            return xla::trace::programs_trace(&programs, path);
        }
        return match xplane::find_in_profile_dir(path) {
            Ok(file) => load_unchecked(&file, opts, progress),
            Err(Error::UnknownFormat { message, .. }) => Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                message: format!("no XLA dump (module_*_after_optimizations* files) and {message}"),
            }),
            Err(e) => Err(e),
        };
    }
    if let Some(trace) = load_framed_pickle(path, opts, progress)? {
        return Ok(trace);
    }
    let raw = Input::open(path)?;
    if raw.is_empty() {
        return Err(Error::format(path, "file is empty"));
    }
    if raw.starts_with(b"ARROW1") {
        return crate::trace::read_arrow_bytes(path, raw.into_vec());
    }
    if let Some(p) = progress {
        p.total.store(raw.len() as u64, Ordering::Relaxed);
    }
    let limit = compression::output_limit(raw.len());
    let data = match compression::decompress_slice(path, &raw, limit, progress.map(|p| &p.done))? {
        Some(plain) => {
            drop(raw);
            Input(plain)
        }
        None => raw,
    };
    match detect(&data) {
        Some(SourceKind::PytorchPickle) => {
            let trace = pytorch::import_snapshot(path, &data, opts);
            // Hundreds of MB go back to the kernel on another thread (`munmap`'s work).
            if data.len() as u64 >= LARGE_FROM_BYTES {
                crate::prefault::drop_in_background(data.into_vec());
            }
            trace
        }
        // A compressed `.arrow` file: read from its decompressed bytes (a replay of it cannot
        // stream from a memory map, so it is loaded whole).
        Some(SourceKind::Arrow) => crate::trace::read_arrow_bytes(path, data.into_vec()),
        Some(SourceKind::Xplane) => xplane::import_xplane(path, data.into_vec(), opts),
        None if xplane::is_xplane_name(path) => xplane::import_xplane(path, data.into_vec(), opts),
        None => Err(Error::UnknownFormat {
            path: path.to_path_buf(),
            message: format!(
                "unrecognised file format (first bytes {:02x?}); allocreplay reads .arrow traces, PyTorch memory snapshots (.pickle) and TensorFlow/JAX profiler captures (.xplane.pb or a profile directory), optionally .gz/.xz/.zst",
                &data[..data.len().min(8)]
            ),
        }),
    }
}

/// A plain (uncompressed) pickle of protocol 4 or 5 of [`LARGE_FROM_BYTES`] or more, parsed as
/// a helper thread reads it (`growing`): the read, a fifth of such a load on opt350_serve
/// (170 MB), overlaps the parse. Protocols 4 and 5 put their opcodes in frames of 64 KiB, which
/// the parser waits for whole. `None`: any other file, which [`Input::open`] reads whole (its
/// errors, an unreadable file's among them, are that path's).
fn load_framed_pickle(path: &Path, opts: &ImportOptions, progress: Option<&Progress>) -> Result<Option<Trace>> {
    let Ok(file) = std::fs::File::open(path) else { return Ok(None) };
    let Some(total) =
        file.metadata().ok().filter(|m| m.is_file() && m.len() >= LARGE_FROM_BYTES).and_then(|m| usize::try_from(m.len()).ok())
    else {
        return Ok(None);
    };
    // PROTO 4 or 5, then a FRAME.
    let mut head = [0u8; 3];
    let framed = std::io::Read::read_exact(&mut &file, &mut head).is_ok() && matches!(head, [0x80, 4 | 5, 0x95]);
    if !framed || std::io::Seek::seek(&mut &file, std::io::SeekFrom::Start(0)).is_err() {
        return Ok(None);
    }
    let input = growing::Growing::new(total);
    let done = progress.map(|p| &p.done);
    if let Some(p) = progress {
        p.total.store(total as u64, Ordering::Relaxed);
    }
    let token = crate::cancel::current();
    let trace = std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name("allocreplay-read".into())
            .spawn_scoped(s, || crate::cancel::within(token.as_ref(), || input.read_rest(&file, path, done)));
        if reader.is_err() {
            // No thread: read the rest here first.
            input.read_rest(&file, path, done);
        }
        pytorch::import_growing(path, &input, opts)
    });
    crate::prefault::drop_in_background(input.into_vec());
    trace.map(Some)
}

/// Files from this size on are read in chunks with a prefaulting helper (see [`Input`]).
const LARGE_FROM_BYTES: u64 = 32 << 20;

/// Bytes read per call for a large file: between two, the read looks at the call's
/// cancellation token and the prefaulting helper is told what comes next.
const READ_CHUNK: usize = 8 << 20;

/// A source file's bytes, read into memory.
///
/// Large files were memory-mapped until issue 28 (to save the copy and the first-touch faults
/// of the buffer), but a file truncated by another process while it is mapped kills the
/// process with SIGBUS. They are read instead, exactly the length the file had when opened: a
/// file that ends before it shrank during the read, an error saying so (`F: the file changed
/// (shrank) while it was read ...`). For large files a [`crate::prefault::Prefaulter`] maps the
/// buffer's pages on another core a little ahead of the read, which then copies into pages
/// already there.
struct Input(Vec<u8>);

impl Input {
    fn open(path: &Path) -> Result<Input> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        let Some(len) = meta.is_file().then(|| usize::try_from(meta.len()).ok()).flatten() else {
            // Not a regular file (a pipe, /proc): its size is not known in advance.
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut buf).map_err(|e| Error::io(path, e))?;
            return Ok(Input(buf));
        };
        let mut buf = Vec::with_capacity(len);
        let prefault = if meta.len() >= LARGE_FROM_BYTES { crate::prefault::Prefaulter::start() } else { None };
        while buf.len() < len {
            crate::cancel::check()?;
            if let Some(pf) = &prefault {
                pf.ahead(0, &buf, 2 * READ_CHUNK);
            }
            let want = (len - buf.len()).min(READ_CHUNK);
            let got = std::io::Read::read_to_end(&mut std::io::Read::take(&file, want as u64), &mut buf).map_err(|e| Error::io(path, e))?;
            if got == 0 {
                let now = file.metadata().map_or_else(|_| "fewer".to_string(), |m| m.len().to_string());
                return Err(Error::format(
                    path,
                    format!(
                        "the file changed (shrank) while it was read: it had {len} bytes when opened and has {now} now (another process truncated or rewrote it); read it again once it is complete"
                    ),
                ));
            }
        }
        if let Some(pf) = &prefault {
            pf.clear(0);
        }
        Ok(Input(buf))
    }

    /// The bytes as an owned vector.
    fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl std::ops::Deref for Input {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

pub fn detect(data: &[u8]) -> Option<SourceKind> {
    if data.starts_with(b"ARROW1") {
        Some(SourceKind::Arrow)
    } else if data.len() >= 2 && data[0] == 0x80 && (2..=5).contains(&data[1]) {
        Some(SourceKind::PytorchPickle)
    } else if data.last() == Some(&b'.') && matches!(data[0], b'(' | b'}' | b']' | b')' | b'c' | b'd' | b'l' | b'N' | b'I') {
        // Protocol 0/1 pickles have no PROTO header: they start with the opcode building the
        // first object and end with STOP. Detected so that they get the pickle's own errors
        // (an unsafe GLOBAL is refused by name) rather than "unrecognised format".
        Some(SourceKind::PytorchPickle)
    } else if xplane::looks_like_xspace(data) {
        Some(SourceKind::Xplane)
    } else {
        None
    }
}

/// The capture metadata `.json` beside a trace (`NAME.json` for `NAME.pickle.xz`), if any.
pub fn sidecar_json(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.split('.').next()?;
    let candidate = path.with_file_name(format!("{stem}.json"));
    (candidate != path && candidate.is_file()).then_some(candidate)
}

/// A text file's content. Bytes that are not UTF-8 make a corrupt file (a format error), not an
/// I/O error as `fs::read_to_string` has it (found by tests/test_hypothesis_inputs.py).
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    String::from_utf8(bytes).map_err(|e| Error::format(path, format!("not UTF-8 text (byte {} is not)", e.utf8_error().valid_up_to())))
}

/// A byte count of the capture metadata (`--meta`, the `.json` sidecar) at `key` of `obj`
/// (`what` names `obj` in errors: `""` for the top level): `None` when absent or null; a
/// non-negative integer, or a float without a fraction below 2^64 (`8.0e10`), is its value;
/// anything else (a fraction, a negative number, a string) is an error naming the key, never a
/// truncation or a value silently dropped.
pub(crate) fn meta_u64(meta: &Path, obj: &serde_json::Value, what: &str, key: &str) -> Result<Option<u64>> {
    let Some(v) = obj.get(key).filter(|v| !v.is_null()) else { return Ok(None) };
    if let Some(n) = v.as_u64() {
        return Ok(Some(n));
    }
    if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0) {
        return Ok(Some(f as u64));
    }
    Err(Error::format(meta, format!("metadata '{what}{key}' is {v}, not a number of bytes (an integer from 0 to 2^64 - 1)")))
}

pub(crate) fn read_meta_json(opts: &ImportOptions, path: &Path) -> Result<Option<(PathBuf, serde_json::Value)>> {
    let Some(meta) = opts.meta.clone().or_else(|| sidecar_json(path)) else { return Ok(None) };
    let text = read_text(&meta)?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::format(&meta, format!("metadata is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(Error::format(&meta, "metadata JSON must be an object"));
    }
    Ok(Some((meta, v)))
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hasher};

    #[test]
    fn a_text_file_that_is_not_utf8_is_a_format_error() {
        let dir = std::env::temp_dir().join(format!("allocreplay-read-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.json");
        std::fs::write(&p, b"{\"a\": \"\x80\"}").unwrap();
        let e = super::read_text(&p).unwrap_err();
        assert!(matches!(e, crate::Error::Format { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("{}: not UTF-8 text (byte 7 is not)", p.display()));
        // As a sidecar: the snapshot's load names the .json.
        let opts = super::ImportOptions { meta: Some(p.clone()), ..Default::default() };
        assert!(matches!(super::read_meta_json(&opts, &dir.join("x.pickle")), Err(crate::Error::Format { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use rustc_hash::{FxBuildHasher, FxHashMap};

    /// The importers key maps by addresses (multiples of 512): rustc-hash 2's FxHasher rotates
    /// its product so the well-mixed high bits reach the low bits hashbrown takes the bucket
    /// index from. Without that rotation (rustc-hash 1.x) the low 9 bits of every such address's
    /// hash are zero and 1,024 addresses share at most 2 of 1,024 bucket indices.
    #[test]
    fn addresses_512_apart_spread_over_buckets() {
        let low: std::collections::HashSet<u64> = (0..1024u64)
            .map(|i| {
                let mut h = FxBuildHasher.build_hasher();
                h.write_u64(0x7f00_0000_0000 + i * 512);
                h.finish() & 1023
            })
            .collect();
        assert!(low.len() > 256, "{} distinct bucket indices of 1024", low.len());
        let mut m: FxHashMap<u64, u32> = FxHashMap::default();
        for i in 0..10_000u64 {
            m.insert(0x7f00_0000_0000 + i * 512, i as u32);
        }
        assert_eq!((m.len(), m[&(0x7f00_0000_0000 + 77 * 512)]), (10_000, 77));
    }
}
