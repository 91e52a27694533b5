//! Large vectors backed by transparent huge pages.
//!
//! The offline planner fills a few hundred megabytes of fresh vectors on every plan (the
//! intervals, the sort keys, the overlap structure's lists) and then reads most of them at
//! random. With 4 KiB pages both cost: every page is faulted in (allocated, zeroed, mapped) on
//! first touch, and nearly every random read misses the TLB. On this project's VMs
//! (`transparent_hugepage/enabled` = `madvise`, the common default) a vector gets 2 MiB pages
//! only when asked with `madvise(MADV_HUGEPAGE)`, before its pages are touched: measured on the
//! qwen2 capture tiled twice, `plan_trace` took ~10% less time with huge pages.
//!
//! The advice is a hint: where the kernel has no huge pages to give, or on other systems, the
//! vector is an ordinary one.

/// Vectors below this many bytes are left alone (a huge page is 2 MiB).
const FROM_BYTES: usize = 8 << 20;

/// An empty vector with room for `n` elements, its memory advised to be huge pages.
pub(crate) fn with_capacity<T>(n: usize) -> Vec<T> {
    let v = Vec::with_capacity(n);
    advise(&v);
    v
}

/// `vec![value; n]`, its memory advised to be huge pages before it is written.
pub(crate) fn filled<T: Clone>(n: usize, value: T) -> Vec<T> {
    let mut v = with_capacity(n);
    v.resize(n, value);
    v
}

/// Advises the capacity of `v` (not yet touched) to be backed by huge pages.
fn advise<T>(v: &Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if bytes < FROM_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // madvise wants a page-aligned start: the first whole 4 KiB page of the buffer.
        let page = 4096usize;
        let start = (v.as_ptr() as usize).next_multiple_of(page);
        let end = (v.as_ptr() as usize + bytes) / page * page;
        if end > start {
            // SAFETY: MADV_HUGEPAGE changes how the kernel backs the range (this vector's own
            // allocation), never its contents; a failure (no THP in this kernel) is ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn filled_and_with_capacity_hold_what_vec_would() {
        // Large enough to be advised, and a small one that is not: same contents either way.
        for n in [10usize, 3 << 20] {
            let v = super::filled(n, 7u32);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 7));
            let mut w = super::with_capacity::<u64>(n);
            assert!(w.capacity() >= n && w.is_empty());
            w.extend(0..n as u64);
            assert_eq!(w[n - 1], n as u64 - 1);
        }
    }
}
