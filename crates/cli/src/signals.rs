//! Signals are the program's business, not the engine's: only the binary's
//! entry point installs the [`SignalGuard`]; a library run leaves the
//! caller's signal mask and handlers alone and removes its files itself
//! when it fails. On SIGINT/SIGTERM/SIGHUP the run's registered files
//! ([`Debris`]) are removed and the process exits 128 + the signal.
//!
//! Signals are handled without async-signal-unsafe work in a handler: they
//! are blocked in every thread (the mask is inherited by threads created
//! after `SignalGuard::install`), and one dedicated thread waits for them with
//! `sigwait`, removes what is registered, and exits the process. A signal
//! that was ignored when the process started (`nohup` ignores SIGHUP, shells
//! ignore SIGINT for background jobs) is left ignored: it is neither blocked
//! nor waited for, so it cannot stop the run.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::report::progress::Screen;
use std::io::{self, Write};

/// Blocks SIGINT/SIGTERM/SIGHUP in this thread (and so in every thread it
/// creates afterwards) and starts the thread that cleans up on them; those
/// of them that were ignored at startup stay ignored. Process-wide and
/// never undone: for the program's entry point only.
pub struct SignalGuard;

const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// True when SIG's disposition, as inherited from the parent, is SIG_IGN.
fn ignored_at_start(sig: libc::c_int) -> io::Result<bool> {
    // SAFETY: sigaction with a null new action only reads the current one
    // into a zeroed, locally owned struct.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(old.sa_sigaction == libc::SIG_IGN)
    }
}

/// Set by the signal thread before it removes the run's files.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Call on a failed run before reporting it: if a handled signal is being
/// acted on, the signal thread is removing the run's files and will end the
/// process with 128 + the signal; an error this thread met because those
/// files vanished must not win the race to exit, so this waits for that
/// exit. Returns at once otherwise.
pub fn yield_to_signal() {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

impl SignalGuard {
    /// Call before any other thread is created.
    pub fn install(debris: Debris, screen: Screen) -> io::Result<SignalGuard> {
        let mut handled = Vec::with_capacity(HANDLED.len());
        for s in HANDLED {
            if !ignored_at_start(s)? {
                handled.push(s);
            }
        }
        if handled.is_empty() {
            return Ok(SignalGuard);
        }
        // SAFETY: plain libc calls on a zeroed, locally owned sigset_t.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in &handled {
                libc::sigaddset(&mut set, s);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            set
        };
        let set = SigSet(set);
        std::thread::Builder::new().name("alnsort-signals".into()).spawn(move || {
            let set = set;
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is a valid initialised sigset_t owned by this thread.
                let r = unsafe { libc::sigwait(&set.0, &mut sig) };
                if r == 0 && handled.contains(&sig) {
                    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
                    debris.remove_all();
                    screen.clear_for_exit();
                    // Not `eprintln!`: it panics when stderr is a pipe
                    // whose reader has gone (a parent killed first), and
                    // a panic here would leave the run waiting in
                    // `yield_to_signal` for an exit that never comes.
                    let _ = writeln!(
                        io::stderr(),
                        "alnsort: interrupted by signal {sig}; temporary files and partial output removed"
                    );
                    // SAFETY: terminating the process; _exit runs no destructors
                    // that could race with the threads still working.
                    unsafe { libc::_exit(128 + sig) };
                }
            }
        })?;
        Ok(SignalGuard)
    }
}

/// Ends the process by SIGPIPE, as a Unix filter whose reader went away
/// does (the shell sees status 141). The Rust runtime ignores SIGPIPE so
/// that writes return EPIPE; this restores the default action and raises
/// it. Call after the run's own files are removed.
pub fn exit_by_sigpipe() -> ! {
    // SAFETY: plain libc calls; raise with SIG_DFL terminates the process,
    // and _exit is the fallback if it does not.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(libc::SIGPIPE);
        libc::_exit(128 + libc::SIGPIPE)
    }
}

struct SigSet(libc::sigset_t);
// SAFETY: a sigset_t is plain data; it is moved to one thread and only read there.
unsafe impl Send for SigSet {}
