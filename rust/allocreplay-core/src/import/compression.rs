//! Transparent decompression of gzip, xz and zstd inputs, detected by magic bytes.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

pub fn decompress(path: &Path, raw: Vec<u8>) -> Result<Vec<u8>> {
    let what = if raw.starts_with(&[0x1f, 0x8b]) {
        "gzip"
    } else if raw.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        "xz"
    } else if raw.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        "zstd"
    } else {
        return Ok(raw);
    };
    let mut out = Vec::with_capacity(raw.len() * 8);
    let res = match what {
        "gzip" => flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut out).map(|_| ()),
        "xz" => liblzma::read::XzDecoder::new_multi_decoder(&raw[..]).read_to_end(&mut out).map(|_| ()),
        _ => ruzstd::decoding::StreamingDecoder::new(&raw[..])
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))
            .and_then(|mut d| d.read_to_end(&mut out).map(|_| ())),
    };
    res.map_err(|e| Error::format(path, format!("corrupt or truncated {what} data: {e}")))?;
    Ok(out)
}
