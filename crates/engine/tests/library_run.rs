//! `alnsort_engine::run::sort::run_sort` as a library call (the Python package, a Ray task):
//! called twice in one process it gives both times the bytes of one call in
//! a fresh process (what the binary runs; tests/python checks the package
//! against the binary) and leaves the process as it found it: the calling
//! thread's signal mask, the open-file limit, and no signal-handling thread
//! left behind.
//!
//! One test in this file on purpose: it lowers the soft open-file limit of
//! the whole test process for its duration. The fresh process is this test
//! binary again, running the test with [`CHILD`] set: one sort, nothing else.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Set in the child process: the output of its one sort.
const CHILD: &str = "ALNSORT_LIBRARY_RUN_CHILD";

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/example.sam");

/// The options of every run here: `-@ 2` so the pool and its jobs are used,
/// no @PG (its CL would name the program path).
fn sort_args(output: &Path) -> Vec<OsString> {
    ["-@", "2", "--no-PG", "-O", "bam", "-o"]
        .iter()
        .map(OsString::from)
        .chain([output.as_os_str().to_owned(), OsString::from(EXAMPLE)])
        .collect()
}

fn library_sort(output: &Path) {
    let parsed = alnsort_engine::options::sort_args::parse("alnsort", sort_args(output), false)
        .expect("options parse");
    let alnsort_engine::options::sort_args::ParsedSort::Run(args) = parsed else {
        panic!("the options name a run");
    };
    let cfg = alnsort_engine::config::resolve(&args).expect("options resolve");
    alnsort_engine::run::sort::run_sort(cfg).expect("library sort succeeds");
}

fn blocked_signals() -> Vec<libc::c_int> {
    // SAFETY: pthread_sigmask with a null new set only reads the calling
    // thread's mask into a zeroed, locally owned sigset_t.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut set),
            0
        );
        (1..32)
            .filter(|&s| libc::sigismember(&set, s) == 1)
            .collect()
    }
}

fn nofile() -> (libc::rlim_t, libc::rlim_t) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    (lim.rlim_cur, lim.rlim_max)
}

fn set_soft_nofile(soft: libc::rlim_t) {
    let (_, hard) = nofile();
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `lim` is a valid rlimit; lowering the soft limit is always
    // allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn run_sort_twice_in_one_process_matches_a_fresh_process_and_changes_no_process_state() {
    if let Some(out) = std::env::var_os(CHILD) {
        library_sort(Path::new(&out));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("library_run.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test directory");

    // A soft limit below the hard one, so raising it would show.
    let (soft_at_start, hard) = nofile();
    let soft = soft_at_start.min(hard.saturating_sub(1)).min(4096);
    set_soft_nofile(soft);
    let limit_before = nofile();
    if limit_before.0 == limit_before.1 {
        eprintln!(
            "WARNING: RLIMIT_NOFILE soft == hard ({}): a raised limit cannot be detected here",
            limit_before.0
        );
    }
    let mask_before = blocked_signals();

    let first = dir.join("first.bam");
    let second = dir.join("second.bam");
    library_sort(&first);
    library_sort(&second);

    let mask_after = blocked_signals();
    let limit_after = nofile();
    let threads_after = thread_names();
    set_soft_nofile(soft_at_start);

    let status = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "run_sort_twice_in_one_process_matches_a_fresh_process_and_changes_no_process_state",
            "--test-threads=1",
        ])
        .env(CHILD, dir.join("fresh.bam"))
        .status()
        .expect("run the test binary again");
    assert!(status.success(), "the fresh process: {status}");

    let first = std::fs::read(&first).expect("first output");
    let second = std::fs::read(&second).expect("second output");
    let fresh = std::fs::read(dir.join("fresh.bam")).expect("the fresh process's output");
    let _ = std::fs::remove_dir_all(&dir);

    assert!(first.len() > 28, "the output holds records");
    assert!(first == second, "two library runs differ");
    assert!(
        first == fresh,
        "a run in a used process and one in a fresh process differ"
    );
    assert_eq!(mask_after, mask_before, "run_sort changed the signal mask");
    assert_eq!(limit_after, limit_before, "run_sort changed RLIMIT_NOFILE");
    assert!(
        !threads_after.iter().any(|n| n == "alnsort-signals"),
        "run_sort left a signal-handling thread: {threads_after:?}"
    );
}
