//! Progress and accounting: how far a long sort has got (a live display on a
//! terminal, nothing when stderr is a log), per-phase wall and CPU times, and
//! the numbers `--stats-json` keeps for pipelines.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The phases a run goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    ReadSort,
    Write,
}

impl Phase {
    pub fn label(self) -> &'static str {
        match self {
            Phase::ReadSort => "read and sort",
            Phase::Write => "merge and write",
        }
    }
}

/// One finished phase's times.
#[derive(Debug, Clone)]
pub struct PhaseTime {
    pub phase: &'static str,
    pub wall_s: f64,
    pub cpu_s: f64,
}

/// Process CPU time (user + system) in seconds.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills a caller-owned, zeroed struct.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Peak resident set size of this process in bytes: `VmHWM` of
/// /proc/self/status where there is one. `ru_maxrss` is the fallback only,
/// because Linux carries the pre-exec address space's peak into it, and a
/// parent that starts alnsort with vfork (Python's subprocess, posix_spawn)
/// makes that the *parent's* peak (measured: 76 MiB reported for a run that
/// used 6 MiB, started from pytest).
pub fn peak_rss_bytes() -> u64 {
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        });
    if let Some(kib) = hwm {
        return kib * 1024;
    }
    // SAFETY: as above.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    ru.ru_maxrss as u64 * 1024 // Linux reports KiB
}

pub struct Progress {
    records: AtomicU64,
    bytes: AtomicU64,
    input_offset: AtomicU64,
    total_input: Option<u64>,
    bar: Option<ProgressBar>,
    phase: Mutex<(Phase, Instant, f64)>,
    times: Mutex<Vec<PhaseTime>>,
}

impl Progress {
    /// `show`: draw on stderr. `total_input`: the input file's size, for an ETA.
    pub fn new(show: bool, total_input: Option<u64>) -> Progress {
        let bar = show.then(|| {
            let bar = match total_input {
                Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::stderr_with_hz(4)),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4)),
            };
            let style = if total_input.is_some() {
                "{prefix:>16} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} in ({bytes_per_sec}, ETA {eta}) {msg}"
            } else {
                "{prefix:>16} [{elapsed_precise}] {spinner} {msg}"
            };
            if let Ok(s) = ProgressStyle::with_template(style) {
                bar.set_style(s);
            }
            bar.set_prefix(Phase::ReadSort.label());
            bar.enable_steady_tick(Duration::from_millis(250));
            bar
        });
        Progress {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            input_offset: AtomicU64::new(0),
            total_input,
            bar,
            phase: Mutex::new((Phase::ReadSort, Instant::now(), cpu_seconds())),
            times: Mutex::new(Vec::new()),
        }
    }

    /// Counts records read; `input_offset` is the compressed position (0 if unknown).
    pub fn add_records(&self, n: u64, bytes: u64, input_offset: u64) {
        let r = self.records.fetch_add(n, Ordering::Relaxed) + n;
        let b = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if input_offset > 0 {
            self.input_offset.store(input_offset, Ordering::Relaxed);
        }
        if let Some(bar) = &self.bar {
            if r.is_multiple_of(65536) {
                if self.total_input.is_some() {
                    let off = self.input_offset.load(Ordering::Relaxed);
                    bar.set_position(if off > 0 { off } else { b });
                }
                bar.set_message(format!("{r} records, {} MiB", b >> 20));
            }
        }
    }

    /// Ends the current phase (recording its times) and starts `next`.
    pub fn enter(&self, next: Phase) {
        let Ok(mut p) = self.phase.lock() else { return };
        let now = Instant::now();
        let cpu = cpu_seconds();
        if let Ok(mut t) = self.times.lock() {
            t.push(PhaseTime {
                phase: p.0.label(),
                wall_s: (now - p.1).as_secs_f64(),
                cpu_s: cpu - p.2,
            });
        }
        *p = (next, now, cpu);
        if let Some(bar) = &self.bar {
            bar.set_prefix(next.label());
            if next != Phase::ReadSort {
                bar.set_length(self.records.load(Ordering::Relaxed));
                bar.set_position(0);
                if let Ok(s) = ProgressStyle::with_template(
                    "{prefix:>16} [{elapsed_precise}] {wide_bar} {pos}/{len} records ({per_sec}, ETA {eta})",
                ) {
                    bar.set_style(s);
                }
            }
        }
    }

    pub fn set_output_position(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(n);
        }
    }

    /// Closes the current phase and the display; returns all phase times.
    pub fn finish(&self) -> Vec<PhaseTime> {
        if let Ok(p) = self.phase.lock() {
            let now = Instant::now();
            if let Ok(mut t) = self.times.lock() {
                t.push(PhaseTime {
                    phase: p.0.label(),
                    wall_s: (now - p.1).as_secs_f64(),
                    cpu_s: cpu_seconds() - p.2,
                });
            }
        }
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        self.times.lock().map(|t| t.clone()).unwrap_or_default()
    }

    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}
