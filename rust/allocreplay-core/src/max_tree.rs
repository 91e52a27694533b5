//! [`MaxTree`]: the highest index whose value is at least a bound, in O(log n).

/// A max tree over indices (recency stamps, creation order): a value per index (0: none), to
/// find the highest index of at least a value in O(log n). cudaMallocAsync's pool
/// (`policy::cuda_async`: the newest freed range of at least a size) and the driver's address
/// space (`device::memory`: the newest region with a hole of at least a size) search it.
///
/// Each node has [`FANOUT`] children, stored side by side (one 64-byte line of `u64`s), so a
/// change climbs log8 n levels instead of log2 n: the tree is read and written on every free
/// and every reuse of a freed range, and a binary tree's climb was a sixth of a replay.
#[derive(Debug, Default, Clone)]
pub(crate) struct MaxTree {
    /// Leaves (a power of two, at least [`FANOUT`]).
    n: usize,
    /// The levels, leaves first, each a whole number of groups of [`FANOUT`] (padded with 0),
    /// one after another; the last level is one group.
    t: Vec<u64>,
    /// Where each level starts in `t`.
    level: Vec<usize>,
}

/// Children of a [`MaxTree`] node.
const FANOUT: usize = 8;

/// Bit k set where `group[k] >= v`.
#[inline(always)]
fn at_least_mask(group: &[u64], v: u64) -> u32 {
    let g: &[u64; FANOUT] = group[..FANOUT].try_into().expect("a whole group");
    let mut m = 0u32;
    for (k, &x) in g.iter().enumerate() {
        m |= u32::from(x >= v) << k;
    }
    m
}

/// The largest value of a group.
#[inline(always)]
fn group_max(group: &[u64]) -> u64 {
    let g: &[u64; FANOUT] = group[..FANOUT].try_into().expect("a whole group");
    g.iter().fold(0, |m, &x| m.max(x))
}

/// The highest set bit of a non-zero mask.
#[inline(always)]
fn highest(mask: u32) -> usize {
    (u32::BITS - 1 - mask.leading_zeros()) as usize
}

impl MaxTree {
    /// A tree of at least `n` leaves with the given leading values (the rest 0), built bottom
    /// up in O(n); the buffer is reused.
    pub(crate) fn rebuild(&mut self, n: usize, values: impl ExactSizeIterator<Item = u64>) {
        self.n = n.max(values.len()).next_power_of_two().max(FANOUT);
        self.t.clear();
        self.level.clear();
        self.level.push(0);
        self.t.extend(values);
        self.t.resize(self.n, 0);
        let mut len = self.n;
        while len > FANOUT {
            let below = self.t.len() - len;
            let parents = len / FANOUT;
            let start = self.t.len();
            self.level.push(start);
            for g in 0..parents {
                let m = group_max(&self.t[below + g * FANOUT..]);
                self.t.push(m);
            }
            len = parents.next_multiple_of(FANOUT);
            self.t.resize(start + len, 0);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.n
    }

    pub(crate) fn set(&mut self, i: usize, v: u64) {
        let old = std::mem::replace(&mut self.t[i], v);
        let mut p = i;
        if v >= old {
            // A larger value: each ancestor below it takes it, without reading its other
            // children; the first that is not below it already holds it or more.
            for l in 1..self.level.len() {
                p /= FANOUT;
                let x = &mut self.t[self.level[l] + p];
                if *x >= v {
                    break;
                }
                *x = v;
            }
            return;
        }
        for l in 1..self.level.len() {
            let m = group_max(&self.t[self.level[l - 1] + p / FANOUT * FANOUT..]);
            p /= FANOUT;
            let x = &mut self.t[self.level[l] + p];
            if *x == m {
                break; // the ancestors' maxima do not change either
            }
            *x = m;
        }
    }

    /// The highest index at most `last` whose value is at least `v`. The search starts at
    /// `last`'s group and widens leftwards, group by group up the levels, so it costs O(log d)
    /// for an answer `d` indices away (the newest ranges are at the right: that is where
    /// requests usually fit).
    pub(crate) fn rightmost_at_least(&self, v: u64, last: usize) -> Option<usize> {
        if last >= self.n {
            return None;
        }
        // Up: at level `l`, the nodes of `q`'s group up to `q` itself; then the nodes left of
        // that group's parent.
        let (mut l, mut q) = (0, last);
        loop {
            let g = q / FANOUT * FANOUT;
            let upto = (2u32 << (q % FANOUT)) - 1;
            let mask = at_least_mask(&self.t[self.level[l] + g..], v) & upto;
            if mask != 0 {
                q = g + highest(mask);
                break;
            }
            if l + 1 == self.level.len() || q < FANOUT {
                return None; // the whole tree left of `last` was searched
            }
            (l, q) = (l + 1, q / FANOUT - 1);
        }
        // Down the subtree that has one, keeping to the right.
        while l > 0 {
            l -= 1;
            let g = q * FANOUT;
            let mask = at_least_mask(&self.t[self.level[l] + g..], v);
            debug_assert!(mask != 0, "a node's maximum is one of its children's");
            q = g + highest(mask);
        }
        Some(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tree_finds_the_rightmost_value_at_least() {
        let mut rng = crate::test_rng::XorShift64::new(0x2545_f491_4f6c_dd1d);
        let mut t = MaxTree::default();
        // Dense values, and sparse ones (a search then climbs far up the tree and back down).
        for (n, every) in [1usize, 2, 5, 64, 100, 513, 4096, 40_000].into_iter().flat_map(|n| [(n, 1), (n, 500)]) {
            let value = |rng: &mut crate::test_rng::XorShift64| if rng.next_u64().is_multiple_of(every) { rng.next_u64() % 8 } else { 0 };
            let values: Vec<u64> = (0..n).map(|_| value(&mut rng)).collect();
            t.rebuild(n, values.iter().copied());
            let mut values = values;
            values.resize(t.len(), 0);
            for step in 0..4000 {
                let (i, v) = ((rng.next_u64() as usize) % t.len(), rng.next_u64() % 8);
                if step % 2 == 0 {
                    let x = value(&mut rng);
                    t.set(i, x);
                    values[i] = x;
                }
                let last = (rng.next_u64() as usize) % t.len();
                let want = values.iter().take(last + 1).rposition(|&x| x >= v);
                assert_eq!(t.rightmost_at_least(v, last), want, "n {n} every {every} step {step} last {last} v {v}");
            }
        }
    }
}
