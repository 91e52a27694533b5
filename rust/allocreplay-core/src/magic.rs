//! What a file's first bytes say it is: the compressions the importers undo, and the message
//! for a file read as Arrow IPC that is not one. Below the trace model, which reads `.arrow`
//! files, and the importers, which decompress.

/// The compression a file's first bytes show (`"gzip"`, `"xz"`, `"zstd"`), if any.
pub fn compressed_as(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(&[0x1f, 0x8b]) {
        Some("gzip")
    } else if bytes.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Some("xz")
    } else if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some("zstd")
    } else {
        None
    }
}

/// The message for a file that is not an Arrow IPC file where one is read directly (a
/// streamed replay, `read_arrow`): a compressed one says so and what to do.
pub fn not_arrow_message(bytes: &[u8]) -> String {
    match compressed_as(bytes) {
        Some(what) => format!(
            "a {what}-compressed file, not an Arrow IPC file: allocreplay.load / `allocreplay replay` read it (decompressing it whole); to stream it from disk, decompress it first ({})",
            match what {
                "gzip" => "gunzip -k FILE",
                "xz" => "unxz -k FILE",
                _ => "zstd -d FILE",
            }
        ),
        None => "not a readable Arrow IPC file (no ARROW1 magic)".into(),
    }
}
