//! Long calls of the core that Ctrl-C stops (issue 28, class 4).
//!
//! The core runs with the GIL released, so Python's signal handlers (`KeyboardInterrupt` for
//! SIGINT) cannot run until the call returns: a library call such as
//! `allocreplay.replay(trace, "offline")` on millions of events ignored Ctrl-C for as long
//! as it ran. [`detach`] — the one way the bindings release the GIL for the core's work — runs
//! the work on a worker thread under a cancellation token (`allocreplay_core::cancel`) while
//! the calling thread waits, taking the GIL back every [`POLL`] to run the signal handlers
//! (`Python::check_signals`). When a handler raises, the token is cancelled, the worker is
//! waited for (the core's loops poll the token every `engine::PROGRESS_EVERY` rows:
//! milliseconds), its result is dropped and the handler's exception (`KeyboardInterrupt`, or
//! the CLI's `Terminated` for SIGTERM) is raised.
//!
//! Python runs signal handlers in its main thread only: called from another thread
//! (`_output.interruptible`'s worker, which the CLI uses so that its main thread sees the
//! signal at once), `check_signals` never raises and the call runs to its end, as before.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use allocreplay_core::cancel::Cancel;
use allocreplay_core::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::errors::{BindingError, BindingResult};

/// How often the waiting thread looks at Python's signals.
pub const POLL: Duration = Duration::from_millis(50);

/// The worker's stack: the 8 MiB of a main thread (the core ran on Python's threads before).
const WORKER_STACK: usize = 8 << 20;

/// Runs `f`, a call of the core, with the GIL released and Ctrl-C working (see the module's
/// documentation). A panic of `f` goes on in the calling thread, with its own payload (for
/// `errors::guard`).
pub fn detach<T: Send>(py: Python<'_>, f: impl FnOnce() -> Result<T, Error> + Send) -> BindingResult<T> {
    let token = Cancel::new();
    let done = (Mutex::new(false), Condvar::new());
    let (token_ref, done_ref) = (&token, &done);
    std::thread::scope(|s| {
        let worker = std::thread::Builder::new().name("allocreplay-core".into()).stack_size(WORKER_STACK).spawn_scoped(s, move || {
            /// Tells the waiting thread that the work is over, also when it panics.
            struct Finished<'a>(&'a (Mutex<bool>, Condvar));
            impl Drop for Finished<'_> {
                fn drop(&mut self) {
                    *self.0 .0.lock().unwrap_or_else(|e| e.into_inner()) = true;
                    self.0 .1.notify_all();
                }
            }
            let _finished = Finished(done_ref);
            token_ref.run(f)
        });
        let worker =
            worker.map_err(|e| BindingError::Py(PyRuntimeError::new_err(format!("allocreplay: cannot start a worker thread: {e}"))))?;
        let mut interrupted = None;
        loop {
            let finished = py.detach(|| {
                let (lock, cv) = done_ref;
                let g = lock.lock().unwrap_or_else(|e| e.into_inner());
                *cv.wait_timeout_while(g, POLL, |finished| !*finished).unwrap_or_else(|e| e.into_inner()).0
            });
            if finished {
                break;
            }
            if let Err(e) = py.check_signals() {
                token.cancel();
                interrupted = Some(e);
                break;
            }
        }
        let outcome = py.detach(move || worker.join());
        match (interrupted, outcome) {
            // The work stopped early: whatever it returned is not an answer.
            (Some(e), _) => Err(BindingError::Py(e)),
            (None, Ok(result)) => result.map_err(BindingError::from),
            (None, Err(payload)) => std::panic::resume_unwind(payload),
        }
    })
}
