//! Transparent decompression of gzip, xz and zstd inputs, detected by magic bytes.

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

pub fn decompress(path: &Path, raw: Vec<u8>) -> Result<Vec<u8>> {
    decompress_counted(path, raw, None)
}

/// [`decompress`], counting the compressed bytes consumed into `progress` (its total is
/// `raw.len()`); an uncompressed input counts as consumed at once.
pub fn decompress_counted(path: &Path, raw: Vec<u8>, progress: Option<&AtomicU64>) -> Result<Vec<u8>> {
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
        return Ok(raw);
    };
    let mut out = Vec::with_capacity(raw.len() * 8);
    let input = Counted { inner: &raw[..], progress, pending: 0 };
    let res = match what {
        "gzip" => flate2::read::MultiGzDecoder::new(input).read_to_end(&mut out).map(|_| ()),
        "xz" => liblzma::read::XzDecoder::new_multi_decoder(input).read_to_end(&mut out).map(|_| ()),
        _ => ruzstd::decoding::StreamingDecoder::new(input)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
            .and_then(|mut d| d.read_to_end(&mut out).map(|_| ())),
    };
    res.map_err(|e| Error::format(path, format!("corrupt or truncated {what} data: {e}")))?;
    Ok(out)
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
}
