//! The one ordered-slot primitive of alnsort (ARCHITECTURE.md, "Ordering of
//! parallel results"): a job's result slot (a `bounded(1)` receiver) is
//! created and queued *before* the job is dispatched to the injected pool,
//! and the consumer takes slots in the order they were queued. Order holds
//! by construction whatever order workers finish in; the queue's bound gives
//! backpressure; a job that panics (caught here, so it can never abort the
//! process through rayon's default handler) or whose pool went away leaves
//! an empty slot, which the consumer gets as [`Lost`] naming the stage,
//! never as a skipped result or a hang.
//!
//! Waiting is pool-aware: when the waiting thread is itself a worker of the
//! pool the job runs on (a stage inside `pool.install`, or a pool of one
//! thread), a plain blocking wait could hold the very thread the job needs,
//! so a worker runs other pending pool jobs while it waits.
//!
//! Three shapes, one mechanism:
//! * [`spawn`] + [`Slot::wait`]: one job, one result.
//! * [`OrderedQueue`]: the caller pushes jobs and pops results in push order
//!   (bounded by the caller, who pops before pushing more).
//! * [`Ordered`]: a producer thread cuts work items and a consumer takes the
//!   results in production order (bounded FIFO between them). A producer
//!   that reads items from a source (a record scanner, a CRAM container
//!   reader) runs [`pump`], the one reader-thread loop.
//! * [`OrderedSink`]: the mirror of [`Ordered`]: the caller pushes jobs and
//!   a consumer thread takes their results in push order (the BGZF writer's
//!   thread, which writes the compressed blocks).
//!
//! Besides, [`varint`]: the workspace's one LEB128 varint, here because
//! this is the one crate every user of it already depends on; and
//! [`prefault`]: pool jobs that make a serially filled buffer's pages
//! resident ahead of its writes (its one `madvise` call is the crate's only
//! unsafe code).

#![deny(unsafe_code)]

pub mod prefault;
pub mod varint;

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{
    bounded, Receiver, RecvError, RecvTimeoutError, SendError, SendTimeoutError, Sender,
    TryRecvError,
};
use rayon::{ThreadPool, Yield};

/// A job's result never arrived: the job panicked, or the pool it was
/// queued on shut down before running it. `stage` names the pipeline stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {stage} job stopped without delivering its result (it panicked or its thread pool shut down)")]
pub struct Lost {
    pub stage: &'static str,
}

/// How long a pool worker sleeps on a channel when the pool had no job for
/// it, before looking for jobs again. Short, because it only applies when
/// every job is already running on another worker.
const IDLE_POLL: Duration = Duration::from_micros(200);

/// The pending result of one job started by [`spawn`].
#[must_use = "a slot holds a job's result; dropping it discards the result"]
pub struct Slot<T> {
    rx: Receiver<T>,
}

/// Runs `job` on `pool`. The slot is made before the job is queued; a panic
/// in `job` is caught and shows up as [`Lost`] when the slot is waited on.
pub fn spawn<T, F>(pool: &ThreadPool, job: F) -> Slot<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = bounded(1);
    pool.spawn(move || {
        if let Ok(value) = catch_unwind(AssertUnwindSafe(job)) {
            // The slot may be gone if the consumer gave up on an error.
            let _ = tx.send(value);
        }
    });
    Slot { rx }
}

impl<T> Slot<T> {
    /// Waits for the result, running `pool`'s jobs meanwhile if called from
    /// one of its workers. `stage` names the job in the error.
    pub fn wait(self, pool: &ThreadPool, stage: &'static str) -> Result<T, Lost> {
        recv(pool, &self.rx).map_err(|_| Lost { stage })
    }

    /// The result if the job has finished, without waiting.
    pub fn try_take(&self, stage: &'static str) -> Option<Result<T, Lost>> {
        match self.rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(Lost { stage })),
        }
    }
}

/// Jobs whose results are taken in the order the jobs were pushed.
pub struct OrderedQueue<T> {
    pool: Arc<ThreadPool>,
    stage: &'static str,
    slots: VecDeque<Slot<T>>,
}

impl<T: Send + 'static> OrderedQueue<T> {
    pub fn new(pool: Arc<ThreadPool>, stage: &'static str) -> Self {
        OrderedQueue {
            pool,
            stage,
            slots: VecDeque::new(),
        }
    }

    /// Queues the job's slot, then dispatches the job.
    pub fn push<F>(&mut self, job: F)
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let slot = spawn(&self.pool, job);
        self.slots.push_back(slot);
    }

    /// Results pending (queued and not yet popped).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The oldest pending result (waiting for it); `None` when none is
    /// pending.
    pub fn pop(&mut self) -> Option<Result<T, Lost>> {
        let slot = self.slots.pop_front()?;
        Some(slot.wait(&self.pool, self.stage))
    }

    /// The oldest pending result if it is already done.
    pub fn try_pop(&mut self) -> Option<Result<T, Lost>> {
        let r = self.slots.front()?.try_take(self.stage)?;
        self.slots.pop_front();
        Some(r)
    }

    /// Waits for every pending job and discards the results (for drop paths
    /// that must not leave jobs running against freed state).
    pub fn drain(&mut self) {
        while self.pop().is_some() {}
    }

    pub fn pool(&self) -> &Arc<ThreadPool> {
        &self.pool
    }
}

/// Results of an ordered map, in the order a producer thread emitted items.
pub struct Ordered<T> {
    pool: Arc<ThreadPool>,
    stage: &'static str,
    slots: Receiver<Slot<T>>,
    producer: Option<std::thread::JoinHandle<()>>,
}

impl<T: Send + 'static> Ordered<T> {
    /// Runs `produce` on its own thread; it calls `emit(item)` for each work
    /// item, which queues a slot and dispatches `work(item)` on `pool`, and
    /// returns false when the consumer is gone (stop producing). `depth`
    /// bounds the number of items in flight.
    pub fn spawn<I, P, W>(
        pool: Arc<ThreadPool>,
        stage: &'static str,
        depth: usize,
        produce: P,
        work: W,
    ) -> std::io::Result<Self>
    where
        I: Send + 'static,
        P: FnOnce(&mut dyn FnMut(I) -> bool) + Send + 'static,
        W: Fn(I) -> T + Send + Sync + 'static,
    {
        let (slot_tx, slots) = bounded::<Slot<T>>(depth.max(1));
        let work = Arc::new(work);
        let job_pool = Arc::clone(&pool);
        let producer = std::thread::Builder::new()
            .name(format!("alnsort-{stage}"))
            .spawn(move || {
                let mut emit = |item: I| -> bool {
                    let work = Arc::clone(&work);
                    // `spawn` makes the slot before it queues the job, and
                    // the slot enters the FIFO before the next item is cut.
                    let slot = spawn(&job_pool, move || work(item));
                    slot_tx.send(slot).is_ok()
                };
                produce(&mut emit);
            })?;
        Ok(Ordered {
            pool,
            stage,
            slots,
            producer: Some(producer),
        })
    }

    /// The next result in order; `None` when the producer is done.
    pub fn next_result(&mut self) -> Option<Result<T, Lost>> {
        let slot = recv(&self.pool, &self.slots).ok()?;
        Some(slot.wait(&self.pool, self.stage))
    }
}

impl<T> Drop for Ordered<T> {
    fn drop(&mut self) {
        // Closing the FIFO makes a producer blocked on it stop at its next
        // emit. It is not joined: it may be blocked reading a pipe, and the
        // consumer is going away anyway.
        let (_tx, empty) = bounded(0);
        drop(std::mem::replace(&mut self.slots, empty));
        drop(self.producer.take());
    }
}

/// Jobs pushed by the caller whose results a consumer thread takes in push
/// order: the caller's thread cuts the work, and `consume` (on its own
/// thread) gets each result through `next` until the caller finishes. The
/// FIFO between them holds at most `depth` pending slots; a push blocks
/// while it is full (running pool jobs meanwhile if the caller is a pool
/// worker).
pub struct OrderedSink<T, R> {
    pool: Arc<ThreadPool>,
    stage: &'static str,
    slots: Option<Sender<Slot<T>>>,
    done: Receiver<R>,
}

impl<T: Send + 'static, R: Send + 'static> OrderedSink<T, R> {
    /// Starts the consumer thread, named after `stage`. `consume` calls
    /// `next()` for each result in push order: `Some(Ok(value))`,
    /// `Some(Err(Lost))` for a job that delivered nothing, `None` once the
    /// caller has finished and every pushed result was taken. What
    /// `consume` returns is [`OrderedSink::finish`]'s result. When `consume`
    /// returns early (an error), later pushes return false.
    pub fn spawn<C>(
        pool: Arc<ThreadPool>,
        stage: &'static str,
        depth: usize,
        consume: C,
    ) -> std::io::Result<Self>
    where
        C: FnOnce(&mut dyn FnMut() -> Option<Result<T, Lost>>) -> R + Send + 'static,
    {
        let (slots, fifo) = bounded::<Slot<T>>(depth.max(1));
        let (done_tx, done) = bounded(1);
        let job_pool = Arc::clone(&pool);
        std::thread::Builder::new()
            .name(format!("alnsort-{stage}"))
            .spawn(move || {
                let mut next = || {
                    let slot = fifo.recv().ok()?;
                    Some(slot.wait(&job_pool, stage))
                };
                let _ = done_tx.send(consume(&mut next));
            })?;
        Ok(OrderedSink {
            pool,
            stage,
            slots: Some(slots),
            done,
        })
    }

    /// Dispatches `job` on the pool with its slot queued for the consumer.
    /// False when the consumer has stopped (then [`OrderedSink::finish`]
    /// says why).
    pub fn push<F>(&mut self, job: F) -> bool
    where
        F: FnOnce() -> T + Send + 'static,
    {
        let Some(slots) = &self.slots else {
            return false;
        };
        // The slot enters the FIFO before the next job is pushed, so the
        // consumer meets results in push order.
        let slot = spawn(&self.pool, job);
        send(&self.pool, slots, slot).is_ok()
    }

    /// Ends the stream and waits for what `consume` returns; [`Lost`] if
    /// its thread ended without returning (it panicked).
    pub fn finish(&mut self) -> Result<R, Lost> {
        self.slots = None;
        recv(&self.pool, &self.done).map_err(|_| Lost { stage: self.stage })
    }
}

/// The reader-thread loop of an [`Ordered`] producer: emits each item
/// `next` reads, in order, until `next` says the input is done (`Ok(None)`),
/// the consumer is gone (`emit` returns false), or `next` fails. An error is
/// emitted as the last item, so the consumer meets it in input order, after
/// every item read before it, and reports it with its place (file, offset,
/// record: the error's own context); nothing is read after it.
///
/// ```text
/// Ordered::spawn(pool, "read", depth, move |emit| pump(|| scanner.next_batch(), emit), decode)
/// ```
pub fn pump<I, E>(
    mut next: impl FnMut() -> Result<Option<I>, E>,
    emit: &mut dyn FnMut(Result<I, E>) -> bool,
) {
    loop {
        match next() {
            Ok(Some(item)) => {
                if !emit(Ok(item)) {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                emit(Err(e));
                return;
            }
        }
    }
}

/// `rx.recv()`, running `pool` jobs meanwhile if called from a worker of it.
pub fn recv<T>(pool: &ThreadPool, rx: &Receiver<T>) -> Result<T, RecvError> {
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
pub fn send<T>(pool: &ThreadPool, tx: &Sender<T>, value: T) -> Result<(), SendError<T>> {
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
mod tests;
