//! `alnsort fixmate`'s run: name-grouped input read in batches, each template fixed as samtools fixmate 1.24 fixes it (`alnsort_markdup::fixmate`: the templates inside a batch on the pool, those across batches on the reading thread), written in input order.

use crate::io::cleanup::Debris;

use crate::error::{Error, Result};
use crate::io::input::{next_batch, spawn_batches};
use crate::options::fixmate::FixmateArgs;
use alnsort_bam::reader::ScanOptions;
use alnsort_markdup::fixmate::{self as fm, Fixmate, TemplateCutter};
use std::sync::Arc;

/// What a run did.
#[derive(Debug, Clone, Copy)]
pub struct FixmateReport {
    pub records_in: u64,
    pub records_out: u64,
    pub templates: u64,
}

/// Runs `alnsort fixmate` as parsed; on error its files are removed.
pub fn run_fixmate(a: &FixmateArgs, debris: &Debris) -> Result<FixmateReport> {
    let r = run_inner(a, debris);
    if r.is_err() {
        debris.remove_all();
    }
    r
}

/// Records copied out of the reader's buffers: `bytes` holds them one
/// after another, each with its `block_size`, from the offsets `starts`.
#[derive(Default)]
struct CopiedRecords {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl CopiedRecords {
    fn push(&mut self, rec: &[u8]) {
        self.starts.push(self.bytes.len());
        self.bytes.extend_from_slice(rec);
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let ends = self.starts.iter().skip(1).copied();
        self.starts
            .iter()
            .zip(ends.chain([self.bytes.len()]))
            .map(|(&s, e)| &self.bytes[s..e])
    }
}

/// One input batch after its pool job: its first template (which may have
/// begun in the batch before), the templates wholly inside it already
/// fixed, and its last template (which may go on in the next batch).
/// A batch of one name is all `head`, with no `tail`.
struct FixedBatch {
    head: CopiedRecords,
    fixed: CopiedRecords,
    fixed_templates: u64,
    tail: Option<CopiedRecords>,
    records: u64,
    warnings: Vec<String>,
}

/// The pool job of a batch: the records decoded and cut into templates;
/// those between the first and the last are fixed here.
fn cut_and_fix(all: CopiedRecords, fixer: &Fixmate, warnings: Vec<String>) -> FixedBatch {
    let recs: Vec<&[u8]> = all.iter().collect();
    let runs = fm::template_runs(&recs);
    let gather = |range: std::ops::Range<usize>| {
        let mut out = CopiedRecords::default();
        for r in &recs[range] {
            out.push(r);
        }
        out
    };
    let mut piece = FixedBatch {
        head: CopiedRecords::default(),
        fixed: CopiedRecords::default(),
        fixed_templates: 0,
        tail: None,
        records: recs.len() as u64,
        warnings,
    };
    let Some(first) = runs.first().cloned() else {
        return piece;
    };
    piece.head = gather(first);
    if runs.len() > 1 {
        let mut template: Vec<Vec<u8>> = Vec::new();
        for run in &runs[1..runs.len() - 1] {
            template.clear();
            template.extend(recs[run.clone()].iter().map(|r| r.to_vec()));
            fixer.fix_template(&mut template);
            piece.fixed_templates += 1;
            for r in &template {
                piece.fixed.push(r);
            }
        }
        piece.tail = Some(gather(runs[runs.len() - 1].clone()));
    }
    piece
}

fn run_inner(a: &FixmateArgs, debris: &Debris) -> Result<FixmateReport> {
    let cfg = crate::config::resolve(&a.sort)?;
    cfg.print_warnings();
    let pool = crate::run::resources::worker_pool(cfg.threads, "alnsort-worker")?;
    let input = crate::io::input::open_with_refs(&cfg.input, Arc::clone(&pool), &cfg.refs)?;
    let name = input.name.clone();
    let so = input
        .header
        .lines()
        .iter()
        .find(|l| l.starts_with(b"@HD"))
        .and_then(|hd| {
            hd.split(|&b| b == b'\t')
                .skip(1)
                .find(|f| f.starts_with(b"SO:"))
                .map(|f| f[3..].to_vec())
        });
    fm::check_sort_order(so.as_deref()).map_err(|e| Error::input(&name, e.to_string()))?;
    let ref_lens = input.header.refs().iter().map(|r| r.len as i64).collect();
    let fixer = Arc::new(Fixmate::new(a.fix, ref_lens).map_err(|e| Error::Refused(e.to_string()))?);
    let mut header = input.header.clone();
    if let Some(cl) = &cfg.pg {
        header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
    }
    let dest = crate::io::output::Destinations::prepare(&cfg, debris)?;
    let mut out =
        crate::io::output::Output::create(&cfg, dest, Arc::new(header), Arc::clone(&pool), debris)?;
    let dec = crate::run::mark_in_order::decoder_for(&name, &input.header, &cfg);
    let (_, _, records) = input.into_records(ScanOptions::default());
    let depth = pool.current_num_threads() * 2 + 2;
    let job_fixer = Arc::clone(&fixer);
    let (mut batches, _) = spawn_batches(&name, records, &pool, "read", depth, move |raw| {
        let mut all = CopiedRecords {
            bytes: Vec::with_capacity(raw.bytes()),
            starts: Vec::new(),
        };
        let mut warnings = Vec::new();
        dec.decode(
            raw,
            |_key, rec| {
                all.push(rec);
                Ok(())
            },
            |w| warnings.push(w),
        )?;
        Ok(cut_and_fix(all, &job_fixer, warnings))
    })?;
    // The template that may go on in the next batch.
    let mut open = TemplateCutter::new();
    let (mut records_out, mut n_templates, mut records_in) = (0u64, 0u64, 0u64);
    // Fixes and writes a template gathered on this thread.
    let emit = |recs: &mut Vec<Vec<u8>>,
                out: &mut crate::io::output::Output,
                counts: (&mut u64, &mut u64)|
     -> Result<()> {
        fixer.fix_template(recs);
        *counts.1 += 1;
        for r in recs.iter() {
            out.write_record(r)?;
            *counts.0 += 1;
        }
        Ok(())
    };
    while let Some(p) = next_batch(&mut batches, &name, records_in + 1, |p| &p.warnings) {
        let p = p?;
        for rec in p.head.iter() {
            if open.starts_new(rec) {
                open.take(|t| emit(t, &mut out, (&mut records_out, &mut n_templates)))?;
            }
            open.push(rec);
        }
        if let Some(tail) = &p.tail {
            open.take(|t| emit(t, &mut out, (&mut records_out, &mut n_templates)))?;
            for rec in p.fixed.iter() {
                out.write_record(rec)?;
            }
            records_out += p.fixed.starts.len() as u64;
            n_templates += p.fixed_templates;
            for rec in tail.iter() {
                open.push(rec);
            }
        }
        records_in += p.records;
    }
    open.take(|t| emit(t, &mut out, (&mut records_out, &mut n_templates)))?;
    out.finish()?;
    Ok(FixmateReport {
        records_in,
        records_out,
        templates: n_templates,
    })
}
