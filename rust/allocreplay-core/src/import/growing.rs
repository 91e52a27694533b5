//! A file read on a helper thread while the bytes already read are parsed.
//!
//! A large plain snapshot pickle was read whole before its parse began: on opt350_serve
//! (170 MB) the read was 90 of the 355 ms of a load (the copy out of the page cache, and the
//! faults of the buffer's pages). Here a scoped thread reads the file in chunks into one buffer
//! of the file's length ([`Growing::read_rest`]) while the parser reads the prefix already
//! filled ([`Growing::prefix`]) and waits, at a frame it needs whole or at the end of what is
//! filled, for more ([`Growing::wait_for`]). The bytes, and so every result, are those of a
//! whole read; a read that fails (the file shrank, an I/O error, the call cancelled) fails the
//! load with the error the whole read gives.
//!
//! What it gains needs a core to spare: on the project's 2-core VM, with the prefaulting thread
//! (`crate::prefault`) on the other core, a load took as long as before (opt350_serve 342–363
//! ms against 354–367 ms, alternated, machine idle); with the prefaulter off, so that the
//! reader had that core, 474–498 ms against 550–567 ms: the read's time comes off the load.
//!
//! Soundness: the reader writes only beyond the published length (`filled`, stored with
//! `Release` after the bytes), and the parser only forms slices of the published prefix (read
//! with `Acquire`): no byte is written while a slice covers it.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::error::{Error, Result};

/// Bytes read per call: the parser waits for at most one chunk when it catches up.
const CHUNK: usize = 8 << 20;

/// A buffer of `total` bytes filled in order by one reader while others read its prefix.
pub(crate) struct Growing {
    ptr: *mut u8,
    cap: usize,
    total: usize,
    /// Bytes read per call ([`CHUNK`]; less in tests).
    chunk: usize,
    /// Bytes written and published (only grows).
    filled: AtomicUsize,
    /// How the reading ended (`None`: still reading), behind the lock the waiters sleep on.
    end: Mutex<Option<Result<()>>>,
    more: Condvar,
}

// SAFETY: the buffer is written by one thread (`read_rest`) beyond `filled` only, and read by
// any thread below `filled` only (see the module's documentation); the rest is atomics and a
// mutex. (Shared with the reader of a scoped thread; never sent: not `Send`.)
unsafe impl Sync for Growing {}

impl Growing {
    /// An empty buffer for `total` bytes.
    pub(crate) fn new(total: usize) -> Growing {
        let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(total));
        Growing {
            ptr: v.as_mut_ptr(),
            cap: v.capacity(),
            total,
            chunk: CHUNK,
            filled: AtomicUsize::new(0),
            end: Mutex::new(None),
            more: Condvar::new(),
        }
    }

    /// The length the file had when it was opened (what a whole read holds).
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The bytes published so far.
    pub(crate) fn filled(&self) -> usize {
        self.filled.load(Ordering::Acquire)
    }

    /// The first `n` bytes (at most [`Growing::filled`]).
    pub(crate) fn prefix(&self, n: usize) -> &[u8] {
        assert!(n <= self.filled(), "a prefix beyond the bytes read");
        // SAFETY: the first `filled` bytes are initialised (published after they were read)
        // and never written again; the buffer lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, n) }
    }

    /// Reads up to `upto` bytes of `file` (from its current position, where the previous call
    /// stopped), publishing each chunk; `progress` counts the bytes. Called by one thread.
    pub(crate) fn fill(&self, file: &File, path: &Path, upto: usize, progress: Option<&AtomicU64>) -> Result<()> {
        let upto = upto.min(self.total);
        let mut at = self.filled.load(Ordering::Relaxed);
        while at < upto {
            crate::cancel::check()?;
            let want = (upto - at).min(self.chunk);
            // SAFETY: `at..at + want` is inside the allocation and beyond `filled`: no slice
            // covers it.
            let p = unsafe { self.ptr.add(at) };
            // Its pages mapped in one call, not faulted in one by one by the copy (the
            // read's main cost; `prefault`). Page-aligned: the chunk's first whole page on.
            let (first_page, end) = ((p as usize).next_multiple_of(4096), p as usize + want);
            if first_page < end {
                crate::prefault::populate(first_page, end);
            }
            let mut got = 0;
            while got < want {
                // SAFETY: as above, for the chunk's part not read yet.
                match unsafe { read_into(file, p.add(got), want - got) } {
                    Ok(0) => return Err(shrank(file, path, self.total)),
                    Ok(k) => got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(path, e)),
                }
            }
            at += want;
            self.filled.store(at, Ordering::Release);
            if let Some(p) = progress {
                p.fetch_add(want as u64, Ordering::Relaxed);
            }
            // Under the lock: a waiter checks `filled` holding it, so none misses this.
            let _guard = self.end.lock().unwrap_or_else(|e| e.into_inner());
            self.more.notify_all();
        }
        Ok(())
    }

    /// The reader thread's work: the rest of the file, then how it ended, for the waiters.
    pub(crate) fn read_rest(&self, file: &File, path: &Path, progress: Option<&AtomicU64>) {
        /// Ends the reading if `fill` panics: the parser would otherwise wait for ever.
        struct OnPanic<'g>(&'g Growing);
        impl Drop for OnPanic<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.end_with(Err(Error::Replay("internal error: the file's reader panicked".into())));
                }
            }
        }
        let guard = OnPanic(self);
        let r = self.fill(file, path, self.total, progress);
        std::mem::forget(guard);
        self.end_with(r);
    }

    fn end_with(&self, r: Result<()>) {
        let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
        *end = Some(r);
        self.more.notify_all();
    }

    /// Waits until `want` bytes (at most the total) are filled or the reading has ended;
    /// returns the bytes filled then.
    pub(crate) fn wait_for(&self, want: usize) -> usize {
        let want = want.min(self.total);
        let f = self.filled();
        if f >= want {
            return f;
        }
        let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let f = self.filled();
            if f >= want || end.is_some() {
                return f;
            }
            end = self.more.wait(end).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits for the end of the reading: `Ok` once the whole file is in (then
    /// [`Growing::prefix`] of [`Growing::total`] holds it), else the reader's error (given to
    /// the first call; a later one gets [`Error::Cancelled`]'s stand-in, never a hang).
    pub(crate) fn finish(&self) -> Result<()> {
        let mut end = self.end.lock().unwrap_or_else(|e| e.into_inner());
        while end.is_none() {
            end = self.more.wait(end).unwrap_or_else(|e| e.into_inner());
        }
        match end.replace(Err(Error::Cancelled)) {
            Some(Ok(())) => {
                *end = Some(Ok(()));
                Ok(())
            }
            Some(Err(e)) => Err(e),
            None => unreachable!("the loop waits for the end"),
        }
    }

    /// The buffer as a vector of the bytes read (all of them after a successful
    /// [`Growing::finish`]).
    pub(crate) fn into_vec(mut self) -> Vec<u8> {
        let len = *self.filled.get_mut();
        let (ptr, cap) = (self.ptr, self.cap);
        // `Drop` frees nothing now: the vector owns the allocation.
        self.cap = 0;
        // SAFETY: `ptr` and `cap` are the vector's of `new`, and its first `len` bytes are
        // initialised.
        unsafe { Vec::from_raw_parts(ptr, len, cap) }
    }
}

impl Drop for Growing {
    fn drop(&mut self) {
        if self.cap != 0 {
            // SAFETY: the vector of `new` (bytes need no drop: length 0 frees the allocation).
            drop(unsafe { Vec::from_raw_parts(self.ptr, 0, self.cap) });
        }
    }
}

/// Reads at most `n` bytes of `file` (from its position) to `p`.
///
/// # Safety
/// `p..p + n` must be writable memory that nothing else reads or writes meanwhile.
unsafe fn read_into(file: &File, p: *mut u8, n: usize) -> std::io::Result<usize> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the caller's: `n` writable bytes at `p` (the kernel writes them; no
        // reference to uninitialised bytes is made).
        let r = unsafe { libc::read(file.as_raw_fd(), p.cast(), n) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }
    #[cfg(not(unix))]
    {
        use std::io::Read;
        // SAFETY: the caller's; zeroed first, so that `read` gets initialised bytes.
        let chunk = unsafe {
            std::ptr::write_bytes(p, 0, n);
            std::slice::from_raw_parts_mut(p, n)
        };
        (&*file).read(chunk)
    }
}

/// The error of a file that ends before the length it had when opened.
pub(crate) fn shrank(file: &File, path: &Path, len: usize) -> Error {
    let now = file.metadata().map_or_else(|_| "fewer".to_string(), |m| m.len().to_string());
    Error::format(
        path,
        format!(
            "the file changed (shrank) while it was read: it had {len} bytes when opened and has {now} now (another process truncated or rewrote it); read it again once it is complete"
        ),
    )
}

#[cfg(test)]
impl Growing {
    /// Reads of `chunk` bytes (a test's small files in several).
    pub(crate) fn with_chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk;
        self
    }

    /// A test's reader: appends `bytes` (published at once).
    pub(crate) fn feed(&self, bytes: &[u8]) {
        let at = self.filled.load(Ordering::Relaxed);
        assert!(at + bytes.len() <= self.total);
        // SAFETY: beyond `filled`, inside the allocation (as in `fill`).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(at), bytes.len()) };
        self.filled.store(at + bytes.len(), Ordering::Release);
        let _guard = self.end.lock().unwrap();
        self.more.notify_all();
    }

    /// A test's reader: the end of the reading.
    pub(crate) fn end(&self, r: Result<()>) {
        self.end_with(r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_whole_in_chunks_and_a_shrunk_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("allocreplay-growing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.bin");
        const C: usize = 1000;
        let bytes: Vec<u8> = (0..3 * C + 345).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let g = Growing::new(bytes.len()).with_chunk(C);
        let counted = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| g.read_rest(&file, &path, Some(&counted)));
            // A waiter sees a prefix of the file at every point.
            let f = g.wait_for(C + 1);
            assert!(f > C && g.prefix(f) == &bytes[..f]);
        });
        g.finish().unwrap();
        assert_eq!(g.prefix(g.total()), &bytes[..]);
        assert_eq!(counted.load(Ordering::Relaxed), bytes.len() as u64);
        assert_eq!(g.into_vec(), bytes);
        // Opened at its length, shorter when read: the whole read's error.
        let g = Growing::new(bytes.len() + 10).with_chunk(C);
        g.read_rest(&File::open(&path).unwrap(), &path, None);
        // Three whole chunks; the fourth, cut short, is not published.
        assert_eq!(g.filled(), 3 * C);
        let e = g.finish().unwrap_err().to_string();
        assert!(e.contains("the file changed (shrank) while it was read"), "{e}");
        // Asked again: an error, not a hang.
        assert!(g.finish().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
