//! allocreplay-core: trace model and Arrow schema, importers, allocator policies and the
//! replay engine. Pure Rust; the Python bindings live in `allocreplay-py`.

// A library prints nothing: results go to the caller (tests, benches and examples may print).
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

pub mod analysis;
pub mod cancel;
mod cores;
pub mod device;
pub mod engine;
pub mod error;
pub mod export;
mod huge_pages;
pub mod import;
mod magic;
mod max_tree;
pub mod offline;
pub mod policy;
mod prefault;
pub mod registry;
pub mod replay;
pub mod trace;
pub mod tune;
pub mod units;
pub mod validate;

#[cfg(test)]
mod test_rng;

pub use error::{Error, Result};
pub use trace::{Action, Trace, TraceMetadata};
