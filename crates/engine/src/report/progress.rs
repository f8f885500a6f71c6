//! Progress and accounting: how far a long sort has got, per-phase wall and
//! CPU times, and the numbers `--stats-json` keeps for pipelines.
//!
//! The display has two forms. On a terminal it is one live line, redrawn
//! four times a second and cut to the terminal's width (the bar is dropped
//! before the line would wrap). When stderr is a log (`--progress` with
//! stderr not a terminal) it is a plain line every `--progress-interval`
//! seconds (10 by default) and a final line. Without `--progress` a
//! non-terminal stderr gets nothing. Counts are shown with k/M/G and one
//! decimal at most, bytes with binary units, and every number says its unit.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The phases a run goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Reading, keying, sorting sub-batches and spilling runs.
    ReadSort,
    /// Waiting for spills and merging the runs the final merge cannot hold
    /// open: no records move to the output yet.
    MergeRuns,
    /// The final merge, compression and writing.
    Write,
}

impl Phase {
    /// The name in phase times and `--stats-json`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::ReadSort => "read and sort",
            Phase::MergeRuns => "merge runs",
            Phase::Write => "merge and write",
        }
    }

    /// The short name on the live line.
    fn short(self) -> &'static str {
        match self {
            Phase::ReadSort => "reading",
            Phase::MergeRuns => "merging runs",
            Phase::Write => "writing",
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

/// The reading thread's CPU seconds, known once it has finished.
#[derive(Clone, Default)]
pub struct ScanTime(Arc<AtomicU64>);

impl ScanTime {
    pub fn seconds(&self) -> f64 {
        self.0.load(Ordering::Relaxed) as f64 / 1e9
    }

    /// Runs the reading thread's loop, then keeps its CPU seconds here.
    pub(crate) fn timer(&self) -> impl FnOnce(&mut dyn FnMut()) + Send + 'static {
        let time = self.clone();
        move |run: &mut dyn FnMut()| {
            let start = thread_cpu_seconds();
            run();
            let secs = thread_cpu_seconds() - start;
            time.0.store((secs * 1e9) as u64, Ordering::Relaxed);
        }
    }
}

/// CPU seconds the calling thread has used (Linux `CLOCK_THREAD_CPUTIME_ID`):
/// time spent working, not time blocked. The serial stages' figures in
/// `--stats-json` (`serial_seconds`) are differences of this.
pub fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes a caller-owned timespec.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
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

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Display {
    Off,
    /// One line redrawn in place (stderr is a terminal).
    Live,
    /// A plain line every interval, and one at the end (stderr is a log).
    Lines(Duration),
}

/// Seconds between plain progress lines when `--progress-interval` is not given.
pub const DEFAULT_INTERVAL_S: f64 = 10.0;
const LIVE_PERIOD: Duration = Duration::from_millis(250);

impl Display {
    /// `forced`: `--progress` / `--no-progress`; `interval`: `--progress-interval`.
    pub fn choose(forced: Option<bool>, interval: Option<f64>, terminal: bool) -> Display {
        match (forced.unwrap_or(terminal), terminal) {
            (false, _) => Display::Off,
            (true, true) => Display::Live,
            (true, false) => Display::Lines(Duration::from_secs_f64(
                interval.unwrap_or(DEFAULT_INTERVAL_S),
            )),
        }
    }
}

/// Whether the live line is drawn, and whether drawing has stopped for good.
#[derive(Debug, Default)]
struct ScreenState {
    drawn: bool,
    closed: bool,
}

/// The terminal's live progress line, as a handle the caller makes and
/// hands both to the run that draws it ([`Progress::new`], through
/// `Config::screen`) and to whatever must clear it before the process
/// exits ([`Screen::clear_for_exit`]: the binary's signal thread). No
/// process-wide state: a library run (Python, a Ray task) gets a screen of
/// its own.
#[derive(Debug, Clone, Default)]
pub struct Screen(Arc<Mutex<ScreenState>>);

const CLEAR_LINE: &[u8] = b"\r\x1b[K";

impl Screen {
    /// Erases the live line (if one is drawn) and stops further drawing;
    /// called by the signal thread just before it exits the process. It
    /// does not wait more than about 50 ms for a draw in progress (stderr
    /// may be blocked).
    pub fn clear_for_exit(&self) {
        for _ in 0..25 {
            match self.0.try_lock() {
                Ok(mut s) => {
                    if s.drawn {
                        let _ = std::io::stderr().write_all(CLEAR_LINE);
                        s.drawn = false;
                    }
                    s.closed = true;
                    return;
                }
                Err(std::sync::TryLockError::Poisoned(p)) => {
                    p.into_inner().closed = true;
                    return;
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_millis(2))
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScreenState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Width of the terminal on stderr (80 when it cannot be asked).
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a caller-owned, zeroed winsize.
    let ws = unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(2, libc::TIOCGWINSZ, &mut ws) != 0 {
            return 80;
        }
        ws
    };
    if ws.ws_col == 0 {
        80
    } else {
        ws.ws_col as usize
    }
}

struct PhaseState {
    phase: Phase,
    start: Instant,
    cpu: f64,
    /// Records read when the phase started (the write phase's total).
    records_at_start: u64,
}

/// What the progress thread and the run's stages share.
struct ProgressShared {
    records: AtomicU64,
    bytes: AtomicU64,
    input_offset: AtomicU64,
    written: AtomicU64,
    total_input: Option<u64>,
    started: Instant,
    phase: Mutex<PhaseState>,
    times: Mutex<Vec<PhaseTime>>,
    stop: Mutex<bool>,
    wake: Condvar,
    screen: Screen,
}

pub struct Progress {
    shared: Arc<ProgressShared>,
    display: Display,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// What the display shows at one moment (pure data, so the line formats
/// can be tested without a clock or a terminal).
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub phase: Phase,
    pub phase_elapsed_s: f64,
    pub elapsed_s: f64,
    pub records: u64,
    pub bytes: u64,
    /// Compressed input position and the input's size, when both are known.
    pub input_fraction: Option<f64>,
    pub written: u64,
}

impl Progress {
    /// `total_input`: the input file's size, for a fraction and an ETA.
    /// `screen`: where the live line is drawn (and cleared on exit).
    pub fn new(display: Display, total_input: Option<u64>, screen: Screen) -> Progress {
        let now = Instant::now();
        let shared = Arc::new(ProgressShared {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            input_offset: AtomicU64::new(0),
            written: AtomicU64::new(0),
            total_input: total_input.filter(|&t| t > 0),
            started: now,
            phase: Mutex::new(PhaseState {
                phase: Phase::ReadSort,
                start: now,
                cpu: cpu_seconds(),
                records_at_start: 0,
            }),
            times: Mutex::new(Vec::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            screen,
        });
        let thread = match display {
            Display::Off => None,
            Display::Live | Display::Lines(_) => {
                let s = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name("alnsort-progress".into())
                    .spawn(move || s.report_loop(display))
                    .ok()
            }
        };
        Progress {
            shared,
            display,
            thread: Mutex::new(thread),
        }
    }

    /// Counts records read; `input_offset` is the compressed position (0 if unknown).
    pub fn add_records(&self, n: u64, bytes: u64, input_offset: u64) {
        let s = &self.shared;
        s.records.fetch_add(n, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        if input_offset > 0 {
            s.input_offset.store(input_offset, Ordering::Relaxed);
        }
    }

    /// Ends the current phase (recording its times) and starts `next`.
    pub fn enter(&self, next: Phase) {
        let s = &self.shared;
        let Ok(mut p) = s.phase.lock() else { return };
        let now = Instant::now();
        let cpu = cpu_seconds();
        if let Ok(mut t) = s.times.lock() {
            t.push(PhaseTime {
                phase: p.phase.label(),
                wall_s: (now - p.start).as_secs_f64(),
                cpu_s: cpu - p.cpu,
            });
        }
        *p = PhaseState {
            phase: next,
            start: now,
            cpu,
            records_at_start: s.records.load(Ordering::Relaxed),
        };
    }

    /// Records written to the output so far.
    pub fn set_output_position(&self, n: u64) {
        self.shared.written.store(n, Ordering::Relaxed);
    }

    /// Closes the current phase and the display (the plain form ends with a
    /// final line); returns all phase times.
    pub fn finish(&self) -> Vec<PhaseTime> {
        let s = &self.shared;
        if let Ok(p) = s.phase.lock() {
            let now = Instant::now();
            if let Ok(mut t) = s.times.lock() {
                t.push(PhaseTime {
                    phase: p.phase.label(),
                    wall_s: (now - p.start).as_secs_f64(),
                    cpu_s: cpu_seconds() - p.cpu,
                });
            }
        }
        self.stop_display();
        // The live line erases itself; what stays on the terminal (and ends
        // a log) is one summary line: records, time, rate, peak memory.
        if self.display != Display::Off {
            let elapsed = s.started.elapsed().as_secs_f64();
            let line = summary_line(
                self.display,
                elapsed,
                s.records.load(Ordering::Relaxed),
                peak_rss_bytes(),
            );
            let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
        }
        s.times.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Stops the reporting thread and erases the live line.
    fn stop_display(&self) {
        let s = &self.shared;
        if let Ok(mut stop) = s.stop.lock() {
            *stop = true;
        }
        s.wake.notify_all();
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
        }
    }

    pub fn records(&self) -> u64 {
        self.shared.records.load(Ordering::Relaxed)
    }
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for Progress {
    /// A run that fails must not leave the live line under its error message.
    fn drop(&mut self) {
        self.stop_display();
    }
}

impl ProgressShared {
    fn snapshot(&self) -> Snapshot {
        let (phase, start, at_start) = match self.phase.lock() {
            Ok(p) => (p.phase, p.start, p.records_at_start),
            Err(_) => (Phase::ReadSort, self.started, 0),
        };
        let offset = self.input_offset.load(Ordering::Relaxed);
        Snapshot {
            phase,
            phase_elapsed_s: start.elapsed().as_secs_f64(),
            elapsed_s: self.started.elapsed().as_secs_f64(),
            records: if phase == Phase::ReadSort {
                self.records.load(Ordering::Relaxed)
            } else {
                at_start
            },
            bytes: self.bytes.load(Ordering::Relaxed),
            input_fraction: match self.total_input {
                Some(t) if offset > 0 => Some((offset as f64 / t as f64).min(1.0)),
                _ => None,
            },
            written: self.written.load(Ordering::Relaxed),
        }
    }

    /// The reporting thread: draws until `stop`, then erases the live line.
    fn report_loop(&self, display: Display) {
        let period = match display {
            Display::Lines(d) => d,
            _ => LIVE_PERIOD,
        };
        let mut next = Instant::now()
            + if display == Display::Live {
                Duration::ZERO
            } else {
                period
            };
        loop {
            {
                let Ok(mut stop) = self.stop.lock() else {
                    break;
                };
                while !*stop {
                    let now = Instant::now();
                    if now >= next {
                        break;
                    }
                    stop = match self.wake.wait_timeout(stop, next - now) {
                        Ok((g, _)) => g,
                        Err(_) => return,
                    };
                }
                if *stop {
                    break;
                }
            }
            // A late wake (a loaded machine) does not make a burst of lines.
            next = (next + period).max(Instant::now() + period / 2);
            let snap = self.snapshot();
            match display {
                Display::Live => {
                    let line = live_line(&snap, terminal_width());
                    let mut sc = self.screen.lock();
                    if sc.closed {
                        return;
                    }
                    let mut buf = Vec::with_capacity(line.len() + 8);
                    buf.push(b'\r');
                    buf.extend_from_slice(line.as_bytes());
                    buf.extend_from_slice(b"\x1b[K");
                    let _ = std::io::stderr().write_all(&buf);
                    sc.drawn = true;
                }
                Display::Lines(_) => {
                    let line = format!("{}\n", log_line(&snap));
                    let _ = std::io::stderr().write_all(line.as_bytes());
                }
                Display::Off => {}
            }
        }
        if display == Display::Live {
            let mut sc = self.screen.lock();
            if sc.drawn {
                let _ = std::io::stderr().write_all(CLEAR_LINE);
                sc.drawn = false;
            }
        }
    }
}

/// A count with k/M/G and one decimal at most: `999`, `1.2 k`, `262 k`, `12.5 M`.
pub fn count_text(n: u64) -> String {
    const UNITS: [&str; 4] = ["", " k", " M", " G"];
    let mut v = n as f64;
    let mut u = 0;
    // 999,960 is "1.0 M", not "1000.0 k".
    while v >= 999.5 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    match u {
        0 => n.to_string(),
        _ if v < 99.95 => format!("{v:.1}{}", UNITS[u]),
        _ => format!("{v:.0}{}", UNITS[u]),
    }
}

fn records_text(n: u64) -> String {
    format!("{} records", count_text(n))
}

fn rate_text(per_s: f64) -> String {
    format!("{} rec/s", count_text(per_s.max(0.0).round() as u64))
}

/// `45s`, `3m05s`, `2h03m`.
pub fn duration_text(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// Rate of this phase's records and the fraction done, when known.
struct Measures {
    fraction: Option<f64>,
    rate: Option<f64>,
    eta_s: Option<f64>,
}

fn measures(s: &Snapshot) -> Measures {
    let t = s.phase_elapsed_s;
    let (fraction, moved) = match s.phase {
        Phase::ReadSort => (s.input_fraction, s.records),
        Phase::MergeRuns => (None, 0),
        Phase::Write => (
            (s.records > 0).then(|| (s.written as f64 / s.records as f64).min(1.0)),
            s.written,
        ),
    };
    let rate = (s.phase != Phase::MergeRuns && t >= 0.2 && moved > 0).then(|| moved as f64 / t);
    let eta_s = match fraction {
        Some(f) if f > 0.001 && t >= 1.0 && moved > 0 => Some(t * (1.0 - f) / f),
        _ => None,
    };
    Measures {
        fraction,
        rate,
        eta_s,
    }
}

/// The pieces after the phase name, most important first: the optional
/// uncompressed-bytes piece is the one dropped when space is short.
fn pieces(s: &Snapshot, m: &Measures) -> (Vec<String>, Option<String>) {
    let mut v = Vec::new();
    let mut bytes = None;
    match s.phase {
        Phase::ReadSort => {
            v.push(records_text(s.records));
            if let Some(r) = m.rate {
                v.push(rate_text(r));
            }
            bytes = Some(format!(
                "{} read (uncompressed)",
                crate::options::memsize::human(s.bytes)
            ));
        }
        Phase::MergeRuns => {
            v.push(format!("{} sorted", records_text(s.records)));
            v.push(format!("{} so far", duration_text(s.phase_elapsed_s)));
        }
        Phase::Write => {
            v.push(format!(
                "{}/{}",
                count_text(s.written),
                records_text(s.records)
            ));
            if let Some(r) = m.rate {
                v.push(rate_text(r));
            }
        }
    }
    if let Some(e) = m.eta_s {
        v.push(format!("ETA {}", duration_text(e)));
    }
    (v, bytes)
}

/// The live line for a terminal `width` columns wide: never longer than
/// `width - 1` (the last column would wrap on some terminals). The bar is
/// shown when it can be at least 10 columns wide; the uncompressed bytes
/// piece goes first when space is short, then the bar.
pub fn live_line(s: &Snapshot, width: usize) -> String {
    let max = width.saturating_sub(1).max(1);
    let m = measures(s);
    let (mut parts, bytes) = pieces(s, &m);
    let with_bytes = {
        let mut p = parts.clone();
        // The bytes piece sits before the ETA.
        if let Some(b) = &bytes {
            let at = if m.eta_s.is_some() {
                p.len() - 1
            } else {
                p.len()
            };
            p.insert(at, b.clone());
        }
        p
    };
    let head = s.phase.short();
    let mut tries: Vec<(bool, Vec<String>)> = Vec::new();
    if m.fraction.is_some() {
        tries.push((true, with_bytes.clone()));
        tries.push((true, parts.clone()));
    }
    tries.push((false, with_bytes));
    tries.push((false, std::mem::take(&mut parts)));
    let last = tries.len() - 1;
    for (n, (bar, p)) in tries.into_iter().enumerate() {
        let text = p.join(", ");
        let line = match (bar, m.fraction) {
            (true, Some(f)) => {
                let pct = format!("{:>3.0}%", f * 100.0);
                // head [bar] pct text
                let fixed = head.len() + 2 + 2 + pct.len() + 1 + text.len();
                if fixed + 10 > max {
                    continue;
                }
                // Capped so the bar does not swallow a wide terminal.
                let w = (max - fixed).min(30);
                let fill = ((f * w as f64).round() as usize).min(w);
                format!(
                    "{head} [{}{}] {pct} {text}",
                    "#".repeat(fill),
                    "-".repeat(w - fill)
                )
            }
            (true, None) => continue,
            (false, Some(f)) => format!("{head} {:.0}% {text}", f * 100.0),
            (false, None) => format!("{head}: {text}"),
        };
        if line.chars().count() <= max || n == last {
            return line.chars().take(max).collect();
        }
    }
    String::new()
}

/// The line left when the run ends: on a terminal `[alnsort] done: ...`
/// (at most 80 columns for any count below a billion records and a run
/// under a day), in a log the last progress line, stamped like the others.
pub fn summary_line(display: Display, elapsed_s: f64, records: u64, peak_rss: u64) -> String {
    // Seconds with a decimal for a short run, `3m05s`/`2h03m` after a minute.
    let took = if elapsed_s < 60.0 {
        format!("{elapsed_s:.1} s")
    } else {
        duration_text(elapsed_s)
    };
    let body = format!(
        "{} in {took}, {}, peak RSS {}",
        records_text(records),
        rate_text(records as f64 / elapsed_s.max(1e-3)),
        crate::options::memsize::human(peak_rss),
    );
    match display {
        Display::Lines(_) => format!("[alnsort] progress {elapsed_s:.1}s: done, {body}"),
        _ => format!("[alnsort] done: {body}"),
    }
}

/// One plain progress line for a log.
pub fn log_line(s: &Snapshot) -> String {
    let m = measures(s);
    let (mut parts, bytes) = pieces(s, &m);
    if let Some(b) = bytes {
        let at = if m.eta_s.is_some() {
            parts.len() - 1
        } else {
            parts.len()
        };
        parts.insert(at, b);
    }
    if let Some(f) = m.fraction {
        let what = if s.phase == Phase::ReadSort {
            "of the input"
        } else {
            "written"
        };
        parts.insert(1, format!("{:.0}% {what}", f * 100.0));
    }
    format!(
        "[alnsort] progress {:.1}s: {}, {}",
        s.elapsed_s,
        s.phase.label(),
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(phase: Phase, fraction: Option<f64>) -> Snapshot {
        Snapshot {
            phase,
            phase_elapsed_s: 5.3,
            elapsed_s: 9.0,
            records: 1_234_567_890,
            bytes: 1_500_000_000_000,
            input_fraction: fraction,
            written: 612_345_678,
        }
    }

    #[test]
    fn counts_have_one_decimal_at_most() {
        assert_eq!(count_text(999), "999");
        assert_eq!(count_text(1_234), "1.2 k");
        assert_eq!(count_text(261_951), "262 k");
        assert_eq!(count_text(999_960), "1.0 M");
        assert_eq!(count_text(12_500_000), "12.5 M");
        assert_eq!(count_text(3_000_000_000_000), "3000 G");
        assert_eq!(rate_text(261_951.639_6), "262 k rec/s");
        assert_eq!(duration_text(3.4), "3s");
        assert_eq!(duration_text(185.0), "3m05s");
        assert_eq!(duration_text(7380.0), "2h03m");
    }

    #[test]
    fn live_line_fits_and_keeps_the_bar_at_80_columns() {
        for phase in [Phase::ReadSort, Phase::MergeRuns, Phase::Write] {
            for f in [None, Some(0.0), Some(0.456), Some(1.0)] {
                for width in [20, 40, 80, 200] {
                    let l = live_line(&snap(phase, f), width);
                    assert!(l.chars().count() < width, "{width}: {l:?}");
                    assert!(l.is_ascii());
                }
                let l = live_line(&snap(phase, f), 80);
                let has_fraction =
                    (f.is_some() && phase == Phase::ReadSort) || phase == Phase::Write;
                assert_eq!(l.contains('['), has_fraction, "{l}");
                if phase != Phase::MergeRuns {
                    assert!(l.contains("rec/s"), "{l}");
                }
            }
        }
        let l = live_line(&snap(Phase::ReadSort, None), 80);
        assert!(
            l.contains("1.2 G records") && l.contains("1.36 TiB read (uncompressed)"),
            "{l}"
        );
        let l = live_line(&snap(Phase::Write, None), 80);
        assert!(
            l.contains("612 M/1.2 G records") && l.contains("ETA 5s"),
            "{l}"
        );
    }

    #[test]
    fn merging_runs_shows_no_rate_or_eta() {
        let l = live_line(&snap(Phase::MergeRuns, Some(1.0)), 80);
        assert_eq!(l, "merging runs: 1.2 G records sorted, 5s so far");
        assert!(!log_line(&snap(Phase::MergeRuns, None)).contains("ETA"));
    }

    #[test]
    fn log_line_has_phase_rate_and_eta() {
        let l = log_line(&snap(Phase::ReadSort, Some(0.5)));
        assert_eq!(
            l,
            "[alnsort] progress 9.0s: read and sort, 1.2 G records, 50% of the input, 233 M rec/s, \
             1.36 TiB read (uncompressed), ETA 5s"
        );
    }

    #[test]
    fn summary_line_names_records_time_rate_and_peak_memory() {
        let live = summary_line(Display::Live, 12.34, 4_319_596, 3 << 29);
        assert_eq!(
            live,
            "[alnsort] done: 4.3 M records in 12.3 s, 350 k rec/s, peak RSS 1.50 GiB"
        );
        // The widest counts a long run gives still fit 80 columns.
        let wide = summary_line(Display::Live, 86_399.9, 999_000_000, 1023 << 30);
        assert!(wide.chars().count() <= 80, "{} columns: {wide}", wide.len());
        let log = summary_line(
            Display::Lines(Duration::from_secs(10)),
            12.34,
            4_319_596,
            3 << 29,
        );
        assert_eq!(
            log,
            "[alnsort] progress 12.3s: done, 4.3 M records in 12.3 s, 350 k rec/s, \
             peak RSS 1.50 GiB"
        );
    }

    #[test]
    fn display_choice() {
        let ten = Display::Lines(Duration::from_secs(10));
        assert_eq!(Display::choose(None, None, true), Display::Live);
        assert_eq!(Display::choose(None, None, false), Display::Off);
        assert_eq!(Display::choose(Some(true), None, false), ten);
        assert_eq!(Display::choose(Some(false), None, true), Display::Off);
        assert_eq!(
            Display::choose(Some(true), Some(0.25), false),
            Display::Lines(Duration::from_millis(250))
        );
    }
}
