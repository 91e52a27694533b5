//! How many threads a pass over a large input takes: the cores, at most 8; one where the input
//! is too small for starting threads to pay (the import's entry decoding and matching of frees,
//! the trace check); and [`joined`], a scoped thread's result.

/// Inputs of fewer items are passed over on one thread.
const PARALLEL_FROM: usize = 1 << 18;

/// Threads for a pass over `n` items: 1 below [`PARALLEL_FROM`] or on one core.
pub(crate) fn threads_for(n: usize) -> usize {
    if n < PARALLEL_FROM {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |p| p.get()).min(8)
}

/// A scoped thread's result, its panic carried on to the joining thread.
pub(crate) fn joined<T>(h: std::thread::ScopedJoinHandle<'_, T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}
