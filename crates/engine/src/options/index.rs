//! `alnsort index`'s command line, read as samtools index 1.24 reads it: one table (`INDEX_OPTIONS`), its parser and help, and the parsed `IndexArgs`.

use crate::error::ArgError;
use crate::options::sort_args;
use crate::options::table::{push_help_entry, Group, OptSpec, OptionName};
use alnsort_index::IndexFormat;
use std::ffi::OsString;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

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

crate::options::table::refused_when_unsupported!(IndexOptId);

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
    OptSpec::new(id, short, long, value, group, help, None)
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
