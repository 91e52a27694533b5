//! Transparent decompression of gzip, xz and zstd inputs, detected by magic bytes.
//!
//! The output is bounded (a compression bomb is refused before it exhausts memory): at most
//! [`MAX_RATIO`] times the compressed size, and never less than [`MIN_LIMIT`] bytes. The real
//! captures compress 14–20× (PyTorch snapshots) and 3× (xplane.pb); docs/bad-inputs.md.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// A reader that counts the bytes taken from it into a progress counter, every 1 MiB; there
/// too it looks at the call's cancellation token (`crate::cancel`: an error, which
/// [`decompress_slice`] returns as `Error::Cancelled`).
struct Counted<'a, R> {
    inner: R,
    progress: Option<&'a AtomicU64>,
    pending: u64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.pending += n as u64;
        if self.pending >= 1 << 20 || n == 0 {
            if let Some(p) = self.progress {
                p.fetch_add(self.pending, Ordering::Relaxed);
            }
            self.pending = 0;
            if crate::cancel::requested() {
                return Err(std::io::Error::other("cancelled"));
            }
        }
        Ok(n)
    }
}

impl Counted<'_, &[u8]> {
    /// Skips `n` bytes of the input (a skippable zstd frame), counting them.
    fn consume(&mut self, n: usize) {
        self.inner = &self.inner[n..];
        self.pending += n as u64;
        self.flush();
    }

    /// Counts what was read but not counted yet.
    fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if let Some(p) = self.progress {
            p.fetch_add(pending, Ordering::Relaxed);
        }
    }
}

pub use crate::magic::{compressed_as, not_arrow_message};

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
/// `Vec`.
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
            // A file may hold several frames (`zstd -T0`, `pzstd`, concatenated files, with
            // skippable frames between them): every frame is decoded, as `zstd -d` does.
            let mut input = input;
            let mut res = Ok(());
            while !input.inner.is_empty() && res.is_ok() {
                if input.inner.len() >= 8 && input.inner[0] & 0xf0 == 0x50 && input.inner[1..4] == [0x2a, 0x4d, 0x18] {
                    let len = u32::from_le_bytes([input.inner[4], input.inner[5], input.inner[6], input.inner[7]]) as usize;
                    let skip = len.saturating_add(8).min(input.inner.len());
                    input.consume(skip);
                    continue;
                }
                let left = limit.saturating_sub(out.len() as u64);
                res = match ruzstd::decoding::StreamingDecoder::new(&mut input) {
                    Err(e) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())),
                    Ok(d) => {
                        let declared = d.decoder.content_size();
                        if declared > left {
                            return Err(bomb(path, what, limit, raw.len()));
                        }
                        d.take(left.saturating_add(1)).read_to_end(&mut out).map(|_| ())
                    }
                };
                if out.len() as u64 > limit {
                    return Err(bomb(path, what, limit, raw.len()));
                }
            }
            input.flush();
            res
        }
    };
    crate::cancel::check()?;
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

    /// A zstd frame of one raw block holding `data` (under 256 bytes): a single-segment frame
    /// with a one-byte content size, no checksum.
    fn zstd_raw_frame(data: &[u8]) -> Vec<u8> {
        let mut v = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20, data.len() as u8];
        let header = 1u32 | (data.len() as u32) << 3;
        v.extend_from_slice(&header.to_le_bytes()[..3]);
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn every_frame_of_a_multi_frame_zstd_file_is_decoded() {
        // Issue 28, class 8: `zstd -T0`, `pzstd` and concatenated files hold several frames
        // (pzstd puts a skippable frame before each); only the first was decoded, and the
        // pickle then looked truncated.
        let mut z = zstd_raw_frame(b"hello ");
        z.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 9, 9, 9, 9]);
        z.extend(zstd_raw_frame(b"world"));
        z.extend(zstd_raw_frame(b"!"));
        let done = AtomicU64::new(0);
        assert_eq!(decompress_counted(Path::new("x.zst"), z.clone(), Some(&done)).unwrap(), b"hello world!");
        assert_eq!(done.load(Ordering::Relaxed), z.len() as u64);
        // The bound holds over all the frames together.
        let e = decompress_limited(Path::new("x.zst"), z, 8, None).unwrap_err().to_string();
        assert!(e.contains("refused as a decompression bomb"), "{e}");
    }

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
