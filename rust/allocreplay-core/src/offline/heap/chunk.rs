//! The entries of the overlap structure's lists ([`Chunk`]): a placed chunk and the two slot
//! numbers a query's time filter compares, as [`Compact`] or [`Wide`].

/// A placed chunk as a list of the overlap structure keeps it: `[offset, end)` and the two
/// slot numbers its time filter compares, relative to the list's first slot (see
/// [`Layout`]). Two encodings: [`Compact`] (12 bytes: the lists are read from memory on every
/// placement, so their size is most of the time) when the chunks fit it, else [`Wide`].
///
/// [`Layout`]: super::layout::Layout
pub(super) trait Chunk: Copy + Default + Send + 'static {
    /// None when the values don't fit.
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, shift: u32) -> Option<Self>;
    fn offset(self, shift: u32) -> i64;
    fn end(self, shift: u32) -> i64;
    fn rel_slot(self) -> u32;
    fn rel_upto(self) -> u32;
}

/// Offsets and ends in units of `1 << shift` bytes (a power of two dividing the alignment
/// and every size, so every offset and end) below 2^32, relative slots below 2^16.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Compact {
    offset: u32,
    end: u32,
    rel_slot: u16,
    rel_upto: u16,
}

impl Chunk for Compact {
    #[inline(always)]
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, shift: u32) -> Option<Self> {
        let unit = |x: i64| u32::try_from(x >> shift).ok().filter(|&u| (u as i64) << shift == x);
        Some(Compact {
            offset: unit(offset)?,
            end: unit(end)?,
            rel_slot: u16::try_from(rel_slot).ok()?,
            rel_upto: u16::try_from(rel_upto).ok()?,
        })
    }
    #[inline(always)]
    fn offset(self, shift: u32) -> i64 {
        (self.offset as i64) << shift
    }
    #[inline(always)]
    fn end(self, shift: u32) -> i64 {
        (self.end as i64) << shift
    }
    #[inline(always)]
    fn rel_slot(self) -> u32 {
        self.rel_slot as u32
    }
    #[inline(always)]
    fn rel_upto(self) -> u32 {
        self.rel_upto as u32
    }
}

/// Any chunk (24 bytes).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Wide {
    offset: i64,
    end: i64,
    rel_slot: u32,
    rel_upto: u32,
}

impl Chunk for Wide {
    #[inline(always)]
    fn pack(offset: i64, end: i64, rel_slot: u32, rel_upto: u32, _shift: u32) -> Option<Self> {
        Some(Wide { offset, end, rel_slot, rel_upto })
    }
    #[inline(always)]
    fn offset(self, _shift: u32) -> i64 {
        self.offset
    }
    #[inline(always)]
    fn end(self, _shift: u32) -> i64 {
        self.end
    }
    #[inline(always)]
    fn rel_slot(self) -> u32 {
        self.rel_slot
    }
    #[inline(always)]
    fn rel_upto(self) -> u32 {
        self.rel_upto
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_entries_refuse_what_they_cannot_hold() {
        // Offsets and ends in units of 1 << shift below 2^32; relative slots below 2^16.
        assert!(Compact::pack(256 << 20, 512 << 20, 3, 4, 8).is_some());
        assert!(Compact::pack(1 << 40, (1 << 40) + 256, 0, 1, 8).is_none());
        assert!(Compact::pack(100, 200, 0, 1, 8).is_none(), "not a multiple of the unit");
        assert!(Compact::pack(0, 256, 1 << 16, 1, 8).is_none());
        let c = Compact::pack(0xFFFF_FFFF << 8, 0xFFFF_FFFF << 8, 65_535, 65_535, 8).unwrap();
        assert_eq!((c.offset(8), c.end(8), c.rel_slot(), c.rel_upto()), (0xFFFF_FFFF << 8, 0xFFFF_FFFF << 8, 65_535, 65_535));
    }
}
