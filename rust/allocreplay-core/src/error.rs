//! The one error type of the core. Every variant names what went wrong in words a user can act
//! on; the Python bindings map each variant to an exception class (see `allocreplay.errors`).

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read at all.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// The file was read but is not a valid input of the format it claims (corrupt, truncated,
    /// or the wrong kind of file).
    #[error("{path}: {message}")]
    Format { path: PathBuf, message: String },

    /// A pickle that holds something other than plain dicts, lists, tuples, strings and
    /// numbers (class instances, globals, reduce calls): refused, never executed.
    #[error("{path}: {message}")]
    UnsafePickle { path: PathBuf, message: String },

    /// The source format could not be recognised.
    #[error("{path}: {message}")]
    UnknownFormat { path: PathBuf, message: String },

    /// An `.arrow` file whose schema is not a trace of a supported format version.
    #[error("{path}: {message}")]
    Schema { path: PathBuf, message: String },

    /// A policy specification string that does not parse, or names unknown options.
    #[error("{0}")]
    PolicySpec(String),

    /// Any other invalid argument (capacity strings, option combinations).
    #[error("{0}")]
    InvalidArgument(String),

    /// An argument that does not fit the file it is about (an allocator the capture does not
    /// hold, a folder of several captures): an invalid argument, with the file's path.
    #[error("{path}: {message}")]
    InvalidInput { path: PathBuf, message: String },

    /// The trace is well formed but inconsistent (a free of an unknown allocation id, ...).
    #[error("{0}")]
    Replay(String),

    /// The call was asked to stop (`cancel::Cancel::cancel`: Ctrl-C in the Python bindings,
    /// which raise `KeyboardInterrupt`); its partial results are dropped.
    #[error("cancelled")]
    Cancelled,
}

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io { path: path.to_path_buf(), source }
    }
    pub fn format(path: &Path, message: impl Into<String>) -> Self {
        Error::Format { path: path.to_path_buf(), message: message.into() }
    }
    pub fn unsafe_pickle(path: &Path, message: impl Into<String>) -> Self {
        Error::UnsafePickle { path: path.to_path_buf(), message: message.into() }
    }
    pub fn schema(path: &Path, message: impl Into<String>) -> Self {
        Error::Schema { path: path.to_path_buf(), message: message.into() }
    }
    pub fn invalid_input(path: &Path, message: impl Into<String>) -> Self {
        Error::InvalidInput { path: path.to_path_buf(), message: message.into() }
    }
}
