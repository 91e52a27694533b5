//! Cancellation of long calls (issue 28, class 4: Ctrl-C stops a library call within a second).
//!
//! A caller that may want to stop a long call — the Python bindings, when a signal arrives —
//! runs it under a [`Cancel`] token: `token.run(|| replay(...))`, and calls
//! [`Cancel::cancel`] from another thread. The core's long loops poll the token about every
//! [`PROGRESS_EVERY`] rows (the engine, the offline planner, the loaders and
//! the trace check) and stop, their entry points returning [`Error::Cancelled`].
//!
//! The token is the calling thread's (a thread-local), so that it reaches the loaders and the
//! planner without a parameter in every signature; the threads the core starts for one call
//! (`replay`'s and `tune`'s workers, the planner's second order) run under the token of the
//! thread that started them ([`current`], [`within`]). Without a token nothing is ever
//! cancelled: a poll is one thread-local read, and results are those of a call without it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// Rows between two bumps of a progress counter and two polls of the token: rare enough not to
/// slow a loop (the engine's, the offline planner's, the loaders').
pub const PROGRESS_EVERY: usize = 1 << 14;

/// How far a long call has gone, read from another thread for a progress bar: `done` of
/// `total` units (a load: bytes of the file read, the parse that follows not counted; a
/// replay: trace rows walked, every (policy, device) replay walking the whole trace). The call
/// sets `total` when it starts and counts into `done` every [`PROGRESS_EVERY`] units.
#[derive(Debug, Default)]
pub struct Progress {
    pub done: std::sync::atomic::AtomicU64,
    pub total: std::sync::atomic::AtomicU64,
}

impl Progress {
    /// Starts counting a call of `total` units from 0.
    pub fn start(&self, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }
}

/// A cancellation flag shared by the caller and the call it may stop.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

thread_local! {
    static CURRENT: RefCell<Option<Cancel>> = const { RefCell::new(None) };
}

impl Cancel {
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Asks the call running under this token to stop (from any thread).
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Runs `f` with this token as the current thread's (the previous one back afterwards,
    /// also when `f` panics).
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        within(Some(self), f)
    }
}

/// The current thread's token, to hand to the threads a call starts ([`within`]).
pub fn current() -> Option<Cancel> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Runs `f` under `token` (none: no token, as outside any [`Cancel::run`]).
pub fn within<T>(token: Option<&Cancel>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Cancel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), token.cloned())));
    f()
}

/// Whether the current thread's call was asked to stop.
#[inline]
pub fn requested() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(Cancel::is_cancelled))
}

/// `Err(Error::Cancelled)` once the current thread's call was asked to stop.
#[inline]
pub fn check() -> Result<()> {
    if requested() {
        Err(Error::Cancelled)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_the_threads_for_the_call_and_handed_to_threads_it_starts() {
        assert!(!requested() && current().is_none());
        let t = Cancel::new();
        t.run(|| {
            assert!(check().is_ok());
            t.cancel();
            assert!(matches!(check(), Err(Error::Cancelled)));
            let token = current();
            std::thread::scope(|s| {
                assert!(s.spawn(|| within(token.as_ref(), requested)).join().unwrap());
                assert!(!s.spawn(requested).join().unwrap(), "a thread without the token is not cancelled");
            });
        });
        assert!(!requested() && current().is_none(), "the token is the call's only");
        let r = std::panic::catch_unwind(|| t.run(|| panic!("in the call")));
        assert!(r.is_err() && current().is_none(), "restored after a panic");
    }
}
