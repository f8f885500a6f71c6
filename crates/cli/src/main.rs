//! `alnsort`: maps argv to `alnsort::run` and its result to an exit code.
//! Everything else lives in the library so it can be tested and reused,
//! but for one symbol that only the program's executable may define.

fn main() {
    let code = alnsort::run(std::env::args_os().collect());
    std::process::exit(code);
}

/// The program's `sched_yield`: returns at once without entering the
/// kernel. The waits of the dependencies spin with `sched_yield` before
/// they sleep (rayon-core's idle workers 33 rounds, crossbeam-channel's
/// backoff 4 per blocking send or receive: 9,355 calls in one 400k-record
/// sort). On a machine with more runnable threads than cores each call
/// hands the core to another process for a whole time slice while the
/// thread still counts as awake, so a job queued to an idle worker, or a
/// block the writer thread waits for, sits behind other processes instead
/// of waking the thread: under a busy-loop load the sort's wall time was
/// twice its wall with this definition (LD_PRELOAD measurement in
/// bench/results/2026-11-27-loaded-speed22.md). Returning at once turns
/// those rounds into a short spin, after which the thread sleeps on its
/// futex and is woken when work arrives. An executable's definition takes
/// precedence over the C library's for every call in the process, so this
/// lives in the program only: the library (`alnsort::run_sort`, the Python
/// package) leaves the process's `sched_yield` alone.
#[cfg(target_os = "linux")]
#[no_mangle]
pub extern "C" fn sched_yield() -> std::ffi::c_int {
    0
}
