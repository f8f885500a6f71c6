//! What a run may use: its thread pool and how the memory budget is shared between the sorter, the duplicate marker, CRAM and the I/O reserve.

use crate::config::Config;
use crate::error::{Context, Error, Result};
use alnsort_bam::header::Header;
use std::sync::Arc;
/// Bytes of the total budget kept back for what the sorter does not own:
/// in-flight BGZF blocks of the reader and of the writer (4 per pool thread
/// each, 64 KiB compressed + 64 KiB payload), read batches in flight
/// (`alnsort_bam::reader::BATCH_BYTES`, 2 per thread + 4 counting the one
/// being cut and the one being handed over, each with its raw bytes, a
/// recycled raw buffer waiting for reuse, and its sort-layout copy with its
/// entries and keys: 3 batches' worth), and the program's own baseline
/// (about 6 MiB of code, stacks and allocator state). With an index
/// (`indexed`), each of the writer's blocks in flight also carries its
/// records' index notes (`alnsort_bgzf::UnitNote`: at most
/// `MAX_NOTES_PER_BLOCK`, in a vector that grows by doubling).
fn reserve_bytes(threads: usize, indexed: bool) -> u64 {
    let batch = alnsort_bam::reader::BATCH_BYTES as u64;
    let per_batch = batch * 3;
    let notes = match indexed {
        true => {
            alnsort_bgzf::MAX_NOTES_PER_BLOCK.next_power_of_two()
                * std::mem::size_of::<alnsort_bgzf::UnitNote>()
        }
        false => 0,
    } as u64;
    let per_thread = 2 * 4 * 2 * 65536 + 4 * notes + 2 * per_batch;
    (6 << 20) + 4 * per_batch + per_thread * threads as u64
}

/// What a CRAM run holds beside the records and the BAM reserve, for each
/// pool thread: the container being decoded or encoded (noodles' records
/// and blocks) and the decoded batches in flight. Measured: peak RSS above
/// `--max-memory` with only the references charged was 22, 36 and 62 MB at
/// -@1, -@2, -@4 (500,072 benchmark records in samtools' containers of
/// 10,000 records); containers of long reads are larger than this.
const CRAM_PER_THREAD: u64 = 16 << 20;
/// The same, once per run (the reader's container and the writer's).
const CRAM_BASE: u64 = 12 << 20;

/// Takes what a CRAM run holds outside the sorter from the sorter's share
/// of `--max-memory`: the reference sequences the reader and the writer
/// can hold at once ([`alnsort_cram::RefHolding::bytes`]: in coordinate
/// order those of the container jobs running, plus one kept; in any other
/// order all of them; the reader's are freed before the writer starts,
/// so the larger of the two) and the containers in flight
/// ([`CRAM_PER_THREAD`]). Too little left for the records is an error
/// naming the amounts.
pub(crate) fn charge_cram(
    budget: usize,
    header: &Header,
    threads: usize,
    total: u64,
    holdings: &[alnsort_cram::RefHolding],
) -> Result<usize> {
    let lengths: Vec<u64> = header.refs().iter().map(|r| r.len).collect();
    let refs = holdings
        .iter()
        .map(|h| h.bytes(&lengths, threads))
        .max()
        .unwrap_or(0);
    let need = refs + CRAM_BASE + CRAM_PER_THREAD * threads.max(1) as u64;
    let room = 2 << 20;
    match (budget as u64).checked_sub(need).filter(|&l| l >= room) {
        Some(left) => Ok(left as usize),
        None => Err(Error::Refused(format!(
            "--max-memory {} is too small for this CRAM run: of its {} reference sequence(s) \
             up to {} are held at once, and the containers in flight take about {} beside the \
             records; use --max-memory {} or more",
            crate::options::memsize::human(total),
            header.refs().len(),
            crate::options::memsize::human(refs),
            crate::options::memsize::human(need - refs),
            crate::options::memsize::human(total + (need + room).saturating_sub(budget as u64))
        ))),
    }
}

/// The smallest `--max-memory` accepted: below it the process's own
/// baseline and I/O buffers leave the sorter no useful room.
pub const MIN_TOTAL_BUDGET: u64 = 16 << 20;

/// Whether a run reads or writes CRAM, as far as the binary can tell
/// before it starts: CRAM output, or an input file (not standard input,
/// which cannot be read twice) that begins with the CRAM magic.
pub fn uses_cram<'a>(cram_out: bool, inputs: impl IntoIterator<Item = &'a str>) -> bool {
    use std::io::Read;
    cram_out
        || inputs.into_iter().any(|path| {
            if path == "-" {
                return false;
            }
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok_and(|()| &magic == alnsort_cram::MAGIC)
        })
}

/// `--markdup`'s memory out of the sorter's `budget`: a quarter of it,
/// taken from the sorter, with `--max-memory`; with `-m` alone (the record
/// buffer, as in samtools) as much again, beside the sorter. Also the
/// `--max-memory` total its messages name.
pub(crate) fn markdup_share(cfg: &Config, budget: &mut usize) -> (usize, Option<u64>) {
    match &cfg.markdup {
        Some(_) if cfg.explicit_total => {
            let share = *budget / 4;
            *budget -= share;
            (share, Some(cfg.memory_budget))
        }
        _ => (*budget, None),
    }
}

/// The memory `--markdup` may use in a run of `cfg` on its own (the
/// distributed decision, `crate::stages::markdup::decide`): as [`markdup_share`]
/// gives it out of the sorter's budget.
pub(crate) fn markdup_budget(cfg: &Config) -> Result<(usize, Option<u64>)> {
    let mut budget = sorter_budget(cfg, cfg.explicit_total)?;
    Ok(markdup_share(cfg, &mut budget))
}

pub(crate) fn sorter_budget(cfg: &Config, explicit_total: bool) -> Result<usize> {
    // A CRAM output's index (.crai) is built from containers, not notes.
    let noted =
        (cfg.index.is_some() || cfg.qc.any()) && cfg.format == crate::options::sort::OutFormat::Bam;
    let reserve = reserve_bytes(cfg.threads, noted);
    let budget = if explicit_total {
        if cfg.memory_budget < MIN_TOTAL_BUDGET.max(reserve + (2 << 20)) {
            return Err(Error::Refused(format!("--max-memory {} is too small: with {} thread(s) alnsort needs at least {} for I/O buffers plus \
                 room for records; use --max-memory {} or more",
                crate::options::memsize::human(cfg.memory_budget),
                cfg.threads,
                crate::options::memsize::human(reserve),
                crate::options::memsize::human(MIN_TOTAL_BUDGET.max(reserve + (2 << 20))))));
        }
        cfg.memory_budget - reserve
    } else {
        // samtools' -m is the record buffer (per thread x threads); keep
        // that meaning so -m 1M spills as often as samtools does.
        cfg.memory_budget
    };
    Ok(budget as usize)
}

/// samtools' record arena (`bam_sort_core_ext`, reference/samtools-sort.md
/// §4): each record takes `sizeof(bam1_t)` (80 bytes on LP64, measured)
/// plus its `l_data`, rounded up to 8. A framed BAM record here is
/// `l_data` plus 36 bytes (`block_size` and the 32 bytes of fixed fields,
/// which `bam1_t` holds in its 80), so it takes its length plus 44.
const SAMTOOLS_ARENA: alnsort_sort::ChunkFill = alnsort_sort::ChunkFill::Arena {
    overhead: 80 - 36,
    align: 8,
};

/// What fills the sorter's chunk: with `-m` (samtools' per-thread record
/// buffer), records count as samtools' arena counts them, so alnsort spills
/// exactly where samtools writes its first temporary file, never sooner;
/// with `--max-memory` (a whole-process total) what they hold here.
pub(crate) fn chunk_fill(explicit_total: bool) -> alnsort_sort::ChunkFill {
    if explicit_total {
        alnsort_sort::ChunkFill::Held
    } else {
        SAMTOOLS_ARENA
    }
}

/// The run's worker pool: `threads` workers (at least one) named
/// `{name}-{i}`; sort, merge and the stages each start one.
pub fn worker_pool(threads: usize, name: &'static str) -> Result<Arc<rayon::ThreadPool>> {
    Ok(Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(move |i| format!("{name}-{i}"))
            .build()
            .context("starting the thread pool")?,
    ))
}

/// The run's progress: the display `cfg` asks for (a live line only on a
/// terminal), over an input of `input_bytes` where known.
pub(crate) fn progress(
    cfg: &Config,
    input_bytes: Option<u64>,
) -> crate::report::progress::Progress {
    use std::io::IsTerminal;
    let display = crate::report::progress::Display::choose(
        cfg.progress,
        cfg.progress_interval,
        std::io::stderr().is_terminal(),
    );
    crate::report::progress::Progress::new(display, input_bytes, cfg.screen.clone())
}
