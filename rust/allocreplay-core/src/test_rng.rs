//! The tests' deterministic pseudo-random numbers: Marsaglia's xorshift64 (13, 7, 17), one
//! generator instead of a copy of its three lines in every randomized test.

pub(crate) struct XorShift64(u64);

impl XorShift64 {
    /// `seed` must not be 0 (xorshift stays at 0).
    pub(crate) fn new(seed: u64) -> Self {
        XorShift64(seed)
    }

    /// The next value of the sequence.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// The next value, modulo `m`.
    pub(crate) fn below(&mut self, m: u64) -> u64 {
        self.next_u64() % m
    }
}
