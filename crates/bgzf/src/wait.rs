//! Blocking channel operations that cannot starve the pool they wait on.
//!
//! The reader's consumer waits for inflate jobs, and `write_block` waits for
//! room in the deflate queue. If such a call runs *on* a worker of the same
//! pool (a pipeline stage inside `pool.install`, or a pool of one thread), a
//! plain blocking call would hold the very thread the awaited job needs. So,
//! on a worker of that pool, we run pending pool jobs while waiting; on any
//! other thread we simply block.

use std::time::Duration;

use crossbeam_channel::{
    Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender, TryRecvError,
};
use rayon::{ThreadPool, Yield};

/// How long a pool worker sleeps on the channel when the pool had no job for
/// it, before looking for jobs again. Short, because it only applies when
/// every job is already running elsewhere.
const IDLE_POLL: Duration = Duration::from_micros(200);

/// `rx.recv()`, running `pool` jobs meanwhile if called from a worker of it.
pub(crate) fn recv<T>(pool: &ThreadPool, rx: &Receiver<T>) -> Result<T, RecvError> {
    if pool.current_thread_index().is_none() {
        return rx.recv();
    }
    loop {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(TryRecvError::Disconnected) => return Err(RecvError),
            Err(TryRecvError::Empty) => {}
        }
        if pool.yield_now() == Some(Yield::Executed) {
            continue;
        }
        match rx.recv_timeout(IDLE_POLL) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Disconnected) => return Err(RecvError),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

/// `tx.send(value)`, running `pool` jobs meanwhile if called from a worker
/// of it.
pub(crate) fn send<T>(pool: &ThreadPool, tx: &Sender<T>, value: T) -> Result<(), SendError<T>> {
    if pool.current_thread_index().is_none() {
        return tx.send(value);
    }
    let mut value = value;
    loop {
        match tx.send_timeout(value, Duration::ZERO) {
            Ok(()) => return Ok(()),
            Err(SendTimeoutError::Disconnected(v)) => return Err(SendError(v)),
            Err(SendTimeoutError::Timeout(v)) => value = v,
        }
        if pool.yield_now() == Some(Yield::Executed) {
            continue;
        }
        match tx.send_timeout(value, IDLE_POLL) {
            Ok(()) => return Ok(()),
            Err(SendTimeoutError::Disconnected(v)) => return Err(SendError(v)),
            Err(SendTimeoutError::Timeout(v)) => value = v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_inside_a_one_thread_pool_runs_the_awaited_job() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let got = pool.install(|| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            pool.spawn(move || {
                let _ = tx.send(41 + 1);
            });
            recv(&pool, &rx)
        });
        assert_eq!(got, Ok(42));
    }

    #[test]
    fn sending_inside_a_one_thread_pool_lets_queued_jobs_drain() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::sync::Arc;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let taken = Arc::new(AtomicU32::new(0));
        let left: u32 = pool.install(|| {
            let (tx, rx) = crossbeam_channel::bounded::<u32>(1);
            for v in [1, 2, 3] {
                // With the channel full, this only returns once the job
                // spawned in the previous round has run on this thread.
                send(&pool, &tx, v).expect("receiver alive");
                let (rx, taken) = (rx.clone(), Arc::clone(&taken));
                pool.spawn(move || {
                    if let Ok(v) = rx.try_recv() {
                        taken.fetch_add(v, Ordering::SeqCst);
                    }
                });
            }
            while pool.yield_now() == Some(Yield::Executed) {}
            rx.try_iter().sum()
        });
        assert_eq!(taken.load(Ordering::SeqCst) + left, 6);
        assert!(
            taken.load(Ordering::SeqCst) >= 3,
            "jobs ran while send waited"
        );
    }

    #[test]
    fn disconnection_is_reported() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let (tx, rx) = crossbeam_channel::bounded::<u8>(1);
        drop(tx);
        assert_eq!(recv(&pool, &rx), Err(RecvError));
        let (tx, rx) = crossbeam_channel::bounded::<u8>(1);
        drop(rx);
        assert!(send(&pool, &tx, 1).is_err());
    }
}
