//! Page prefaulting on the pool: the first write to a fresh page of a large
//! buffer costs a page fault and the kernel zeroing the page. When one
//! serial thread fills the buffer (the sorter's reading thread copying
//! records into a sub-batch, the duplicate marker's read ends), a pool job
//! can take that cost a little ahead of the writes instead
//! (`madvise(MADV_POPULATE_WRITE)`, which fills in missing pages and leaves
//! present ones, and their contents, alone). It is only a hint: if the job
//! is late the writer faults the page itself, and a failed or unsupported
//! call changes nothing.

/// Makes the pages of `[addr, addr + len)` resident for writing. Meant for
/// a range of a buffer that a pool job populates while its owner writes
/// below it: should the buffer have been moved or freed meanwhile, the call
/// fails or faults in missing pages of an unrelated mapping only, and never
/// changes memory contents.
pub fn populate(addr: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = addr & !(PAGE - 1);
        let len = len + (addr - start);
        // SAFETY: MADV_POPULATE_WRITE only faults in pages of an existing
        // mapping (or fails); it never alters data, and no Rust reference
        // to the range is made. The result is ignored: this is a
        // performance hint.
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len);
}

/// Keeps the spare capacity of a growing `Vec` resident a little ahead of
/// its length, `step` bytes per pool job, at most `ahead` bytes beyond the
/// length (so the resident set grows by at most `ahead` over what the
/// buffer's elements use). Call [`PrefaultAhead::check`] after pushes; it
/// costs a few comparisons when nothing is due.
#[derive(Debug, Clone, Copy)]
pub struct PrefaultAhead {
    /// The buffer's address when last seen (a reallocation moves it).
    base: usize,
    /// Bytes from `base` already handed to a job (or written).
    done: usize,
    step: usize,
    ahead: usize,
}

impl PrefaultAhead {
    pub const fn new(step: usize, ahead: usize) -> PrefaultAhead {
        PrefaultAhead {
            base: 0,
            done: 0,
            step,
            ahead,
        }
    }

    /// Hands the next `step` bytes of `v`'s spare capacity to a job on
    /// `pool` when the length has come within `ahead` of what was handed
    /// out so far.
    #[inline]
    pub fn check<T>(&mut self, v: &Vec<T>, pool: &rayon::ThreadPool) {
        let size = std::mem::size_of::<T>();
        let len = v.len() * size;
        let base = v.as_ptr() as usize;
        if base != self.base {
            // Moved (or first seen): what lies beyond the length is unknown.
            self.base = base;
            self.done = len;
        }
        if len + self.ahead <= self.done {
            return;
        }
        let end = v.capacity() * size;
        let from = self.done.max(len);
        if from >= end {
            return;
        }
        let to = (from + self.step).min(end);
        self.done = to;
        pool.spawn(move || populate(base + from, to - from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populate_leaves_contents_alone() {
        let mut v: Vec<u64> = Vec::with_capacity(1 << 20);
        v.extend(0..1000u64);
        populate(v.as_ptr() as usize, v.capacity() * 8);
        assert!(v.iter().copied().eq(0..1000u64));
        // A range that is not mapped: the call fails and nothing happens.
        populate(8, 4096);
    }

    #[test]
    fn prefault_ahead_hands_out_steps_within_capacity() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let mut p = PrefaultAhead::new(4096, 8192);
        let mut v: Vec<u8> = Vec::with_capacity(10_000);
        p.check(&v, &pool);
        assert_eq!(p.done, 4096);
        p.check(&v, &pool);
        assert_eq!(p.done, 8192);
        // Far enough ahead: nothing more until the length comes near.
        p.check(&v, &pool);
        assert_eq!(p.done, 8192);
        v.resize(1000, 7);
        p.check(&v, &pool);
        assert_eq!(p.done, 10_000, "the last step stops at the capacity");
        v.resize(10_000, 7);
        p.check(&v, &pool);
        assert_eq!(p.done, 10_000);
        // A move starts again from the length.
        v.reserve(20_000);
        p.check(&v, &pool);
        assert_eq!(p.done, 10_000 + 4096);
        assert!(v.iter().all(|&b| b == 7));
    }
}
