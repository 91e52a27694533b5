//! Stack frames side table: distinct frames and distinct stacks (lists of frame ids, innermost
//! first). The `stack_id` column of the events points into `stacks`. Stored as JSON under the
//! schema metadata key `allocreplay.frames`.

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
