//! Duplicate marking in the distributed stages (`alnsort_engine::stages`):
//! the output and metrics of one-node `alnsort sort --markdup` from the
//! split/map/reduce dataflow.
//!
//! * **map** (with `--markdup` among the options): each record enters the
//!   map's sorter followed by its place in the input as 8 bytes,
//!   [`packed`]`(split ordinal, record index in the split)`, as one node
//!   appends the input ordinal ([`crate::markdup::ordinal_suffix`]); the
//!   blocks carry it to the reduce.
//! * **decide** ([`decide`]): the decision of one node over the whole input
//!   ([`crate::markdup_inputs::decide`]: the inputs read in Picard's merge
//!   order, the marker's state within the options' memory budget, read
//!   ends spilled beyond it), the duplicate and optical bits over
//!   input-order ordinals ([`Decisions::to_bytes`]) and the metrics. It
//!   reads the inputs itself, so it runs beside the maps. The read ends of
//!   the whole input are decided by this one task: the shuffle of read
//!   ends by duplicate key over several tasks is not built.
//! * **reduce** ([`crate::stages::reduce_marked`]): each record's packed
//!   place becomes its input ordinal (the split's first record's ordinal,
//!   from the maps' record counts: [`split_bases`], plus its index), and
//!   the record is written as one node writes it ([`Decisions::apply_at`]:
//!   0x400, `DT`, removal).
//! * **metrics**: [`write_metrics`] writes the text one node writes.

use std::path::{Path, PathBuf};

use crate::error::{bail, Context, Result};

use crate::cleanup::Debris;
use crate::markdup::{Decisions, MetricsFile};
use crate::options::SortOptions;
use alnsort_markdup::MetricsReport;

/// Bits of a packed place that hold the record's index in its split.
const INDEX_BITS: u32 = 40;

/// A record's place as a map appends it: split ordinal and index in the
/// split (up to 2^40 records per split, 2^24 splits).
pub fn packed(split: u32, index: u64) -> u64 {
    (split as u64) << INDEX_BITS | index
}

/// What [`decide`] gives: the decisions as bytes for the reduce tasks,
/// each input's record count (which [`split_bases`] checks), the metrics.
pub struct StageDecision {
    pub decisions: Vec<u8>,
    pub records: Vec<u64>,
    pub metrics: MetricsReport,
}

/// Decides duplicates over `inputs` as `alnsort sort --markdup IN...` does
/// on one node with `options`.
pub fn decide(inputs: &[PathBuf], options: &SortOptions) -> Result<StageDecision> {
    let mut cfg = crate::stages::stage_config(options, Path::new("stage.bam"), None)?;
    let Some(md) = cfg.markdup.clone() else {
        bail!(
            Refused,
            "the duplicate-marking stage needs --markdup among the options"
        );
    };
    cfg.inputs = inputs.iter().map(|p| p.display().to_string()).collect();
    cfg.input = cfg.inputs.first().cloned().unwrap_or_default();
    let pool = crate::worker_pool(cfg.threads, "alnsort-decide")?;
    let budget = crate::markdup_budget(&cfg)?;
    let debris = Debris::default();
    let d = crate::markdup_inputs::decide(
        &cfg,
        &md,
        budget,
        crate::several_inputs_merge_options(),
        &pool,
        &debris,
    )?;
    Ok(StageDecision {
        decisions: d.decisions.to_bytes(),
        records: d.records,
        metrics: d.decisions.metrics,
    })
}

/// The input ordinal of the first record of each split, by split ordinal,
/// from the maps' record counts (`split_records[s]`: split `s`'s), checked
/// against the decision's record count per input (`input_records`;
/// `split_inputs[s]`: split `s`'s input).
pub fn split_bases(
    split_records: &[u64],
    split_inputs: &[usize],
    input_records: &[u64],
) -> Result<Vec<u64>> {
    if split_records.len() != split_inputs.len() {
        bail!(
            Refused,
            "{} split record counts for {} splits",
            split_records.len(),
            split_inputs.len()
        );
    }
    let mut per_input = vec![0u64; input_records.len()];
    let mut bases = Vec::with_capacity(split_records.len());
    let mut at = 0u64;
    for (&n, &i) in split_records.iter().zip(split_inputs) {
        if i >= per_input.len() {
            bail!(
                Refused,
                "split of input {i}, but the decision read {} inputs",
                per_input.len()
            );
        }
        bases.push(at);
        at += n;
        per_input[i] += n;
    }
    if per_input != input_records {
        bail!(Refused,
            "the maps read {per_input:?} records per input, but duplicate marking decided on {input_records:?}: \
             an input changed during the run"
        );
    }
    Ok(bases)
}

/// The decisions a reduce applies, and where each split's records start
/// in input order.
pub struct Marks {
    pub decisions: Decisions,
    pub bases: Vec<u64>,
}

impl Marks {
    pub fn new(decisions: &[u8], bases: Vec<u64>, options: &SortOptions) -> Result<Marks> {
        let cfg = crate::stages::stage_config(options, Path::new("stage.bam"), None)?;
        let Some(md) = cfg.markdup.as_ref() else {
            bail!(
                Refused,
                "duplicate decisions given, but --markdup is not among the options"
            );
        };
        Ok(Marks {
            decisions: Decisions::from_bytes(decisions, md)?,
            bases,
        })
    }

    /// The record to write for `rec` as it comes out of a map's block
    /// (with its packed place); `None` when it is removed.
    pub fn apply<'a>(&self, rec: &[u8], buf: &'a mut Vec<u8>) -> Result<Option<&'a [u8]>> {
        let place = crate::markdup::record_ordinal(rec)?;
        let split = (place >> INDEX_BITS) as usize;
        let Some(&base) = self.bases.get(split) else {
            bail!(
                Internal,
                "a record of split {split}, beyond the {} splits",
                self.bases.len()
            );
        };
        let ordinal = base + (place & ((1 << INDEX_BITS) - 1));
        let body = &rec[..rec.len() - crate::markdup::ORDINAL_BYTES];
        self.decisions.apply_at(body, ordinal, buf)
    }
}

/// `options` with the duplicate-marking options of `argv` (`--markdup`,
/// `--metrics FILE`, `--tagging-policy all`, ...: the long names and values
/// `alnsort sort` takes, from its option table) applied; any other option
/// is refused by name.
pub fn with_markdup(options: &SortOptions, argv: &[String]) -> Result<SortOptions> {
    use crate::options::{OptId, OPTIONS};
    let mut o = options.clone();
    let mut args = argv.iter();
    while let Some(a) = args.next() {
        let (name, inline) = match a.strip_prefix("--").map(|n| n.split_once('=')) {
            Some(Some((n, v))) => (n, Some(v.to_string())),
            Some(None) => (&a[2..], None),
            None => bail!(
                Refused,
                "{a:?}: not a duplicate-marking option (--markdup, --metrics FILE, ...)"
            ),
        };
        let Some(spec) = OPTIONS
            .iter()
            .find(|s| s.long == Some(name) && matches!(s.id, OptId::Markdup(_)))
        else {
            bail!(
                Refused,
                "--{name}: not a duplicate-marking option of alnsort sort"
            );
        };
        let value = match (spec.value, inline) {
            (None, None) => None,
            (None, Some(_)) => bail!(Refused, "--{name} takes no value"),
            (Some(_), Some(v)) => Some(v),
            (Some(_), None) => match args.next() {
                Some(v) => Some(v.clone()),
                None => bail!(Refused, "--{name} needs a value"),
            },
        };
        o.apply(spec.id, value.map(Into::into))?;
    }
    Ok(o)
}

/// Writes the metrics file of `alnsort sort --markdup --metrics PATH`:
/// `inputs` and `output` as the user gave them, `command_line` the line
/// the file records.
pub fn write_metrics(
    metrics: &MetricsReport,
    path: &Path,
    inputs: &[String],
    output: Option<&Path>,
    command_line: &str,
) -> Result<()> {
    let debris = Debris::default();
    let f = MetricsFile::create(path, &debris)?;
    f.write(metrics, inputs, output, command_line)
        .with_context(|| format!("--metrics {}", path.display()))
}
