//! The free blocks of one pool of the caching allocator: upstream `BlockPool::blocks`, a
//! `std::set<Block*>` ordered by `BlockComparatorSize` (stream, size, ptr), where
//! `get_free_block` takes the `lower_bound` of (stream, size, 0).
//!
//! Most of a real trace's searches and updates go to the small pool, whose blocks are at most
//! 2 MiB (`kSmallBuffer`) and multiples of 512 bytes (`kMinBlockSize`): 4,096 possible sizes.
//! Those blocks are kept in size classes, one per size, as the driver model's `FreeBySize`
//! does (policy/cuda_malloc.rs): a two-level bitmap of the classes that hold a block, and per
//! class its least-address block in a flat array, its other blocks in a short sorted list. A
//! best fit is then a find-first-set at or after the request's class, and most updates touch
//! one class's slot and bit, with no search and no shift. Blocks above 2 MiB (most of the
//! large pool) are in a [`SortedMap`] under the packed key (stream rank, size, ptr) as before.
//!
//! Streams are ranked by first use (the allocator's `rank`): iteration is in (rank, size, ptr)
//! order, as the packed keys were; the allocator reorders by stream value where upstream's
//! order depends on it.
//!
//! BFC's free chunks (policy/bfc.rs) use the same set with one rank and 256-byte classes
//! (`kMinAllocationSize`, classes up to 1 MiB): `FindChunkPtr`'s walk over its bins, each a
//! `std::set` by (size, ptr), is the set's first chunk of at least the request's size.

use super::class_bitmap::{ClassBitmap, CLASSES};
use super::sorted_map::SortedMap;

/// (stream rank, size, ptr) packed as 16 + 56 + 56 bits (sizes and addresses below 64 PiB; a
/// device sees far fewer than 65,536 streams), which orders blocks like the tuple.
#[inline]
pub(crate) fn size_key(rank: u32, size: u64, ptr: u64) -> u128 {
    debug_assert!(rank < 1 << 16 && size < 1 << 56 && ptr < 1 << 56);
    (u128::from(rank) << 112) | (u128::from(size) << 56) | u128::from(ptr)
}

/// The key just past every key of `rank` (none past the last rank).
#[inline]
fn rank_end(rank: u32) -> Option<u128> {
    (rank + 1 < 1 << 16).then(|| size_key(rank + 1, 0, 0))
}

#[inline]
fn unpack(key: u128) -> (u64, u64) {
    (((key >> 56) as u64) & ((1 << 56) - 1), (key as u64) & ((1 << 56) - 1))
}

/// The largest size with a class, for classes of `UNIT` bytes.
#[inline]
const fn class_max(unit: u64) -> u64 {
    CLASSES as u64 * unit
}

/// Whether a block of `size` bytes belongs in a class of `unit` bytes.
#[inline]
fn has_class(size: u64, unit: u64) -> bool {
    size != 0 && size <= class_max(unit) && size.is_multiple_of(unit)
}

/// The class of the smallest class size not below `size` (`size <= class_max(unit)`).
#[inline]
fn class_at_least(size: u64, unit: u64) -> usize {
    (size.max(1).div_ceil(unit) - 1) as usize
}

#[inline]
fn class_size(c: usize, unit: u64) -> u64 {
    (c as u64 + 1) * unit
}

/// A class's least-address block and how many others it has (in `Classes::others`): one
/// 16-byte slot, so that most updates of a class read and write one cache line.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    ptr: u64,
    val: u32,
    others: u32,
}

/// The classes of one stream rank.
#[derive(Debug, Clone)]
struct Classes {
    /// The classes that hold a block (class `c`: blocks of `(c + 1) * 512` bytes).
    bits: ClassBitmap,
    slots: Vec<Slot>,
    /// Per class, its blocks other than the slot's, as (ptr, block) sorted by address.
    others: Vec<Vec<(u64, u32)>>,
}

impl Classes {
    fn new() -> Box<Classes> {
        Box::new(Classes { bits: ClassBitmap::default(), slots: vec![Slot::default(); CLASSES], others: vec![Vec::new(); CLASSES] })
    }
}

/// A pool's free blocks, see the module doc, in classes of `UNIT` bytes: the allocator's
/// size granularity (the caching allocator's `kMinBlockSize`, 512, so that the `CLASSES`
/// classes reach `kSmallBuffer`, the whole small pool; BFC's `kMinAllocationSize`, 256).
/// Values are block indices.
#[derive(Debug, Clone, Default)]
pub(crate) struct FreeBlocks<const UNIT: u64> {
    /// Per stream rank, its classes (made at the rank's first block with a class).
    classes: Vec<Option<Box<Classes>>>,
    /// Blocks without a class.
    rest: SortedMap,
    /// Set once a block size with no class (not a multiple of 512, e.g. a seeded segment's)
    /// has been inserted: from then on every block is in `rest`, since a class would no
    /// longer hold all the blocks between its size and the previous class's.
    unclassed: bool,
    /// Ranks below this may have blocks.
    ranks: u32,
    len: usize,
}

impl<const UNIT: u64> FreeBlocks<UNIT> {
    const CLASS_MAX: u64 = class_max(UNIT);

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    pub fn insert(&mut self, rank: u32, size: u64, ptr: u64, val: u32) {
        self.ranks = self.ranks.max(rank + 1);
        if !self.unclassed && (size == 0 || !size.is_multiple_of(UNIT)) {
            self.declass();
        }
        if self.unclassed || size > Self::CLASS_MAX {
            self.len += usize::from(self.rest.insert(size_key(rank, size, ptr), val));
            return;
        }
        if self.classes.len() <= rank as usize {
            self.classes.resize_with(rank as usize + 1, || None);
        }
        let cl = self.classes[rank as usize].get_or_insert_with(Classes::new);
        let c = class_at_least(size, UNIT);
        if !cl.bits.is_set(c) {
            cl.slots[c] = Slot { ptr, val, others: 0 };
            cl.bits.set(c);
            self.len += 1;
            return;
        }
        let slot = &mut cl.slots[c];
        if slot.ptr == ptr {
            slot.val = val;
            return;
        }
        // The higher-addressed of the two goes to the list.
        let (ptr, val) = if ptr < slot.ptr {
            let old = (slot.ptr, slot.val);
            (slot.ptr, slot.val) = (ptr, val);
            old
        } else {
            (ptr, val)
        };
        let list = &mut cl.others[c];
        let i = list.partition_point(|&(p, _)| p < ptr);
        match list.get_mut(i) {
            Some(e) if e.0 == ptr => e.1 = val,
            _ => {
                list.insert(i, (ptr, val));
                slot.others += 1;
                self.len += 1;
            }
        }
    }

    #[inline(always)]
    pub fn remove(&mut self, rank: u32, size: u64, ptr: u64) -> Option<u32> {
        let cl = match self.classes.get_mut(rank as usize) {
            Some(Some(cl)) if !self.unclassed && has_class(size, UNIT) => cl,
            _ => {
                let v = self.rest.remove(&size_key(rank, size, ptr))?;
                self.len -= 1;
                return Some(v);
            }
        };
        let c = class_at_least(size, UNIT);
        if !cl.bits.is_set(c) {
            return None;
        }
        let slot = &mut cl.slots[c];
        let v = if slot.ptr == ptr {
            let v = slot.val;
            if slot.others == 0 {
                cl.bits.clear(c);
            } else {
                // The class's next block takes the slot.
                (slot.ptr, slot.val) = cl.others[c].remove(0);
                slot.others -= 1;
            }
            v
        } else {
            if slot.others == 0 {
                return None;
            }
            let list = &mut cl.others[c];
            let i = list.partition_point(|&(p, _)| p < ptr);
            if list.get(i).is_none_or(|e| e.0 != ptr) {
                return None;
            }
            slot.others -= 1;
            list.remove(i).1
        };
        self.len -= 1;
        Some(v)
    }

    /// The first block of `rank` not below (size, ptr) in (size, ptr) order, if `inclusive`,
    /// else the first above it: found in the classes, or where to start in `rest`.
    #[inline(always)]
    fn seek(&self, rank: u32, size: u64, ptr: u64, inclusive: bool) -> Seek {
        let ptr_from = ptr + u64::from(!inclusive);
        if let (Some(Some(cl)), false, true) = (self.classes.get(rank as usize), self.unclassed, size <= Self::CLASS_MAX) {
            let c = class_at_least(size, UNIT);
            let mut from = c;
            if class_size(c, UNIT) == size && cl.bits.is_set(c) {
                // Within the request's own class: its least block, or one of its others.
                let slot = &cl.slots[c];
                if slot.ptr >= ptr_from {
                    return Seek::Found((size, slot.ptr, slot.val));
                }
                if slot.others > 0 {
                    let list = &cl.others[c];
                    if let Some(&(p, v)) = list.get(list.partition_point(|&(p, _)| p < ptr_from)) {
                        return Seek::Found((size, p, v));
                    }
                }
                from = c + 1;
            }
            if let Some(c) = cl.bits.next_set(from) {
                let slot = &cl.slots[c];
                return Seek::Found((class_size(c, UNIT), slot.ptr, slot.val));
            }
            // Past the classes: the blocks above 2 MiB.
            return Seek::Rest(size_key(rank, Self::CLASS_MAX + 1, 0));
        }
        Seek::Rest(size_key(rank, size, ptr_from))
    }

    /// The blocks of `rank` from `lower_bound(size, 0)` on, in (size, ptr) order: (size, ptr,
    /// block). Upstream's iteration from `lower_bound((stream, size, 0))` ends, for every
    /// caller, at the first block of another stream.
    #[inline]
    pub fn range(&self, rank: u32, size: u64) -> Range<'_, UNIT> {
        Range { set: self, rank, at: Some((size, 0)), started: false, rest: None }
    }

    /// Every block, in (rank, size, ptr) order.
    pub fn values(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.ranks).flat_map(move |r| self.range(r, 0).map(|(_, _, v)| v))
    }

    /// Moves every block into `rest` for good (see `unclassed`).
    fn declass(&mut self) {
        for (rank, cl) in self.classes.drain(..).enumerate() {
            let Some(cl) = cl else { continue };
            let mut c = 0;
            while let Some(n) = cl.bits.next_set(c) {
                let slot = &cl.slots[n];
                for &(ptr, val) in std::iter::once(&(slot.ptr, slot.val)).chain(&cl.others[n]) {
                    self.rest.insert(size_key(rank as u32, class_size(n, UNIT), ptr), val);
                }
                c = n + 1;
            }
        }
        self.unclassed = true;
    }
}

/// Each step is a search from the last block returned (most callers take only the first).
pub(crate) struct Range<'a, const UNIT: u64> {
    set: &'a FreeBlocks<UNIT>,
    rank: u32,
    /// The (size, ptr) to search the classes from: inclusive before the first step, then the
    /// last block returned; `None` past the end.
    at: Option<(u64, u64)>,
    started: bool,
    /// Once past the classes: the blocks above them, iterated (not searched at every step).
    rest: Option<super::sorted_map::Iter<'a>>,
}

/// Where [`FreeBlocks::seek`] ended.
enum Seek {
    Found((u64, u64, u32)),
    /// In `rest`, from this key on.
    Rest(u128),
}

impl<const UNIT: u64> Iterator for Range<'_, UNIT> {
    type Item = (u64, u64, u32);

    #[inline(always)]
    fn next(&mut self) -> Option<(u64, u64, u32)> {
        if self.rest.is_none() {
            let (size, ptr) = self.at?;
            match self.set.seek(self.rank, size, ptr, !self.started) {
                Seek::Found(found) => {
                    self.started = true;
                    self.at = Some((found.0, found.1));
                    return Some(found);
                }
                Seek::Rest(from) => self.rest = Some(self.set.rest.range(from, rank_end(self.rank))),
            }
        }
        let (k, v) = self.rest.as_mut()?.next()?;
        let (s, p) = unpack(k);
        Some((s, p, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::bfc::K_MIN_ALLOCATION_SIZE as BFC_UNIT;
    use crate::policy::pytorch::K_MIN_BLOCK_SIZE as PYTORCH_UNIT;
    use std::collections::BTreeMap;

    /// Random inserts and removes of blocks of a few ranks, sizes in and beyond the classes
    /// with many equal ones, each result checked against a BTreeMap over (rank, size, ptr):
    /// removals, every range's first few blocks, the full iteration, the length.
    fn against_btreemap<const UNIT: u64>(seed: u64, odd_sizes: bool) {
        let class_max = class_max(UNIT);
        let mut ours = FreeBlocks::<UNIT>::default();
        let mut theirs: BTreeMap<(u32, u64, u64), u32> = BTreeMap::new();
        let mut rng = crate::test_rng::XorShift64::new(seed);
        let mut live: Vec<(u32, u64, u64)> = Vec::new();
        for step in 0..60_000u32 {
            let x = rng.next_u64();
            let rank = (x % 3) as u32;
            let size = match (x >> 8) % 8 {
                // A few popular sizes (classes with several blocks), any class, the largest
                // class, above the classes.
                0..=2 => UNIT * (1 + (x >> 16) % 4),
                3 | 4 => UNIT * (1 + (x >> 16) % CLASSES as u64),
                5 => class_max,
                6 => class_max + UNIT * (1 + (x >> 16) % 5000),
                _ if odd_sizes && step > 30_000 => 1 + (x >> 16) % (3 * class_max),
                _ => UNIT * (1 + (x >> 16) % 8),
            };
            let ptr = ((x >> 32) % 50) * 4096;
            if x % 7 < 4 || live.is_empty() {
                ours.insert(rank, size, ptr, step);
                theirs.insert((rank, size, ptr), step);
                live.push((rank, size, ptr));
            } else {
                // Mostly a present block, sometimes one that may not be.
                let (r, s, p) = if x % 7 == 4 { (rank, size, ptr) } else { live.swap_remove(((x >> 20) as usize) % live.len()) };
                assert_eq!(ours.remove(r, s, p), theirs.remove(&(r, s, p)), "step {step}");
            }
            assert_eq!(ours.len(), theirs.len(), "step {step}");
            let q = if x.is_multiple_of(2) { size } else { (x >> 24) % (3 * class_max) };
            let a: Vec<_> = ours.range(rank, q).take(4).collect();
            let b: Vec<_> = theirs.range((rank, q, 0)..(rank + 1, 0, 0)).take(4).map(|(&(_, s, p), &v)| (s, p, v)).collect();
            assert_eq!(a, b, "step {step} range({rank}, {q})");
            if step % 1000 == 0 {
                assert!(ours.values().eq(theirs.values().copied()), "step {step}");
            }
        }
        assert!(ours.values().eq(theirs.values().copied()));
        assert_eq!(ours.unclassed, odd_sizes);
    }

    #[test]
    fn behaves_like_an_ordered_set() {
        against_btreemap::<PYTORCH_UNIT>(0x9e37_79b9_7f4a_7c15, false);
        against_btreemap::<BFC_UNIT>(0x9e37_79b9_7f4a_7c15, false);
    }

    #[test]
    fn behaves_like_an_ordered_set_after_a_size_without_class() {
        against_btreemap::<PYTORCH_UNIT>(0x2545_f491_4f6c_dd1d, true);
        against_btreemap::<BFC_UNIT>(0x2545_f491_4f6c_dd1d, true);
    }

    #[test]
    fn a_class_slot_passes_to_the_next_address() {
        const CLASS_MAX: u64 = class_max(PYTORCH_UNIT);
        let mut s = FreeBlocks::<PYTORCH_UNIT>::default();
        s.insert(0, 1024, 300, 3);
        s.insert(0, 1024, 100, 1);
        s.insert(0, 1024, 200, 2);
        s.insert(0, 4 * CLASS_MAX, 0, 9);
        assert_eq!(s.range(0, 600).collect::<Vec<_>>(), vec![(1024, 100, 1), (1024, 200, 2), (1024, 300, 3), (4 * CLASS_MAX, 0, 9)]);
        assert_eq!(s.remove(0, 1024, 100), Some(1));
        assert_eq!(s.range(0, 1024).next(), Some((1024, 200, 2)));
        assert_eq!(s.remove(0, 1024, 100), None);
        assert_eq!(s.range(1, 0).next(), None, "another rank's blocks are not in range");
        assert_eq!(s.values().collect::<Vec<_>>(), vec![2, 3, 9]);
    }
}
