//! alnsort's runs as a library (sort, merge, duplicate marking, the distributed stages), called by the `alnsort` binary and the Python package alike; it installs no signal handling and changes no process state.

// This crate calls libc (descriptors, rusage, mkdtemp) and so has `unsafe`:
// each block says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod config;
pub mod error;
pub mod io;
pub mod markdup;
pub mod options;
pub mod report;
pub mod run;
pub mod stages;

pub use error::{error_text, Error};
