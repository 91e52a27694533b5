//! A minimal reader of the protobuf wire format, enough for XLA's `HloProto` and the profiler's
//! `XSpace`: fields are visited in order, unknown fields are skipped, truncated or corrupt
//! input is an error (never a panic).

/// One field of a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

impl<'a> Value<'a> {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Varint(v) | Value::Fixed64(v) => Some(v),
            Value::Fixed32(v) => Some(v as u64),
            Value::Bytes(_) => None,
        }
    }
    /// int64 fields (two's complement varints).
    pub fn as_i64(&self) -> Option<i64> {
        self.as_u64().map(|v| v as i64)
    }
    pub fn as_bool(&self) -> bool {
        self.as_u64().is_some_and(|v| v != 0)
    }
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&'a str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }
}

/// Iterates over the fields of one message: `(field number, value)`.
pub struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    failed: bool,
}

pub fn fields(data: &[u8]) -> Fields<'_> {
    Fields { data, pos: 0, failed: false }
}

pub fn read_varint(data: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let Some(&b) = data.get(*pos) else { return Err(format!("truncated varint at byte {}", *pos)) };
        *pos += 1;
        if shift < 64 {
            v |= ((b & 0x7f) as u64) << shift;
        }
        if b < 0x80 {
            return Ok(v);
        }
        shift += 7;
        if shift > 70 {
            return Err(format!("varint longer than 10 bytes at byte {}", *pos));
        }
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.data.len() {
            return None;
        }
        let r = self.read_one();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

impl<'a> Fields<'a> {
    fn read_one(&mut self) -> Result<(u32, Value<'a>), String> {
        let key = read_varint(self.data, &mut self.pos)?;
        let field = (key >> 3) as u32;
        let v = match key & 7 {
            0 => Value::Varint(read_varint(self.data, &mut self.pos)?),
            1 => {
                let b = self.take(8)?;
                Value::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let len = read_varint(self.data, &mut self.pos)?;
                let len = usize::try_from(len).map_err(|_| "length overflow".to_string())?;
                Value::Bytes(self.take(len)?)
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            w => return Err(format!("unsupported wire type {w} (field {field}) at byte {}", self.pos)),
        };
        Ok((field, v))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let Some(end) = end else {
            return Err(format!("field of {n} bytes runs past the end of its message at byte {}", self.pos));
        };
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
}

/// Values of a repeated integer field, packed (one bytes field) or not (one varint).
pub fn push_repeated_i64(v: Value<'_>, out: &mut Vec<i64>) -> Result<(), String> {
    match v {
        Value::Bytes(b) => {
            let mut pos = 0;
            while pos < b.len() {
                out.push(read_varint(b, &mut pos)? as i64);
            }
            Ok(())
        }
        other => {
            out.push(other.as_i64().unwrap_or(0));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_varints_bytes_and_fixed() {
        // field 1 varint 150 (08 96 01), field 2 bytes "hi", field 3 fixed32 1, field 4 fixed64 2
        let data = [0x08, 0x96, 0x01, 0x12, 0x02, b'h', b'i', 0x1d, 1, 0, 0, 0, 0x21, 2, 0, 0, 0, 0, 0, 0, 0];
        let f: Vec<_> = fields(&data).collect::<Result<_, _>>().unwrap();
        assert_eq!(f[0], (1, Value::Varint(150)));
        assert_eq!(f[1].1.as_str(), Some("hi"));
        assert_eq!(f[2], (3, Value::Fixed32(1)));
        assert_eq!(f[3], (4, Value::Fixed64(2)));
    }

    #[test]
    fn negative_int64_and_packed() {
        // -1 as int64 varint is ten bytes.
        let data = [0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        let f: Vec<_> = fields(&data).collect::<Result<_, _>>().unwrap();
        assert_eq!(f[0].1.as_i64(), Some(-1));
        let mut out = vec![];
        push_repeated_i64(Value::Bytes(&[1, 0x96, 0x01]), &mut out).unwrap();
        assert_eq!(out, vec![1, 150]);
    }

    #[test]
    fn truncation_is_an_error_not_a_panic() {
        let data = [0x12, 0x05, b'a'];
        let r: Result<Vec<_>, _> = fields(&data).collect();
        assert!(r.unwrap_err().contains("past the end"));
        let r: Result<Vec<_>, _> = fields(&[0x08, 0x80]).collect();
        assert!(r.is_err());
        let r: Result<Vec<_>, _> = fields(&[0x0b]).collect();
        assert!(r.unwrap_err().contains("wire type 3"));
    }
}
