//! A fast, non-cryptographic hasher for maps keyed by integers (addresses, ids) and short
//! slices in the importers' hot loops, where std's SipHash dominated the profile. It is the
//! multiply-add hash of `rustc-hash` 2.x (`FxHasher`), including its final rotation: hashbrown
//! picks buckets from the low bits, and addresses (multiples of 512) times an odd constant
//! keep their low bits zero — without the rotation every address landed in 1/512 of the
//! buckets. Inputs are the trace's own values, so HashDoS resistance is not needed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

/// rustc-hash 2.x's multiplier.
const K: u64 = 0xf135_7aea_2e62_a9c5;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64)
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64)
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i)
    }
    #[inline]
    fn write_i64(&mut self, i: i64) {
        self.add(i as u64)
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64)
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The product's high bits are its well-mixed ones; bring them down to where hashbrown
        // takes the bucket index (rustc-hash 2.x: rotate_left(26)).
        self.hash.rotate_left(26)
    }
}

pub type FxBuildHasher = BuildHasherDefault<FxHasher>;
pub type FxHashMap<K, V> = HashMap<K, V, FxBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_hashes_spread() {
        let mut m: FxHashMap<u64, u32> = FxHashMap::default();
        for i in 0..10_000u64 {
            m.insert(0x7f00_0000_0000 + i * 512, i as u32);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m[&(0x7f00_0000_0000 + 77 * 512)], 77);
        // Addresses 512 apart must not share their low hash bits (the bucket index).
        let low: std::collections::HashSet<u64> = (0..1024u64)
            .map(|i| {
                let mut h = FxHasher::default();
                h.write_u64(0x7f00_0000_0000 + i * 512);
                h.finish() & 1023
            })
            .collect();
        // Without the final rotation the low 9 bits are always zero: at most 2 distinct
        // indices. With it: 500 here (uniform random would give ~647).
        assert!(low.len() > 256, "{} distinct bucket indices of 1024", low.len());
        let mut s: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        s.insert(vec![1, 2, 3], 7);
        assert_eq!(s.get(&[1u32, 2, 3][..]), Some(&7));
        assert_eq!(s.get(&[1u32, 2][..]), None);
    }
}
