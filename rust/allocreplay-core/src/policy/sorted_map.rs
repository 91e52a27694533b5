//! An ordered map from packed `u128` keys to block indices, for the free-block sets of the
//! caching allocator (`BlockPool::blocks`, upstream a `std::set` with a comparator).
//!
//! Real caches hold few free blocks (gpt2_train: about 120 in the large pool, 30 in the small
//! one), where a sorted array beats a B-tree: one binary search over contiguous keys and a short
//! `memmove` (a removal leaves a hole that the next insertion fills, see [`SmallMap`]). Past [`SPILL`] entries the map moves into a `BTreeMap` for good, so a pathological
//! trace stays O(log n) per operation.

use std::cell::Cell;
use std::collections::btree_map;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Entries above which the map becomes a B-tree.
const SPILL: usize = 1024;

#[derive(Debug, Clone)]
pub(crate) enum SortedMap {
    Small(SmallMap),
    Large(BTreeMap<u128, u32>),
}

/// One key and its value, side by side: a shift of the array is one `memmove`, not one per
/// column. The key is split in two `u64`s so that an entry is 24 bytes (a `u128` would align
/// it to 32).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    hi: u64,
    lo: u64,
    val: u32,
}

impl Entry {
    #[inline]
    fn new(key: u128, val: u32) -> Entry {
        Entry { hi: (key >> 64) as u64, lo: key as u64, val }
    }
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }
}

/// The sorted array. A removal only marks its entry as a hole (it keeps its key, so the array
/// stays sorted for the binary searches); the next insertion fills the hole by shifting just
/// the entries between the hole and the new key's place. The caching allocator's updates come
/// in such pairs: a found block leaves the pool and its split remainder enters it
/// (`get_free_block` then `alloc_found_block`), a neighbour merged away leaves and the merged
/// block enters (`free_block`): one short shift each instead of two.
#[derive(Debug, Clone, Default)]
pub(crate) struct SmallMap {
    entries: Vec<Entry>,
    hole: Option<usize>,
    /// Where the last range started: the block a free-block search finds is the one removed
    /// next (`get_free_block`'s `pool.blocks.erase(it)`), and its key is checked here before
    /// searching again.
    last_found: Cell<usize>,
}

impl SmallMap {
    #[inline]
    fn search(&self, k: u128) -> Result<usize, usize> {
        let i = self.lower_bound(k);
        match self.entries.get(i) {
            Some(e) if e.key() == k => Ok(i),
            _ => Err(i),
        }
    }

    /// The first entry whose key is not below `k`: a binary search whose halving is a
    /// conditional move, not a branch (the comparisons of a free-block search are coin flips
    /// to the branch predictor; the number of steps depends on the length only).
    #[inline]
    fn lower_bound(&self, k: u128) -> usize {
        let e = &self.entries[..];
        let mut size = e.len();
        if size == 0 {
            return 0;
        }
        let mut base = 0;
        while size > 1 {
            let half = size / 2;
            let mid = base + half;
            base = std::hint::select_unpredictable(e[mid].key() < k, mid, base);
            size -= half;
        }
        base + usize::from(e[base].key() < k)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len() - usize::from(self.hole.is_some())
    }

    /// Removes the hole's entry for good.
    fn close_hole(&mut self) {
        if let Some(h) = self.hole.take() {
            self.entries.remove(h);
        }
    }

    /// Returns whether `k` is new (not already in the map).
    fn insert(&mut self, k: u128, v: u32) -> bool {
        match self.search(k) {
            Ok(i) => {
                self.entries[i].val = v;
                if self.hole == Some(i) {
                    self.hole = None;
                    return true;
                }
                return false;
            }
            Err(j) => match self.hole.take() {
                None => self.entries.insert(j, Entry::new(k, v)),
                // The new key's place is often the hole itself or next to it: no shift then
                // (nor a call to `memmove` for nothing).
                Some(h) if j <= h => {
                    if j < h {
                        self.entries.copy_within(j..h, j + 1);
                    }
                    self.entries[j] = Entry::new(k, v);
                }
                Some(h) => {
                    if h + 1 < j {
                        self.entries.copy_within(h + 1..j, h);
                    }
                    self.entries[j - 1] = Entry::new(k, v);
                }
            },
        }
        true
    }

    fn remove(&mut self, k: u128) -> Option<u32> {
        let last = self.last_found.get();
        let mut i = match self.entries.get(last) {
            Some(e) if e.key() == k => last,
            _ => self.search(k).ok()?,
        };
        match self.hole {
            Some(h) if h == i => return None,
            Some(h) => {
                self.entries.remove(h);
                i -= usize::from(h < i);
            }
            None => {}
        }
        self.hole = Some(i);
        Some(self.entries[i].val)
    }

    fn range(&self, lo: u128, hi: Option<u128>) -> Iter<'_> {
        let a = self.lower_bound(lo);
        self.last_found.set(a + usize::from(self.hole == Some(a)));
        let b = hi.map_or(self.entries.len(), |h| self.lower_bound(h)).max(a);
        match self.hole {
            Some(h) if (a..b).contains(&h) => Iter::Small { front: &self.entries[a..h], back: &self.entries[h + 1..b] },
            _ => Iter::Small { front: &self.entries[a..b], back: &[] },
        }
    }
}

impl Default for SortedMap {
    fn default() -> Self {
        SortedMap::Small(SmallMap::default())
    }
}

impl SortedMap {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            SortedMap::Small(m) => m.len(),
            SortedMap::Large(m) => m.len(),
        }
    }

    /// Returns whether `k` is new (not already in the map).
    pub fn insert(&mut self, k: u128, v: u32) -> bool {
        match self {
            SortedMap::Small(m) => {
                let new = m.insert(k, v);
                if m.entries.len() > SPILL {
                    m.close_hole();
                    let large: BTreeMap<u128, u32> = m.entries.iter().map(|e| (e.key(), e.val)).collect();
                    *self = SortedMap::Large(large);
                }
                new
            }
            SortedMap::Large(m) => m.insert(k, v).is_none(),
        }
    }

    pub fn remove(&mut self, k: &u128) -> Option<u32> {
        match self {
            SortedMap::Small(m) => m.remove(*k),
            SortedMap::Large(m) => m.remove(k),
        }
    }

    /// Entries with keys in `[lo, hi)`, in key order (`lower_bound(lo)` onwards).
    pub fn range(&self, lo: u128, hi: Option<u128>) -> Iter<'_> {
        match self {
            SortedMap::Small(m) => m.range(lo, hi),
            SortedMap::Large(m) => {
                let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
                Iter::Large(m.range((Bound::Included(lo), hi)))
            }
        }
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        match self {
            SortedMap::Small(m) => m.entries.len() == usize::from(m.hole.is_some()),
            SortedMap::Large(m) => m.is_empty(),
        }
    }

    #[cfg(test)]
    /// The entry with the least key (no search: the array's first entry not a hole).
    pub fn first(&self) -> Option<(u128, u32)> {
        match self {
            SortedMap::Small(m) => {
                let i = usize::from(m.hole == Some(0));
                m.entries.get(i).map(|e| (e.key(), e.val))
            }
            SortedMap::Large(m) => m.first_key_value().map(|(&k, &v)| (k, v)),
        }
    }

    #[cfg(test)]
    /// Every entry, in key order.
    pub fn iter(&self) -> Iter<'_> {
        self.range(0, None)
    }

    #[cfg(test)]
    pub fn values(&self) -> impl DoubleEndedIterator<Item = u32> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

pub(crate) enum Iter<'a> {
    /// The entries in range before the hole, then those after it.
    Small {
        front: &'a [Entry],
        back: &'a [Entry],
    },
    Large(btree_map::Range<'a, u128, u32>),
}

impl Iterator for Iter<'_> {
    type Item = (u128, u32);

    #[inline]
    fn next(&mut self) -> Option<(u128, u32)> {
        match self {
            Iter::Small { front, back } => {
                let part = if front.is_empty() { back } else { front };
                let (e, rest) = part.split_first()?;
                *part = rest;
                Some((e.key(), e.val))
            }
            Iter::Large(r) => r.next().map(|(&k, &v)| (k, v)),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<(u128, u32)> {
        match self {
            Iter::Small { front, back } => {
                let part = if back.is_empty() { front } else { back };
                let (e, rest) = part.split_last()?;
                *part = rest;
                Some((e.key(), e.val))
            }
            Iter::Large(r) => r.next_back().map(|(&k, &v)| (k, v)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same operations on a SortedMap and a BTreeMap give the same contents and ranges,
    /// across the spill from the array to the B-tree.
    #[test]
    fn behaves_like_a_btreemap_before_and_after_spilling() {
        let mut ours = SortedMap::default();
        let mut theirs = BTreeMap::new();
        // A deterministic pseudo-random walk of inserts and removes over a small key space,
        // growing past SPILL and shrinking again.
        let mut rng = crate::test_rng::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        for step in 0..20_000u32 {
            let x = rng.next_u64();
            let k = u128::from(x % 4096) << 64 | u128::from(x % 7);
            let grow = step < 8_000 || (14_000..16_000).contains(&step);
            if !x.is_multiple_of(3) || grow {
                assert_eq!(ours.insert(k, step), theirs.insert(k, step).is_none());
            } else {
                assert_eq!(ours.remove(&k), theirs.remove(&k));
            }
            if step % 997 == 0 || step % 7 == 0 && step < 3_000 {
                let lo = u128::from(x % 4096) << 64;
                let hi = lo + (u128::from(300u32) << 64);
                let a: Vec<_> = ours.range(lo, Some(hi)).collect();
                let b: Vec<_> = theirs.range(lo..hi).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(a, b, "step {step}");
                let a: Vec<_> = ours.range(lo, None).rev().take(5).collect();
                let b: Vec<_> = theirs.range(lo..).rev().take(5).map(|(&k, &v)| (k, v)).collect();
                assert_eq!(a, b, "step {step}");
            }
            assert_eq!(ours.len(), theirs.len());
            assert_eq!(ours.first(), theirs.first_key_value().map(|(&k, &v)| (k, v)), "step {step}");
        }
        assert!(matches!(ours, SortedMap::Large(_)), "grew past SPILL");
        let a: Vec<_> = ours.iter().collect();
        let b: Vec<_> = theirs.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(a, b);
    }

    /// Removals leave holes that insertions fill: removing the hole's key again, re-inserting
    /// it, ranges and reversed ranges across the hole, a removal while a hole is open, all as a
    /// BTreeMap does, with every operation checked (a small key space that never spills).
    #[test]
    fn holes_behave_like_removals() {
        let mut ours = SortedMap::default();
        let mut theirs = BTreeMap::new();
        let mut rng = crate::test_rng::XorShift64::new(0x2545_f491_4f6c_dd1d);
        for step in 0..50_000u32 {
            let x = rng.next_u64();
            let k = u128::from(x % 97) << 64 | u128::from(x >> 60);
            if x % 5 < 2 {
                assert_eq!(ours.insert(k, step), theirs.insert(k, step).is_none(), "step {step}");
            } else {
                assert_eq!(ours.remove(&k), theirs.remove(&k), "step {step}");
            }
            let lo = u128::from((x >> 8) % 100) << 64;
            let hi = lo + (u128::from((x >> 16) % 40) << 64);
            let a: Vec<_> = ours.range(lo, Some(hi)).collect();
            let b: Vec<_> = theirs.range(lo..hi.max(lo)).map(|(&k, &v)| (k, v)).collect();
            assert_eq!(a, b, "step {step}");
            let a: Vec<_> = ours.range(lo, None).rev().collect();
            let b: Vec<_> = theirs.range(lo..).rev().map(|(&k, &v)| (k, v)).collect();
            assert_eq!(a, b, "step {step}");
            assert_eq!(ours.len(), theirs.len());
            assert_eq!(ours.is_empty(), theirs.is_empty());
            assert_eq!(ours.first(), theirs.first_key_value().map(|(&k, &v)| (k, v)), "step {step}");
        }
        assert!(matches!(ours, SortedMap::Small(_)), "stayed an array");
    }

    #[test]
    fn empty_and_reversed_ranges() {
        let mut m = SortedMap::default();
        assert_eq!(m.range(5, None).next(), None);
        m.insert(10, 1);
        m.insert(20, 2);
        assert_eq!(m.range(15, Some(12)).next(), None, "hi below lo is empty");
        assert_eq!(m.range(0, Some(20)).collect::<Vec<_>>(), vec![(10, 1)]);
        assert_eq!(m.remove(&15), None);
        assert_eq!(m.values().collect::<Vec<_>>(), vec![1, 2]);
    }
}
