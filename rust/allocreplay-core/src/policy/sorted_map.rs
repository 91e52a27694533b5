//! An ordered map from packed `u128` keys to block indices, for the free-block sets of the
//! caching allocator (`BlockPool::blocks`, upstream a `std::set` with a comparator).
//!
//! Real caches hold few free blocks (gpt2_train: about 120 in the large pool, 30 in the small
//! one), where a sorted array beats a B-tree: one binary search over contiguous keys and a short
//! `memmove`. Past [`SPILL`] entries the map moves into a `BTreeMap` for good, so a pathological
//! trace stays O(log n) per operation.

use std::collections::btree_map;
use std::collections::BTreeMap;
use std::ops::Bound;

/// Entries above which the map becomes a B-tree.
const SPILL: usize = 1024;

#[derive(Debug, Clone)]
pub(crate) enum SortedMap {
    Small { keys: Vec<u128>, vals: Vec<u32> },
    Large(BTreeMap<u128, u32>),
}

impl Default for SortedMap {
    fn default() -> Self {
        SortedMap::Small { keys: Vec::new(), vals: Vec::new() }
    }
}

impl SortedMap {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        match self {
            SortedMap::Small { keys, .. } => keys.len(),
            SortedMap::Large(m) => m.len(),
        }
    }

    pub fn insert(&mut self, k: u128, v: u32) {
        match self {
            SortedMap::Small { keys, vals } => {
                match keys.binary_search(&k) {
                    Ok(i) => vals[i] = v,
                    Err(i) => {
                        keys.insert(i, k);
                        vals.insert(i, v);
                    }
                }
                if keys.len() > SPILL {
                    let m: BTreeMap<u128, u32> = keys.iter().copied().zip(vals.iter().copied()).collect();
                    *self = SortedMap::Large(m);
                }
            }
            SortedMap::Large(m) => {
                m.insert(k, v);
            }
        }
    }

    pub fn remove(&mut self, k: &u128) -> Option<u32> {
        match self {
            SortedMap::Small { keys, vals } => {
                let i = keys.binary_search(k).ok()?;
                keys.remove(i);
                Some(vals.remove(i))
            }
            SortedMap::Large(m) => m.remove(k),
        }
    }

    /// Entries with keys in `[lo, hi)`, in key order (`lower_bound(lo)` onwards).
    pub fn range(&self, lo: u128, hi: Option<u128>) -> Iter<'_> {
        match self {
            SortedMap::Small { keys, vals } => {
                let a = keys.partition_point(|&x| x < lo);
                let b = hi.map_or(keys.len(), |h| keys.partition_point(|&x| x < h)).max(a);
                Iter::Small { keys: &keys[a..b], vals: &vals[a..b] }
            }
            SortedMap::Large(m) => {
                let hi = hi.map_or(Bound::Unbounded, Bound::Excluded);
                Iter::Large(m.range((Bound::Included(lo), hi)))
            }
        }
    }

    /// Every entry, in key order.
    pub fn iter(&self) -> Iter<'_> {
        self.range(0, None)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = u32> + '_ {
        self.iter().map(|(_, v)| v)
    }
}

pub(crate) enum Iter<'a> {
    Small { keys: &'a [u128], vals: &'a [u32] },
    Large(btree_map::Range<'a, u128, u32>),
}

impl Iterator for Iter<'_> {
    type Item = (u128, u32);

    #[inline]
    fn next(&mut self) -> Option<(u128, u32)> {
        match self {
            Iter::Small { keys, vals } => {
                let (&k, rest_k) = keys.split_first()?;
                let (&v, rest_v) = vals.split_first()?;
                *keys = rest_k;
                *vals = rest_v;
                Some((k, v))
            }
            Iter::Large(r) => r.next().map(|(&k, &v)| (k, v)),
        }
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<(u128, u32)> {
        match self {
            Iter::Small { keys, vals } => {
                let (&k, rest_k) = keys.split_last()?;
                let (&v, rest_v) = vals.split_last()?;
                *keys = rest_k;
                *vals = rest_v;
                Some((k, v))
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
                ours.insert(k, step);
                theirs.insert(k, step);
            } else {
                assert_eq!(ours.remove(&k), theirs.remove(&k));
            }
            if step % 997 == 0 {
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
        }
        assert!(matches!(ours, SortedMap::Large(_)), "grew past SPILL");
        let a: Vec<_> = ours.iter().collect();
        let b: Vec<_> = theirs.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(a, b);
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
