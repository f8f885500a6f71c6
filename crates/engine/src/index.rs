//! `alnsort index`: samtools index's command line and files. A BAM gets the
//! BAI or CSI `samtools index` 1.24 writes (`alnsort_bam::index_file`, the
//! blocks inflated on the pool); a CRAM gets its `.crai`
//! (`alnsort_cram::crai`). The CSI and the `.crai` are compressed by zlib
//! where it can be loaded ([`zlib`]), as htslib compresses them, so their
//! bytes are samtools' too. Each index is written under a temporary name
//! beside its destination and renamed into place once whole, so a failure
//! leaves no index behind.

mod zlib;

use crate::cleanup::{Debris, PendingFile};
use crate::options::{push_help_entry, ArgError, Group, OptSpec, OptionId, OptionName};
use crate::sort_args;
use alnsort_bam::index_file::{index_bam, IndexBamError};
use alnsort_bgzf::ParallelReader;
use alnsort_index::IndexFormat;
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What an option of `alnsort index` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOptId {
    Bai,
    Csi,
    MinShift,
    Multiple,
    Output,
    Threads,
    Help,
    /// Refused when used, with this reason.
    Unsupported(&'static str),
}

impl OptionId for IndexOptId {
    fn refused(self) -> Option<&'static str> {
        match self {
            IndexOptId::Unsupported(why) => Some(why),
            _ => None,
        }
    }
}

/// A row of [`INDEX_OPTIONS`].
pub type IndexSpec = OptSpec<IndexOptId>;

const fn spec(
    id: IndexOptId,
    short: Option<char>,
    long: Option<&'static str>,
    value: Option<&'static str>,
    help: &'static str,
) -> IndexSpec {
    let group = match id {
        IndexOptId::Unsupported(_) => Group::Unsupported,
        IndexOptId::Threads => Group::Resources,
        IndexOptId::Help => Group::Other,
        _ => Group::Output,
    };
    OptSpec {
        id,
        short,
        long,
        value,
        group,
        help,
        key: None,
    }
}

/// samtools' global options that `samtools index` accepts as words but
/// refuses (its `getopt` falls to the usage message): refused here too, by
/// name.
const NOT_AN_INDEX_OPTION: &str = "samtools index does not take it either";

/// `BAM_LIDX_SHIFT` in htslib: the CSI bottom-bin shift when `-m` is not given.
pub const DEFAULT_MIN_SHIFT: i64 = 14;

/// Every option `alnsort index` knows (samtools index 1.24's `bcm:Mo:@:`
/// with its long names); the parser and the help read it.
pub const INDEX_OPTIONS: &[IndexSpec] = &[
    spec(
        IndexOptId::Bai,
        Some('b'),
        Some("bai"),
        None,
        "Generate a BAI index for BAM files [default].",
    ),
    spec(
        IndexOptId::Csi,
        Some('c'),
        Some("csi"),
        None,
        "Generate a CSI index for BAM files.",
    ),
    spec(
        IndexOptId::MinShift,
        Some('m'),
        Some("min-shift"),
        Some("INT"),
        "Generate a CSI index with bottom bins of 2^INT bases [14]; 0 or less \
         gives a BAI, as in samtools.",
    ),
    spec(
        IndexOptId::Multiple,
        Some('M'),
        None,
        None,
        "Take every file argument as a file to index.",
    ),
    spec(
        IndexOptId::Output,
        Some('o'),
        Some("output"),
        Some("FILE"),
        "Write the index to FILE [alternative to <out.index> in the arguments; \
         default <in>.bai, <in>.csi or <in>.crai].",
    ),
    spec(
        IndexOptId::Threads,
        Some('@'),
        Some("threads"),
        Some("INT"),
        "Threads that inflate the BGZF blocks besides the reading one [0: one].",
    ),
    spec(
        IndexOptId::Help,
        Some('h'),
        Some("help"),
        None,
        "Print this help and exit.",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("input-fmt"),
        Some("FMT"),
        "Not an index option (samtools refuses it too).",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("input-fmt-option"),
        Some("OPT"),
        "Not an index option (samtools refuses it too).",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("output-fmt"),
        Some("FMT"),
        "Not an index option (samtools refuses it too).",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("output-fmt-option"),
        Some("OPT"),
        "Not an index option (samtools refuses it too).",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("reference"),
        Some("FILE"),
        "Not an index option (samtools refuses it too). A CRAM slice of several \
         references is decoded for its .crai, its references found through \
         REF_PATH, REF_CACHE or the @SQ UR.",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("write-index"),
        None,
        "Not an index option (samtools refuses it too).",
    ),
    spec(
        IndexOptId::Unsupported(NOT_AN_INDEX_OPTION),
        None,
        Some("verbosity"),
        Some("INT"),
        "Not an index option (samtools refuses it too).",
    ),
];

/// `alnsort index --help`, from [`INDEX_OPTIONS`].
pub fn index_help() -> String {
    let mut out = String::from(
        "Usage: alnsort index -M [-bc] [-m INT] <in1.bam> <in2.bam>...\n   \
         or: alnsort index [-bc] [-m INT] <in.bam> [out.index]\n\n\
         Indexes coordinate-sorted BAM files (BAI or CSI) and CRAM files (.crai),\n\
         writing the index samtools index 1.24 writes for the same file.\n\nOptions:\n",
    );
    for group in Group::ALL {
        for s in INDEX_OPTIONS.iter().filter(|s| s.group == group) {
            push_help_entry(&mut out, s, s.help);
        }
    }
    out
}

/// Parsed `alnsort index` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexArgs {
    /// BAI, or CSI with this `min_shift` (BAM inputs; CRAM gets a `.crai`).
    pub format: IndexFormat,
    /// `-o FILE` or the legacy second argument.
    pub output: Option<String>,
    /// `-@ INT`: threads besides the reading one.
    pub threads: usize,
    pub inputs: Vec<String>,
}

/// What parsing produced.
#[derive(Debug)]
pub enum ParsedIndex {
    Run(IndexArgs),
    /// Print [`index_help`] and exit 0 (`--help`, or no file given).
    Usage,
}

/// Parses `alnsort index`'s arguments (after the word `index`).
pub fn parse_index(args: Vec<OsString>) -> Result<ParsedIndex, ArgError> {
    use lexopt::prelude::*;
    let mut csi = false;
    let mut min_shift = DEFAULT_MIN_SHIFT;
    let mut multiple = false;
    let mut output = None;
    let mut threads = 0usize;
    let mut files = Vec::new();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            files.push(v.string()?);
            continue;
        }
        let s = sort_args::find_option(INDEX_OPTIONS, &arg)?;
        if let Some(refusal) = s.refusal() {
            return Err(refusal);
        }
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        let int = |v: &Option<String>| -> Result<i64, ArgError> {
            let text = v.as_deref().unwrap_or_default();
            text.trim().parse::<i64>().map_err(|_| {
                ArgError::Invalid(format!("{} '{text}': expected an integer", s.name()))
            })
        };
        match s.id {
            IndexOptId::Bai => csi = false,
            IndexOptId::Csi => csi = true,
            IndexOptId::MinShift => {
                csi = true;
                min_shift = int(&value)?;
            }
            IndexOptId::Multiple => multiple = true,
            IndexOptId::Output => output = value,
            IndexOptId::Threads => {
                // samtools takes a negative count as none.
                threads = usize::try_from(int(&value)?).unwrap_or(0);
            }
            IndexOptId::Help => return Ok(ParsedIndex::Usage),
            IndexOptId::Unsupported(_) => unreachable!("refused above"),
        }
    }
    if files.is_empty() {
        return Ok(ParsedIndex::Usage);
    }
    // The legacy synopsis `index in.bam out.index`: a second argument that
    // does not exist, or is an index, names the index.
    if files.len() == 2 && output.is_none() && nonexistent_or_index(Path::new(&files[1])) {
        output = files.pop();
    }
    if files.len() > 1 && !multiple {
        return Err(ArgError::Invalid(
            "use -M to enable indexing more than one alignment file".into(),
        ));
    }
    if output.is_some() && files.len() > 1 {
        return Err(ArgError::Invalid(
            "can't use -o with multiple input alignment files".into(),
        ));
    }
    // samtools passes `csi ? min_shift : 0` on, and a shift of 0 or less
    // means BAI there.
    let format = if csi && min_shift > 0 {
        let min_shift = u32::try_from(min_shift)
            .map_err(|_| ArgError::Invalid(format!("-m {min_shift}: too large")))?;
        IndexFormat::Csi { min_shift }
    } else {
        IndexFormat::Bai
    };
    Ok(ParsedIndex::Run(IndexArgs {
        format,
        output,
        threads,
        inputs: files,
    }))
}

/// Whether `path` does not exist or holds an index (BAI, CSI, TBI, CRAI),
/// as samtools' `nonexistent_or_index` decides for the legacy synopsis.
fn nonexistent_or_index(path: &Path) -> bool {
    let Ok(mut f) = File::open(path) else {
        return true;
    };
    let mut head = [0u8; 64];
    let n = alnsort_bam::reader::read_some(&mut f, &mut head).unwrap_or(0);
    let head = &head[..n];
    if head.starts_with(b"BAI\x01") {
        return true;
    }
    if !alnsort_bgzf::is_gzip(head) {
        return false;
    }
    // CSI and TBI are BGZF, a .crai is gzip text: look at the content.
    let Ok(f) = File::open(path) else {
        return false;
    };
    let mut text = [0u8; 64];
    let mut gz = flate2::read::MultiGzDecoder::new(BufReader::new(f));
    let n = alnsort_bam::reader::read_some(&mut gz, &mut text).unwrap_or(0);
    let text = &text[..n];
    text.starts_with(b"CSI\x01")
        || text.starts_with(b"TBI\x01")
        || (n > 0
            && text.split(|&b| b == b'\n').next().is_some_and(|l| {
                l.iter()
                    .all(|&b| b.is_ascii_digit() || b == b'\t' || b == b'-')
            }))
}

/// Why a file could not be indexed.
#[derive(Debug, thiserror::Error)]
pub enum IndexRunError {
    #[error("cannot open {file}")]
    Open {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Neither BAM nor CRAM (SAM text, plain gzip, anything else).
    #[error("{file}: {what}")]
    Format { file: String, what: String },
    #[error(transparent)]
    Bam(#[from] IndexBamError),
    #[error(transparent)]
    Cram(#[from] alnsort_cram::CramError),
    #[error(transparent)]
    Bgzf(#[from] alnsort_bgzf::BgzfError),
    #[error("cannot create or write index {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the thread pool")]
    Pool(#[from] rayon::ThreadPoolBuildError),
}

/// What indexing one file did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexReport {
    pub input: String,
    pub index: PathBuf,
    pub records: u64,
    /// A warning to print (the EOF block is missing), if any.
    pub warning: Option<String>,
}

/// Indexes every input in turn, as `samtools index` does; stops at the
/// first failure (the indexes already written stay, as in samtools).
pub fn run_index(args: &IndexArgs, debris: &Debris) -> Result<Vec<IndexReport>, IndexRunError> {
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(args.threads.max(1))
            .thread_name(|i| format!("alnsort-index-{i}"))
            .build()?,
    );
    let mut reports = Vec::new();
    for input in &args.inputs {
        reports.push(index_one(input, args, &pool, debris)?);
    }
    Ok(reports)
}

/// BAM magic (SAM spec §4.2).
const BAM_MAGIC: &[u8; 4] = b"BAM\x01";

fn index_one(
    input: &str,
    args: &IndexArgs,
    pool: &Arc<rayon::ThreadPool>,
    debris: &Debris,
) -> Result<IndexReport, IndexRunError> {
    let open_err = |source| IndexRunError::Open {
        file: input.to_string(),
        source,
    };
    let format_err = |what: &str| IndexRunError::Format {
        file: input.to_string(),
        what: what.to_string(),
    };
    let mut file = File::open(input).map_err(open_err)?;
    let mut prefix = vec![0u8; alnsort_bgzf::block::HEADER_LEN];
    let n = alnsort_bam::reader::read_some(&mut file, &mut prefix).map_err(open_err)?;
    prefix.truncate(n);
    if prefix.starts_with(alnsort_cram::MAGIC) {
        let chained = std::io::Cursor::new(prefix).chain(BufReader::with_capacity(1 << 20, file));
        let crai = alnsort_cram::crai::index_cram(
            input,
            chained,
            &alnsort_cram::RefSource::from_env(None),
        )?;
        let dest = output_path(input, args, "crai");
        let bytes = zlib::zlib()
            .and_then(|z| z.gzip(&crai.text))
            .unwrap_or(crai.gzip);
        write_index(&dest, &bytes, debris)?;
        return Ok(IndexReport {
            input: input.to_string(),
            index: dest,
            records: crai.records,
            warning: None,
        });
    }
    if !alnsort_bgzf::is_bgzf(&prefix) {
        return Err(format_err(if prefix.is_empty() {
            "the file is empty: there is nothing to index"
        } else if alnsort_bgzf::is_gzip(&prefix) {
            "plain gzip, not BGZF: it cannot be indexed (samtools refuses it too)"
        } else {
            "not BGZF-compressed: only BAM and CRAM files can be indexed (uncompressed SAM \
             cannot; samtools refuses it too)"
        }));
    }
    let mut reader = ParallelReader::new(
        BufReader::with_capacity(1 << 20, file),
        Arc::clone(pool),
        prefix,
    )?;
    let head = std::io::BufRead::fill_buf(&mut reader)
        .map_err(|e| IndexRunError::Bgzf(alnsort_bgzf::BgzfError::io(0, e)))?;
    if !head.starts_with(BAM_MAGIC) {
        return Err(format_err(
            "BGZF-compressed but not BAM (SAM text?): alnsort index indexes BAM and CRAM \
             files; index BGZF SAM with samtools",
        ));
    }
    let indexed = index_bam(Arc::from(input), reader, args.format)?;
    let ext = match indexed.index.format() {
        IndexFormat::Bai => "bai",
        IndexFormat::Csi { .. } => "csi",
    };
    let dest = output_path(input, args, ext);
    let bytes = match (indexed.index.is_bgzf(), zlib::zlib()) {
        (true, Some(z)) => alnsort_bgzf::compress_all_with(indexed.index.content(), |p| z.raw(p)),
        _ => indexed.index.file_bytes(),
    };
    write_index(&dest, &bytes, debris)?;
    Ok(IndexReport {
        input: input.to_string(),
        index: dest,
        records: indexed.records,
        warning: indexed.missing_eof.map(|at| {
            format!(
                "{input}: EOF marker is absent (expected at compressed offset {at}); the input may be truncated"
            )
        }),
    })
}

/// `-o FILE`, else the input's name with `.bai`, `.csi` or `.crai` added.
fn output_path(input: &str, args: &IndexArgs, ext: &str) -> PathBuf {
    match &args.output {
        Some(o) => PathBuf::from(o),
        None => PathBuf::from(format!("{input}.{ext}")),
    }
}

/// Writes `bytes` under a temporary name beside `dest`, then renames it
/// into place.
fn write_index(dest: &Path, bytes: &[u8], debris: &Debris) -> Result<(), IndexRunError> {
    let err = |source| IndexRunError::Write {
        path: dest.to_path_buf(),
        source,
    };
    let (pending, mut f) = PendingFile::create(dest, debris).map_err(err)?;
    f.write_all(bytes).and_then(|_| f.flush()).map_err(err)?;
    drop(f);
    pending.commit().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<ParsedIndex, ArgError> {
        parse_index(args.iter().map(OsString::from).collect())
    }

    fn run_args(args: &[&str]) -> IndexArgs {
        match parse(args) {
            Ok(ParsedIndex::Run(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn formats_follow_samtools_rules() {
        assert_eq!(run_args(&["in.bam"]).format, IndexFormat::Bai);
        assert_eq!(
            run_args(&["-c", "in.bam"]).format,
            IndexFormat::Csi { min_shift: 14 }
        );
        assert_eq!(
            run_args(&["-m", "12", "in.bam"]).format,
            IndexFormat::Csi { min_shift: 12 }
        );
        // A later -b switches back to BAI; -m 0 means BAI.
        assert_eq!(
            run_args(&["-m", "12", "-b", "in.bam"]).format,
            IndexFormat::Bai
        );
        assert_eq!(run_args(&["-m", "0", "in.bam"]).format, IndexFormat::Bai);
        assert_eq!(run_args(&["-@", "3", "in.bam"]).threads, 3);
    }

    #[test]
    fn several_files_need_m_and_no_output() {
        let dir = std::env::temp_dir();
        let existing = dir.join(format!("alnsort-index-test-{}.bam", std::process::id()));
        std::fs::write(&existing, b"not an index").unwrap_or_else(|e| panic!("{e}"));
        let existing = existing.to_string_lossy().into_owned();
        assert!(matches!(
            parse(&["a.bam", &existing]),
            Err(ArgError::Invalid(m)) if m.contains("-M")
        ));
        let a = run_args(&["-M", "a.bam", &existing]);
        assert_eq!(a.inputs.len(), 2);
        assert!(parse(&["-M", "-o", "x.bai", "a.bam", &existing]).is_err());
        // Legacy synopsis: a second argument that does not exist is the index.
        let a = run_args(&["a.bam", "/nonexistent/out.bai"]);
        assert_eq!(a.output.as_deref(), Some("/nonexistent/out.bai"));
        let _ = std::fs::remove_file(&existing);
    }

    #[test]
    fn global_options_are_refused_by_name() {
        match parse(&["--reference", "ref.fa", "in.cram"]) {
            Err(ArgError::Unsupported { option, .. }) => assert_eq!(option, "--reference"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse(&["-x", "in.bam"]),
            Err(ArgError::UnknownOption(_))
        ));
        assert!(matches!(parse(&[]), Ok(ParsedIndex::Usage)));
        assert!(index_help().contains("--min-shift INT"));
    }
}
