//! A set of 4,096 length classes as a two-level bitmap: the first non-empty class at or after
//! a given one is two find-first-sets, no search tree. The free lists kept by length use it for
//! their best fit: cuda-malloc's free ranges in shared 2 MiB pages (`FreeBySize`) and the
//! caching allocator's small-pool blocks (`FreeBlocks`), both in 512-byte classes up to 2 MiB.

/// Classes in a set (64 words of 64 bits, and one summary word over them).
pub(crate) const CLASSES: usize = 4096;

#[derive(Debug, Clone)]
pub(crate) struct ClassBitmap {
    /// Bit `c % 64` of `words[c / 64]`: class `c` is not empty.
    words: [u64; CLASSES / 64],
    /// Bit `w`: `words[w] != 0`.
    summary: u64,
}

impl Default for ClassBitmap {
    fn default() -> Self {
        ClassBitmap { words: [0; CLASSES / 64], summary: 0 }
    }
}

impl ClassBitmap {
    #[inline]
    pub fn is_set(&self, c: usize) -> bool {
        self.words[c / 64] & (1 << (c % 64)) != 0
    }

    #[inline]
    pub fn set(&mut self, c: usize) {
        self.words[c / 64] |= 1 << (c % 64);
        self.summary |= 1 << (c / 64);
    }

    #[inline]
    pub fn clear(&mut self, c: usize) {
        self.words[c / 64] &= !(1 << (c % 64));
        if self.words[c / 64] == 0 {
            self.summary &= !(1 << (c / 64));
        }
    }

    /// The first non-empty class at or after `c`.
    #[inline]
    pub fn next_set(&self, c: usize) -> Option<usize> {
        if c >= CLASSES {
            return None;
        }
        let w0 = c / 64;
        let here = self.words[w0] & (u64::MAX << (c % 64));
        if here != 0 {
            return Some(w0 * 64 + here.trailing_zeros() as usize);
        }
        let above = self.summary & u64::MAX.checked_shl(w0 as u32 + 1).unwrap_or(0);
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `next_set` against a scan of a plain array of flags, over random sets and clears.
    #[test]
    fn next_set_is_the_first_flag_at_or_after() {
        let mut rng = crate::test_rng::XorShift64::new(0x9E37_79B9_7F4A_7C15);
        let mut bits = ClassBitmap::default();
        let mut flags = vec![false; CLASSES];
        for step in 0..20_000 {
            let x = rng.next_u64();
            // Few classes at a time, clustered or spread, so that whole words empty out.
            let c = if x.is_multiple_of(2) { (x >> 8) as usize % 96 } else { (x >> 8) as usize % CLASSES };
            if (x >> 40).is_multiple_of(3) {
                bits.clear(c);
                flags[c] = false;
            } else {
                bits.set(c);
                flags[c] = true;
            }
            let from = (x >> 20) as usize % (CLASSES + 1);
            assert_eq!(bits.next_set(from), (from..CLASSES).find(|&k| flags[k]), "step {step} from {from}");
            assert_eq!(bits.is_set(c), flags[c]);
        }
    }
}
