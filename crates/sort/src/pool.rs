//! Running jobs on the injected pool and waiting for their results without
//! starving it.
//!
//! Sub-batch sorts, frame compression and frame decompression run as
//! `pool.spawn` jobs whose result comes back on a `bounded(1)` channel
//! (ARCHITECTURE.md: ordering of parallel results). If the waiting thread is
//! itself a worker of that pool (a caller inside `pool.install`, or a pool of
//! one thread), a plain blocking `recv` could hold the very thread the job
//! needs, so a worker runs other pool jobs while it waits. A job that panics
//! drops its sender; the waiter then gets an error, never a hang or a skip.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use rayon::{ThreadPool, Yield};

use crate::error::{Result, SortError};

/// How long a pool worker sleeps on the channel when the pool had no job for
/// it before looking again. Short: it only happens when every job is already
/// running on another worker.
const IDLE_POLL: Duration = Duration::from_micros(200);

/// Spawns `job` on `pool`; its return value arrives on the receiver. A panic
/// in `job` is caught (so it cannot abort the process through rayon's
/// default handler) and shows up as a disconnected receiver.
pub(crate) fn spawn<T, F>(pool: &ThreadPool, job: F) -> Receiver<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = crossbeam_channel::bounded(1);
    pool.spawn(move || {
        if let Ok(value) = catch_unwind(AssertUnwindSafe(job)) {
            // The receiver may be gone if the waiter gave up on an error.
            let _ = tx.send(value);
        }
    });
    rx
}

/// Waits for the result of a job started with [`spawn`]; `what` names the
/// job in the error if it panicked.
pub(crate) fn wait<T>(pool: &ThreadPool, rx: &Receiver<T>, what: &'static str) -> Result<T> {
    let lost = || SortError::Worker { what };
    if pool.current_thread_index().is_none() {
        return rx.recv().map_err(|_| lost());
    }
    loop {
        match rx.try_recv() {
            Ok(value) => return Ok(value),
            Err(TryRecvError::Disconnected) => return Err(lost()),
            Err(TryRecvError::Empty) => {}
        }
        if pool.yield_now() == Some(Yield::Executed) {
            continue;
        }
        match rx.recv_timeout(IDLE_POLL) {
            Ok(value) => return Ok(value),
            Err(RecvTimeoutError::Disconnected) => return Err(lost()),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_on_a_one_thread_pool_from_inside_it_completes() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let got = pool.install(|| {
            let rx = spawn(&pool, || 6 * 7);
            wait(&pool, &rx, "test job")
        });
        assert_eq!(got.expect("job ran"), 42);
    }

    #[test]
    fn a_panicking_job_is_an_error() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let rx = spawn(&pool, || -> u32 { panic!("boom") });
        let err = wait(&pool, &rx, "test job").expect_err("job panicked");
        assert!(matches!(err, SortError::Worker { what: "test job" }));
    }
}
