//! Stack frames side table: distinct frames and distinct stacks (lists of frame ids, innermost
//! first). The `stack_id` column of the events points into `stacks`. Stored as JSON under the
//! schema metadata key `allocreplay.frames`.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

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
}

/// Interns frames and stacks while an importer walks its source.
#[derive(Default)]
pub struct FrameInterner {
    pub table: FrameTable,
    frames: HashMap<(String, i64, String), u32>,
    stacks: HashMap<Vec<u32>, u32>,
}

impl FrameInterner {
    pub fn frame(&mut self, filename: &str, line: i64, name: &str) -> u32 {
        let key = (filename.to_string(), line, name.to_string());
        if let Some(&id) = self.frames.get(&key) {
            return id;
        }
        let id = self.table.filename.len() as u32;
        self.table.filename.push(key.0.clone());
        self.table.line.push(line);
        self.table.name.push(key.2.clone());
        self.frames.insert(key, id);
        id
    }

    pub fn stack(&mut self, frames: Vec<u32>) -> u32 {
        if let Some(&id) = self.stacks.get(&frames) {
            return id;
        }
        let id = self.table.stacks.len() as u32;
        self.table.stacks.push(frames.clone());
        self.stacks.insert(frames, id);
        id
    }

    pub fn finish(self) -> FrameTable {
        self.table
    }
}
