//! allocreplay-core: trace model and Arrow schema, importers, allocator policies and the
//! replay engine. Pure Rust; the Python bindings live in `allocreplay-py`.

pub mod engine;
pub mod error;
pub(crate) mod hash;
pub mod import;
pub mod offline;
pub mod policy;
pub mod replay;
pub mod trace;
pub mod tune;
pub mod units;
pub mod validate;

pub use error::{Error, Result};
pub use trace::{Action, Trace, TraceMetadata};
