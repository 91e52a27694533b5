//! Stack frames side table: distinct frames and distinct stacks (lists of frame ids, innermost
//! first). The `stack_id` column of the events points into `stacks`. Stored as JSON under the
//! schema metadata key `allocreplay.frames`.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, StringBuilder, UInt32Builder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameTable {
    pub filename: Vec<String>,
    pub line: Vec<i64>,
    pub name: Vec<String>,
    pub stacks: Vec<Vec<u32>>,
}

impl FrameTable {
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// One row per frame: `frame_id` (its index), `filename`, `line`, `name`.
    pub fn frames_batch(&self) -> RecordBatch {
        let n = self.filename.len();
        let mut id = UInt32Builder::with_capacity(n);
        let mut filename = StringBuilder::new();
        let mut line = Int64Builder::with_capacity(n);
        let mut name = StringBuilder::new();
        for i in 0..n {
            id.append_value(i as u32);
            filename.append_value(&self.filename[i]);
            line.append_value(self.line.get(i).copied().unwrap_or(0));
            name.append_value(self.name.get(i).map_or("", String::as_str));
        }
        let schema = Schema::new(vec![
            Field::new("frame_id", DataType::UInt32, false),
            Field::new("filename", DataType::Utf8, false),
            Field::new("line", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
        ]);
        let columns: Vec<ArrayRef> =
            vec![Arc::new(id.finish()), Arc::new(filename.finish()), Arc::new(line.finish()), Arc::new(name.finish())];
        RecordBatch::try_new(Arc::new(schema), columns).expect("columns match their fields")
    }

    /// One row per frame of each stack: `stack_id` (the events' `stack_id`), `depth` (0 the
    /// innermost frame), `frame_id` (a row of [`Self::frames_batch`]).
    pub fn stacks_batch(&self) -> RecordBatch {
        let total: usize = self.stacks.iter().map(Vec::len).sum();
        let (mut stack, mut depth, mut frame) =
            (UInt32Builder::with_capacity(total), UInt32Builder::with_capacity(total), UInt32Builder::with_capacity(total));
        for (s, frames) in self.stacks.iter().enumerate() {
            for (d, &f) in frames.iter().enumerate() {
                stack.append_value(s as u32);
                depth.append_value(d as u32);
                frame.append_value(f);
            }
        }
        let schema = Schema::new(vec![
            Field::new("stack_id", DataType::UInt32, false),
            Field::new("depth", DataType::UInt32, false),
            Field::new("frame_id", DataType::UInt32, false),
        ]);
        let columns: Vec<ArrayRef> = vec![Arc::new(stack.finish()), Arc::new(depth.finish()), Arc::new(frame.finish())];
        RecordBatch::try_new(Arc::new(schema), columns).expect("columns match their fields")
    }
}

/// Interns frames and stacks while an importer walks its source. Looking up a frame or stack
/// seen before allocates nothing.
#[derive(Default)]
pub struct FrameInterner {
    pub table: FrameTable,
    strings: FxHashMap<String, u32>,
    frames: FxHashMap<(u32, i64, u32), u32>,
    stacks: FxHashMap<Vec<u32>, u32>,
}

impl FrameInterner {
    fn string(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.to_string(), id);
        id
    }

    pub fn frame(&mut self, filename: &str, line: i64, name: &str) -> u32 {
        let key = (self.string(filename), line, self.string(name));
        if let Some(&id) = self.frames.get(&key) {
            return id;
        }
        let id = self.table.filename.len() as u32;
        self.table.filename.push(filename.to_string());
        self.table.line.push(line);
        self.table.name.push(name.to_string());
        self.frames.insert(key, id);
        id
    }

    /// The id of a stack (frame ids, innermost first).
    pub fn stack(&mut self, frames: impl AsRef<[u32]>) -> u32 {
        let frames = frames.as_ref();
        if let Some(&id) = self.stacks.get(frames) {
            return id;
        }
        let id = self.table.stacks.len() as u32;
        self.table.stacks.push(frames.to_vec());
        self.stacks.insert(frames.to_vec(), id);
        id
    }

    pub fn finish(self) -> FrameTable {
        self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt32Type;

    #[test]
    fn frames_and_stacks_tables_follow_the_interned_ids() {
        let mut f = FrameInterner::default();
        let a = f.frame("a.py", 10, "f");
        let b = f.frame("b.py", 20, "g");
        let s0 = f.stack([b, a]);
        let s1 = f.stack([a]);
        assert_eq!(f.stack([b, a]), s0);
        let t = f.finish();
        let frames = t.frames_batch();
        assert_eq!(frames.num_rows(), 2);
        assert_eq!(frames.column_by_name("filename").unwrap().as_string::<i32>().value(1), "b.py");
        let stacks = t.stacks_batch();
        let col = |n: &str| stacks.column_by_name(n).unwrap().as_primitive::<UInt32Type>().values().to_vec();
        // Stack 0 is [b, a] (innermost first), stack 1 is [a].
        assert_eq!(col("stack_id"), vec![s0, s0, s1]);
        assert_eq!(col("depth"), vec![0, 1, 0]);
        assert_eq!(col("frame_id"), vec![b, a, a]);
    }
}
