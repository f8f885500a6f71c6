//! Ordered parallel map: a producer thread cuts work items, each item's
//! result slot (a bounded(1) receiver) is queued in a bounded FIFO *before*
//! the work is dispatched to the injected pool, and the consumer pops slots
//! in order. Order holds by construction, the FIFO bound gives backpressure,
//! and a slot whose worker vanished is an error, never skipped.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::Arc;

/// Results of an ordered map, in the order items were produced.
pub struct Ordered<T> {
    slots: Receiver<Receiver<T>>,
    producer: Option<std::thread::JoinHandle<()>>,
}

/// Why a slot came back empty: a worker panicked or the pool went away.
#[derive(Debug, thiserror::Error)]
#[error(
    "a worker thread stopped without delivering its result (it panicked or the pool shut down)"
)]
pub struct LostResult;

impl<T: Send + 'static> Ordered<T> {
    /// Runs `produce` on its own thread; it calls `emit(item)` for each work
    /// item, which queues a slot and dispatches `work(item)` on `pool`.
    /// `depth` bounds the number of items in flight.
    pub fn spawn<I, P, W>(pool: Arc<rayon::ThreadPool>, depth: usize, produce: P, work: W) -> Self
    where
        I: Send + 'static,
        P: FnOnce(&mut dyn FnMut(I) -> bool) + Send + 'static,
        W: Fn(I) -> T + Send + Sync + 'static,
    {
        let (slot_tx, slots) = bounded::<Receiver<T>>(depth.max(1));
        let work = Arc::new(work);
        let producer = std::thread::Builder::new()
            .name("alnsort-ordered".into())
            .spawn(move || {
                let mut emit = |item: I| -> bool {
                    let (tx, rx): (Sender<T>, Receiver<T>) = bounded(1);
                    // Queue the slot first, then dispatch: the consumer sees
                    // slots in production order whatever order workers finish.
                    if slot_tx.send(rx).is_err() {
                        return false; // consumer gone: stop producing
                    }
                    let work = Arc::clone(&work);
                    pool.spawn(move || {
                        let _ = tx.send(work(item));
                    });
                    true
                };
                produce(&mut emit);
            })
            .expect("spawning a thread");
        Ordered {
            slots,
            producer: Some(producer),
        }
    }

    /// The next result in order; `None` when the producer is done.
    pub fn next_result(&mut self) -> Option<Result<T, LostResult>> {
        let slot = self.slots.recv().ok()?;
        Some(slot.recv().map_err(|_| LostResult))
    }
}

impl<T> Drop for Ordered<T> {
    fn drop(&mut self) {
        // Closing the FIFO makes a producer blocked on it stop at its next
        // emit. It is not joined: it may be blocked reading a pipe, and the
        // run is ending anyway.
        let (_tx, empty) = bounded(0);
        drop(std::mem::replace(&mut self.slots, empty));
        drop(self.producer.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_production_order() {
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .unwrap(),
        );
        let mut o = Ordered::spawn(
            pool,
            4,
            |emit| {
                for i in 0..200u64 {
                    if !emit(i) {
                        break;
                    }
                }
            },
            |i: u64| {
                // later items finish first
                std::thread::sleep(std::time::Duration::from_micros((200 - i) * 20));
                i * 2
            },
        );
        let mut got = Vec::new();
        while let Some(r) = o.next_result() {
            got.push(r.unwrap());
        }
        assert_eq!(got, (0..200).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn dropping_early_does_not_hang() {
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap(),
        );
        let mut o = Ordered::spawn(
            pool,
            2,
            |emit| {
                for i in 0..10_000u32 {
                    if !emit(i) {
                        break;
                    }
                }
            },
            |i: u32| i,
        );
        assert_eq!(o.next_result().unwrap().unwrap(), 0);
        drop(o);
    }

    #[test]
    fn a_panicking_worker_is_an_error() {
        let pool = Arc::new(
            rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .panic_handler(|_| {})
                .build()
                .unwrap(),
        );
        let mut o = Ordered::spawn(
            pool,
            2,
            |emit| {
                emit(1u8);
            },
            |_: u8| -> u8 { panic!("boom") },
        );
        assert!(o.next_result().unwrap().is_err());
    }
}
