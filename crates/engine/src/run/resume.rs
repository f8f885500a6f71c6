//! `alnsort sort --resume DIR`: the sorter's runs kept in DIR with a manifest, so that the same command run again after a kill adopts them and reads the input only from where they end (docs/resume.md).
//!
//! Each spill's run, once complete, is hard-linked from the sorter's
//! temporary directory (made inside DIR) to `DIR/kept-NNNNNN.alnrun`,
//! fsync'd, checksummed, and recorded in the manifest, which is written
//! to a temporary name, fsync'd, renamed over `DIR/manifest` and the
//! directory fsync'd (`manifest.rs` holds the format). The record the runs
//! reach is a record number; for BAM read from a file the manifest also
//! keeps the virtual offset of the batch that holds it, so a rerun seeks
//! there and drops the batch's records before it; other inputs are read
//! again from the start and their first records dropped.
//!
//! A rerun's output is the same bytes whatever the runs' boundaries: the
//! sort is stable (equal keys keep their input order), the kept runs
//! hold the first records of the input and are merged first, in their
//! order, and the runs of the rerun follow (`alnsort_sort::durable`).
//!
//! The output itself (BAM, BGZF-compressed SAM) is kept as it is written:
//! it is hard-linked as `DIR/output.partial` when it starts, and every
//! [`OUTPUT_STEP`] bytes or so it is fsync'd and its length, block count
//! and checksum recorded in the manifest. A rerun killed in the final merge takes that file back
//! as its pending output, merges the runs again from the start and
//! deflates only the blocks after the kept ones; each kept block is
//! checked against the payload made again (`alnsort_bgzf::kept`).

pub mod manifest;

use crate::config::Config;
use crate::error::{bail, Context, Error, Result};
use alnsort_sort::durable::{file_crc32, RunHook, SpilledRun};
use alnsort_sort::Sorter;
use manifest::{KeptOutput, KeptRun, Manifest, Restart};
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The manifest's name inside DIR.
const MANIFEST: &str = "manifest";
/// Where the manifest is written before it is renamed over [`MANIFEST`].
const MANIFEST_TMP: &str = "manifest.tmp";
/// The input's header as SAM text (a rerun on standard input reads it
/// here instead of from the input).
const HEADER: &str = "header.sam";
/// Prefix of the kept runs' names.
const KEPT: &str = "kept-";
/// Prefix of the sorter's temporary directories inside DIR
/// (`io::cleanup::TempDir`'s stem).
pub(crate) const TEMP_STEM: &str = "alnsort";
/// Bytes of the input's start and end whose checksums are its fingerprint:
/// the BAM header and first blocks, and the last blocks with the EOF block.
const HEAD_BYTES: u64 = 1 << 20;
const TAIL_BYTES: u64 = 64 << 10;
/// Test hook (documented in docs/resume.md): the process kills itself with
/// SIGKILL once this many runs were recorded by it.
const KILL_AFTER_RUNS: &str = "ALNSORT_TEST_KILL_AFTER_RUNS";
/// The kept output's name inside DIR (a hard link to the pending output).
const OUTPUT_PARTIAL: &str = "output.partial";
/// Output bytes between two of its checkpoints (fsync and manifest): 64
/// MiB, a second or two of a sort's output at 16 threads, so a kill in
/// the final merge costs that much deflating again, and the fsyncs find
/// the output's writeback (`io::output::Writeback`) mostly done.
const OUTPUT_STEP: u64 = 64 << 20;
/// Test hook: output bytes between checkpoints instead of [`OUTPUT_STEP`].
const OUTPUT_STEP_VAR: &str = "ALNSORT_TEST_OUTPUT_STEP";
/// Test hook: the process kills itself with SIGKILL once this many
/// output checkpoints were recorded by it.
const KILL_AFTER_OUTPUT: &str = "ALNSORT_TEST_KILL_AFTER_OUTPUT";

/// What the output's writer tells the checkpoint thread: blocks and bytes
/// written, and, under the test hook, where to say the checkpoint is made.
type Told = (u64, u64, Option<crossbeam_channel::Sender<()>>);
/// Test hook: the process kills itself with SIGKILL at this point:
/// `merge` (input read, final merge about to start), `write` (every
/// record written to the pending output, before it is renamed).
const KILL_AT: &str = "ALNSORT_TEST_KILL_AT";

/// Where one input batch lies: its first record's number, its record
/// count and its first record's virtual offset (BAM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchPlace {
    pub first_record: u64,
    pub records: u64,
    pub voffset: u64,
}

/// The reading side of a resumed sort: which records to drop (those in
/// the kept runs) and where each batch read lies.
pub struct Tracker {
    skip_until: u64,
    bam: bool,
    places: Mutex<VecDeque<BatchPlace>>,
}

impl Tracker {
    /// Records before this one (0-based) are in kept runs: not taken.
    pub fn skip_until(&self) -> u64 {
        self.skip_until
    }

    /// Notes a batch read, in input order.
    pub(crate) fn note(&self, place: BatchPlace) {
        if let Ok(mut p) = self.places.lock() {
            p.push_back(place);
        }
    }

    /// Where reading starts again once the runs hold the first `records`
    /// records: the batch holding that record (BAM), else the start.
    fn restart(&self, records: u64) -> Restart {
        if !self.bam {
            return Restart::default();
        }
        let Ok(mut places) = self.places.lock() else {
            return Restart::default();
        };
        while places
            .front()
            .is_some_and(|p| p.first_record + p.records < records)
        {
            places.pop_front();
        }
        match places.front() {
            Some(p) if p.first_record <= records => Restart {
                voffset: Some(p.voffset),
                record: p.first_record,
            },
            _ => Restart::default(),
        }
    }
}

/// A sort's `--resume DIR`.
pub struct Resume {
    dir: PathBuf,
    stdin: bool,
    /// The manifest found in DIR, checked against this run.
    kept: Option<Manifest>,
    /// The manifest this run writes.
    now: Mutex<Manifest>,
    tracker: Arc<Tracker>,
    /// Runs recorded by this process (for the test hook).
    recorded: Mutex<usize>,
    /// The thread that makes the output's checkpoints durable.
    checkpoints: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Resume {
    /// Opens `--resume DIR` (`None` without it): refuses what cannot be
    /// resumed, makes DIR, and checks a manifest found there against this
    /// run (version, options, input), and each kept run against its size
    /// and checksum. Leftovers of a killed run (its temporary directory,
    /// a manifest never renamed, runs never recorded, its pending output)
    /// are removed.
    pub fn open(cfg: &Config) -> Result<Option<Arc<Resume>>> {
        let Some(dir) = cfg.resume.clone() else {
            return Ok(None);
        };
        let shown = dir.display();
        if cfg.markdup.is_some() {
            bail!(
                Refused,
                "--resume cannot be used with --markdup: the duplicate marker's state is not kept with the runs, so a resumed sort could not mark the records of the kept runs (docs/resume.md)"
            );
        }
        if cfg.inputs.len() > 1 {
            bail!(
                Refused,
                "--resume takes one input: several inputs are merged as they are read, and where each would be read again is not kept (docs/resume.md)"
            );
        }
        if cfg.output.is_none() {
            bail!(
                Refused,
                "--resume needs an output file (-o FILE): output written to standard output cannot be taken back when the sort is killed"
            );
        }
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("--resume {shown}: cannot create the directory"))?;
        // Standard input, or a pipe or device named by path (`<(...)`):
        // what cannot be read again.
        let stdin = cfg.input == "-" || std::fs::metadata(&cfg.input).is_ok_and(|m| !m.is_file());
        let mut now = Manifest {
            version: env!("CARGO_PKG_VERSION").to_string(),
            options: output_options(cfg),
            input: fingerprint(&cfg.input)
                .with_context(|| format!("--resume {shown}: reading input {}", cfg.input))?,
            ..Manifest::default()
        };
        let kept = read_kept(&dir, &now, stdin)?;
        if let Some(k) = &kept {
            now.runs = k.runs.clone();
            now.records = k.records;
            now.restart = k.restart;
            now.complete = k.complete;
            now.output = k.output;
        }
        remove_leftovers(&dir, kept.as_ref());
        // The killed run's pending files beside each destination: output,
        // index, QC text and reports.
        let dests = [
            cfg.output.as_ref(),
            cfg.index.as_ref().map(|i| &i.path),
            cfg.qc.flagstat.as_ref(),
            cfg.qc.idxstats.as_ref(),
            cfg.stats_json.as_ref(),
            cfg.mqc.as_ref(),
        ];
        for dest in dests.into_iter().flatten() {
            remove_dead_pending(dest);
        }
        let tracker = Arc::new(Tracker {
            skip_until: now.records,
            bam: false,
            places: Mutex::new(VecDeque::new()),
        });
        let resume = Resume {
            dir,
            stdin,
            kept,
            now: Mutex::new(now),
            tracker,
            recorded: Mutex::new(0),
            checkpoints: Mutex::new(None),
        };
        if resume.kept.is_none() {
            let now = resume.lock()?.clone();
            resume.write_manifest(&now)?;
        }
        Ok(Some(Arc::new(resume)))
    }

    /// DIR.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether every input record is in a kept run and the input is
    /// standard input: the rerun reads no input (its header is in DIR).
    pub fn needs_no_input(&self) -> bool {
        self.stdin && self.kept.as_ref().is_some_and(|k| k.complete)
    }

    /// Whether the sorter must spill its last chunk too (standard input:
    /// resumable only once every record is in a kept run).
    pub fn spill_last(&self) -> bool {
        self.stdin
    }

    /// The reading side, for `OpenInput::feed`. `bam`: the input is a BAM
    /// file read from a virtual offset on.
    pub fn tracker(&self, bam: bool) -> Arc<Tracker> {
        Arc::new(Tracker {
            skip_until: self.tracker.skip_until,
            bam,
            places: Mutex::new(VecDeque::new()),
        })
    }

    /// Where a BAM input is read again (`None`: from its start).
    pub fn restart(&self) -> Option<Restart> {
        self.kept
            .as_ref()
            .map(|k| k.restart)
            .filter(|r| r.voffset.is_some())
    }

    /// Hands the kept runs to `sorter` (hard links in its temporary
    /// directory `tmp`, which it deletes once merged), in order, and
    /// registers the hook that keeps each new run. Returns the records
    /// the kept runs hold.
    pub fn start(
        self: &Arc<Self>,
        sorter: &mut Sorter,
        tmp: &Path,
        tracker: Arc<Tracker>,
    ) -> Result<u64> {
        let mut held = 0;
        if let Some(k) = &self.kept {
            for run in &k.runs {
                let from = self.dir.join(&run.name);
                let to = tmp.join(format!("adopted-{}", run.name));
                link_or_copy(&from, &to).with_context(|| {
                    format!("--resume: cannot take kept run {} back", from.display())
                })?;
                held += sorter
                    .adopt_run(to)
                    .with_context(|| format!("--resume: kept run {}", from.display()))?;
            }
        }
        let me = Arc::clone(self);
        let hook: RunHook =
            Arc::new(move |run: &SpilledRun<'_>| me.keep(run, &tracker).map_err(|e| e.into()));
        sorter.set_durable(hook, self.spill_last());
        Ok(held)
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Manifest>> {
        self.now
            .lock()
            .map_err(|_| Error::Internal("the resume manifest's lock is poisoned".into()))
    }

    /// Keeps a finished spill's run (the hook, on the spill thread).
    fn keep(&self, run: &SpilledRun<'_>, tracker: &Tracker) -> Result<()> {
        let mut now = self.lock()?;
        let name = format!("{KEPT}{:06}.alnrun", now.runs.len() + 1);
        let path = self.dir.join(&name);
        let _ = std::fs::remove_file(&path);
        link_or_copy(run.path, &path)
            .with_context(|| format!("--resume: cannot keep run file {}", path.display()))?;
        let file = std::fs::File::open(&path)
            .with_context(|| format!("--resume: cannot open {}", path.display()))?;
        file.sync_all()
            .with_context(|| format!("--resume: cannot fsync {}", path.display()))?;
        let (bytes, crc) = file_crc32(&path)
            .with_context(|| format!("--resume: cannot read {}", path.display()))?;
        sync_dir(&self.dir)?;
        now.runs.push(KeptRun {
            name,
            records: run.records,
            bytes,
            crc,
        });
        now.records = run.records_end;
        now.restart = tracker.restart(run.records_end);
        self.write_manifest(&now)?;
        drop(now);
        let mut recorded = self
            .recorded
            .lock()
            .map_err(|_| Error::Internal("poisoned".into()))?;
        *recorded += 1;
        if std::env::var(KILL_AFTER_RUNS)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(*recorded)
        {
            kill_self();
        }
        Ok(())
    }

    /// Every input record is in a kept run (after the sorter's `finish`
    /// with `spill_last`).
    pub fn mark_complete(&self) -> Result<()> {
        let mut now = self.lock()?;
        if self.stdin && !now.complete {
            now.complete = true;
            self.write_manifest(&now)?;
        }
        Ok(())
    }

    /// Keeps the input's header (a rerun on standard input has no input
    /// to read it from).
    pub fn keep_header(&self, header: &alnsort_bam::header::Header) -> Result<()> {
        if !self.stdin || self.kept.is_some() {
            return Ok(());
        }
        self.write_atomically(HEADER, &header.to_sam_text())
    }

    /// The header kept by [`Resume::keep_header`].
    pub fn kept_header(&self) -> Result<alnsort_bam::header::Header> {
        let path = self.dir.join(HEADER);
        let text = std::fs::read(&path)
            .with_context(|| format!("--resume: cannot read the kept header {}", path.display()))?;
        alnsort_bam::header::parse_sam_header(text.split(|&b| b == b'\n').filter(|l| !l.is_empty()))
            .map_err(|e| Error::context(format!("--resume: kept header {}", path.display()), e))
    }

    /// The output's file and how its writer goes on (`io::output`): the
    /// pending output at `pending`, open as `file`, is replaced by the
    /// output a killed run kept in DIR when the manifest names one made
    /// for the same header (`header`, its SAM text), cut back to its
    /// durable length; and the writer's checkpoints are made durable and
    /// recorded on a thread of their own. A kept output that cannot be
    /// used (another header: the command line in its `@PG` changed; the
    /// file damaged) is said on standard error and the output is written
    /// from its start.
    pub fn output(
        self: &Arc<Self>,
        pending: &Path,
        dest: &Path,
        file: std::fs::File,
        header: &[u8],
    ) -> Result<(std::fs::File, alnsort_bgzf::Resuming)> {
        let header_crc = alnsort_sort::durable::crc32(header);
        let partial = self.dir.join(OUTPUT_PARTIAL);
        let kept = self.lock()?.output;
        let mut taken = None;
        if let Some(k) = kept {
            let why = if k.header_crc != header_crc {
                Err("it was written under another header (the @PG line holds the command line, which changed)".to_string())
            } else if same_file(&partial, dest) {
                // Killed after its output was renamed into place, before
                // DIR was cleared: going on in that file would change the
                // file at -o before the rerun has finished.
                Err(format!(
                    "it is {} already, renamed into place by the run that was killed",
                    dest.display()
                ))
            } else {
                take_partial(&partial, pending, k)
            };
            match why {
                Ok(found) => taken = Some(found),
                Err(why) => {
                    eprintln!(
                        "alnsort: --resume {}: the output kept in {} is not used: {why}; the output is written again from its start",
                        self.dir.display(),
                        partial.display()
                    );
                    let mut now = self.lock()?;
                    now.output = None;
                    self.write_manifest(&now)?;
                }
            }
        }
        let taken_back = taken.is_some();
        let kept_crc = match (&taken, kept) {
            (Some(_), Some(k)) => crc32fast::Hasher::new_with_initial_len(k.crc, k.bytes),
            _ => crc32fast::Hasher::new(),
        };
        let (file, kept) = match taken {
            Some(found) => found,
            // The pending output as reserved, or made again empty where
            // taking the kept one failed half way.
            None if kept.is_some() => {
                let _ = std::fs::remove_file(pending);
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(pending)
                    .with_context(|| format!("cannot create {}", pending.display()))?;
                (f, alnsort_bgzf::KeptBlocks::default())
            }
            None => (file, alnsort_bgzf::KeptBlocks::default()),
        };
        // A fresh output is linked into DIR now, before anything is
        // written, so that the checkpoints never touch a path (the pending
        // output is renamed into place when it is complete, perhaps before
        // the checkpoint thread has caught up). The manifest names it only
        // from the first checkpoint on; till then a rerun removes it.
        if !taken_back {
            let linked = std::fs::remove_file(&partial)
                .or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => Ok(()),
                    _ => Err(e),
                })
                .and_then(|()| std::fs::hard_link(pending, &partial))
                .map_err(Error::from)
                .and_then(|()| sync_dir(&self.dir));
            if let Err(e) = linked {
                eprintln!(
                    "alnsort: --resume {}: the output cannot be kept in {} ({}; DIR must be on the output's file system); the sort goes on, and a rerun would write the output again from its start",
                    self.dir.display(),
                    partial.display(),
                    crate::error::error_text(&e)
                );
                return Ok((file, alnsort_bgzf::Resuming::default()));
            }
        }
        let step = std::env::var(OUTPUT_STEP_VAR)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
            .unwrap_or(OUTPUT_STEP);
        // Read back (from the page cache) for the kept bytes' checksum, and
        // fsync'd, on the checkpoint thread.
        let synced = std::fs::File::open(pending)
            .with_context(|| format!("--resume: cannot open {} again", pending.display()))?;
        let hashed = (kept.end(), kept_crc);
        // Under the test hook that kills after the Nth checkpoint, the
        // writer waits for each checkpoint to be made, so that the count
        // does not depend on how far the checkpoint thread lags behind
        // (it takes the latest of those waiting otherwise).
        let in_step = std::env::var(KILL_AFTER_OUTPUT).is_ok();
        let (tx, rx) = crossbeam_channel::unbounded::<Told>();
        let me = Arc::clone(self);
        let pending = pending.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("alnsort-checkpoint".into())
            .spawn(move || me.checkpoints(rx, synced, &pending, header_crc, hashed))
            .context("--resume: cannot start the output's checkpoint thread")?;
        *self
            .checkpoints
            .lock()
            .map_err(|_| Error::Internal("poisoned".into()))? = Some(handle);
        let tell: alnsort_bgzf::Checkpoint = Box::new(move |blocks, bytes| {
            if in_step {
                let (done, made) = crossbeam_channel::bounded(1);
                if tx.send((blocks, bytes, Some(done))).is_ok() {
                    let _ = made.recv();
                }
            } else {
                let _ = tx.send((blocks, bytes, None));
            }
        });
        Ok((
            file,
            alnsort_bgzf::Resuming {
                kept,
                checkpoint: Some((step, tell)),
            },
        ))
    }

    /// The checkpoint thread: for each (blocks, bytes) the writer tells
    /// (the latest of those waiting), fsyncs the output (linked into DIR
    /// already), reads the new bytes back for their checksum, and records
    /// it in the manifest. A failure ends
    /// the checkpoints, said once on standard error: the output goes on,
    /// and a rerun writes it from the last checkpoint recorded.
    fn checkpoints(
        &self,
        rx: crossbeam_channel::Receiver<Told>,
        file: std::fs::File,
        pending: &Path,
        header_crc: u32,
        (mut hashed, mut crc): (u64, crc32fast::Hasher),
    ) {
        let mut made = 0usize;
        while let Ok(mut at) = rx.recv() {
            while let Ok(later) = rx.try_recv() {
                at = later;
            }
            let (blocks, bytes, done) = at;
            let mut step = || -> Result<()> {
                file.sync_data()
                    .with_context(|| format!("cannot fsync {}", pending.display()))?;
                hashed = crc_range(&file, &mut crc, hashed, bytes)
                    .with_context(|| format!("cannot read {} back", pending.display()))?;
                let mut now = self.lock()?;
                now.output = Some(KeptOutput {
                    blocks,
                    bytes,
                    crc: crc.clone().finalize(),
                    header_crc,
                });
                self.write_manifest(&now)
            };
            if let Err(e) = step() {
                eprintln!(
                    "alnsort: --resume {}: the output written from now on is not kept ({}); the sort goes on, and a rerun would write the output again from the last output kept",
                    self.dir.display(),
                    crate::error::error_text(&e),
                );
                return;
            }
            made += 1;
            if std::env::var(KILL_AFTER_OUTPUT)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                == Some(made)
            {
                kill_self();
            }
            if let Some(done) = done {
                let _ = done.send(());
            }
        }
    }

    /// The test hook's kill points (`ALNSORT_TEST_KILL_AT`).
    pub fn kill_point(&self, phase: &str) {
        if std::env::var(KILL_AT).is_ok_and(|v| v == phase) {
            kill_self();
        }
    }

    /// The sort succeeded and its output is in place: what alnsort put in
    /// DIR goes, the manifest first (a kill after it leaves runs no
    /// manifest names, which a rerun removes and sorts afresh; a kill
    /// before it leaves every run the manifest names), then DIR itself if
    /// nothing else is in it (a DIR given with files of its own keeps
    /// them).
    pub fn finished(&self) -> Result<()> {
        let checkpoints = self
            .checkpoints
            .lock()
            .map_err(|_| Error::Internal("poisoned".into()))?
            .take();
        if let Some(h) = checkpoints {
            // Its last manifest is written before this one is removed.
            let _ = h.join();
        }
        std::fs::remove_file(self.dir.join(MANIFEST)).with_context(|| {
            format!(
                "the sort finished and its output is complete, but removing --resume {}'s manifest failed",
                self.dir.display()
            )
        })?;
        sync_dir(&self.dir)?;
        self.kill_point("finish");
        remove_leftovers(&self.dir, None);
        let _ = std::fs::remove_file(self.dir.join(HEADER));
        let _ = std::fs::remove_file(self.dir.join(OUTPUT_PARTIAL));
        let _ = std::fs::remove_dir(&self.dir);
        Ok(())
    }

    fn write_manifest(&self, m: &Manifest) -> Result<()> {
        self.write_atomically(MANIFEST, m.to_text().as_bytes())
    }

    /// Writes DIR/`name` through a temporary name, fsync'd, renamed and
    /// the directory fsync'd.
    fn write_atomically(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let tmp = self.dir.join(if name == MANIFEST {
            MANIFEST_TMP.to_string()
        } else {
            format!("{name}.tmp")
        });
        let dest = self.dir.join(name);
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &dest)
        };
        write().with_context(|| format!("--resume: cannot write {}", dest.display()))?;
        sync_dir(&self.dir)
    }
}

/// Adds to a failed sort's error where its runs are kept and what to do.
pub fn explain_failure(cfg: &Config, e: Error) -> Error {
    let Some(dir) = &cfg.resume else { return e };
    if matches!(&e, Error::Refused(_)) || !dir.join(MANIFEST).is_file() {
        return e;
    }
    Error::context(
        format!(
            "the sort did not finish; the runs kept so far are in --resume {dir}: run the same command again to resume, or remove {dir} to start afresh",
            dir = dir.display()
        ),
        e,
    )
}

/// The options that decide the output bytes, by name: what a rerun must
/// give the same. Threads and memory do not change the output; the @PG
/// line, which holds the command line, is the rerun's own, as the header
/// is written by the rerun (the runs hold records only).
fn output_options(cfg: &Config) -> Vec<(String, String)> {
    vec![
        ("order".into(), format!("{:?}", cfg.order)),
        ("format".into(), format!("{:?}", cfg.format)),
        ("level".into(), cfg.level.to_string()),
        ("@HD".into(), format!("{:?}", cfg.hd)),
        ("@HD-unplaced".into(), format!("{:?}", cfg.hd_all_unplaced)),
        (
            "index".into(),
            format!("{:?}", cfg.index.as_ref().map(|i| i.kind)),
        ),
        (
            "unknown-reference".into(),
            format!("{:?}", cfg.unknown_reference),
        ),
        ("cram".into(), format!("{:?}", cfg.cram)),
        ("reference".into(), format!("{:?}", cfg.refs.fasta)),
        ("markdup".into(), cfg.markdup.is_some().to_string()),
    ]
}

/// The input's fingerprint: path, size, modification time and the
/// checksums of its first and last bytes (standard input, a pipe: its name
/// only).
fn fingerprint(input: &str) -> std::io::Result<Vec<(String, String)>> {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    if input == "-" || std::fs::metadata(input).is_ok_and(|m| !m.is_file()) {
        return Ok(vec![("path".into(), input.into())]);
    }
    let mut f = std::fs::File::open(input)?;
    let m = f.metadata()?;
    let path = std::fs::canonicalize(input).unwrap_or_else(|_| PathBuf::from(input));
    let mut out = vec![
        ("path".into(), path.display().to_string()),
        ("size".into(), m.len().to_string()),
        (
            "mtime".into(),
            format!("{}.{:09}", m.mtime(), m.mtime_nsec()),
        ),
    ];
    if m.is_file() {
        let mut head = Vec::new();
        (&mut f).take(HEAD_BYTES).read_to_end(&mut head)?;
        let from = m.len().saturating_sub(TAIL_BYTES);
        f.seek(SeekFrom::Start(from))?;
        let mut tail = Vec::new();
        f.read_to_end(&mut tail)?;
        let crc = alnsort_sort::durable::crc32;
        out.push(("head-crc32".into(), format!("{:08x}", crc(&head))));
        out.push(("tail-crc32".into(), format!("{:08x}", crc(&tail))));
    }
    Ok(out)
}

/// The manifest in DIR, if any, checked against this run and its runs
/// against their sizes and checksums.
fn read_kept(dir: &Path, now: &Manifest, stdin: bool) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let afresh = format!("remove {} to start afresh", dir.display());
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::context(
                format!("--resume: cannot read {}", path.display()),
                e,
            ))
        }
    };
    let kept = std::str::from_utf8(&text)
        .map_err(|_| manifest::ManifestError::Magic)
        .and_then(Manifest::parse)
        .map_err(|e| {
            Error::Refused(format!(
                "--resume: {} cannot be used: {e}; {afresh}",
                path.display()
            ))
        })?;
    let diffs = kept.differences(now);
    if !diffs.is_empty() {
        bail!(
            Refused,
            "--resume {}: the kept runs were made by a different sort, so they are not used: {} differ{}; {afresh}, or give another directory",
            dir.display(),
            diffs.join("; "),
            if diffs.len() == 1 { "s" } else { "" }
        );
    }
    if stdin && !kept.complete {
        bail!(
            Refused,
            "--resume {}: the input is standard input (or a pipe), which cannot be read again, and the kept runs hold only its first {} records (a sort on standard input resumes only once every record is in a kept run); {afresh} and sort the whole input again",
            dir.display(),
            kept.records
        );
    }
    for run in &kept.runs {
        let p = dir.join(&run.name);
        let refuse = |what: String| {
            Error::Refused(format!(
                "--resume: kept run {} {what}; it is not used, nor are the other runs; {afresh}",
                p.display()
            ))
        };
        let (bytes, crc) = file_crc32(&p).map_err(|e| refuse(format!("cannot be read ({e})")))?;
        if bytes != run.bytes {
            return Err(refuse(format!(
                "is {bytes} bytes, the manifest says {}",
                run.bytes
            )));
        }
        if crc != run.crc {
            return Err(refuse(format!(
                "fails its checksum (CRC-32 {crc:08x}, the manifest says {:08x})",
                run.crc
            )));
        }
    }
    Ok(Some(kept))
}

/// Removes what a killed run left in DIR and no manifest names: its
/// temporary directories, a manifest never renamed, runs kept after the
/// last manifest was written. Other files are left alone.
fn remove_leftovers(dir: &Path, kept: Option<&Manifest>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let named = |n: &str| kept.is_some_and(|k| k.runs.iter().any(|r| r.name == n));
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        if name.starts_with(&format!("{TEMP_STEM}.")) && p.is_dir() {
            let _ = std::fs::remove_dir_all(&p);
        } else if name == MANIFEST_TMP
            || name == format!("{HEADER}.tmp")
            || (name.starts_with(KEPT) && !named(&name))
            || (name == OUTPUT_PARTIAL && kept.is_none_or(|k| k.output.is_none()))
        {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Removes pending files of `dest` (`.NAME.alnsort-PID-N.tmp`, see
/// `io::cleanup::PendingFile`) whose process is gone: a killed run's
/// partial output or index.
fn remove_dead_pending(dest: &Path) {
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(name) = dest.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}.alnsort-");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = n.strip_prefix(&prefix).and_then(|r| r.strip_suffix(".tmp")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Takes the output a killed run kept (`partial`, at least `k.bytes`
/// long) as the pending output at `pending`: linked there in place of
/// the empty file, its blocks read back up to `k.bytes` and the rest (a
/// torn write after the last checkpoint) cut off; positioned at its end.
/// Why not, when it cannot be.
fn take_partial(
    partial: &Path,
    pending: &Path,
    k: KeptOutput,
) -> std::result::Result<(std::fs::File, alnsort_bgzf::KeptBlocks), String> {
    use std::io::Seek;
    // Checked before the pending output is touched.
    let f = std::fs::File::open(partial).map_err(|e| format!("it cannot be read ({e})"))?;
    let len = f
        .metadata()
        .map_err(|e| format!("it cannot be read ({e})"))?
        .len();
    if len < k.bytes {
        return Err(format!(
            "it is {len} bytes, shorter than the {} bytes the manifest says are on disk",
            k.bytes
        ));
    }
    let mut crc = crc32fast::Hasher::new();
    crc_range(&f, &mut crc, 0, k.bytes).map_err(|e| format!("it cannot be read ({e})"))?;
    let got = crc.finalize();
    if got != k.crc {
        return Err(format!(
            "its first {} bytes fail their checksum (CRC-32 {got:08x}, the manifest says {:08x})",
            k.bytes, k.crc
        ));
    }
    let blocks = alnsort_bgzf::KeptBlocks::scan(&f, k.bytes).map_err(|e| e.to_string())?;
    if blocks.len() != k.blocks {
        return Err(format!(
            "it holds {} blocks where the manifest says {}",
            blocks.len(),
            k.blocks
        ));
    }
    drop(f);
    let swap = || -> std::io::Result<std::fs::File> {
        std::fs::remove_file(pending)?;
        std::fs::hard_link(partial, pending)?;
        let mut f = std::fs::OpenOptions::new().write(true).open(pending)?;
        f.set_len(k.bytes)?;
        f.seek(std::io::SeekFrom::Start(k.bytes))?;
        Ok(f)
    };
    swap().map(|f| (f, blocks)).map_err(|e| {
        format!(
            "it cannot be taken as the pending output {} ({e})",
            pending.display()
        )
    })
}

/// Whether `a` and `b` are one file (the same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Adds bytes `[from, to)` of `file` to `crc`; returns `to`.
fn crc_range(
    file: &std::fs::File,
    crc: &mut crc32fast::Hasher,
    from: u64,
    to: u64,
) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; (1 << 20).min((to - from) as usize)];
    let mut at = from;
    while at < to {
        let n = buf.len().min((to - at) as usize);
        file.read_exact_at(&mut buf[..n], at)?;
        crc.update(&buf[..n]);
        at += n as u64;
    }
    Ok(to)
}

fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(_) => std::fs::copy(from, to).map(|_| ()),
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("--resume: cannot fsync directory {}", dir.display()))
}

/// The test hooks' kill: SIGKILL, as a preempted job gets.
fn kill_self() {
    // SAFETY: sends a signal to this process; nothing to uphold.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}
