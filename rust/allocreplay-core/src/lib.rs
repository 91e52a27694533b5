//! allocreplay-core: trace model and Arrow schema, importers, allocator policies and the
//! replay engine. Pure Rust; the Python bindings live in `allocreplay-py`.

pub mod engine;
pub mod error;
pub mod import;
pub mod offline;
pub mod policy;
pub mod trace;

pub use error::{Error, Result};
pub use trace::{Action, Trace, TraceMetadata};
