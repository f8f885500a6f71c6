//! What a run tells its user: live progress and timings (`progress`) and the end-of-run statistics (`stats`).

pub mod progress;
pub mod qc;
pub mod stats;
