//! `alnsort markdup`'s run: a coordinate-sorted, fixmate'd input marked as samtools markdup 1.24 marks it (`alnsort_markdup::samtools`), streaming, and its statistics.

use crate::config::Config;
use crate::error::{Context, Error, Result};
use crate::io::cleanup::Debris;
use crate::io::input::{next_batch, spawn_batches};

use crate::options::samtools_markdup::SamtoolsMarkdupArgs;
use alnsort_bam::header::Header;
use alnsort_bam::reader::ScanOptions;
use alnsort_markdup::samtools::SamtoolsMarker;
use std::io::Write as _;
use std::sync::Arc;

/// What a run did.
#[derive(Debug, Clone)]
pub struct SamtoolsMarkdupReport {
    pub records: u64,
    pub stats: alnsort_markdup::samtools::Stats,
}

/// The `@HD SO` of a header.
fn sort_order(header: &Header) -> Option<String> {
    let hd = header.lines().iter().find(|l| l.starts_with(b"@HD"))?;
    hd.split(|&b| b == b'\t')
        .find(|f| f.starts_with(b"SO:"))
        .map(|f| String::from_utf8_lossy(&f[3..]).into_owned())
}

/// The IDs of the header's `@RG` lines, in order.
fn read_group_ids(header: &Header) -> Vec<Vec<u8>> {
    header
        .lines()
        .iter()
        .filter(|l| l.starts_with(b"@RG\t"))
        .filter_map(|l| {
            l.split(|&b| b == b'\t')
                .find(|f| f.starts_with(b"ID:"))
                .map(|f| f[3..].to_vec())
        })
        .collect()
}

/// Runs `alnsort markdup`: the output in place and the statistics
/// written, or an error with the output removed.
pub fn run(a: &SamtoolsMarkdupArgs, debris: &Debris) -> Result<SamtoolsMarkdupReport> {
    let r = run_inner(a, debris);
    if r.is_err() {
        debris.remove_all();
    }
    r
}

fn run_inner(a: &SamtoolsMarkdupArgs, debris: &Debris) -> Result<SamtoolsMarkdupReport> {
    let cfg: Config = crate::config::resolve(&a.sort)?;
    cfg.print_warnings();
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-worker")?;
    let input = crate::io::input::open_with_refs(&a.sort.input, Arc::clone(&pool), &cfg.refs)?;
    let name = input.name.clone();
    let header = input.header.clone();
    if sort_order(&header).as_deref() == Some("queryname") {
        return Err(Error::input(
            &name,
            "the header says SO:queryname: samtools markdup needs coordinate-sorted input \
             (samtools: \"error, queryname sorted, must be sorted by coordinate.\")",
        ));
    }
    let rgs = read_group_ids(&header);
    let rg_refs: Vec<&[u8]> = rgs.iter().map(Vec::as_slice).collect();
    let mut marker = SamtoolsMarker::new(a.marking.clone(), &rg_refs);
    let mut out_header = header.clone();
    if let Some(cl) = &cfg.pg {
        out_header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
    }
    let dest = crate::io::output::Destinations::prepare(&cfg, debris)?;
    let mut out = crate::io::output::Output::create(
        &cfg,
        dest,
        Arc::new(out_header),
        Arc::clone(&pool),
        debris,
    )?;
    let dec = crate::run::mark_in_order::decoder_for(&name, &header, &cfg);
    let depth = pool.current_num_threads() * 2 + 2;
    let (_, _, records) = input.into_records(ScanOptions::default());
    let (mut batches, _) = spawn_batches(&name, records, &pool, "read", depth, move |raw| {
        let mut bytes = Vec::with_capacity(raw.bytes());
        let mut starts = Vec::with_capacity(raw.voffsets.len());
        let mut warnings = Vec::new();
        dec.decode(
            raw,
            |_key, rec| {
                starts.push(bytes.len());
                bytes.extend_from_slice(rec);
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        Ok((bytes, starts, warnings))
    })?;
    // -S: the first pass's records go to a temporary file, read back for
    // the second pass (as samtools does).
    let mut first_pass = match marker.needs_second_pass() {
        true => Some(FirstPass::create(&cfg, debris)?),
        false => None,
    };
    let mut n = 0u64;
    let ref_name = |tid: i32| match usize::try_from(tid).ok().and_then(|t| header.refs().get(t)) {
        Some(r) => String::from_utf8_lossy(&r.name).into_owned(),
        None => "*".to_string(),
    };
    let failed = |e: alnsort_markdup::samtools::Error| {
        match e {
        alnsort_markdup::samtools::Error::NotSorted {
            record,
            name: qname,
            tid,
            pos,
            prev_tid,
            prev_pos,
        } => Error::input(
            &name,
            format!(
                "record {record} ({qname}) at {}:{pos} comes after {}:{prev_pos}: not in coordinate \
                 sorted order (samtools markdup: \"error, not in coordinate sorted order.\"); sort it first",
                ref_name(tid),
                ref_name(prev_tid)
            ),
        ),
        e => Error::Context {
            what: format!("{name}: samtools markdup"),
            source: Box::new(Error::from(e)),
        },
    }
    };
    while let Some(r) = next_batch(&mut batches, &name, n + 1, |(_, _, w)| w) {
        let (bytes, starts, _) = r?;
        for (i, &s) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(bytes.len());
            n += 1;
            marker.push(bytes[s..end].to_vec()).map_err(failed)?;
            drain("alnsort markdup", &mut marker, &mut out, &mut first_pass)?;
        }
    }
    marker.finish().map_err(failed)?;
    drain("alnsort markdup", &mut marker, &mut out, &mut first_pass)?;
    if let Some(f) = first_pass {
        f.replay(|rec| match marker.second_pass(rec) {
            Some(r) => out.write_record(&r),
            None => Ok(()),
        })?;
    }
    let stats = marker.stats();
    for w in marker.take_warnings() {
        eprintln!("alnsort markdup: {w}");
    }
    out.finish()?;
    if a.stats {
        write_stats(
            "alnsort markdup",
            &a.command_line,
            a.json,
            a.stats_file.as_deref(),
            &stats,
        )?;
    }
    Ok(SamtoolsMarkdupReport { records: n, stats })
}

/// `-S`'s temporary file of first-pass records (BAM records with their
/// `block_size`, back to back), in a private temporary directory.
pub(crate) struct FirstPass {
    _dir: crate::io::cleanup::TempDir,
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl FirstPass {
    pub(crate) fn create(cfg: &Config, debris: &Debris) -> Result<FirstPass> {
        let dir = crate::io::cleanup::TempDir::new(&cfg.temp_parent, "alnsort", debris)
            .with_context(|| {
                format!(
                    "cannot create a temporary directory in {}",
                    cfg.temp_parent.display()
                )
            })?;
        let path = dir.path().join("markdup-first-pass.bin");
        let file = std::fs::File::create(&path)
            .with_context(|| format!("{}: creating the -S pass file", path.display()))?;
        Ok(FirstPass {
            _dir: dir,
            path,
            file: std::io::BufWriter::with_capacity(1 << 20, file),
        })
    }

    pub(crate) fn write(&mut self, rec: &[u8]) -> Result<()> {
        self.file
            .write_all(rec)
            .with_context(|| format!("{}: writing the -S pass file", self.path.display()))
    }

    /// Reads the records back, in order, handing each to `each`.
    pub(crate) fn replay(mut self, mut each: impl FnMut(Vec<u8>) -> Result<()>) -> Result<()> {
        use std::io::Read as _;
        let what = |p: &std::path::Path| format!("{}: reading the -S pass file back", p.display());
        self.file.flush().with_context(|| what(&self.path))?;
        let f = std::fs::File::open(&self.path).with_context(|| what(&self.path))?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, f);
        loop {
            let mut size = [0u8; 4];
            match r.read_exact(&mut size) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e).with_context(|| what(&self.path)),
            }
            let len = u32::from_le_bytes(size) as usize;
            let mut rec = Vec::with_capacity(4 + len);
            rec.extend_from_slice(&size);
            rec.resize(4 + len, 0);
            r.read_exact(&mut rec[4..])
                .with_context(|| what(&self.path))?;
            each(rec)?;
        }
    }
}

/// The statistics to `-f FILE` (`stats_file`) or standard error, as
/// samtools writes them (a file that cannot be created: samtools' warning,
/// then standard error); `who` begins the warnings.
pub(crate) fn write_stats(
    who: &str,
    command_line: &str,
    json: bool,
    stats_file: Option<&str>,
    stats: &alnsort_markdup::samtools::Stats,
) -> Result<()> {
    let (text, warnings) = if json {
        stats.json(command_line)
    } else {
        stats.text(command_line)
    };
    for w in warnings {
        eprintln!("{who}: {w}");
    }
    if let Some(path) = stats_file {
        match std::fs::File::create(path) {
            Ok(mut f) => {
                return f
                    .write_all(text.as_bytes())
                    .with_context(|| format!("{path}: writing the statistics"));
            }
            Err(_) => eprintln!("{who}: warning, cannot write stats to {path}."),
        }
    }
    eprint!("{text}");
    Ok(())
}

/// Hands on what the marker has ready, in order: to the first-pass file
/// with `-S`, else to the output; its warnings printed after `who`.
pub(crate) fn drain(
    who: &str,
    marker: &mut SamtoolsMarker,
    out: &mut crate::io::output::Output,
    first_pass: &mut Option<FirstPass>,
) -> Result<()> {
    for w in marker.take_warnings() {
        eprintln!("{who}: {w}");
    }
    while let Some(rec) = marker.pop_ready() {
        match first_pass {
            Some(f) => f.write(&rec)?,
            None => out.write_record(&rec)?,
        }
    }
    Ok(())
}
