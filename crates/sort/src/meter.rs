//! Accounting of the bytes the engine holds, for `SortStats::peak_bytes`.
//!
//! Batches report what they charge against the budget (records, keys,
//! entries, sort scratch); run writers and readers report their frame
//! buffers. The meter is shared by the sorter, its pool jobs and the
//! background merge thread, so it is two atomics. It measures; it does not
//! enforce (the sorter's plan does that).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Current and peak bytes held.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    current: AtomicU64,
    peak: AtomicU64,
}

impl Meter {
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub(crate) fn current(&self) -> u64 {
        self.current.load(Ordering::Relaxed)
    }

    fn add(&self, n: u64) {
        let now = self.current.fetch_add(n, Ordering::Relaxed) + n;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    fn sub(&self, n: u64) {
        self.current.fetch_sub(n, Ordering::Relaxed);
    }
}

/// A share of the meter held by one owner; released on drop.
#[derive(Debug)]
pub(crate) struct Charge {
    meter: Arc<Meter>,
    bytes: u64,
}

impl Charge {
    pub(crate) fn new(meter: &Arc<Meter>) -> Self {
        Charge {
            meter: Arc::clone(meter),
            bytes: 0,
        }
    }

    /// Sets this owner's share to `bytes`.
    pub(crate) fn set(&mut self, bytes: usize) {
        let bytes = bytes as u64;
        if bytes > self.bytes {
            self.meter.add(bytes - self.bytes);
        } else {
            self.meter.sub(self.bytes - bytes);
        }
        self.bytes = bytes;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.meter.sub(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_survives_release() {
        let meter = Arc::new(Meter::default());
        let mut a = Charge::new(&meter);
        a.set(100);
        {
            let mut b = Charge::new(&meter);
            b.set(50);
        }
        a.set(20);
        assert_eq!(meter.peak(), 150);
        assert_eq!(meter.current.load(Ordering::Relaxed), 20);
        drop(a);
        assert_eq!(meter.current.load(Ordering::Relaxed), 0);
    }
}
