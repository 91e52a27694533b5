//! The Arrow schema of a trace: one row per event. Field-by-field documentation is in
//! traces/README.md; keep the two in step.

use arrow_schema::{DataType, Field, Schema};
use std::collections::HashMap;
use std::sync::Arc;

use super::metadata::FORMAT_VERSION;

pub const COL_ACTION: &str = "action";
pub const COL_ALLOC_ID: &str = "alloc_id";
pub const COL_SIZE: &str = "size";
pub const COL_ADDR: &str = "addr";
pub const COL_STREAM: &str = "stream";
pub const COL_DEVICE: &str = "device";
pub const COL_POOL: &str = "pool";
pub const COL_TIME_NS: &str = "time_ns";
pub const COL_SEED: &str = "seed";
pub const COL_STACK_ID: &str = "stack_id";

/// Schema metadata keys.
pub const META_FORMAT_VERSION: &str = "allocreplay.format_version";
pub const META_METADATA: &str = "allocreplay.metadata";
pub const META_FRAMES: &str = "allocreplay.frames";

/// The columns every trace has, in order. Importers may append optional columns after them
/// (see `optional_field`).
pub fn core_fields() -> Vec<Field> {
    vec![
        Field::new_dictionary(COL_ACTION, DataType::UInt8, DataType::Utf8, false),
        Field::new(COL_ALLOC_ID, DataType::UInt64, true),
        Field::new(COL_SIZE, DataType::UInt64, false),
        Field::new(COL_ADDR, DataType::UInt64, true),
        Field::new(COL_STREAM, DataType::Int64, false),
        Field::new(COL_DEVICE, DataType::Int32, false),
        Field::new(COL_POOL, DataType::UInt32, false),
        Field::new(COL_TIME_NS, DataType::Int64, true),
        Field::new(COL_SEED, DataType::Boolean, false),
        Field::new(COL_STACK_ID, DataType::UInt32, true),
    ]
}

/// Optional columns with a fixed meaning; an importer that has the data fills them.
pub fn optional_field(name: &str) -> Option<Field> {
    let dt = match name {
        // Recorded allocator decisions / state after the event.
        "chunk_bytes" | "in_use_bytes" | "peak_in_use_bytes" | "reserved_bytes" => DataType::UInt64,
        "fragmentation" => DataType::Float64,
        // Context.
        "op" | "shape" | "data_type" | "region_type" | "allocator" | "program" | "compile_context" | "user_metadata" => DataType::Utf8,
        "step" | "thread_id" => DataType::Int64,
        _ => return None,
    };
    Some(Field::new(name, dt, true))
}

pub fn schema_with(extra: &[Field], metadata_json: String, frames_json: Option<String>) -> Arc<Schema> {
    let mut fields = core_fields();
    fields.extend(extra.iter().cloned());
    let mut md = HashMap::new();
    md.insert(META_FORMAT_VERSION.to_string(), FORMAT_VERSION.to_string());
    md.insert(META_METADATA.to_string(), metadata_json);
    if let Some(f) = frames_json {
        md.insert(META_FRAMES.to_string(), f);
    }
    Arc::new(Schema::new_with_metadata(fields, md))
}

/// A record batch of `columns` under `fields` (the result tables of replays, analyses and
/// plans: their columns are built to match, so a mismatch is a bug).
pub fn record_batch(fields: Vec<arrow_schema::Field>, columns: Vec<arrow_array::ArrayRef>) -> arrow_array::RecordBatch {
    arrow_array::RecordBatch::try_new(std::sync::Arc::new(arrow_schema::Schema::new(fields)), columns).expect("columns match their fields")
}
