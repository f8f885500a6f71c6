//! What the sort crate's tests share.

use std::sync::Arc;

/// A pool of `threads` workers for a test's sorter, runs and merges.
pub(crate) fn pool(threads: usize) -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool"),
    )
}

/// The crate's one test random number generator: Marsaglia's xorshift64
/// (shifts 13, 7, 17; "Xorshift RNGs", J. Stat. Softw. 8(14), 2003),
/// deterministic and free of dependencies, so every test that draws keys
/// or bytes is reproducible. The seed must not be zero (its fixed point).
pub(crate) struct XorShift64(u64);

impl XorShift64 {
    pub(crate) fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift64 stays at zero from a zero seed");
        XorShift64(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}
