//! The messages of `tsl/profiler/protobuf/xplane.proto` (package `tensorflow.profiler`, proto3)
//! that the memory importer reads, written by hand for prost (no protoc at build time). Field
//! numbers follow the .proto exactly; fields we never read are left out and skipped by prost.
//!
//! `XSpace` keeps its planes as raw bytes so that the (large) device planes are never decoded:
//! only each plane's name is read ([`XPlaneName`]), then the one plane we need in full.

use std::collections::HashMap;

use bytes::Bytes;

/// `message XSpace { repeated XPlane planes = 1; repeated string errors = 2;
/// repeated string warnings = 3; repeated string hostnames = 4; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XSpaceRaw {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub planes: Vec<Bytes>,
    #[prost(string, repeated, tag = "2")]
    pub errors: Vec<String>,
    #[prost(string, repeated, tag = "3")]
    pub warnings: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub hostnames: Vec<String>,
}

/// The header of an `XPlane`: id and name only (lines and metadata skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlaneName {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
}

/// `message XPlane { int64 id = 1; string name = 2; repeated XLine lines = 3;
/// map<int64, XEventMetadata> event_metadata = 4; map<int64, XStatMetadata> stat_metadata = 5;
/// repeated XStat stats = 6; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlane {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<XLine>,
    #[prost(map = "int64, message", tag = "4")]
    pub event_metadata: HashMap<i64, XEventMetadata>,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

/// `message XLine { int64 id = 1; int64 display_id = 10; string name = 2;
/// string display_name = 11; int64 timestamp_ns = 3; int64 duration_ps = 9;
/// repeated XEvent events = 4; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XLine {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int64, tag = "3")]
    pub timestamp_ns: i64,
    #[prost(message, repeated, tag = "4")]
    pub events: Vec<XEvent>,
    #[prost(int64, tag = "9")]
    pub duration_ps: i64,
    #[prost(int64, tag = "10")]
    pub display_id: i64,
    #[prost(string, tag = "11")]
    pub display_name: String,
}

/// `message XEvent { int64 metadata_id = 1; oneof data { int64 offset_ps = 2;
/// int64 num_occurrences = 5; } int64 duration_ps = 3; repeated XStat stats = 4; }`
/// (The oneof is read as two plain fields: only `offset_ps` matters here.)
#[derive(Clone, PartialEq, prost::Message)]
pub struct XEvent {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(int64, tag = "2")]
    pub offset_ps: i64,
    #[prost(int64, tag = "3")]
    pub duration_ps: i64,
    #[prost(message, repeated, tag = "4")]
    pub stats: Vec<XStat>,
    #[prost(int64, tag = "5")]
    pub num_occurrences: i64,
}

/// `message XStat { int64 metadata_id = 1; oneof value { double double_value = 2;
/// uint64 uint64_value = 3; int64 int64_value = 4; string str_value = 5; bytes bytes_value = 6;
/// uint64 ref_value = 7; } }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XStat {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(oneof = "XStatValue", tags = "2, 3, 4, 5, 6, 7")]
    pub value: Option<XStatValue>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum XStatValue {
    #[prost(double, tag = "2")]
    Double(f64),
    #[prost(uint64, tag = "3")]
    Uint64(u64),
    #[prost(int64, tag = "4")]
    Int64(i64),
    #[prost(string, tag = "5")]
    Str(String),
    #[prost(bytes = "vec", tag = "6")]
    Bytes(Vec<u8>),
    /// A string interned as `stat_metadata[ref].name`.
    #[prost(uint64, tag = "7")]
    Ref(u64),
}

/// `message XEventMetadata { int64 id = 1; string name = 2; string display_name = 4;
/// bytes metadata = 3; repeated XStat stats = 5; repeated int64 child_id = 6; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XEventMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "4")]
    pub display_name: String,
}

/// `message XStatMetadata { int64 id = 1; string name = 2; string description = 3; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct XStatMetadata {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
}

/// An `XPlane` whose events are kept as raw bytes (slices of the input, no copy): the host
/// plane has a million events of which a few thousand are memory events; each event's header
/// is read first ([`XEventHead`]) and only memory events are decoded in full.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlaneLazy {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<XLineLazy>,
    #[prost(map = "int64, message", tag = "4")]
    pub event_metadata: HashMap<i64, XEventMetadata>,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}

/// An `XLine` with its events as raw bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct XLineLazy {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int64, tag = "3")]
    pub timestamp_ns: i64,
    #[prost(bytes = "bytes", repeated, tag = "4")]
    pub events: Vec<Bytes>,
}

/// The head of an `XEvent`: which event it is and when (its stats skipped).
#[derive(Clone, PartialEq, prost::Message)]
pub struct XEventHead {
    #[prost(int64, tag = "1")]
    pub metadata_id: i64,
    #[prost(int64, tag = "2")]
    pub offset_ps: i64,
}

/// An `XPlane` without its lines: name and plane-level stats (device planes carry the
/// device's memory size and compute capability there).
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlaneStats {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
}
