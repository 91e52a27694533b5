//! First-touch page faults on a second thread.
//!
//! Importing a large snapshot fills about 1 GB of fresh memory (the parser's arenas, the
//! decoded entries, the columns), and on this project's VMs the kernel's first-touch fault of
//! each 4 KiB page (allocate, zero, map) cost as much as the parse itself: perf of the 4 M-entry
//! load, ~40% of the time in `exc_page_fault`. A [`Prefaulter`] asks the kernel to populate the
//! pages of a buffer's spare capacity (`madvise(MADV_POPULATE_WRITE)`) on a helper thread, a
//! little ahead of the thread that fills the buffer, which then finds them mapped. The work is
//! the same; it moves to the other core.
//!
//! `MADV_POPULATE_WRITE` maps pages without writing to them: populating a range never changes
//! memory contents. So a published range that became stale (the owner's vector grew and moved)
//! is harmless: the call fails on an unmapped range, or maps pages of whatever lives there now,
//! which is this process's memory either way. Linux 5.14 and later; elsewhere (or when the
//! call is refused) the helper stops and the owner faults its pages itself, as without it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Buffers followed at once.
pub(crate) const SLOTS: usize = 16;

/// Most bytes populated in one call: between calls the helper looks at the slots again, lowest
/// first (an owner numbers its buffers in the order it fills them; the parser's arenas, each
/// wanted only a little ahead of its end, are all served before the next slot).
const CHUNK: usize = 1 << 20;

#[derive(Default)]
struct Slot {
    /// Populate [from, to) (byte addresses; `to <= from`: nothing).
    from: AtomicUsize,
    to: AtomicUsize,
}

#[derive(Default)]
struct Shared {
    slots: [Slot; SLOTS],
    stop: AtomicBool,
}

/// The helper thread and the ranges it populates; dropping it stops and joins the thread.
pub(crate) struct Prefaulter {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Prefaulter {
    /// A started helper, or `None` where prefaulting is not available (not Linux, or no
    /// thread could be started): callers then simply fault their own pages.
    pub(crate) fn start() -> Option<Prefaulter> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("allocreplay-prefault".into()).spawn(move || helper(&s)).ok()?;
        Some(Prefaulter { shared, thread: Some(thread) })
    }

    /// Asks for the pages of `v`'s spare capacity from its end up to `ahead` more elements
    /// (all of the spare capacity when `ahead` is `usize::MAX`), in `slot`.
    #[inline]
    pub(crate) fn ahead<T>(&self, slot: usize, v: &Vec<T>, ahead: usize) {
        let size = std::mem::size_of::<T>();
        let base = v.as_ptr() as usize;
        let from = base + v.len() * size;
        let to = base + v.len().saturating_add(ahead).min(v.capacity()) * size;
        let s = &self.shared.slots[slot];
        // `to` first: a reader seeing the new `from` with the old `to` gets an empty range.
        s.to.store(0, Ordering::Relaxed);
        s.from.store(from, Ordering::Relaxed);
        s.to.store(to, Ordering::Release);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// Forgets the range of `slot` (its buffer is about to be freed).
    pub(crate) fn clear(&self, slot: usize) {
        self.shared.slots[slot].to.store(0, Ordering::Release);
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn helper(s: &Shared) {
    const PAGE: usize = 4096;
    // Per slot: how far this thread has populated the slot's current range.
    let mut done = [(0usize, 0usize); SLOTS];
    while !s.stop.load(Ordering::Acquire) {
        let mut worked = false;
        for (k, slot) in s.slots.iter().enumerate() {
            let to = slot.to.load(Ordering::Acquire);
            let from = slot.from.load(Ordering::Relaxed);
            // A new range, or the same buffer further on: start past what is already done.
            let start = if done[k].0 <= from && from <= done[k].1 { done[k].1 } else { from };
            let start = start.next_multiple_of(PAGE);
            if start >= to {
                continue;
            }
            let end = to.min(start + CHUNK);
            if !populate(start, end) {
                return;
            }
            done[k] = (from, end);
            worked = true;
            break;
        }
        if !worked {
            std::thread::park_timeout(std::time::Duration::from_micros(200));
        }
    }
}

/// Populates the pages of [start, end) for writing; false when the kernel does not support it.
#[cfg(target_os = "linux")]
pub(crate) fn populate(start: usize, end: usize) -> bool {
    // SAFETY: MADV_POPULATE_WRITE only maps pages of the range (as a write fault would, without
    // the write): no memory content changes whatever the range holds (see the module's
    // documentation); a range that is no longer mapped fails with ENOMEM.
    let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
    if r == 0 {
        return true;
    }
    // EINVAL: a kernel without MADV_POPULATE_WRITE. Other errors (an unmapped or stale range,
    // a guard page): skip this range, keep going.
    std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn populate(_start: usize, _end: usize) -> bool {
    false
}

/// Drops `v` on a thread of its own: freeing hundreds of MB returns them to the kernel
/// (`munmap`, its page-table and LRU work: 6% of a 4 M-entry snapshot's load), which the
/// caller need not wait for.
pub(crate) fn drop_in_background<T: Send + 'static>(v: T) {
    // When no thread can be started, `spawn` drops the closure, and `v` with it, right here.
    let _ = std::thread::Builder::new().name("allocreplay-free".into()).spawn(move || drop(v));
}
