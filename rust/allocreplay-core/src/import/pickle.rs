//! A pickle *parser* (not an unpickler): it decodes the opcodes of pickle protocols 0–5 that
//! build plain data — dicts, lists, tuples, sets, strings, bytes, ints, floats, bools, None —
//! into an arena, and refuses every opcode that would import a global, call a function or build
//! an object (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, PERSID, EXT*). A snapshot
//! from `torch.cuda.memory._snapshot()` is plain data, so nothing is lost; a hostile pickle
//! can't run code. Opcode semantics follow CPython's `Lib/pickle.py` (`_Unpickler.load_*`).

use std::fmt;

/// One decoded value. Containers and strings are indices into the `Pickle` arena, so a value
/// is `Copy` and a memo lookup (BINGET) shares the container like Python does.
#[derive(Debug, Clone, Copy, PartialEq)]
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
    lists: Vec<Vec<Value>>,
    tuples: Vec<Vec<Value>>,
    dicts: Vec<Vec<(Value, Value)>>,
    pub root: Value,
}

impl<'a> Pickle<'a> {
    pub fn str(&self, v: Value) -> Option<&'a str> {
        match v {
            Value::Str(i) => {
                let (s, e) = self.spans[i as usize];
                std::str::from_utf8(&self.data[s..e]).ok()
            }
            _ => None,
        }
    }

    pub fn list(&self, v: Value) -> Option<&[Value]> {
        match v {
            Value::List(i) => Some(&self.lists[i as usize]),
            Value::Tuple(i) => Some(&self.tuples[i as usize]),
            _ => None,
        }
    }

    pub fn dict(&self, v: Value) -> Option<&[(Value, Value)]> {
        match v {
            Value::Dict(i) => Some(&self.dicts[i as usize]),
            _ => None,
        }
    }

    /// `d[key]` for a dict with string keys.
    pub fn get(&self, d: Value, key: &str) -> Option<Value> {
        let items = self.dict(d)?;
        let kb = key.as_bytes();
        items.iter().find_map(|&(k, v)| match k {
            Value::Str(i) => {
                let (s, e) = self.spans[i as usize];
                (&self.data[s..e] == kb).then_some(v)
            }
            _ => None,
        })
    }

    pub fn keys(&self, d: Value) -> Vec<String> {
        self.dict(d)
            .map(|items| items.iter().filter_map(|&(k, _)| self.str(k).map(str::to_string)).collect())
            .unwrap_or_default()
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
    pub fn to_json(&self, v: Value) -> serde_json::Value {
        use serde_json::Value as J;
        match v {
            Value::None => J::Null,
            Value::Bool(b) => J::Bool(b),
            Value::Int(i) => J::from(i),
            Value::BigInt(f) | Value::Float(f) => serde_json::Number::from_f64(f).map(J::Number).unwrap_or(J::Null),
            Value::Str(_) => J::String(self.str(v).unwrap_or("").to_string()),
            Value::Bytes(i) => {
                let (s, e) = self.spans[i as usize];
                J::String(String::from_utf8_lossy(&self.data[s..e]).into_owned())
            }
            Value::List(_) | Value::Tuple(_) => J::Array(self.list(v).unwrap().iter().map(|&x| self.to_json(x)).collect()),
            Value::Dict(_) => {
                let mut m = serde_json::Map::new();
                for &(k, x) in self.dict(v).unwrap() {
                    let key = match self.to_json(k) {
                        J::String(s) => s,
                        other => other.to_string(),
                    };
                    m.insert(key, self.to_json(x));
                }
                J::Object(m)
            }
        }
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

/// Parses `data` as a pickle of plain data.
pub fn parse(data: &[u8]) -> Result<Pickle<'_>, PickleError> {
    Parser::new(data).run()
}

struct Parser<'a> {
    p: Pickle<'a>,
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: Vec<Option<Value>>,
}

fn corrupt(msg: String) -> PickleError {
    PickleError::Corrupt(msg)
}

impl<'a> Parser<'a> {
    fn new(data: &'a [u8]) -> Self {
        Parser {
            p: Pickle { data, spans: Vec::new(), lists: Vec::new(), tuples: Vec::new(), dicts: Vec::new(), root: Value::None },
            pos: 0,
            stack: Vec::with_capacity(64),
            marks: Vec::with_capacity(16),
            memo: Vec::new(),
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let data = self.p.data;
        if self.pos + n > data.len() {
            return Err(corrupt(format!(
                "pickle ends at byte {} in the middle of an opcode (truncated file?)",
                data.len()
            )));
        }
        let s = &data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
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
        let data = self.p.data;
        let start = self.pos;
        let end = data[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| start + i)
            .ok_or_else(|| corrupt("pickle ends inside a text opcode (truncated file?)".into()))?;
        self.pos = end + 1;
        Ok(&data[start..end])
    }

    #[inline]
    fn pop(&mut self) -> Result<Value, PickleError> {
        self.stack.pop().ok_or_else(|| corrupt(format!("stack underflow at byte {}", self.pos)))
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

    fn new_list(&mut self, items: Vec<Value>) -> Value {
        self.p.lists.push(items);
        Value::List(self.p.lists.len() as u32 - 1)
    }
    fn new_tuple(&mut self, items: Vec<Value>) -> Value {
        self.p.tuples.push(items);
        Value::Tuple(self.p.tuples.len() as u32 - 1)
    }
    fn new_dict(&mut self, items: Vec<(Value, Value)>) -> Value {
        self.p.dicts.push(items);
        Value::Dict(self.p.dicts.len() as u32 - 1)
    }

    fn memo_put(&mut self, idx: usize, v: Value) {
        if self.memo.len() <= idx {
            self.memo.resize(idx + 1, None);
        }
        self.memo[idx] = Some(v);
    }

    fn memo_get(&self, idx: usize) -> Result<Value, PickleError> {
        self.memo
            .get(idx)
            .copied()
            .flatten()
            .ok_or_else(|| corrupt(format!("memo key {idx} read before it was written (byte {})", self.pos)))
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

    fn append_items(&mut self, target: Value, items: Vec<Value>) -> Result<(), PickleError> {
        match target {
            Value::List(i) => {
                self.p.lists[i as usize].extend(items);
                Ok(())
            }
            other => Err(corrupt(format!("APPEND to a {} at byte {}", Pickle::type_name(other), self.pos))),
        }
    }

    fn set_items(&mut self, target: Value, items: &[Value]) -> Result<(), PickleError> {
        if items.len() % 2 != 0 {
            return Err(corrupt(format!("SETITEMS with an odd number of items at byte {}", self.pos)));
        }
        match target {
            Value::Dict(i) => {
                let d = &mut self.p.dicts[i as usize];
                for kv in items.chunks_exact(2) {
                    // Python semantics: a repeated key overwrites.
                    if let Some(slot) = d.iter_mut().find(|(k, _)| *k == kv[0] && !matches!(kv[0], Value::List(_) | Value::Dict(_))) {
                        slot.1 = kv[1];
                    } else {
                        d.push((kv[0], kv[1]));
                    }
                }
                Ok(())
            }
            other => Err(corrupt(format!("SETITEM on a {} at byte {}", Pickle::type_name(other), self.pos))),
        }
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

    fn run(mut self) -> Result<Pickle<'a>, PickleError> {
        let data = self.p.data;
        if data.is_empty() {
            return Err(corrupt("file is empty".into()));
        }
        // Protocol 2+ starts with PROTO; protocols 0/1 start with whatever opcode builds the
        // first object (a MARK, an empty container, a GLOBAL, a literal).
        if data[0] != 0x80 && !matches!(data[0], b'(' | b'}' | b']' | b')' | b'd' | b'l' | b'c' | b'i' | b'N' | b'I' | b'L' | b'F' | b'G' | b'J' | b'K' | b'M') {
            return Err(corrupt(format!(
                "not a pickle (starts with bytes {:02x?})",
                &data[..data.len().min(4)]
            )));
        }
        loop {
            let op = match self.take(1) {
                Ok(b) => b[0],
                Err(_) => return Err(corrupt(format!("pickle ends at byte {} without a STOP opcode (truncated file?)", data.len()))),
            };
            match op {
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return Err(corrupt(format!("unsupported pickle protocol {proto}")));
                    }
                }
                0x95 => {
                    self.u64le()?; // FRAME: a length hint only
                }
                b'.' => {
                    // STOP
                    self.p.root = self.pop()?;
                    return Ok(self.p);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    let m = self.pop_mark()?;
                    self.stack.truncate(m);
                }
                b'2' => {
                    let v = self.top()?;
                    self.stack.push(v);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'J' => {
                    let v = self.u32le()? as i32 as i64;
                    self.stack.push(Value::Int(v));
                }
                b'K' => {
                    let v = self.u8()? as i64;
                    self.stack.push(Value::Int(v));
                }
                b'M' => {
                    let b = self.take(2)?;
                    self.stack.push(Value::Int(u16::from_le_bytes([b[0], b[1]]) as i64));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    self.stack.push(Self::long(b));
                }
                0x8b => {
                    let n = self.u32le()? as usize;
                    let b = self.take(n)?;
                    self.stack.push(Self::long(b));
                }
                b'I' | b'L' => {
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
                }
                b'G' => {
                    let b = self.take(8)?;
                    self.stack.push(Value::Float(f64::from_be_bytes(b.try_into().unwrap())));
                }
                b'F' => {
                    let l = self.line()?;
                    let f = std::str::from_utf8(l).ok().and_then(|s| s.parse::<f64>().ok()).ok_or_else(|| corrupt(format!("bad FLOAT literal at byte {}", self.pos)))?;
                    self.stack.push(Value::Float(f));
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    let v = self.span(n, true)?;
                    self.stack.push(v);
                }
                b'X' => {
                    let n = self.u32le()? as usize;
                    let v = self.span(n, true)?;
                    self.stack.push(v);
                }
                0x8d => {
                    let n = self.u64le()? as usize;
                    let v = self.span(n, true)?;
                    self.stack.push(v);
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let v = self.span(n, false)?;
                    self.stack.push(v);
                }
                b'T' => {
                    let n = self.u32le()? as usize;
                    let v = self.span(n, false)?;
                    self.stack.push(v);
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    let v = self.span(n, false)?;
                    self.stack.push(v);
                }
                b'B' => {
                    let n = self.u32le()? as usize;
                    let v = self.span(n, false)?;
                    self.stack.push(v);
                }
                0x8e => {
                    let n = self.u64le()? as usize;
                    let v = self.span(n, false)?;
                    self.stack.push(v);
                }
                b']' => {
                    let v = self.new_list(Vec::new());
                    self.stack.push(v);
                }
                b'}' => {
                    let v = self.new_dict(Vec::new());
                    self.stack.push(v);
                }
                b')' => {
                    let v = self.new_tuple(Vec::new());
                    self.stack.push(v);
                }
                0x8f => {
                    // EMPTY_SET: kept as a list.
                    let v = self.new_list(Vec::new());
                    self.stack.push(v);
                }
                b'l' => {
                    let m = self.pop_mark()?;
                    let items = self.stack.split_off(m);
                    let v = self.new_list(items);
                    self.stack.push(v);
                }
                b't' | 0x91 => {
                    let m = self.pop_mark()?;
                    let items = self.stack.split_off(m);
                    let v = self.new_tuple(items);
                    self.stack.push(v);
                }
                0x85 | 0x86 | 0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err(corrupt(format!("stack underflow at byte {}", self.pos)));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.new_tuple(items);
                    self.stack.push(v);
                }
                b'd' => {
                    let m = self.pop_mark()?;
                    let items = self.stack.split_off(m);
                    let v = self.new_dict(Vec::new());
                    self.set_items(v, &items)?;
                    self.stack.push(v);
                }
                b'a' => {
                    let item = self.pop()?;
                    let target = self.top()?;
                    self.append_items(target, vec![item])?;
                }
                b'e' | 0x90 => {
                    let m = self.pop_mark()?;
                    let items = self.stack.split_off(m);
                    let target = self.top()?;
                    self.append_items(target, items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let target = self.top()?;
                    self.set_items(target, &[k, v])?;
                }
                b'u' => {
                    let m = self.pop_mark()?;
                    let items = self.stack.split_off(m);
                    let target = self.top()?;
                    self.set_items(target, &items)?;
                }
                0x94 => {
                    let v = self.top()?;
                    let idx = self.memo.len();
                    self.memo_put(idx, v);
                }
                b'q' => {
                    let idx = self.u8()? as usize;
                    let v = self.top()?;
                    self.memo_put(idx, v);
                }
                b'r' => {
                    let idx = self.u32le()? as usize;
                    let v = self.top()?;
                    self.memo_put(idx, v);
                }
                b'p' => {
                    let l = self.line()?;
                    let idx = std::str::from_utf8(l).ok().and_then(|s| s.parse::<usize>().ok()).ok_or_else(|| corrupt(format!("bad PUT at byte {}", self.pos)))?;
                    let v = self.top()?;
                    self.memo_put(idx, v);
                }
                b'h' => {
                    let idx = self.u8()? as usize;
                    let v = self.memo_get(idx)?;
                    self.stack.push(v);
                }
                b'j' => {
                    let idx = self.u32le()? as usize;
                    let v = self.memo_get(idx)?;
                    self.stack.push(v);
                }
                b'g' => {
                    let l = self.line()?;
                    let idx = std::str::from_utf8(l).ok().and_then(|s| s.parse::<usize>().ok()).ok_or_else(|| corrupt(format!("bad GET at byte {}", self.pos)))?;
                    let v = self.memo_get(idx)?;
                    self.stack.push(v);
                }
                b'c' => return Err(self.refuse(op, "imports a global")),
                0x93 => return Err(self.refuse(op, "imports a global")),
                b'i' => return Err(self.refuse(op, "builds a class instance")),
                b'o' | 0x81 | 0x92 => return Err(self.refuse(op, "builds an object")),
                b'R' => return Err(self.refuse(op, "calls a function (REDUCE)")),
                b'b' => return Err(self.refuse(op, "sets object state (BUILD)")),
                b'P' | b'Q' => return Err(self.refuse(op, "holds a persistent id")),
                0x82..=0x84 => return Err(self.refuse(op, "uses the extension registry")),
                0x96..=0x98 => return Err(self.refuse(op, "holds out-of-band buffers")),
                _ => {
                    return Err(corrupt(format!(
                        "not a valid pickle: unknown opcode {op:#04x} at byte {}",
                        self.pos - 1
                    )))
                }
            }
        }
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
                Err(PickleError::Corrupt(m)) => assert!(m.contains("truncated") || m.contains("underflow") || m.contains("MARK"), "{cut}: {m}"),
                other => panic!("cut at {cut}: {:?}", other.map(|p| p.root)),
            }
        }
        assert!(matches!(parse(b"hello world"), Err(PickleError::Corrupt(_))));
        assert!(matches!(parse(b""), Err(PickleError::Corrupt(_))));
    }
}
