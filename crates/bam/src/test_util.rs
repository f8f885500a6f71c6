//! What the crate's tests share.

use std::sync::Arc;

/// The pool the readers' and writers' tests hand their jobs to: two
/// threads, so results come back from more than one worker.
pub(crate) fn pool() -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool"),
    )
}
