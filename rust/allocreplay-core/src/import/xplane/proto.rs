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

/// An `XPlane` whose lines are kept as raw bytes (slices of the input, no copy): the host
/// plane has a million events of which a few thousand are memory events. Its lines are read
/// by hand ([`Fields`]): each event's `metadata_id` is read without building the event, and
/// only memory events are decoded in full ([`XEvent`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct XPlaneLazy {
    #[prost(int64, tag = "1")]
    pub id: i64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    pub lines: Vec<Bytes>,
    #[prost(map = "int64, message", tag = "4")]
    pub event_metadata: HashMap<i64, XEventMetadata>,
    #[prost(map = "int64, message", tag = "5")]
    pub stat_metadata: HashMap<i64, XStatMetadata>,
    #[prost(message, repeated, tag = "6")]
    pub stats: Vec<XStat>,
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

// --- The wire format, read by hand where prost would build a struct per event.
//
// Decoding an `XLine` with prost, even with its events as `Bytes`, costs a refcounted slice
// per event and a prost decode of each event's head: on jaxlm's host plane (1.16 M events,
// 3,861 of them memory events) that was most of the import. [`Fields`] walks a message's
// fields over a borrowed slice, allocating nothing, with the checks prost makes (varints of at
// most 10 bytes, lengths within the message, field number not 0, known wire types).

/// Why a message read with [`Fields`] does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// A varint, a length or a field's value runs past the end of its message.
    Truncated,
    /// A varint of more than 10 bytes, or whose 10th byte holds more than the 64th bit.
    InvalidVarint,
    /// Field number 0 or above 2^29 - 1, or wire type 6 or 7.
    InvalidKey(u64),
    /// A group (wire types 3 and 4: proto2 only, never in xplane.proto).
    Group(u32),
    /// A field of ours with another wire type than the .proto gives it.
    WrongWireType { field: u32, wire_type: u8 },
    /// A `string` field that is not UTF-8.
    NotUtf8(u32),
}

impl WireError {
    /// The data ends inside a message (or a varint never ends): a cut or damaged file rather
    /// than some other protobuf.
    pub fn is_truncated(self) -> bool {
        matches!(self, WireError::Truncated | WireError::InvalidVarint)
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            WireError::Truncated => f.write_str("buffer underflow"),
            WireError::InvalidVarint => f.write_str("invalid varint"),
            WireError::InvalidKey(k) => write!(f, "invalid field key {k}"),
            WireError::Group(n) => write!(f, "field {n} is a group, which xplane.proto has none of"),
            WireError::WrongWireType { field, wire_type } => write!(f, "field {field} has wire type {wire_type}"),
            WireError::NotUtf8(n) => write!(f, "string field {n} is not UTF-8"),
        }
    }
}

/// One field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0 (`int64`, `uint64`, `bool`, enums): the raw varint.
    Varint(u64),
    /// Wire type 2 (`string`, `bytes`, messages, packed fields).
    Len(&'a [u8]),
    /// Wire types 1 and 5 (`fixed64`, `double`, `fixed32`, `float`): not read.
    Fixed,
}

impl<'a> Value<'a> {
    /// The value of an `int64` field (a varint's bits, as protobuf casts it).
    pub fn int64(self, field: u32) -> Result<i64, WireError> {
        match self {
            Value::Varint(v) => Ok(v as i64),
            other => Err(WireError::WrongWireType { field, wire_type: other.wire_type() }),
        }
    }

    /// The value of a `string` field.
    pub fn string(self, field: u32) -> Result<&'a str, WireError> {
        match self {
            Value::Len(b) => std::str::from_utf8(b).map_err(|_| WireError::NotUtf8(field)),
            other => Err(WireError::WrongWireType { field, wire_type: other.wire_type() }),
        }
    }

    /// The bytes of a length-delimited field (an embedded message).
    pub fn message(self, field: u32) -> Result<&'a [u8], WireError> {
        match self {
            Value::Len(b) => Ok(b),
            other => Err(WireError::WrongWireType { field, wire_type: other.wire_type() }),
        }
    }

    fn wire_type(self) -> u8 {
        match self {
            Value::Varint(_) => 0,
            Value::Len(_) => 2,
            Value::Fixed => 1,
        }
    }
}

/// The fields of one serialized message, in wire order: `(field number, value)`. Stops at the
/// first error (which it yields).
pub struct Fields<'a> {
    rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(message: &'a [u8]) -> Self {
        Fields { rest: message }
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        // Most keys and small values are one byte.
        match self.rest.first() {
            None => return Err(WireError::Truncated),
            Some(&b) if b < 0x80 => {
                self.rest = &self.rest[1..];
                return Ok(u64::from(b));
            }
            Some(_) => {}
        }
        let mut value = 0u64;
        for (i, &b) in self.rest.iter().take(10).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                if i == 9 && b > 1 {
                    return Err(WireError::InvalidVarint);
                }
                self.rest = &self.rest[i + 1..];
                return Ok(value);
            }
        }
        Err(if self.rest.len() < 10 { WireError::Truncated } else { WireError::InvalidVarint })
    }

    #[inline]
    fn take(&mut self, n: u64) -> Result<&'a [u8], WireError> {
        let n = usize::try_from(n).ok().filter(|&n| n <= self.rest.len()).ok_or(WireError::Truncated)?;
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    // Inlined into the per-event loop ([`event_metadata_id`]): a call per field was half the
    // import of jaxlm.
    #[inline(always)]
    fn field(&mut self) -> Result<(u32, Value<'a>), WireError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).ok().filter(|&n| n > 0 && n < 1 << 29).ok_or(WireError::InvalidKey(key))?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let len = self.varint()?;
                Value::Len(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            3 | 4 => return Err(WireError::Group(number)),
            _ => return Err(WireError::InvalidKey(key)),
        };
        Ok((number, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), WireError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.rest = &[];
        }
        Some(field)
    }
}

/// The `metadata_id` of a serialized `XEvent` (`int64 metadata_id = 1`; the last one if the
/// field repeats, as protobuf reads scalars), the other fields skipped unread.
#[inline]
pub fn event_metadata_id(event: &[u8]) -> Result<i64, WireError> {
    let mut id = 0;
    for field in Fields::new(event) {
        if let (1, value) = field? {
            id = value.int64(1)?;
        }
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn event() -> XEvent {
        let stat = |id, value| XStat { metadata_id: id, value: Some(value) };
        XEvent {
            metadata_id: 2570,
            offset_ps: 1 << 40,
            duration_ps: 5,
            stats: vec![stat(3, XStatValue::Str("GPU_0_bfc".into())), stat(4, XStatValue::Double(0.5)), stat(5, XStatValue::Int64(-1))],
            num_occurrences: 0,
        }
    }

    #[test]
    fn the_metadata_id_is_read_as_prost_reads_it_and_cut_events_fail_as_in_prost() {
        let data = event().encode_to_vec();
        assert_eq!(event_metadata_id(&data), Ok(2570));
        // A scalar field that repeats: the last value counts (protobuf's merge).
        let mut twice = XEvent { metadata_id: 7, ..Default::default() }.encode_to_vec();
        twice.extend_from_slice(&data);
        assert_eq!(event_metadata_id(&twice), Ok(XEvent::decode(&twice[..]).unwrap().metadata_id));
        // Every cut: an error exactly where prost gives one (a cut between two fields is a
        // shorter, valid event), else the same id.
        for cut in 0..data.len() {
            let ours = event_metadata_id(&data[..cut]);
            match XEvent::decode(&data[..cut]) {
                Ok(e) => assert_eq!(ours, Ok(e.metadata_id), "cut at {cut}"),
                Err(_) => assert_eq!(ours, Err(WireError::Truncated), "cut at {cut}"),
            }
        }
    }

    #[test]
    fn malformed_fields_are_errors() {
        let id = |b: &[u8]| event_metadata_id(b);
        // Varints: 10 bytes hold 64 bits; an 11th byte, or a 10th above 1, is invalid.
        let mut max = vec![0x08];
        max.extend([0xff; 9]);
        max.push(0x01);
        assert_eq!(id(&max), Ok(-1));
        *max.last_mut().unwrap() = 0x02;
        assert_eq!(id(&max), Err(WireError::InvalidVarint));
        let mut long = vec![0x08];
        long.extend([0x80; 10]);
        long.push(0x00);
        assert_eq!(id(&long), Err(WireError::InvalidVarint));
        assert_eq!(id(&[0x08, 0x80]), Err(WireError::Truncated));
        // Keys: field 0, wire types 6 and 7, groups.
        assert_eq!(id(&[0x00, 0x01]), Err(WireError::InvalidKey(0)));
        assert_eq!(id(&[0x0f]), Err(WireError::InvalidKey(0x0f)));
        assert_eq!(id(&[0x13, 0x14]), Err(WireError::Group(2)));
        // metadata_id as a length-delimited field; a length past the end.
        assert_eq!(id(&[0x0a, 0x00]), Err(WireError::WrongWireType { field: 1, wire_type: 2 }));
        assert_eq!(id(&[0x22, 0x05, 0x08]), Err(WireError::Truncated));
        // Fixed-width fields are skipped, as long as they are whole.
        assert_eq!(id(&[0x08, 0x03, 0x29, 0, 0, 0, 0, 0, 0, 0, 0, 0x35, 0, 0, 0, 0]), Ok(3));
        assert_eq!(id(&[0x08, 0x03, 0x29, 0, 0]), Err(WireError::Truncated));
        assert!(Value::Len(&[0xff]).string(2).is_err());
    }
}
