//! `validate`: replays a trace under the settings it recorded and compares, decision by
//! decision, with what the real allocator did. One module per source.

pub mod bfc;
pub mod pytorch;
