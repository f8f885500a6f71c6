//! `alnsort fixmate`: samtools fixmate's command line ([`FIXMATE_OPTIONS`]) and run, each template of a name-grouped input edited by `alnsort_markdup::fixmate` and written in input order.
//!
//! The input is read as `alnsort sort` reads it (a scanning thread, decoding
//! on the pool, [`crate::input::spawn_batches`]); this thread cuts the
//! records into templates ([`Templates`]), fixes each and hands it to the
//! output ([`crate::output::Output`], compressing on the pool).

use crate::cleanup::Debris;
use crate::config;
use crate::error::{Error, Result};
use crate::input::{next_batch, spawn_batches};
use crate::options::{self, ArgError, Group, OptSpec, OrderFlag, SortOptions};
use crate::sort_args;
use alnsort_bam::reader::ScanOptions;
use alnsort_markdup::fixmate::{self as fm, Fixmate, Options, Sanitize, Templates};
use std::ffi::OsString;
use std::sync::Arc;

/// What an option of `alnsort fixmate` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixmateOptId {
    Remove,
    NoProperPairCheck,
    TemplateCigar,
    MateScore,
    Sanitize,
    Uncompressed,
    OutputFmt,
    OutputFmtOption,
    InputFmtOption,
    Reference,
    Threads,
    WriteIndex,
    NoPg,
    Verbosity,
    Help,
    Unsupported(&'static str),
}

impl options::OptionId for FixmateOptId {
    fn refused(self) -> Option<&'static str> {
        match self {
            FixmateOptId::Unsupported(why) => Some(why),
            _ => None,
        }
    }
}

/// One option of `alnsort fixmate` ([`FIXMATE_OPTIONS`]).
pub type FixmateSpec = OptSpec<FixmateOptId>;

/// A row of [`FIXMATE_OPTIONS`]; its help group follows from what it does.
const fn spec(
    id: FixmateOptId,
    short: Option<char>,
    long: Option<&'static str>,
    value: Option<&'static str>,
    help: &'static str,
    key: Option<&'static str>,
) -> FixmateSpec {
    use FixmateOptId::*;
    let group = match id {
        Uncompressed | OutputFmt | OutputFmtOption | WriteIndex | NoPg | Reference => Group::Output,
        Threads => Group::Resources,
        Unsupported(_) => Group::Unsupported,
        _ => Group::Other,
    };
    OptSpec {
        id,
        short,
        long,
        value,
        group,
        help,
        key,
    }
}

/// Every option `alnsort fixmate` knows (samtools fixmate 1.24's); the
/// parser and the help read it.
pub const FIXMATE_OPTIONS: &[FixmateSpec] = &[
    spec(
        FixmateOptId::Remove,
        Some('r'),
        None,
        None,
        "Remove unmapped reads and secondary alignments.",
        Some("remove"),
    ),
    spec(
        FixmateOptId::NoProperPairCheck,
        Some('p'),
        None,
        None,
        "Disable the FR proper pair check (0x2 is then never cleared).",
        Some("no_proper_pair_check"),
    ),
    spec(
        FixmateOptId::TemplateCigar,
        Some('c'),
        None,
        None,
        "Add the template cigar ct tag.",
        Some("template_cigar"),
    ),
    spec(
        FixmateOptId::MateScore,
        Some('m'),
        None,
        None,
        "Add the mate score tag ms (what samtools markdup needs).",
        Some("mate_score"),
    ),
    spec(
        FixmateOptId::Sanitize,
        Some('z'),
        Some("sanitize"),
        Some("FLAG[,FLAG]"),
        "Sanitize alignment fields: all (default: every fix but cigarx), none, off, on, pos, \
         mqual, unmap, cigar, cigdup, cigarx, aux.",
        None,
    ),
    spec(
        FixmateOptId::Unsupported(
            "fixing base modification tags (MM/ML/MN) to match hard clips is not implemented",
        ),
        Some('M'),
        None,
        None,
        "Fix base modification tags (MM/ML/MN).",
        Some("base_mods"),
    ),
    spec(
        FixmateOptId::Uncompressed,
        Some('u'),
        None,
        None,
        "Uncompressed output.",
        Some("uncompressed"),
    ),
    spec(
        FixmateOptId::OutputFmt,
        Some('O'),
        Some("output-fmt"),
        Some("FORMAT[,OPT[=VAL]]..."),
        "Output format: SAM, BAM or CRAM (default BAM, or as the output's name says), \
         with options as in --output-fmt-option.",
        None,
    ),
    spec(
        FixmateOptId::OutputFmtOption,
        None,
        Some("output-fmt-option"),
        Some("OPT[=VAL]"),
        "Output format option: level=N, reference=FILE, and CRAM's version, embed_ref, \
         no_ref, store_md, store_nm.",
        None,
    ),
    spec(
        FixmateOptId::InputFmtOption,
        None,
        Some("input-fmt-option"),
        Some("OPT=VAL"),
        "Input format option: reference=FILE (as --reference).",
        None,
    ),
    spec(
        FixmateOptId::Reference,
        None,
        Some("reference"),
        Some("FILE"),
        "Reference sequence FASTA FILE (CRAM input and output).",
        None,
    ),
    spec(
        FixmateOptId::Threads,
        Some('@'),
        Some("threads"),
        Some("INT"),
        "Number of additional threads to use.",
        None,
    ),
    spec(
        FixmateOptId::WriteIndex,
        None,
        Some("write-index"),
        None,
        "Ignored with a warning, as the output is not sorted by position.",
        None,
    ),
    spec(
        FixmateOptId::NoPg,
        None,
        Some("no-PG"),
        None,
        "Do not add a PG line.",
        None,
    ),
    spec(
        FixmateOptId::Verbosity,
        None,
        Some("verbosity"),
        Some("INT"),
        "Set the level of diagnostic output.",
        None,
    ),
    spec(
        FixmateOptId::Help,
        Some('h'),
        Some("help"),
        None,
        "Print this help and exit.",
        None,
    ),
];

/// The usage line.
pub const FIXMATE_USAGE: &str = "Usage: alnsort fixmate [-rpcmu] [-z FLAGS] [-O FMT] [-@ INT] <in.nameSrt.bam> <out.nameSrt.bam>";

/// `alnsort fixmate --help`, rendered from [`FIXMATE_OPTIONS`].
pub fn fixmate_help() -> String {
    let mut out = format!(
        "{FIXMATE_USAGE}\n\n\
         Fills in mate coordinates, TLEN, mate flags and the MQ, MC (and with -m ms,\n\
         with -c ct) tags of a file grouped by read name, as samtools fixmate 1.24 does.\n\
         The input must have the records of each read name together (collated or\n\
         name-sorted); coordinate-sorted input is refused. Use '-' for standard input\n\
         or output.\n\nOptions:\n"
    );
    for s in FIXMATE_OPTIONS {
        options::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// The command's entry for the man page and completions.
pub fn command_doc() -> crate::generate::CommandDoc {
    crate::generate::CommandDoc {
        name: "fixmate",
        summary: "Fill in mate information of name-grouped SAM, BAM or CRAM as samtools \
                  fixmate 1.24 does.",
        usage: FIXMATE_USAGE.trim_start_matches("Usage: ").to_string(),
        options: FIXMATE_OPTIONS
            .iter()
            .map(crate::generate::OptDoc::of)
            .collect(),
    }
}

/// Parsed `alnsort fixmate` arguments.
#[derive(Debug)]
pub struct FixmateArgs {
    /// Input, output, format and threads in `alnsort sort`'s terms.
    pub sort: SortOptions,
    pub fix: Options,
}

/// What parsing produced.
#[derive(Debug)]
pub enum ParsedFixmate {
    Run(Box<FixmateArgs>),
    /// Print [`fixmate_help`] and exit 0 (`--help`, or no arguments).
    Usage,
}

impl FixmateArgs {
    /// No option given yet; `command_line` is the @PG CL.
    pub fn new(command_line: String) -> FixmateArgs {
        let mut sort = SortOptions::new(command_line);
        // The output keeps the input's grouping (no index by position).
        sort.order = OrderFlag::Name;
        FixmateArgs {
            sort,
            fix: Options::default(),
        }
    }

    /// Applies one option of [`FIXMATE_OPTIONS`] (`None` for a flag).
    pub fn apply(&mut self, id: FixmateOptId, value: Option<&str>) -> Result<(), ArgError> {
        let text = || value.ok_or_else(|| ArgError::Invalid(format!("{id:?} needs a value")));
        let sort = &mut self.sort;
        match id {
            FixmateOptId::Remove => self.fix.remove = true,
            FixmateOptId::NoProperPairCheck => self.fix.proper_pair_check = false,
            FixmateOptId::TemplateCigar => self.fix.template_cigar = true,
            FixmateOptId::MateScore => self.fix.mate_score = true,
            FixmateOptId::Sanitize => {
                let v = text()?;
                self.fix.sanitize = Sanitize::parse(v).map_err(|e| ArgError::Value {
                    what: format!("-z {v}"),
                    source: Box::new(e),
                })?;
            }
            FixmateOptId::Uncompressed => sort.uncompressed = true,
            FixmateOptId::OutputFmt => options::parse_output_fmt(text()?, sort)?,
            FixmateOptId::OutputFmtOption => options::parse_fmt_option(text()?, sort)?,
            FixmateOptId::InputFmtOption => {
                let v = text()?;
                match v.split_once('=') {
                    Some(("reference", file)) => sort.reference = Some(file.into()),
                    _ => {
                        return Err(ArgError::Invalid(format!(
                            "--input-fmt-option {v}: alnsort takes reference=FILE only"
                        )))
                    }
                }
            }
            FixmateOptId::Reference => sort.reference = Some(text()?.into()),
            FixmateOptId::Threads => {
                sort.threads = options::parse_int("-@", text()?)?.max(0) as usize
            }
            FixmateOptId::WriteIndex => sort.write_index = true,
            FixmateOptId::NoPg => sort.no_pg = true,
            FixmateOptId::Verbosity => {
                sort.verbosity = options::parse_int("--verbosity", text()?)? as i32
            }
            FixmateOptId::Help | FixmateOptId::Unsupported(_) => {
                return Err(ArgError::Invalid(format!(
                    "{id:?} is not an option of a run: the parser acts on it"
                )))
            }
        }
        Ok(())
    }
}

/// Parses the arguments after `alnsort fixmate` (`argv0` begins the @PG
/// CL) with [`FIXMATE_OPTIONS`]: options, then the input and the output.
pub fn parse_fixmate(argv0: &str, rest: Vec<OsString>) -> Result<ParsedFixmate, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedFixmate::Usage);
    }
    let mut f = FixmateArgs::new(sort_args::stringify(argv0, "fixmate", &rest));
    let mut positional = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            positional.push(v.string()?);
            continue;
        }
        let s = sort_args::find_option(FIXMATE_OPTIONS, &arg)?;
        if let Some(refusal) = s.refusal() {
            return Err(refusal);
        }
        if s.id == FixmateOptId::Help {
            return Ok(ParsedFixmate::Usage);
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        f.apply(s.id, value.as_deref())?;
    }
    match <[String; 2]>::try_from(positional) {
        Ok([input, output]) => {
            f.sort.input = input;
            f.sort.output = output;
        }
        Err(p) => {
            return Err(ArgError::Invalid(format!(
                "expected an input and an output file, got {} argument(s): {FIXMATE_USAGE}",
                p.len()
            )))
        }
    }
    Ok(ParsedFixmate::Run(Box::new(f)))
}

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
struct Records {
    bytes: Vec<u8>,
    starts: Vec<usize>,
}

impl Records {
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
struct Piece {
    head: Records,
    fixed: Records,
    fixed_templates: u64,
    tail: Option<Records>,
    records: u64,
    warnings: Vec<String>,
}

/// The pool job of a batch: the records decoded and cut into templates;
/// those between the first and the last are fixed here.
fn cut_and_fix(all: Records, fixer: &Fixmate, warnings: Vec<String>) -> Piece {
    let recs: Vec<&[u8]> = all.iter().collect();
    let runs = fm::template_runs(&recs);
    let gather = |range: std::ops::Range<usize>| {
        let mut out = Records::default();
        for r in &recs[range] {
            out.push(r);
        }
        out
    };
    let mut piece = Piece {
        head: Records::default(),
        fixed: Records::default(),
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
    let cfg = config::resolve(&a.sort)?;
    cfg.print_warnings();
    let pool = crate::worker_pool(cfg.threads, "alnsort-worker")?;
    let input = crate::input::open_with_refs(&cfg.input, Arc::clone(&pool), &cfg.refs)?;
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
    let dest = crate::output::Destinations::prepare(&cfg, debris)?;
    let mut out =
        crate::output::Output::create(&cfg, dest, Arc::new(header), Arc::clone(&pool), debris)?;
    let dec = crate::mark_in_order::decoder_for(&name, &input.header, &cfg);
    let (_, _, records) = input.into_records(ScanOptions::default());
    let depth = pool.current_num_threads() * 2 + 2;
    let job_fixer = Arc::clone(&fixer);
    let (mut batches, _) = spawn_batches(&name, records, &pool, "read", depth, move |raw| {
        let mut all = Records {
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
    let mut open = Templates::new();
    let (mut records_out, mut n_templates, mut records_in) = (0u64, 0u64, 0u64);
    // Fixes and writes a template gathered on this thread.
    let emit = |recs: &mut Vec<Vec<u8>>,
                out: &mut crate::output::Output,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::OptionName;

    fn args(a: &[&str]) -> Result<ParsedFixmate, ArgError> {
        parse_fixmate("alnsort", a.iter().map(OsString::from).collect())
    }

    #[test]
    fn options_as_samtools_takes_them() {
        let ParsedFixmate::Run(f) =
            args(&["-rpcm", "-z", "on", "-O", "sam", "in.bam", "-"]).unwrap()
        else {
            panic!("a run")
        };
        assert!(f.fix.remove && !f.fix.proper_pair_check && f.fix.template_cigar);
        assert!(f.fix.mate_score);
        assert_eq!(
            f.fix.sanitize,
            Sanitize::parse("mqual,unmap,cigar,aux").unwrap()
        );
        assert_eq!(
            (f.sort.input.as_str(), f.sort.output.as_str()),
            ("in.bam", "-")
        );
        assert_eq!(f.sort.format, Some(crate::options::OutFormat::Sam));
        assert!(matches!(args(&[]), Ok(ParsedFixmate::Usage)));
        assert!(matches!(args(&["--help"]), Ok(ParsedFixmate::Usage)));
    }

    #[test]
    fn refusals_name_the_option() {
        let e = args(&["-M", "in.bam", "out.bam"]).unwrap_err();
        assert!(
            matches!(e, ArgError::Unsupported { ref option, .. } if option == "-M"),
            "{e}"
        );
        let e = args(&["-z", "bogus", "in.bam", "out.bam"]).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = args(&["in.bam"]).unwrap_err();
        assert!(e.to_string().contains("input and an output"), "{e}");
        assert!(args(&["-x", "in.bam", "out.bam"]).is_err());
    }

    #[test]
    fn help_lists_every_option() {
        let h = fixmate_help();
        for s in FIXMATE_OPTIONS {
            assert!(h.contains(&s.synopsis()), "help lacks {}", s.synopsis());
        }
    }
}
