//! Disjoint ranges `[start, end)` keyed by start, with the search the driver's address space
//! model makes in O(log n): the highest range at least `len` long.
//!
//! A treap (randomised binary search tree, fixed seed: its shape never changes a result) in an
//! arena, each node keeping the longest range in its subtree, so that a search descends into
//! the one child that can hold a fit.

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    start: u64,
    end: u64,
    /// A value carried with the range (the region a hole belongs to).
    tag: u64,
    /// Longest `end - start` in this subtree.
    max_len: u64,
    prio: u32,
    left: u32,
    right: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct RangeTree {
    nodes: Vec<Node>,
    free_slots: Vec<u32>,
    root: u32,
    rng: u32,
    len: usize,
}

impl Default for RangeTree {
    fn default() -> Self {
        Self::new()
    }
}

impl RangeTree {
    pub fn new() -> Self {
        RangeTree { nodes: Vec::new(), free_slots: Vec::new(), root: NIL, rng: 0x9E37_79B9, len: 0 }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn max_len(&self, n: u32) -> u64 {
        if n == NIL {
            0
        } else {
            self.nodes[n as usize].max_len
        }
    }

    #[inline]
    fn update(&mut self, n: u32) {
        let node = self.nodes[n as usize];
        let m = (node.end - node.start).max(self.max_len(node.left)).max(self.max_len(node.right));
        self.nodes[n as usize].max_len = m;
    }

    /// Splits `t` into the ranges starting before `key` and the others.
    fn split(&mut self, t: u32, key: u64) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        if self.nodes[t as usize].start < key {
            let (l, r) = self.split(self.nodes[t as usize].right, key);
            self.nodes[t as usize].right = l;
            self.update(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.nodes[t as usize].left, key);
            self.nodes[t as usize].left = r;
            self.update(t);
            (l, t)
        }
    }

    /// Joins two trees, every range of `a` before every range of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.update(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.update(b);
            b
        }
    }

    /// Adds `[start, end)`; it must not overlap a range already held.
    pub fn insert(&mut self, start: u64, end: u64, tag: u64) {
        // xorshift32: a fixed sequence, so that a replay's tree is the same every run.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 17;
        self.rng ^= self.rng << 5;
        let node = Node { start, end, tag, max_len: end - start, prio: self.rng, left: NIL, right: NIL };
        let n = match self.free_slots.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.root = self.insert_at(self.root, n);
        self.len += 1;
    }

    /// Descends to where `n`'s priority puts it, and splits the subtree found there around it.
    fn insert_at(&mut self, t: u32, n: u32) -> u32 {
        if t == NIL {
            return n;
        }
        let key = self.nodes[n as usize].start;
        if self.nodes[n as usize].prio > self.nodes[t as usize].prio {
            let (l, r) = self.split(t, key);
            self.nodes[n as usize].left = l;
            self.nodes[n as usize].right = r;
            self.update(n);
            return n;
        }
        if key < self.nodes[t as usize].start {
            let l = self.insert_at(self.nodes[t as usize].left, n);
            self.nodes[t as usize].left = l;
        } else {
            let r = self.insert_at(self.nodes[t as usize].right, n);
            self.nodes[t as usize].right = r;
        }
        self.update(t);
        t
    }

    /// Removes the range starting at `start`: its end and tag, or `None` if there is none.
    pub fn remove(&mut self, start: u64) -> Option<(u64, u64)> {
        let mut found = None;
        self.root = self.remove_at(self.root, start, &mut found);
        if found.is_some() {
            self.len -= 1;
        }
        found
    }

    fn remove_at(&mut self, t: u32, start: u64, found: &mut Option<(u64, u64)>) -> u32 {
        if t == NIL {
            return NIL;
        }
        let node = self.nodes[t as usize];
        if start == node.start {
            *found = Some((node.end, node.tag));
            self.free_slots.push(t);
            return self.merge(node.left, node.right);
        }
        if start < node.start {
            let l = self.remove_at(node.left, start, found);
            self.nodes[t as usize].left = l;
        } else {
            let r = self.remove_at(node.right, start, found);
            self.nodes[t as usize].right = r;
        }
        if found.is_some() {
            self.update(t);
        }
        t
    }

    /// Moves the bounds of the range starting at `start` to `[new_start, new_end)` in place;
    /// the range must keep its place in the order (no other range starts between `start` and
    /// `new_start`) and not overlap another. False if there is no such range.
    pub fn reshape(&mut self, start: u64, new_start: u64, new_end: u64) -> bool {
        self.reshape_at(self.root, start, new_start, new_end)
    }

    fn reshape_at(&mut self, t: u32, start: u64, new_start: u64, new_end: u64) -> bool {
        if t == NIL {
            return false;
        }
        let node = self.nodes[t as usize];
        let found = if start == node.start {
            self.nodes[t as usize].start = new_start;
            self.nodes[t as usize].end = new_end;
            true
        } else if start < node.start {
            self.reshape_at(node.left, start, new_start, new_end)
        } else {
            self.reshape_at(node.right, start, new_start, new_end)
        };
        if found {
            self.update(t);
        }
        found
    }

    /// The range starting at `start`: its end and tag.
    pub fn get(&self, start: u64) -> Option<(u64, u64)> {
        let mut t = self.root;
        while t != NIL {
            let n = &self.nodes[t as usize];
            if start == n.start {
                return Some((n.end, n.tag));
            }
            t = if start < n.start { n.left } else { n.right };
        }
        None
    }

    /// The last range starting before `key`: `(start, end, tag)`.
    pub fn before(&self, key: u64) -> Option<(u64, u64, u64)> {
        let mut t = self.root;
        let mut best = None;
        while t != NIL {
            let n = &self.nodes[t as usize];
            if n.start < key {
                best = Some((n.start, n.end, n.tag));
                t = n.right;
            } else {
                t = n.left;
            }
        }
        best
    }

    /// The highest range at least `len` long: `(start, end, tag)`.
    pub fn highest_fit(&self, len: u64) -> Option<(u64, u64, u64)> {
        let mut t = self.root;
        if self.max_len(t) < len {
            return None;
        }
        loop {
            let n = &self.nodes[t as usize];
            if self.max_len(n.right) >= len {
                t = n.right;
            } else if n.end - n.start >= len {
                return Some((n.start, n.end, n.tag));
            } else {
                t = n.left;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Random inserts, removes and searches against a `BTreeMap` scanned linearly.
    #[test]
    fn matches_a_linear_scan() {
        let mut rng = crate::test_rng::XorShift64::new(0x2545_F491_4F6C_DD1Du64);
        let mut rnd = |m: u64| rng.below(m);
        let mut tree = RangeTree::new();
        let mut model: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for step in 0..20_000u64 {
            match rnd(4) {
                0 | 1 => {
                    // Slots of 100 apart: disjoint by construction.
                    let start = rnd(2000) * 100;
                    if !model.range(start..start + 100).any(|_| true) {
                        let end = start + 1 + rnd(99);
                        tree.insert(start, end, step);
                        model.insert(start, (end, step));
                    }
                }
                2 => {
                    let start = rnd(2000) * 100;
                    if rnd(2) == 0 {
                        assert_eq!(tree.remove(start), model.remove(&start));
                    } else {
                        // Shrink or grow within the slot: the order is kept.
                        let (s2, e2) = (start + rnd(3), start + 3 + rnd(97));
                        let had = model.remove(&start);
                        assert_eq!(tree.reshape(start, s2, e2), had.is_some());
                        if let Some((_, t)) = had {
                            model.insert(s2, (e2, t));
                        }
                    }
                }
                _ => {
                    let len = 1 + rnd(100);
                    let hi = model.iter().rev().find(|(&s, &(e, _))| e - s >= len).map(|(&s, &(e, t))| (s, e, t));
                    assert_eq!(tree.highest_fit(len), hi);
                    let key = rnd(200_100);
                    assert_eq!(tree.before(key), model.range(..key).next_back().map(|(&s, &(e, t))| (s, e, t)));
                    assert_eq!(tree.get(key), model.get(&key).copied());
                    let key = rnd(2001) * 100;
                    assert_eq!(tree.get(key), model.get(&key).copied());
                    assert_eq!(tree.get(key + 1), model.get(&(key + 1)).copied());
                }
            }
            assert_eq!(tree.len(), model.len());
        }
    }
}
