//! The offline results as Arrow record batches, for the Python layer: `plan` (one row per XLA
//! program) and the `ideal` / `offline` bounds of a trace (one row per device). The columns
//! are the structs' fields, in order; `allocreplay plan --json` prints these rows.

use std::sync::Arc;

use arrow_array::builder::{Float64Builder, Int32Builder, Int64Builder, StringBuilder, UInt64Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field};

use super::buffer_assignment::ProgramPlan;
use super::OfflineResult;

use crate::trace::schema::record_batch as batch;

/// One row per program: `program`, `recorded_temp_bytes`, `planned_temp_bytes`,
/// `lower_bound_bytes`, `argument_bytes`, `output_bytes` ([`ProgramPlan`]'s fields).
pub fn plans_batch(plans: &[ProgramPlan]) -> RecordBatch {
    let mut program = StringBuilder::new();
    let i64s = |f: fn(&ProgramPlan) -> i64| {
        let mut b = Int64Builder::with_capacity(plans.len());
        plans.iter().for_each(|p| b.append_value(f(p)));
        Arc::new(b.finish()) as ArrayRef
    };
    plans.iter().for_each(|p| program.append_value(&p.program));
    let mut fields = vec![Field::new("program", DataType::Utf8, false)];
    let mut columns: Vec<ArrayRef> = vec![Arc::new(program.finish())];
    type Column = (&'static str, fn(&ProgramPlan) -> i64);
    let numbers: [Column; 5] = [
        ("recorded_temp_bytes", |p| p.recorded_temp_bytes),
        ("planned_temp_bytes", |p| p.planned_temp_bytes),
        ("lower_bound_bytes", |p| p.lower_bound_bytes),
        ("argument_bytes", |p| p.argument_bytes),
        ("output_bytes", |p| p.output_bytes),
    ];
    for (name, f) in numbers {
        fields.push(Field::new(name, DataType::Int64, false));
        columns.push(i64s(f));
    }
    batch(fields, columns)
}

/// One row per device: [`OfflineResult`]'s fields.
pub fn offline_batch(results: &[OfflineResult]) -> RecordBatch {
    let n = results.len();
    let mut device = Int32Builder::with_capacity(n);
    let (mut alignment, mut buffers, mut ideal, mut offline) = (
        UInt64Builder::with_capacity(n),
        UInt64Builder::with_capacity(n),
        UInt64Builder::with_capacity(n),
        UInt64Builder::with_capacity(n),
    );
    let mut strategy = StringBuilder::new();
    let mut seconds = Float64Builder::with_capacity(n);
    for r in results {
        device.append_value(r.device);
        alignment.append_value(r.alignment);
        buffers.append_value(r.buffers as u64);
        ideal.append_value(r.ideal_peak_bytes);
        offline.append_value(r.offline_peak_bytes);
        strategy.append_value(r.strategy);
        seconds.append_value(r.plan_seconds);
    }
    batch(
        vec![
            Field::new("device", DataType::Int32, false),
            Field::new("alignment", DataType::UInt64, false),
            Field::new("buffers", DataType::UInt64, false),
            Field::new("ideal_peak_bytes", DataType::UInt64, false),
            Field::new("offline_peak_bytes", DataType::UInt64, false),
            Field::new("strategy", DataType::Utf8, false),
            Field::new("plan_seconds", DataType::Float64, false),
        ],
        vec![
            Arc::new(device.finish()),
            Arc::new(alignment.finish()),
            Arc::new(buffers.finish()),
            Arc::new(ideal.finish()),
            Arc::new(offline.finish()),
            Arc::new(strategy.finish()),
            Arc::new(seconds.finish()),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    #[test]
    fn plan_rows_keep_each_programs_numbers_in_their_columns() {
        let p = |name: &str, base: i64| ProgramPlan {
            program: name.into(),
            recorded_temp_bytes: base,
            planned_temp_bytes: base + 1,
            lower_bound_bytes: base + 2,
            argument_bytes: base + 3,
            output_bytes: base + 4,
        };
        let b = plans_batch(&[p("a", 100), p("b", 200)]);
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.column_by_name("program").unwrap().as_string::<i32>().value(1), "b");
        let col = |n: &str| b.column_by_name(n).unwrap().as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(col("recorded_temp_bytes"), vec![100, 200]);
        assert_eq!(col("output_bytes"), vec![104, 204]);
        // No programs: the columns are still there, so callers see the schema.
        assert_eq!(plans_batch(&[]).num_columns(), 6);
    }
}
