//! Transparent decompression of gzip, xz and zstd inputs, detected by magic bytes.
//!
//! The output is bounded (a compression bomb is refused before it exhausts memory): at most
//! [`MAX_RATIO`] times the compressed size, and never less than [`MIN_LIMIT`] bytes. The real
//! captures compress 14–20× (PyTorch snapshots) and 3× (xplane.pb); docs/bad-inputs.md.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A reader that counts the bytes taken from it into a progress counter, every 1 MiB.
struct Counted<'a, R> {
    inner: R,
    progress: Option<&'a AtomicU64>,
    pending: u64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(p) = self.progress {
            self.pending += n as u64;
            if self.pending >= 1 << 20 || n == 0 {
                p.fetch_add(self.pending, Ordering::Relaxed);
                self.pending = 0;
            }
        }
        Ok(n)
    }
}

/// Largest accepted ratio of decompressed to compressed bytes.
pub const MAX_RATIO: u64 = 1000;
/// The bound on decompressed bytes for small inputs (the ratio alone would refuse a small
/// but legitimately very repetitive file).
pub const MIN_LIMIT: u64 = 256 << 20;

/// The most bytes `decompress` produces from `compressed` input bytes.
pub fn output_limit(compressed: usize) -> u64 {
    (compressed as u64).saturating_mul(MAX_RATIO).max(MIN_LIMIT)
}

pub fn decompress(path: &Path, raw: Vec<u8>) -> Result<Vec<u8>> {
    decompress_counted(path, raw, None)
}

/// [`decompress`], counting the compressed bytes consumed into `progress` (its total is
/// `raw.len()`); an uncompressed input counts as consumed at once.
pub fn decompress_counted(path: &Path, raw: Vec<u8>, progress: Option<&AtomicU64>) -> Result<Vec<u8>> {
    let limit = output_limit(raw.len());
    decompress_limited(path, raw, limit, progress)
}

/// `decompress` with an explicit output bound (tests use a small one).
pub fn decompress_limited(path: &Path, raw: Vec<u8>, limit: u64, progress: Option<&AtomicU64>) -> Result<Vec<u8>> {
    Ok(decompress_slice(path, &raw, limit, progress)?.unwrap_or(raw))
}

/// The decompressed bytes of `raw` (at most `limit`), or `None` when `raw` is not compressed
/// (then counted into `progress` as consumed at once): for inputs the caller does not own as a
/// `Vec`, such as a memory-mapped file.
pub fn decompress_slice(path: &Path, raw: &[u8], limit: u64, progress: Option<&AtomicU64>) -> Result<Option<Vec<u8>>> {
    let what = if raw.starts_with(&[0x1f, 0x8b]) {
        "gzip"
    } else if raw.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        "xz"
    } else if raw.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        "zstd"
    } else {
        if let Some(p) = progress {
            p.fetch_add(raw.len() as u64, Ordering::Relaxed);
        }
        return Ok(None);
    };
    let mut out = Vec::with_capacity(raw.len().saturating_mul(8).min(limit as usize));
    // One byte more than the limit is read so that "exactly at the limit" and "beyond it" differ.
    let cap = limit.saturating_add(1);
    let input = Counted { inner: raw, progress, pending: 0 };
    let res = match what {
        "gzip" => flate2::read::MultiGzDecoder::new(input).take(cap).read_to_end(&mut out).map(|_| ()),
        "xz" => liblzma::read::XzDecoder::new_multi_decoder(input).take(cap).read_to_end(&mut out).map(|_| ()),
        _ => {
            // ruzstd allocates its window (up to 100 MiB, its own limit) when the frame header
            // is read; a frame declaring more content than the limit is refused before that.
            match ruzstd::decoding::StreamingDecoder::new(input) {
                Err(e) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())),
                Ok(d) => {
                    let declared = d.decoder.content_size();
                    if declared > limit {
                        return Err(bomb(path, what, limit, raw.len()));
                    }
                    d.take(cap).read_to_end(&mut out).map(|_| ())
                }
            }
        }
    };
    res.map_err(|e| Error::format(path, format!("corrupt or truncated {what} data: {e}")))?;
    if out.len() as u64 > limit {
        return Err(bomb(path, what, limit, raw.len()));
    }
    Ok(Some(out))
}

fn bomb(path: &Path, what: &str, limit: u64, compressed: usize) -> Error {
    Error::format(
        path,
        format!(
            "{what} data inflates beyond {limit} bytes (from {compressed} compressed bytes; the limit is {MAX_RATIO}× the compressed size, at least {MIN_LIMIT} bytes): refused as a decompression bomb"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn progress_counts_every_compressed_byte() {
        // 4 MiB of varied bytes, gzip-compressed: the counter ends at the compressed size.
        let plain: Vec<u8> = (0..4u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&plain).unwrap();
        let gz = enc.finish().unwrap();
        let done = AtomicU64::new(0);
        let out = decompress_counted(Path::new("x.gz"), gz.clone(), Some(&done)).unwrap();
        assert_eq!(out, plain);
        assert_eq!(done.load(Ordering::Relaxed), gz.len() as u64);
        // Uncompressed input counts as read at once.
        let done = AtomicU64::new(0);
        decompress_counted(Path::new("x"), plain.clone(), Some(&done)).unwrap();
        assert_eq!(done.load(Ordering::Relaxed), plain.len() as u64);
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn inflating_past_the_limit_is_a_format_error() {
        let raw = gzip(&vec![0u8; 1 << 20]);
        let p = Path::new("bomb.pickle.gz");
        let e = decompress_limited(p, raw.clone(), 1000, None).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e:?}");
        let m = e.to_string();
        assert!(m.starts_with("bomb.pickle.gz: gzip data inflates beyond 1000 bytes"), "{m}");
        assert!(m.contains("decompression bomb"), "{m}");
        // At the limit exactly: accepted.
        assert_eq!(decompress_limited(p, raw, 1 << 20, None).unwrap().len(), 1 << 20);
    }

    #[test]
    fn the_limit_grows_with_the_input_and_has_a_floor() {
        assert_eq!(output_limit(10), MIN_LIMIT);
        assert_eq!(output_limit(1 << 30), (1u64 << 30) * MAX_RATIO);
        assert_eq!(output_limit(usize::MAX), u64::MAX);
    }

    #[test]
    fn truncated_gzip_is_a_format_error() {
        let raw = gzip(b"hello hello hello hello");
        let e = decompress(Path::new("t.gz"), raw[..raw.len() - 6].to_vec()).unwrap_err();
        assert!(e.to_string().starts_with("t.gz: corrupt or truncated gzip data"), "{e}");
    }
}
