//! A pickle *parser* (not an unpickler): it decodes the opcodes of pickle protocols 0–5 that
//! build plain data — dicts, lists, tuples, sets, strings, bytes, ints, floats, bools, None —
//! into an arena, and refuses every opcode that would import a global, call a function or build
//! an object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT*). A snapshot
//! from `torch.cuda.memory._snapshot()` is plain data, so nothing is lost; a hostile pickle
//! can't run code. Opcode semantics follow CPython's `Lib/pickle.py` (`_Unpickler.load_*`).

use std::borrow::Cow;
use std::fmt;

use rustc_hash::FxHashMap;

use super::growing::Growing;
use crate::prefault::Prefaulter;

/// One decoded value. Containers and strings are indices into the `Pickle` arena, so a value
/// is `Copy` and a memo lookup (BINGET) shares the container like Python does.
#[derive(Debug, Clone, Copy, PartialEq)]
// Tag and payload in separate 8-byte words: with the default layout, copies of a value moved
// the payload with overlapping 8-byte loads and stores, stalling store forwarding in the
// parser loop (measured: ~40% of parse time).
#[repr(C, u8)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that does not fit i64 (kept as f64 only for messages).
    BigInt(f64),
    Float(f64),
    Str(u32),
    Bytes(u32),
    List(u32),
    Tuple(u32),
    Dict(u32),
}

/// Why a pickle was refused: `Corrupt` for bytes that are not a valid pickle (or end early),
/// `Unsafe` for a valid pickle holding something other than plain data.
#[derive(Debug, Clone, PartialEq)]
pub enum PickleError {
    Corrupt(String),
    Unsafe(String),
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PickleError::Corrupt(m) | PickleError::Unsafe(m) => f.write_str(m),
        }
    }
}

#[derive(Debug)]
pub struct Pickle<'a> {
    data: &'a [u8],
    /// Byte ranges of strings and bytes objects in `data` (strings are checked to be UTF-8
    /// when read).
    spans: Vec<(usize, usize)>,
    /// Lists and tuples (one index space), and dicts.
    seqs: Arena<Value>,
    dicts: Arena<(Value, Value)>,
    /// Dicts stored as records (see [`parse_with_records`]): one packed value per record key,
    /// [`ABSENT`] where the dict lacks the key. A dict `i` is a record when its range's length
    /// is `RECORD`; the range's start is then its index here.
    records: Vec<[u64; RECORD_FIELDS]>,
    /// For each record key, the string object of the first key seen with its text (a record
    /// turned back into items uses it).
    record_key_str: [u32; RECORD_FIELDS],
    /// Values a packed value does not hold in its 60 bits (floats, big ints, ints beyond ±2^59).
    boxed: Vec<Value>,
    pub root: Value,
}

/// Most keys a record holds (the packed values of a record fill one cache line).
pub const RECORD_FIELDS: usize = 8;

/// A record field for a key the dict does not have.
pub const ABSENT: u64 = 0xf;
pub(crate) const P_NONE: u64 = 0;
pub(crate) const P_FALSE: u64 = 1;
pub(crate) const P_TRUE: u64 = 2;
pub(crate) const P_INT: u64 = 3;
pub(crate) const P_STR: u64 = 4;
pub(crate) const P_BYTES: u64 = 5;
pub(crate) const P_LIST: u64 = 6;
pub(crate) const P_TUPLE: u64 = 7;
pub(crate) const P_DICT: u64 = 8;
pub(crate) const P_BOXED: u64 = 9;

impl<'a> Pickle<'a> {
    pub fn str(&self, v: Value) -> Option<&'a str> {
        match v {
            Value::Str(i) => {
                let (s, e) = self.spans[i as usize];
                // SAFETY: every `Str` span was checked to be UTF-8 when it was parsed (`span`).
                Some(unsafe { std::str::from_utf8_unchecked(&self.data[s..e]) })
            }
            _ => None,
        }
    }

    /// The parse of a file read as it was parsed ([`parse_growing`]), its `data` made the whole
    /// file once it is read (`data` starts with the prefix parsed: the same buffer, longer).
    pub(crate) fn with_whole_input(mut self, data: &'a [u8]) -> Self {
        assert!(std::ptr::eq(data.as_ptr(), self.data.as_ptr()) && data.len() >= self.data.len(), "not the parsed input");
        self.data = data;
        self
    }

    /// Frees the arenas on another thread (`prefault::drop_in_background`): for the large
    /// parses, whose release is a noticeable part of a load.
    pub(crate) fn drop_in_background(self) {
        let Pickle { spans, seqs, dicts, records, boxed, .. } = self;
        crate::prefault::drop_in_background((spans, seqs, dicts, records, boxed));
    }

    /// Bound of the indices in `Value::List` and `Value::Tuple` (one index space), for caches
    /// keyed by object identity.
    pub fn list_count(&self) -> usize {
        self.seqs.len()
    }
    /// Bound of the indices in `Value::Str` and `Value::Bytes` (one index space).
    pub fn str_count(&self) -> usize {
        self.spans.len()
    }
    /// Bound of the indices in `Value::Dict`.
    pub fn dict_count(&self) -> usize {
        self.dicts.len()
    }

    pub fn list(&self, v: Value) -> Option<&[Value]> {
        match v {
            Value::List(i) | Value::Tuple(i) => Some(self.seqs.get(i)),
            _ => None,
        }
    }

    /// The items of a dict (a record's turned back into items, in the order of its keys).
    pub fn dict(&self, v: Value) -> Option<Cow<'_, [(Value, Value)]>> {
        match v {
            Value::Dict(i) => Some(match self.record_index(i) {
                Some(r) => Cow::Owned(
                    self.records[r]
                        .iter()
                        .enumerate()
                        .filter_map(|(k, &f)| Some((Value::Str(self.record_key_str[k]), self.unpack(f)?)))
                        .collect(),
                ),
                None => Cow::Borrowed(self.dicts.get(i)),
            }),
            _ => None,
        }
    }

    #[inline]
    fn record_index(&self, dict: u32) -> Option<usize> {
        let (start, len) = self.dicts.ranges[dict as usize];
        (len == RECORD).then_some(start as usize)
    }

    /// The packed fields of a dict stored as a record (in the order of the keys given to
    /// [`parse_with_records`]; [`Pickle::unpack`] reads them), or `None` for any other value.
    #[inline]
    pub fn record(&self, v: Value) -> Option<&[u64; RECORD_FIELDS]> {
        match v {
            Value::Dict(i) => self.record_index(i).map(|r| &self.records[r]),
            _ => None,
        }
    }

    /// A record field as a value (`None`: the dict does not have that key).
    #[inline]
    pub fn unpack(&self, f: u64) -> Option<Value> {
        // Its own match rather than `unpack_set` behind a test: through `bool::then` the value
        // was built in memory in overlapping pieces (store-forwarding stalls, measured: 4× the
        // time of the entry decoding).
        let payload = (f >> 4) as u32;
        Some(match f & 0xf {
            P_NONE => Value::None,
            P_FALSE => Value::Bool(false),
            P_TRUE => Value::Bool(true),
            P_INT => Value::Int((f as i64) >> 4),
            P_STR => Value::Str(payload),
            P_BYTES => Value::Bytes(payload),
            P_LIST => Value::List(payload),
            P_TUPLE => Value::Tuple(payload),
            P_DICT => Value::Dict(payload),
            P_BOXED => self.boxed[payload as usize],
            _ => return None,
        })
    }

    /// [`Pickle::unpack`] of a field known not to be [`ABSENT`].
    #[inline(always)]
    fn unpack_set(&self, f: u64) -> Value {
        let payload = (f >> 4) as u32;
        match f & 0xf {
            P_NONE => Value::None,
            P_FALSE => Value::Bool(false),
            P_TRUE => Value::Bool(true),
            P_INT => Value::Int((f as i64) >> 4),
            P_STR => Value::Str(payload),
            P_BYTES => Value::Bytes(payload),
            P_LIST => Value::List(payload),
            P_TUPLE => Value::Tuple(payload),
            P_DICT => Value::Dict(payload),
            // P_BOXED, the one other tag `Parser::pack` writes.
            _ => self.boxed[payload as usize],
        }
    }

    /// `d[key]` for a dict with string keys. A key set twice keeps its last value, as in
    /// Python (the parser appends items without looking for repeats).
    pub fn get(&self, d: Value, key: &str) -> Option<Value> {
        let kb = key.as_bytes();
        let is_key = |k: Value| match k {
            Value::Str(i) => {
                let (s, e) = self.spans[i as usize];
                &self.data[s..e] == kb
            }
            _ => false,
        };
        if let Some(fields) = self.record(d) {
            let k = (0..RECORD_FIELDS).find(|&k| fields[k] != ABSENT && is_key(Value::Str(self.record_key_str[k])))?;
            return self.unpack(fields[k]);
        }
        let Value::Dict(i) = d else { return None };
        self.dicts.get(i).iter().rev().find_map(|&(k, v)| is_key(k).then_some(v))
    }

    pub fn keys(&self, d: Value) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for &(k, _) in self.dict(d).unwrap_or_default().iter() {
            if let Some(k) = self.str(k) {
                if !keys.iter().any(|x| x == k) {
                    keys.push(k.to_string());
                }
            }
        }
        keys
    }

    pub fn int(&self, v: Value) -> Option<i64> {
        match v {
            Value::Int(i) => Some(i),
            Value::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    pub fn float(&self, v: Value) -> Option<f64> {
        match v {
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            Value::BigInt(f) => Some(f),
            _ => None,
        }
    }

    /// Converts a value to JSON (dict keys that are not strings are written with their repr).
    /// Bounded: nesting deeper than [`MAX_JSON_DEPTH`] (a cycle through the memo included) and
    /// more than [`MAX_JSON_EXPANSION`] × the pickle's size in values (a "billion laughs" of
    /// shared memo references) are refused as corrupt, never expanded.
    pub fn to_json(&self, v: Value) -> Result<serde_json::Value, PickleError> {
        let mut budget = (self.data.len() as u64).saturating_mul(MAX_JSON_EXPANSION).max(64);
        self.to_json_in(v, 0, &mut budget)
    }

    fn to_json_in(&self, v: Value, depth: usize, budget: &mut u64) -> Result<serde_json::Value, PickleError> {
        use serde_json::Value as J;
        if *budget == 0 {
            return Err(corrupt(format!(
                "a value expands to more than {MAX_JSON_EXPANSION}× the pickle's {} bytes (shared memo references): refused",
                self.data.len()
            )));
        }
        *budget -= 1;
        if depth >= MAX_JSON_DEPTH && matches!(v, Value::List(_) | Value::Tuple(_) | Value::Dict(_)) {
            return Err(corrupt(format!("a value nests containers deeper than {MAX_JSON_DEPTH} levels (or in a cycle): refused")));
        }
        Ok(match v {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(b),
            Value::Int(i) => J::from(i),
            Value::BigInt(f) | Value::Float(f) => serde_json::Number::from_f64(f).map(J::Number).unwrap_or(J::Null),
            Value::Str(_) => J::String(self.str(v).unwrap_or("").to_string()),
            Value::Bytes(i) => {
                let (s, e) = self.spans[i as usize];
                J::String(String::from_utf8_lossy(&self.data[s..e]).into_owned())
            }
            Value::List(_) | Value::Tuple(_) => {
                let items = self.list(v).unwrap_or(&[]);
                let mut out = Vec::with_capacity(items.len().min(*budget as usize));
                for &x in items {
                    out.push(self.to_json_in(x, depth + 1, budget)?);
                }
                J::Array(out)
            }
            Value::Dict(_) => {
                let mut m = serde_json::Map::new();
                for &(k, x) in self.dict(v).unwrap_or_default().iter() {
                    let key = match self.to_json_in(k, depth + 1, budget)? {
                        J::String(s) => s,
                        other => other.to_string(),
                    };
                    m.insert(key, self.to_json_in(x, depth + 1, budget)?);
                }
                J::Object(m)
            }
        })
    }

    /// Short description of a value's type, for error messages.
    pub fn type_name(v: Value) -> &'static str {
        match v {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }
}

/// Containers stored back to back in one vector, each a range of it: no allocation per
/// container. A container that grows after another one was stored behind it (a list appended
/// to in several batches around nested lists) moves to a vector of its own, so building stays
/// linear in the number of items.
#[derive(Debug)]
struct Arena<T> {
    items: Vec<T>,
    /// (start, len) in `items`; len == MOVED: the items are in `moved`.
    ranges: Vec<(u32, u32)>,
    moved: FxHashMap<u32, Vec<T>>,
}

const MOVED: u32 = u32::MAX;
/// Range length of a dict stored as a record (`Pickle::records`).
const RECORD: u32 = u32::MAX - 1;

/// Deepest nesting of containers `Pickle::to_json` converts (serde_json reads back 128; a
/// snapshot's `allocator_settings` nest 2 deep).
pub const MAX_JSON_DEPTH: usize = 64;
/// Most JSON values `Pickle::to_json` produces per byte of the pickle.
pub const MAX_JSON_EXPANSION: u64 = 4;

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena { items: Vec::new(), ranges: Vec::new(), moved: FxHashMap::default() }
    }
}

fn too_large() -> PickleError {
    corrupt("pickle holds more than 4 billion containers or items".into())
}

impl<T: Copy> Arena<T> {
    fn len(&self) -> usize {
        self.ranges.len()
    }

    fn push(&mut self, new: impl ExactSizeIterator<Item = T>) -> Result<u32, PickleError> {
        let i = u32::try_from(self.ranges.len()).map_err(|_| too_large())?;
        let start = u32::try_from(self.items.len()).map_err(|_| too_large())?;
        let len = u32::try_from(new.len()).ok().filter(|&l| l < RECORD).ok_or_else(too_large)?;
        self.items.extend(new);
        self.ranges.push((start, len));
        Ok(i)
    }

    fn extend(&mut self, i: u32, new: impl ExactSizeIterator<Item = T>) -> Result<(), PickleError> {
        let (start, len) = self.ranges[i as usize];
        if len == MOVED {
            self.moved.get_mut(&i).expect("moved container").extend(new);
            return Ok(());
        }
        let end = start as usize + len as usize;
        let grown = len as usize + new.len();
        if end == self.items.len() && grown < RECORD as usize && self.items.len() + new.len() <= u32::MAX as usize {
            // The container is the last one stored (or empty): grow it in place.
            let start = if len == 0 { self.items.len() as u32 } else { start };
            self.items.extend(new);
            self.ranges[i as usize] = (start, grown as u32);
        } else if len == 0 && new.len() < RECORD as usize && self.items.len() + new.len() <= u32::MAX as usize {
            let start = self.items.len() as u32;
            let n = new.len() as u32;
            self.items.extend(new);
            self.ranges[i as usize] = (start, n);
        } else {
            let mut own = Vec::with_capacity(grown);
            own.extend_from_slice(&self.items[start as usize..end]);
            own.extend(new);
            self.moved.insert(i, own);
            self.ranges[i as usize].1 = MOVED;
        }
        Ok(())
    }

    fn get(&self, i: u32) -> &[T] {
        let (start, len) = self.ranges[i as usize];
        if len == MOVED {
            &self.moved[&i]
        } else {
            &self.items[start as usize..start as usize + len as usize]
        }
    }
}

/// The packed word of a string, list, tuple or dict index (`tag` one of `P_STR`...`P_DICT`),
/// as [`Parser::pack`] writes it.
#[inline(always)]
fn pack_index(i: u32, tag: u64) -> u64 {
    ((i as u64) << 4) | tag
}

/// The packed word of an int of at most 32 bits (it always fits: no boxing).
#[inline(always)]
fn pack_small_int(x: i64) -> u64 {
    debug_assert!((x << 4) >> 4 == x);
    ((x << 4) as u64) | P_INT
}

/// Key/value pairs of a SETITEMS / DICT run on the stack (an even number of values).
fn pairs_of(values: &[Value]) -> impl ExactSizeIterator<Item = (Value, Value)> + '_ {
    values.chunks_exact(2).map(|kv| (kv[0], kv[1]))
}

/// Parses `data` as a pickle of plain data.
pub fn parse(data: &[u8]) -> Result<Pickle<'_>, PickleError> {
    Parser::new(data, data.len(), &[], None, None).run()
}

/// [`parse`], storing the dicts whose keys are all among `keys` (at most [`RECORD_FIELDS`]
/// strings, none repeated) as records: one packed 8-byte value per key instead of two 16-byte
/// values per item, read with [`Pickle::record`]. For the millions of small dicts of one shape
/// a snapshot's history holds. Nothing else changes: [`Pickle::dict`], [`Pickle::get`] and
/// [`Pickle::to_json`] see a record as the dict it is, and a record that gets more items (a
/// second SETITEMS) turns back into a plain dict first.
pub fn parse_with_records<'a>(data: &'a [u8], keys: &[&str]) -> Result<Pickle<'a>, PickleError> {
    parse_prefaulted(data, keys, None)
}

/// [`parse_with_records`], with the pages of the arenas populated ahead of the parse by
/// `prefault`'s thread (slots 0 to [`ARENA_SLOTS`] - 1).
pub(crate) fn parse_prefaulted<'a>(data: &'a [u8], keys: &[&str], prefault: Option<&Prefaulter>) -> Result<Pickle<'a>, PickleError> {
    assert!(keys.len() <= RECORD_FIELDS, "at most {RECORD_FIELDS} record keys");
    Parser::new(data, data.len(), keys, prefault, None).run()
}

/// [`parse_prefaulted`] of a file still being read into `input` by another thread: the parser
/// reads what is filled and waits for more where it needs it (a frame whole, or bytes beyond
/// what is filled). The same values result as from the whole file's bytes. `Pickle::data` is
/// then the prefix read up to the STOP: [`Pickle::with_whole_input`] gives it the whole file
/// once it is read. An error may come from bytes cut short by a failed read: the read's error
/// is the one to report then ([`Growing::finish`]).
pub(crate) fn parse_growing<'a>(input: &'a Growing, keys: &[&str], prefault: Option<&Prefaulter>) -> Result<Pickle<'a>, PickleError> {
    assert!(keys.len() <= RECORD_FIELDS, "at most {RECORD_FIELDS} record keys");
    // The first bytes before the start's check.
    let filled = input.wait_for(16);
    Parser::new(input.prefix(filled), input.total(), keys, prefault, Some(input)).run()
}

/// Prefaulter slots the parser uses.
pub(crate) const ARENA_SLOTS: usize = 7;

/// Records between two updates of the ranges to prefault.
const PREFAULT_EVERY: usize = 4096;

struct Parser<'a, 'k> {
    p: Pickle<'a>,
    prefault: Option<&'k Prefaulter>,
    /// Keys of the dicts stored as records (none: no records).
    record_keys: &'k [&'k str],
    /// Per string object (`Value::Str` index), which record key it is: `KEY_UNSEEN`,
    /// `KEY_OTHER`, or the key's index. Grown on demand (keys are few memoized strings).
    key_class: Vec<u8>,
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// Memo values packed as record fields are ([`ABSENT`]: a key not set): 8 bytes an entry
    /// rather than an `Option<Value>`'s 16. A snapshot memoizes every dict and most strings
    /// (two entries per history entry), and each page of the memo is a first-touch fault.
    memo: Vec<u64>,
    /// Memo keys far beyond the dense ones (legal: Python's memo is a dict). Kept apart so that
    /// a key of 4 billion does not allocate 64 GB.
    sparse_memo: FxHashMap<usize, Value>,
    /// The input's length: `p.data`'s, or the whole file's while `source` still reads it (the
    /// arenas' sizes and the dense memo's bound come from it, as from a whole input).
    input_len: usize,
    /// The reader filling the input when it is parsed as it is read (`p.data` is the prefix
    /// read so far, extended by [`Parser::more`]).
    source: Option<&'a Growing>,
}

fn corrupt(msg: String) -> PickleError {
    PickleError::Corrupt(msg)
}

const KEY_UNSEEN: u8 = u8::MAX;
const KEY_OTHER: u8 = u8::MAX - 1;

impl<'a, 'k> Parser<'a, 'k> {
    fn new(
        data: &'a [u8],
        input_len: usize,
        record_keys: &'k [&'k str],
        prefault: Option<&'k Prefaulter>,
        source: Option<&'a Growing>,
    ) -> Self {
        // Sized from the input so that the arenas rarely grow by copying: a snapshot pickle
        // holds about one dict item per 12 bytes and one memo entry per 40 (measured on the
        // shared captures). Capped: pages never touched cost nothing, but a huge reservation
        // could be refused.
        let hint = |per_byte: usize, cap: usize| (input_len / per_byte).min(cap);
        let mut dicts = Arena::default();
        dicts.items.reserve(hint(10, 1 << 25));
        dicts.ranges.reserve(hint(80, 1 << 24));
        let mut seqs = Arena::default();
        seqs.items.reserve(hint(20, 1 << 25));
        seqs.ranges.reserve(hint(200, 1 << 24));
        let spans = Vec::with_capacity(hint(80, 1 << 24));
        let records = Vec::with_capacity(if record_keys.is_empty() { 0 } else { hint(64, 1 << 25) });
        let memo = Vec::with_capacity(hint(32, 1 << 25));
        Parser {
            p: Pickle {
                data,
                spans,
                seqs,
                dicts,
                records,
                record_key_str: [u32::MAX; RECORD_FIELDS],
                boxed: Vec::new(),
                root: Value::None,
            },
            prefault,
            record_keys,
            key_class: Vec::new(),
            pos: 0,
            stack: Vec::with_capacity(64),
            marks: Vec::with_capacity(16),
            memo,
            sparse_memo: FxHashMap::default(),
            input_len,
            source,
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let data = self.p.data;
        // `n` comes from the file (up to 2**64 - 1 for BINUNICODE8): no overflow.
        if n > data.len() - self.pos {
            return self.take_more(n);
        }
        let s = &data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// [`Parser::take`] of bytes beyond `p.data`: there while the input is still being read,
    /// else the input ends in the middle of an opcode.
    #[cold]
    #[inline(never)]
    fn take_more(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        while n > self.p.data.len() - self.pos {
            if !self.more(self.pos.saturating_add(n)) {
                return Err(corrupt(format!("pickle ends at byte {} in the middle of an opcode (truncated file?)", self.p.data.len())));
            }
        }
        let s = &self.p.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Waits for the input to reach `want` bytes (or more than it holds now, if less) while it
    /// is being read, and extends `p.data` to what is read; false when nothing more is to come
    /// (`p.data` is all there is, or the read failed).
    #[cold]
    #[inline(never)]
    fn more(&mut self, want: usize) -> bool {
        let Some(source) = self.source else { return false };
        let have = self.p.data.len();
        let filled = source.wait_for(want.max(have + 1));
        if filled <= have {
            return false;
        }
        self.p.data = source.prefix(filled);
        true
    }

    #[inline]
    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }
    #[inline]
    fn u32le(&mut self) -> Result<u32, PickleError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    #[inline]
    fn u64le(&mut self) -> Result<u64, PickleError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn line(&mut self) -> Result<&'a [u8], PickleError> {
        let start = self.pos;
        // Where the search goes on after waiting for more of the input.
        let mut from = start;
        loop {
            let data = self.p.data;
            if let Some(i) = data[from..].iter().position(|&b| b == b'\n') {
                let end = from + i;
                self.pos = end + 1;
                return Ok(&data[start..end]);
            }
            from = data.len();
            if !self.more(data.len() + 1) {
                return Err(corrupt("pickle ends inside a text opcode (truncated file?)".into()));
            }
        }
    }

    #[inline]
    fn pop(&mut self) -> Result<Value, PickleError> {
        self.stack.pop().ok_or_else(|| corrupt(format!("stack underflow at byte {}", self.pos)))
    }

    #[cold]
    fn underflow(&self) -> PickleError {
        corrupt(format!("stack underflow at byte {}", self.pos))
    }

    #[inline]
    fn top(&self) -> Result<Value, PickleError> {
        self.stack.last().copied().ok_or_else(|| corrupt(format!("stack underflow at byte {}", self.pos)))
    }

    fn pop_mark(&mut self) -> Result<usize, PickleError> {
        let m = self.marks.pop().ok_or_else(|| corrupt(format!("MARK missing at byte {}", self.pos)))?;
        if m > self.stack.len() {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        Ok(m)
    }

    // The helpers below push their value themselves: returned through a `Result`, a value
    // went through memory in pieces of different sizes (store-forwarding stalls; measured).
    #[inline(always)]
    fn push_span(&mut self, n: usize, is_str: bool) -> Result<(), PickleError> {
        let v = self.span(n, is_str)?;
        self.stack.push(v);
        Ok(())
    }
    #[inline(always)]
    fn push_new_list(&mut self, from: usize) -> Result<(), PickleError> {
        let v = self.new_list(from)?;
        self.stack.push(v);
        Ok(())
    }
    #[inline(always)]
    fn push_new_tuple(&mut self, from: usize) -> Result<(), PickleError> {
        let v = self.new_tuple(from)?;
        self.stack.push(v);
        Ok(())
    }
    #[inline(always)]
    fn push_new_dict(&mut self, from: usize) -> Result<(), PickleError> {
        let v = self.new_dict(from)?;
        self.stack.push(v);
        Ok(())
    }

    /// LONG1 of at most 8 bytes with 8 bytes of data from its start: one unaligned load,
    /// sign-extended from its length (the general `long` copied through a buffer, stalling).
    #[inline(always)]
    fn push_long1(&mut self) -> Result<(), PickleError> {
        let data = self.p.data;
        let pos = self.pos;
        if pos + 9 <= data.len() {
            let n = data[pos] as usize;
            if n <= 8 && n > 0 {
                let raw = u64::from_le_bytes(data[pos + 1..pos + 9].try_into().unwrap());
                let shift = 64 - 8 * n as u32;
                let v = ((raw << shift) as i64) >> shift;
                self.pos = pos + 1 + n;
                self.stack.push(Value::Int(v));
                return Ok(());
            }
        }
        let n = self.u8()? as usize;
        let b = self.take(n)?;
        self.stack.push(Self::long(b));
        Ok(())
    }

    #[inline(always)]
    fn span(&mut self, n: usize, is_str: bool) -> Result<Value, PickleError> {
        let start = self.pos;
        self.take(n)?;
        if is_str && std::str::from_utf8(&self.p.data[start..start + n]).is_err() {
            return Err(corrupt(format!("invalid UTF-8 in a string at byte {start}")));
        }
        let idx = self.p.spans.len() as u32;
        self.p.spans.push((start, start + n));
        Ok(if is_str { Value::Str(idx) } else { Value::Bytes(idx) })
    }

    /// A list of `stack[from..]` (taken off the stack).
    #[inline(always)]
    fn new_list(&mut self, from: usize) -> Result<Value, PickleError> {
        let i = self.p.seqs.push(self.stack[from..].iter().copied())?;
        self.stack.truncate(from);
        Ok(Value::List(i))
    }
    #[inline(always)]
    fn new_tuple(&mut self, from: usize) -> Result<Value, PickleError> {
        let i = self.p.seqs.push(self.stack[from..].iter().copied())?;
        self.stack.truncate(from);
        Ok(Value::Tuple(i))
    }
    /// A dict of the key/value pairs `stack[from..]` (taken off the stack).
    #[inline(always)]
    fn new_dict(&mut self, from: usize) -> Result<Value, PickleError> {
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(corrupt(format!("DICT with an odd number of items at byte {}", self.pos)));
        }
        let i = self.p.dicts.push(pairs_of(&self.stack[from..]))?;
        self.stack.truncate(from);
        Ok(Value::Dict(i))
    }

    #[inline(always)]
    fn memo_put(&mut self, idx: usize, v: Value) {
        if idx == self.memo.len() && idx < self.input_len {
            // MEMOIZE: the next key.
            let f = self.pack(v);
            self.memo.push(f);
        } else if idx < self.memo.len() {
            self.memo[idx] = self.pack(v);
        } else if idx - self.memo.len() < (1 << 16) && idx < self.input_len {
            // Dense up to the input's size (a pickler numbers memo entries from 0, at most one
            // per byte); keys beyond go to the sparse map, so growing keys can't make the memo
            // larger than the input.
            self.memo.resize(idx + 1, ABSENT);
            self.memo[idx] = self.pack(v);
        } else {
            self.sparse_memo.insert(idx, v);
        }
    }

    /// Pushes memo entry `idx` (BINGET and co). The value is copied straight from the memo to
    /// the stack: returned through a `Result` it went through memory in pieces of different
    /// sizes, stalling store forwarding (measured: a tenth of the parse).
    #[inline(always)]
    fn push_memo(&mut self, idx: usize) -> Result<(), PickleError> {
        match self.memo.get(idx) {
            Some(&f) if f != ABSENT => {
                let v = self.p.unpack_set(f);
                self.stack.push(v);
                Ok(())
            }
            _ => self.push_sparse_memo(idx),
        }
    }

    #[cold]
    #[inline(never)]
    fn push_sparse_memo(&mut self, idx: usize) -> Result<(), PickleError> {
        let v = self
            .sparse_memo
            .get(&idx)
            .copied()
            .ok_or_else(|| corrupt(format!("memo key {idx} read before it was written (byte {})", self.pos)))?;
        self.stack.push(v);
        Ok(())
    }

    fn long(bytes: &[u8]) -> Value {
        // Little-endian two's complement (pickle.decode_long).
        if bytes.is_empty() {
            return Value::Int(0);
        }
        if bytes.len() <= 8 {
            let mut buf = if bytes[bytes.len() - 1] & 0x80 != 0 { [0xffu8; 8] } else { [0u8; 8] };
            buf[..bytes.len()].copy_from_slice(bytes);
            return Value::Int(i64::from_le_bytes(buf));
        }
        let neg = bytes[bytes.len() - 1] & 0x80 != 0;
        let mut f = 0f64;
        for &b in bytes.iter().rev() {
            f = f * 256.0 + (if neg { !b } else { b }) as f64;
        }
        Value::BigInt(if neg { -(f + 1.0) } else { f })
    }

    /// APPEND / APPENDS: moves `stack[from..]` into the list below them on the stack.
    fn append_from(&mut self, from: usize) -> Result<(), PickleError> {
        if from == 0 {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        match self.stack[from - 1] {
            Value::List(i) => {
                self.p.seqs.extend(i, self.stack[from..].iter().copied())?;
                self.stack.truncate(from);
                Ok(())
            }
            other => Err(corrupt(format!("APPEND to a {} at byte {}", Pickle::type_name(other), self.pos))),
        }
    }

    /// SETITEM / SETITEMS: moves the key/value pairs `stack[from..]` into the dict below them.
    /// Items are appended; a key set twice is resolved by `Pickle::get` (the last wins, as in
    /// Python), which keeps this linear in the number of items.
    fn set_items_from(&mut self, from: usize) -> Result<(), PickleError> {
        if from == 0 {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        if !(self.stack.len() - from).is_multiple_of(2) {
            return Err(corrupt(format!("SETITEMS with an odd number of items at byte {}", self.pos)));
        }
        match self.stack[from - 1] {
            Value::Dict(i) => {
                let (_, len) = self.p.dicts.ranges[i as usize];
                if len == 0 && !self.record_keys.is_empty() && self.try_record(i, from) {
                    return Ok(());
                }
                if len == RECORD {
                    // More items for a record: it becomes a plain dict first.
                    let items = self.p.dict(Value::Dict(i)).expect("a dict").into_owned();
                    self.p.dicts.ranges[i as usize] = (0, 0);
                    self.p.dicts.extend(i, items.into_iter())?;
                }
                self.p.dicts.extend(i, pairs_of(&self.stack[from..]))?;
                self.stack.truncate(from);
                Ok(())
            }
            other => Err(corrupt(format!("SETITEM on a {} at byte {}", Pickle::type_name(other), self.pos))),
        }
    }

    /// Stores the empty dict `i` with the items `stack[from..]` as a record if every key is a
    /// distinct record key (true: done, the items are off the stack).
    #[inline]
    fn try_record(&mut self, i: u32, from: usize) -> bool {
        let mut fields = [ABSENT; RECORD_FIELDS];
        let n = self.stack.len() - from;
        if n > 2 * RECORD_FIELDS {
            return false;
        }
        for j in (from..self.stack.len()).step_by(2) {
            let (key, value) = (self.stack[j], self.stack[j + 1]);
            let Value::Str(s) = key else { return false };
            let c = self.key_class(s);
            if c == KEY_OTHER || fields[c as usize] != ABSENT {
                return false;
            }
            fields[c as usize] = self.pack(value);
        }
        let Ok(r) = u32::try_from(self.p.records.len()) else { return false };
        self.p.records.push(fields);
        self.p.dicts.ranges[i as usize] = (r, RECORD);
        self.stack.truncate(from);
        true
    }

    /// Which record key the string object `s` is (`KEY_OTHER`: none).
    #[inline(always)]
    fn key_class(&mut self, s: u32) -> u8 {
        match self.key_class.get(s as usize) {
            Some(&c) if c != KEY_UNSEEN => c,
            _ => self.new_key_class(s),
        }
    }

    #[cold]
    #[inline(never)]
    fn new_key_class(&mut self, s: u32) -> u8 {
        let s = s as usize;
        if s >= self.key_class.len() {
            self.key_class.resize(self.p.spans.len().max(s + 1), KEY_UNSEEN);
        }
        let text = self.p.str(Value::Str(s as u32)).unwrap_or("");
        let c = match self.record_keys.iter().position(|&k| k == text) {
            Some(k) => {
                if self.p.record_key_str[k] == u32::MAX {
                    self.p.record_key_str[k] = s as u32;
                }
                k as u8
            }
            None => KEY_OTHER,
        };
        self.key_class[s] = c;
        c
    }

    fn refuse(&mut self, op: u8, what: &str) -> PickleError {
        let at = self.pos - 1;
        let detail = if op == b'c' || op == b'i' {
            // GLOBAL / INST carry "module\nname\n".
            let module = self.line().map(|l| String::from_utf8_lossy(l).into_owned()).unwrap_or_default();
            let name = self.line().map(|l| String::from_utf8_lossy(l).into_owned()).unwrap_or_default();
            format!(" `{module}.{name}`")
        } else if op == 0x93 {
            // STACK_GLOBAL takes module and name from the stack.
            let n = self.stack.len();
            if n >= 2 {
                let (m, q) = (self.stack[n - 2], self.stack[n - 1]);
                format!(" `{}.{}`", self.p.str(m).unwrap_or("?"), self.p.str(q).unwrap_or("?"))
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        PickleError::Unsafe(format!(
            "the pickle {what}{detail} (opcode {:#04x} at byte {at}); allocreplay reads only plain dicts, lists, strings and numbers and never executes a pickle — pass the `torch.cuda.memory._snapshot()` output as written by `_dump_snapshot`",
            op
        ))
    }

    /// The opcodes of a record dict as Python's pickler writes one (protocol 2+), decoded in
    /// one straight pass after its EMPTY_DICT (`self.pos` is past it): MEMOIZE, MARK, then
    /// key/value pairs up to SETITEMS, keys memo references to record keys, values small ints,
    /// None, bools, memo references, short strings (memoized or not) and lists of memo
    /// references (a snapshot's `frames`). Anything else — or a memo key unset, a key not a
    /// record key or repeated, a FRAME opcode in between — undoes what it did and returns
    /// false: the general loop then reads the same bytes. The same values, memo entries and
    /// containers result either way; this path skips the stack and the per-opcode dispatch.
    fn fast_record(&mut self) -> bool {
        let data = self.p.data;
        let (pos0, memo0, spans0, boxed0) = (self.pos, self.memo.len(), self.p.spans.len(), self.p.boxed.len());
        let (seqs_ranges0, seqs_items0) = (self.p.seqs.ranges.len(), self.p.seqs.items.len());
        let dict = self.p.dicts.ranges.len();
        let ok = self.fast_record_items(data, dict).is_some();
        if !ok {
            self.pos = pos0;
            self.memo.truncate(memo0);
            self.p.spans.truncate(spans0);
            self.p.boxed.truncate(boxed0);
            self.p.seqs.ranges.truncate(seqs_ranges0);
            self.p.seqs.items.truncate(seqs_items0);
        }
        ok
    }

    #[inline(always)]
    fn fast_byte(&mut self, data: &[u8]) -> Option<u8> {
        let b = *data.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// A memo reference (BINGET / LONG_BINGET) at `self.pos` whose entry is set, else None.
    #[inline(always)]
    fn fast_get(&mut self, data: &[u8], op: u8) -> Option<Value> {
        self.fast_get_packed(data, op).map(|f| self.p.unpack_set(f))
    }

    /// [`Parser::fast_get`] as the packed word the memo holds (a record field as it is).
    #[inline(always)]
    fn fast_get_packed(&mut self, data: &[u8], op: u8) -> Option<u64> {
        let idx = match op {
            b'h' => self.fast_byte(data)? as usize,
            b'j' => {
                let b = data.get(self.pos..self.pos + 4)?;
                self.pos += 4;
                u32::from_le_bytes(b.try_into().unwrap()) as usize
            }
            _ => return None,
        };
        self.memo.get(idx).copied().filter(|&f| f != ABSENT)
    }

    /// MEMOIZE of the packed value `f` if the next opcode is one.
    #[inline(always)]
    fn fast_memoize(&mut self, data: &[u8], f: u64) -> Option<()> {
        if data.get(self.pos) == Some(&0x94) {
            if self.memo.len() >= self.input_len {
                return None;
            }
            self.pos += 1;
            self.memo.push(f);
        }
        Some(())
    }

    /// [`Parser::fast_record`]'s pass over the record dict `dict` (None: not one it reads).
    fn fast_record_items(&mut self, data: &'a [u8], dict: usize) -> Option<()> {
        let dict_u32 = u32::try_from(dict).ok()?;
        // MEMOIZE of the dict (required: the pickler always writes it), MARK.
        if self.fast_byte(data)? != 0x94 || self.memo.len() >= self.input_len {
            return None;
        }
        self.memo.push(pack_index(dict_u32, P_DICT));
        if self.fast_byte(data)? != b'(' {
            return None;
        }
        // Values stay packed words from the file to the record (and the memo): no `Value`
        // goes through memory on the way (built in pieces, it stalled store forwarding).
        let mut fields = [ABSENT; RECORD_FIELDS];
        // Keys seen, one bit per record key: a repeated key leaves the fast path.
        let mut seen = 0u32;
        loop {
            let op = self.fast_byte(data)?;
            if op == b'u' {
                break;
            }
            let k = self.fast_get_packed(data, op)?;
            if k & 0xf != P_STR {
                return None;
            }
            let c = self.key_class((k >> 4) as u32);
            if c == KEY_OTHER || seen & (1 << c) != 0 {
                return None;
            }
            seen |= 1 << c;
            fields[c as usize] = self.fast_value(data)?;
        }
        let r = u32::try_from(self.p.records.len()).ok()?;
        if self.prefault.is_some() && self.p.records.len().is_multiple_of(PREFAULT_EVERY) {
            self.publish_arenas();
        }
        self.p.records.push(fields);
        self.p.dicts.ranges.push((r, RECORD));
        self.stack.push(Value::Dict(dict_u32));
        Some(())
    }

    /// A record's value at `self.pos`, as the packed word the record holds: a small int, a
    /// LONG1 of up to 8 bytes, None, a bool, a memo reference, a short string or a list of memo
    /// references.
    #[inline(always)]
    fn fast_value(&mut self, data: &'a [u8]) -> Option<u64> {
        let op = self.fast_byte(data)?;
        Some(match op {
            b'K' => pack_small_int(self.fast_byte(data)? as i64),
            b'M' => {
                let b = data.get(self.pos..self.pos + 2)?;
                self.pos += 2;
                pack_small_int(u16::from_le_bytes([b[0], b[1]]) as i64)
            }
            b'J' => {
                let b = data.get(self.pos..self.pos + 4)?;
                self.pos += 4;
                pack_small_int(i32::from_le_bytes(b.try_into().unwrap()) as i64)
            }
            0x8a => {
                let n = *data.get(self.pos)? as usize;
                if n == 0 || n > 8 || self.pos + 9 > data.len() {
                    return None;
                }
                let raw = u64::from_le_bytes(data[self.pos + 1..self.pos + 9].try_into().unwrap());
                let shift = 64 - 8 * n as u32;
                self.pos += 1 + n;
                self.pack(Value::Int(((raw << shift) as i64) >> shift))
            }
            b'N' => P_NONE,
            0x88 => P_TRUE,
            0x89 => P_FALSE,
            b'h' | b'j' => self.fast_get_packed(data, op)?,
            0x8c => self.fast_short_str(data)?,
            b']' => self.fast_ref_list(data)?,
            _ => return None,
        })
    }

    /// SHORT_BINUNICODE (after its opcode): as `span` stores it (an invalid one is left to the
    /// general loop, which reports it), memoized if a MEMOIZE follows.
    #[inline(always)]
    fn fast_short_str(&mut self, data: &'a [u8]) -> Option<u64> {
        let n = self.fast_byte(data)? as usize;
        let start = self.pos;
        let text = data.get(start..start + n)?;
        if !text.is_ascii() && std::str::from_utf8(text).is_err() {
            return None;
        }
        self.pos += n;
        let idx = self.p.spans.len() as u32;
        self.p.spans.push((start, start + n));
        let f = pack_index(idx, P_STR);
        self.fast_memoize(data, f)?;
        Some(f)
    }

    /// A list of memo references (after its EMPTY_LIST): MEMOIZE?, then nothing, one reference
    /// and APPEND, or MARK, references, APPENDS.
    #[inline(always)]
    fn fast_ref_list(&mut self, data: &'a [u8]) -> Option<u64> {
        let l = u32::try_from(self.p.seqs.ranges.len()).ok()?;
        self.fast_memoize(data, pack_index(l, P_LIST))?;
        let start = self.p.seqs.items.len();
        match data.get(self.pos) {
            Some(b'(') => {
                self.pos += 1;
                loop {
                    let op = self.fast_byte(data)?;
                    if op == b'e' {
                        break;
                    }
                    let item = self.fast_get(data, op)?;
                    self.p.seqs.items.push(item);
                }
            }
            Some(b'h' | b'j') if matches!(data.get(self.pos + if data[self.pos] == b'h' { 2 } else { 5 }), Some(b'a')) => {
                let op = self.fast_byte(data)?;
                let item = self.fast_get(data, op)?;
                self.p.seqs.items.push(item);
                self.pos += 1;
            }
            _ => {}
        }
        let n = self.p.seqs.items.len() - start;
        let (start, n) = (u32::try_from(start).ok()?, u32::try_from(n).ok().filter(|&n| n < RECORD)?);
        if self.p.seqs.items.len() > u32::MAX as usize {
            return None;
        }
        self.p.seqs.ranges.push((start, n));
        Some(pack_index(l, P_LIST))
    }

    /// Tells the prefaulting thread where the arenas end now: it populates a little ahead of
    /// each (an eighth of its length, 1 to 8 MiB), so that the parse finds those pages mapped
    /// and little beyond what the parse uses is populated.
    #[cold]
    #[inline(never)]
    fn publish_arenas(&self) {
        fn ahead<T>(pf: &Prefaulter, slot: usize, v: &Vec<T>) {
            let size = std::mem::size_of::<T>();
            let lead = (v.len() / 8).clamp((1 << 20) / size, (8 << 20) / size);
            pf.ahead(slot, v, lead);
        }
        let Some(pf) = self.prefault else { return };
        let p = &self.p;
        ahead(pf, 0, &p.records);
        ahead(pf, 1, &self.memo);
        ahead(pf, 2, &p.spans);
        ahead(pf, 3, &p.dicts.ranges);
        ahead(pf, 4, &p.seqs.items);
        ahead(pf, 5, &p.seqs.ranges);
        ahead(pf, 6, &p.dicts.items);
    }

    /// A value as a record field (boxed when it does not fit the packed word).
    #[inline(always)]
    fn pack(&mut self, v: Value) -> u64 {
        match v {
            Value::None => P_NONE,
            Value::Bool(false) => P_FALSE,
            Value::Bool(true) => P_TRUE,
            Value::Int(x) if (x << 4) >> 4 == x => ((x << 4) as u64) | P_INT,
            Value::Str(x) => ((x as u64) << 4) | P_STR,
            Value::Bytes(x) => ((x as u64) << 4) | P_BYTES,
            Value::List(x) => ((x as u64) << 4) | P_LIST,
            Value::Tuple(x) => ((x as u64) << 4) | P_TUPLE,
            Value::Dict(x) => ((x as u64) << 4) | P_DICT,
            other => {
                self.p.boxed.push(other);
                (((self.p.boxed.len() - 1) as u64) << 4) | P_BOXED
            }
        }
    }

    fn run(mut self) -> Result<Pickle<'a>, PickleError> {
        self.check_start()?;
        let mut frame_end = 0usize;
        loop {
            let op = match self.take(1) {
                Ok(b) => b[0],
                Err(_) => {
                    return Err(corrupt(format!("pickle ends at byte {} without a STOP opcode (truncated file?)", self.p.data.len())))
                }
            };
            // Python's `_Unpickler.dispatch`: one `load_*` each, or the line that does it.
            match op {
                0x80 => self.load_proto()?,
                0x95 => self.load_frame(&mut frame_end)?,
                b'.' => return self.load_stop(),
                b'(' => self.marks.push(self.stack.len()), // MARK
                b'0' => self.load_pop()?,
                b'1' => self.load_pop_mark()?,
                b'2' => self.load_dup()?,
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => self.load_binint()?,
                b'K' => self.load_binint1()?,
                b'M' => self.load_binint2()?,
                0x8a => self.push_long1()?,
                0x8b => self.load_long4()?,
                b'I' | b'L' => self.load_int()?,
                b'G' => self.load_binfloat()?,
                b'F' => self.load_float()?,
                0x8c => self.load_counted(1, true)?,         // SHORT_BINUNICODE
                b'X' => self.load_counted(4, true)?,         // BINUNICODE
                0x8d => self.load_counted(8, true)?,         // BINUNICODE8
                b'U' | b'C' => self.load_counted(1, false)?, // SHORT_BINSTRING, SHORT_BINBYTES
                b'T' | b'B' => self.load_counted(4, false)?, // BINSTRING, BINBYTES
                0x8e => self.load_counted(8, false)?,        // BINBYTES8
                // EMPTY_LIST; EMPTY_SET, kept as a list.
                b']' | 0x8f => self.push_new_list(self.stack.len())?,
                b'}' => self.load_empty_dict()?,
                b')' => self.push_new_tuple(self.stack.len())?,
                b'l' => self.load_list()?,
                // TUPLE; FROZENSET, kept as a tuple.
                b't' | 0x91 => self.load_tuple()?,
                0x85..=0x87 => self.load_tuple_n((op - 0x84) as usize)?,
                b'd' => self.load_dict()?,
                b'a' => self.load_append()?,
                // APPENDS; ADDITEMS (to a set, kept as a list).
                b'e' | 0x90 => self.load_appends()?,
                b's' => self.load_setitem()?,
                b'u' => self.load_setitems()?,
                0x94 => self.load_memoize()?,
                b'q' => self.load_binput()?,
                b'r' => self.load_long_binput()?,
                b'p' => self.load_put()?,
                b'h' => self.load_binget()?,
                b'j' => self.load_long_binget()?,
                b'g' => self.load_get()?,
                _ => return Err(self.bad_opcode(op)),
            }
        }
    }

    /// The first byte: PROTO for protocol 2+; protocols 0/1 start with whatever opcode builds
    /// the first object (a MARK, an empty container, a GLOBAL, a literal).
    fn check_start(&self) -> Result<(), PickleError> {
        let data = self.p.data;
        if data.is_empty() {
            return Err(corrupt("file is empty".into()));
        }
        if data[0] != 0x80
            && !matches!(
                data[0],
                b'(' | b'}' | b']' | b')' | b'd' | b'l' | b'c' | b'i' | b'N' | b'I' | b'L' | b'F' | b'G' | b'J' | b'K' | b'M'
            )
        {
            return Err(corrupt(format!("not a pickle (starts with bytes {:02x?})", &data[..data.len().min(4)])));
        }
        Ok(())
    }

    /// An opcode the parser does not run: one that imports, builds or calls objects (refused
    /// as unsafe: [`Parser::refuse`]), a text opcode of protocols 0 and 1, or none at all.
    #[cold]
    #[inline(never)]
    fn bad_opcode(&mut self, op: u8) -> PickleError {
        match op {
            b'c' => self.refuse(op, "imports a global"),
            0x93 => self.refuse(op, "imports a global"),
            b'i' => self.refuse(op, "builds a class instance"),
            b'o' | 0x81 | 0x92 => self.refuse(op, "builds an object"),
            b'R' => self.refuse(op, "calls a function (REDUCE)"),
            b'b' => self.refuse(op, "sets object state (BUILD)"),
            b'P' | b'Q' => self.refuse(op, "holds a persistent id"),
            0x82..=0x84 => self.refuse(op, "uses the extension registry"),
            0x96..=0x98 => self.refuse(op, "holds out-of-band buffers"),
            b'V' | b'S' if self.p.data[0] != 0x80 => {
                // Text opcodes of protocols 0 and 1 that a snapshot never holds (it is
                // written with protocol 2 or later): name the file's kind and the fix.
                corrupt(format!(
                    "a protocol-0/1 (text) pickle: its opcode {:?} at byte {} is one allocreplay does not read; PyTorch writes snapshots with protocol 2 or later (torch.cuda.memory._dump_snapshot): re-save it with pickle.dump(pickle.load(open(IN, 'rb')), open(OUT, 'wb'), protocol=4)",
                    op as char,
                    self.pos - 1
                ))
            }
            _ => corrupt(format!("not a valid pickle: unknown opcode {op:#04x} at byte {}", self.pos - 1)),
        }
    }

    // The opcodes `run` dispatches, named after Python's `_Unpickler.load_*`.

    #[inline(always)]
    fn load_proto(&mut self) -> Result<(), PickleError> {
        let proto = self.u8()?;
        if proto > 5 {
            return Err(corrupt(format!("unsupported pickle protocol {proto}")));
        }
        Ok(())
    }

    /// FRAME: the next `len` bytes hold whole opcodes. CPython's unpickler (`load_frame`)
    /// refuses a frame that the data does not hold entirely; its Python one also refuses a
    /// frame that starts inside the previous one (`frame_end`, which it moves).
    #[inline(always)]
    fn load_frame(&mut self, frame_end: &mut usize) -> Result<(), PickleError> {
        let at = self.pos - 1;
        // A frame is 64 KiB: where a long parse looks at its cancellation token
        // (`crate::cancel`; the importer turns this into `Error::Cancelled`).
        if crate::cancel::requested() {
            return Err(corrupt("cancelled".into()));
        }
        if at < *frame_end {
            return Err(corrupt(format!("FRAME at byte {at} begins before the previous frame ends (byte {frame_end})")));
        }
        let len = self.u64le()?;
        // A frame is read whole before its opcodes (the fast paths read within one frame).
        let end = self.pos.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
        if end > self.p.data.len() {
            self.more(end);
        }
        let data = self.p.data;
        if len > (data.len() - self.pos) as u64 {
            return Err(corrupt(format!(
                "FRAME at byte {at} declares {len} bytes but only {} follow (truncated file?)",
                data.len() - self.pos
            )));
        }
        *frame_end = self.pos + len as usize;
        Ok(())
    }

    /// STOP: the value on the stack is the pickle's root.
    fn load_stop(mut self) -> Result<Pickle<'a>, PickleError> {
        self.p.root = self.pop()?;
        if self.prefault.is_some() {
            // A large parse (the caller prefaults): its memo's release need not
            // hold up the import.
            crate::prefault::drop_in_background(std::mem::take(&mut self.memo));
        }
        Ok(self.p)
    }

    #[inline(always)]
    fn load_pop(&mut self) -> Result<(), PickleError> {
        self.pop()?;
        Ok(())
    }

    #[inline(always)]
    fn load_pop_mark(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.stack.truncate(m);
        Ok(())
    }

    #[inline(always)]
    fn load_dup(&mut self) -> Result<(), PickleError> {
        let v = self.top()?;
        self.stack.push(v);
        Ok(())
    }

    #[inline(always)]
    fn load_binint(&mut self) -> Result<(), PickleError> {
        let v = self.u32le()? as i32 as i64;
        self.stack.push(Value::Int(v));
        Ok(())
    }

    #[inline(always)]
    fn load_binint1(&mut self) -> Result<(), PickleError> {
        let v = self.u8()? as i64;
        self.stack.push(Value::Int(v));
        Ok(())
    }

    #[inline(always)]
    fn load_binint2(&mut self) -> Result<(), PickleError> {
        let b = self.take(2)?;
        self.stack.push(Value::Int(u16::from_le_bytes([b[0], b[1]]) as i64));
        Ok(())
    }

    #[inline(always)]
    fn load_long4(&mut self) -> Result<(), PickleError> {
        let n = self.u32le()? as usize;
        let b = self.take(n)?;
        self.stack.push(Self::long(b));
        Ok(())
    }

    /// INT / LONG: a decimal line (`00` / `01` are False / True, as protocol 0 writes bools).
    #[inline(always)]
    fn load_int(&mut self) -> Result<(), PickleError> {
        let l = self.line()?;
        let s = std::str::from_utf8(l).unwrap_or("").trim_end_matches('L');
        let v = match s {
            "00" => Value::Bool(false),
            "01" => Value::Bool(true),
            _ => match s.parse::<i64>() {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(s.parse::<f64>().map_err(|_| corrupt(format!("bad INT literal at byte {}", self.pos)))?),
            },
        };
        self.stack.push(v);
        Ok(())
    }

    #[inline(always)]
    fn load_binfloat(&mut self) -> Result<(), PickleError> {
        let b = self.take(8)?;
        self.stack.push(Value::Float(f64::from_be_bytes(b.try_into().unwrap())));
        Ok(())
    }

    #[inline(always)]
    fn load_float(&mut self) -> Result<(), PickleError> {
        let l = self.line()?;
        let f = std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| corrupt(format!("bad FLOAT literal at byte {}", self.pos)))?;
        self.stack.push(Value::Float(f));
        Ok(())
    }

    /// A string (`is_str`) or bytes whose length comes first, in `width` (1, 4 or 8) bytes:
    /// `load_short_binunicode`, `load_binunicode`, `load_binbytes8` and co.
    #[inline(always)]
    fn load_counted(&mut self, width: usize, is_str: bool) -> Result<(), PickleError> {
        let n = match width {
            1 => self.u8()? as usize,
            4 => self.u32le()? as usize,
            _ => self.u64le()? as usize,
        };
        self.push_span(n, is_str)
    }

    /// EMPTY_DICT: read as a record in one pass where it is one (`fast_record`).
    #[inline(always)]
    fn load_empty_dict(&mut self) -> Result<(), PickleError> {
        if self.record_keys.is_empty() || !self.fast_record() {
            self.push_new_dict(self.stack.len())?;
        }
        Ok(())
    }

    #[inline(always)]
    fn load_list(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.push_new_list(m)
    }

    #[inline(always)]
    fn load_tuple(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.push_new_tuple(m)
    }

    /// TUPLE1, TUPLE2, TUPLE3: of the top `n` values.
    #[inline(always)]
    fn load_tuple_n(&mut self, n: usize) -> Result<(), PickleError> {
        if self.stack.len() < n {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        self.push_new_tuple(self.stack.len() - n)
    }

    #[inline(always)]
    fn load_dict(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.push_new_dict(m)
    }

    #[inline(always)]
    fn load_append(&mut self) -> Result<(), PickleError> {
        if self.stack.len() < 2 {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        self.append_from(self.stack.len() - 1)
    }

    #[inline(always)]
    fn load_appends(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.append_from(m)
    }

    #[inline(always)]
    fn load_setitem(&mut self) -> Result<(), PickleError> {
        if self.stack.len() < 3 {
            return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
        }
        self.set_items_from(self.stack.len() - 2)
    }

    #[inline(always)]
    fn load_setitems(&mut self) -> Result<(), PickleError> {
        let m = self.pop_mark()?;
        self.set_items_from(m)
    }

    #[inline(always)]
    fn load_memoize(&mut self) -> Result<(), PickleError> {
        let Some(&v) = self.stack.last() else { return Err(self.underflow()) };
        let idx = self.memo.len();
        self.memo_put(idx, v);
        Ok(())
    }

    #[inline(always)]
    fn load_binput(&mut self) -> Result<(), PickleError> {
        let idx = self.u8()? as usize;
        let v = self.top()?;
        self.memo_put(idx, v);
        Ok(())
    }

    #[inline(always)]
    fn load_long_binput(&mut self) -> Result<(), PickleError> {
        let idx = self.u32le()? as usize;
        let v = self.top()?;
        self.memo_put(idx, v);
        Ok(())
    }

    #[inline(always)]
    fn load_put(&mut self) -> Result<(), PickleError> {
        let l = self.line()?;
        let idx = std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| corrupt(format!("bad PUT at byte {}", self.pos)))?;
        let v = self.top()?;
        self.memo_put(idx, v);
        Ok(())
    }

    #[inline(always)]
    fn load_binget(&mut self) -> Result<(), PickleError> {
        let idx = self.u8()? as usize;
        self.push_memo(idx)
    }

    #[inline(always)]
    fn load_long_binget(&mut self) -> Result<(), PickleError> {
        let idx = self.u32le()? as usize;
        self.push_memo(idx)
    }

    #[inline(always)]
    fn load_get(&mut self) -> Result<(), PickleError> {
        let l = self.line()?;
        let idx = std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .ok_or_else(|| corrupt(format!("bad GET at byte {}", self.pos)))?;
        self.push_memo(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Byte strings below are what CPython 3.11's `pickle.dumps(obj, protocol=N)` writes
    // (checked with `pickletools.dis`).

    #[test]
    fn parses_protocol4_dict_with_memo_sharing() {
        // pickle.dumps({'a': [1, -2, 3.5], 'b': ('x', None, True), 'c': 140035194093568}, protocol=4)
        let bytes: &[u8] = b"\x80\x04\x955\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00e\x8c\x01b\x94\x8c\x01x\x94N\x88\x87\x94\x8c\x01c\x94\x8a\x06\x00\x00\x00|\x5c\x7fu.";
        let p = parse(bytes).unwrap();
        let a = p.get(p.root, "a").unwrap();
        let items = p.list(a).unwrap();
        assert_eq!(items, &[Value::Int(1), Value::Int(-2), Value::Float(3.5)]);
        let b = p.list(p.get(p.root, "b").unwrap()).unwrap();
        assert_eq!(p.str(b[0]), Some("x"));
        assert_eq!(b[1], Value::None);
        assert_eq!(b[2], Value::Bool(true));
        assert_eq!(p.int(p.get(p.root, "c").unwrap()), Some(140035194093568));
    }

    #[test]
    fn repeated_key_keeps_the_last_value_like_python() {
        // SETITEMS with 'a' twice (memo GET for the second key): pickle.loads gives {'a': 2}.
        let p = parse(b"\x80\x04}\x94(\x8c\x01a\x94K\x01h\x01K\x02u.").unwrap();
        assert_eq!(p.get(p.root, "a"), Some(Value::Int(2)));
        assert_eq!(p.keys(p.root), vec!["a".to_string()]);
        assert_eq!(p.to_json(p.root).unwrap(), serde_json::json!({"a": 2}));
        // DICT opcode (protocol 0) and SETITEM.
        let p = parse(b"(S'x'\nI1\nd.").map(|p| p.root);
        assert!(p.is_err(), "STRING opcode is not supported: refused as corrupt, not misread");
        let p = parse(b"\x80\x02}q\x00X\x01\x00\x00\x00bq\x01K\x05s.").unwrap();
        assert_eq!(p.get(p.root, "b"), Some(Value::Int(5)));
    }

    #[test]
    fn containers_grown_in_several_batches_keep_their_items() {
        fn json(bytes: &[u8]) -> serde_json::Value {
            let p = parse(bytes).unwrap();
            p.to_json(p.root).unwrap()
        }
        // pickle.dumps([[1], [2, 3], {'k': [4]}], protocol=1): per-item APPEND, nested.
        assert_eq!(
            json(b"]q\x00(]q\x01K\x01a]q\x02(K\x02K\x03e}q\x03X\x01\x00\x00\x00kq\x04]q\x05K\x04ase."),
            serde_json::json!([[1], [2, 3], {"k": [4]}])
        );
        // The outer list is appended to again after an inner list was stored behind it (as
        // APPENDS batches of a list longer than 1000 do): it moves, items intact.
        assert_eq!(json(b"\x80\x02](]K\x01ae(]K\x02ae."), serde_json::json!([[1], [2]]));
    }

    #[test]
    fn huge_lengths_and_memo_keys_are_errors_or_sparse_not_panics() {
        // BINUNICODE8 claiming 2**64 - 1 bytes.
        let e = parse(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff").unwrap_err();
        assert!(matches!(e, PickleError::Corrupt(_)));
        // LONG_BINPUT at key 0xffffffff then LONG_BINGET of it: legal, and stored sparsely.
        let p = parse(b"\x80\x04K\x07r\xff\xff\xff\xff0j\xff\xff\xff\xff.").unwrap();
        assert_eq!(p.root, Value::Int(7));
    }

    #[test]
    fn mutated_pickles_never_panic() {
        // Every single-byte change and every truncation of a small snapshot-shaped pickle
        // parses or fails with an error; none may panic.
        // pickle.dumps({'device_traces': [[{'action': 'alloc', 'addr': 140000000000000,
        //   'size': 512, 'frames': [{'name': 'f', 'line': 3}]}]], 'segments': [(1, 2.5)]}, 4)
        let good: &[u8] = b"\x80\x04\x95\x88\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x0ddevice_traces\x94]\x94]\x94}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94\x8a\x06\x00\xc0DJT\x7f\x8c\x04size\x94M\x00\x02\x8c\x06frames\x94]\x94}\x94(\x8c\x04name\x94\x8c\x01f\x94\x8c\x04line\x94K\x03uauaa\x8c\x08segments\x94]\x94K\x01G@\x04\x00\x00\x00\x00\x00\x00\x86\x94au.";
        let p = parse(good).unwrap();
        assert!(p.get(p.root, "device_traces").is_some());
        // Three entries sharing keys, action names and frames through the memo (the third
        // takes the records' straight-line path):
        // f = {'name': 'f', 'line': 3}; fr = [f]; pickle.dumps({'device_traces': [[
        //   {'action': 'alloc', 'addr': 140000000000000, 'size': 512, 'frames': fr},
        //   {'action': 'alloc', 'addr': 140000000000512, 'size': 70000, 'stream': -1,
        //    'time_us': None, 'frames': [f, f]},
        //   {'action': 'free_requested', 'addr': 140000000000000, 'size': 512, 'frames': fr,
        //    'stream': 2**40}]]}, 4)
        let shared: &[u8] = b"\x80\x04\x95\xdd\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\rdevice_traces\x94]\x94]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94\x8a\x06\x00\xc0DJT\x7f\x8c\x04size\x94M\x00\x02\x8c\x06frames\x94]\x94}\x94(\x8c\x04name\x94\x8c\x01f\x94\x8c\x04line\x94K\x03uau}\x94(h\x05h\x06h\x07\x8a\x06\x00\xc2DJT\x7fh\x08Jp\x11\x01\x00\x8c\x06stream\x94J\xff\xff\xff\xff\x8c\x07time_us\x94Nh\t]\x94(h\x0bh\x0beu}\x94(h\x05\x8c\x0efree_requested\x94h\x07\x8a\x06\x00\xc0DJT\x7fh\x08M\x00\x02h\th\nh\x10\x8a\x06\x00\x00\x00\x00\x00\x01ueas.";
        let keys = ["action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"];
        let p = parse_with_records(shared, &keys).unwrap();
        let entries = p.list(p.list(p.get(p.root, "device_traces").unwrap()).unwrap()[0]).unwrap();
        assert!(entries.iter().all(|&e| p.record(e).is_some()));
        assert_eq!(p.get(entries[2], "stream"), Some(Value::Int(1 << 40)));
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for good in [good, shared] {
            for i in 0..good.len() {
                for _ in 0..24 {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let mut m = good.to_vec();
                    m[i] = seed as u8;
                    let plain = parse(&m).map(|p| p.to_json(p.root));
                    let rec = parse_with_records(&m, &keys).map(|p| p.to_json(p.root));
                    // The records (and their straight-line decoding) accept and refuse the same
                    // bytes, with the same content.
                    assert_eq!(plain, rec, "byte {i} set to {}", seed as u8);
                }
                let _ = parse(&good[..i]);
                assert_eq!(parse(&good[..i]).map(|p| p.to_json(p.root)), parse_with_records(&good[..i], &keys).map(|p| p.to_json(p.root)));
            }
        }
    }

    /// `parse_growing` of `bytes` fed in pieces of 1 to 16 bytes by another thread, ending with
    /// `end` (Ok: all of `bytes`; an error: a read that failed after them): its JSON.
    fn parse_fed(bytes: &[u8], total: usize, end: crate::error::Result<()>, keys: &[&str]) -> Result<serde_json::Value, PickleError> {
        let g = Growing::new(total);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut at = 0;
                while at < bytes.len() {
                    let n = (1 + at * 7 % 16).min(bytes.len() - at);
                    g.feed(&bytes[at..at + n]);
                    at += n;
                    std::thread::yield_now();
                }
                g.end(end);
            });
            parse_growing(&g, keys, None).and_then(|p| p.to_json(p.root))
        })
    }

    #[test]
    fn a_pickle_parsed_as_it_is_read_is_the_pickle() {
        // pickle.dumps({'a': [1, -2, 3.5], 'b': ('x', None, True), 'c': 140035194093568}, protocol=4)
        let framed: &[u8] = b"\x80\x04\x955\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94]\x94(K\x01J\xfe\xff\xff\xffG@\x0c\x00\x00\x00\x00\x00\x00e\x8c\x01b\x94\x8c\x01x\x94N\x88\x87\x94\x8c\x01c\x94\x8a\x06\x00\x00\x00|\x5c\x7fu.";
        // Snapshot-shaped entries (records, their straight-line path), and text opcodes (a
        // line read across pieces).
        let shared: &[u8] = b"\x80\x04\x95\xdd\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\rdevice_traces\x94]\x94]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94\x8a\x06\x00\xc0DJT\x7f\x8c\x04size\x94M\x00\x02\x8c\x06frames\x94]\x94}\x94(\x8c\x04name\x94\x8c\x01f\x94\x8c\x04line\x94K\x03uau}\x94(h\x05h\x06h\x07\x8a\x06\x00\xc2DJT\x7fh\x08Jp\x11\x01\x00\x8c\x06stream\x94J\xff\xff\xff\xff\x8c\x07time_us\x94Nh\t]\x94(h\x0bh\x0beu}\x94(h\x05\x8c\x0efree_requested\x94h\x07\x8a\x06\x00\xc0DJT\x7fh\x08M\x00\x02h\th\nh\x10\x8a\x06\x00\x00\x00\x00\x00\x01ueas.";
        let text: &[u8] = b"\x80\x02]q\x00(I12345678901\nF2.5\nI01\ne.";
        let keys = ["action", "addr", "size", "stream", "time_us", "frames", "compile_context", "user_metadata"];
        for bytes in [framed, shared, text] {
            let whole = parse_with_records(bytes, &keys).and_then(|p| p.to_json(p.root));
            assert!(whole.is_ok());
            assert_eq!(parse_fed(bytes, bytes.len(), Ok(()), &keys), whole);
            // Every cut: the whole read's error (the file's end mid-pickle), never a hang or
            // a panic; and a read that fails there ends the parse too.
            for cut in 1..bytes.len() {
                let short = parse_with_records(&bytes[..cut], &keys).and_then(|p| p.to_json(p.root));
                assert_eq!(parse_fed(&bytes[..cut], cut, Ok(()), &keys), short, "cut at {cut}");
                assert!(parse_fed(&bytes[..cut], bytes.len(), Err(crate::error::Error::Cancelled), &keys).is_err(), "cut at {cut}");
            }
        }
        // A frame that declares more than the file holds, read in pieces.
        let mut lying = framed.to_vec();
        lying[3] = 0x77;
        let e = parse_fed(&lying, lying.len(), Ok(()), &keys).unwrap_err();
        assert_eq!(Err(e), parse(&lying).map(|p| p.root));
    }

    #[test]
    fn records_read_as_the_dicts_they_are() {
        const KEYS: [&str; 3] = ["a", "b", "c"];
        // pickle.dumps([{'a': 1, 'b': 'x'}, {'a': 2.5, 'c': [7], 'b': 2**62}, {'a': 1, 'z': 0},
        //   {'a': 1, 'a': 2}], protocol=4): the fourth has its key twice (memo GET).
        let bytes: &[u8] = b"\x80\x04]\x94(}\x94(\x8c\x01a\x94K\x01\x8c\x01b\x94\x8c\x01x\x94u}\x94(h\x02G@\x04\x00\x00\x00\x00\x00\x00\x8c\x01c\x94]\x94K\x07ah\x03\x8a\x08\x00\x00\x00\x00\x00\x00\x00@u}\x94(h\x02K\x01\x8c\x01z\x94K\x00u}\x94(h\x02K\x01h\x02K\x02ue.";
        let plain = parse(bytes).unwrap();
        let rec = parse_with_records(bytes, &KEYS).unwrap();
        let want = serde_json::json!([{"a": 1, "b": "x"}, {"a": 2.5, "c": [7], "b": 4611686018427387904i64}, {"a": 1, "z": 0}, {"a": 2}]);
        assert_eq!(plain.to_json(plain.root).unwrap(), want);
        assert_eq!(rec.to_json(rec.root).unwrap(), want);
        let items = rec.list(rec.root).unwrap();
        // The first two are records (a float and an int beyond 2^59 boxed); an unknown key or
        // a repeated one keeps the plain form.
        let r = rec.record(items[0]).unwrap();
        assert_eq!((rec.unpack(r[0]), rec.str(rec.unpack(r[1]).unwrap()), rec.unpack(r[2])), (Some(Value::Int(1)), Some("x"), None));
        let r = rec.record(items[1]).unwrap();
        assert_eq!(rec.unpack(r[0]), Some(Value::Float(2.5)));
        assert_eq!(rec.unpack(r[1]), Some(Value::Int(1 << 62)));
        assert!(rec.record(items[2]).is_none() && rec.record(items[3]).is_none());
        assert_eq!(rec.get(items[1], "c").and_then(|c| rec.list(c).map(<[Value]>::to_vec)), Some(vec![Value::Int(7)]));
        assert_eq!(rec.get(items[3], "a"), Some(Value::Int(2)));
        assert_eq!(rec.keys(items[1]), vec!["a", "b", "c"]);
        // Negative ints at the edges of the packed range.
        for x in [-(1i64 << 59), (1 << 59) - 1, -1, i64::MIN] {
            let mut b = b"\x80\x04}\x94(\x8c\x01a\x94\x8a\x08".to_vec();
            b.extend(x.to_le_bytes());
            b.extend(b"u.");
            let p = parse_with_records(&b, &KEYS).unwrap();
            assert_eq!(p.get(p.root, "a"), Some(Value::Int(x)), "{x}");
        }
    }

    #[test]
    fn a_record_given_more_items_becomes_a_plain_dict() {
        // d = {'a': 1}; pickled, then SETITEMS with 'q' and 'b' on the memoized dict.
        let bytes: &[u8] = b"\x80\x04}\x94(\x8c\x01a\x94K\x01u(\x8c\x01q\x94K\x02\x8c\x01b\x94K\x03u.";
        let p = parse_with_records(bytes, &["a", "b"]).unwrap();
        assert!(p.record(p.root).is_none());
        assert_eq!(p.to_json(p.root).unwrap(), serde_json::json!({"a": 1, "q": 2, "b": 3}));
        // Only known keys in the second batch too: still the plain form, same content.
        let bytes: &[u8] = b"\x80\x04}\x94(\x8c\x01a\x94K\x01u(\x8c\x01b\x94K\x03u.";
        let p = parse_with_records(bytes, &["a", "b"]).unwrap();
        assert_eq!(p.to_json(p.root).unwrap(), serde_json::json!({"a": 1, "b": 3}));
    }

    #[test]
    fn long1_negative_and_big() {
        assert_eq!(Parser::long(&[0xff]), Value::Int(-1));
        assert_eq!(Parser::long(&[0x00, 0x80]), Value::Int(-32768));
        assert_eq!(Parser::long(&[]), Value::Int(0));
        // 2**64 = LONG1 9 bytes 00*8 01
        assert_eq!(Parser::long(&[0, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt(18446744073709551616.0));
    }

    #[test]
    fn refuses_global_and_reduce_without_running_anything() {
        // pickle.dumps(os.system, protocol=0) starts with GLOBAL 'posix system'
        let e = parse(b"cposix\nsystem\np0\n.").unwrap_err();
        match e {
            PickleError::Unsafe(m) => assert!(m.contains("posix.system"), "{m}"),
            other => panic!("{other:?}"),
        }
        // STACK_GLOBAL (protocol 4): builtins.eval
        let e = parse(b"\x80\x04\x8c\x08builtins\x8c\x04eval\x93.").unwrap_err();
        assert!(matches!(&e, PickleError::Unsafe(m) if m.contains("builtins.eval")), "{e:?}");
        let e = parse(b"\x80\x04}\x94N\x85R.").unwrap_err();
        assert!(matches!(e, PickleError::Unsafe(_)));
    }

    #[test]
    fn truncated_and_garbage_are_corrupt() {
        let full: &[u8] = b"\x80\x04}\x94(\x8c\x01a\x94K\x01u.";
        assert!(parse(full).is_ok());
        for cut in 1..full.len() {
            match parse(&full[..cut]) {
                Err(PickleError::Corrupt(m)) => {
                    assert!(m.contains("truncated") || m.contains("underflow") || m.contains("MARK"), "{cut}: {m}")
                }
                other => panic!("cut at {cut}: {:?}", other.map(|p| p.root)),
            }
        }
        assert!(matches!(parse(b"hello world"), Err(PickleError::Corrupt(_))));
        assert!(matches!(parse(b""), Err(PickleError::Corrupt(_))));
    }
}
