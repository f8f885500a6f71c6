//! `alnsort sort`'s command line, read the way samtools 1.24 reads it
//! (getopt string `l:m:nNo:O:T:@:t:MI:K:uRw:H` plus the global long options),
//! so a pipeline switches by replacing `samtools sort` with `alnsort sort`.
//! This module only turns argv into `SortArgs`; it opens nothing and reads no
//! input (the `Config` built from it in `config.rs` does the resolving).

use crate::memsize;
use lexopt::prelude::*;
use std::ffi::OsString;
use std::path::PathBuf;

/// The order options as given; `config.rs` resolves them as samtools does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderFlag {
    Coordinate,
    Name,
    TemplateCoordinate,
    Minimiser,
}

/// Output format as named by `-O` or the output file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    Bam,
    Sam,
    /// SAM text in BGZF (`-O sam,level=N`, `.sam.gz`).
    SamGz,
    Cram,
}

#[derive(Debug, Clone)]
pub struct SortArgs {
    pub input: String,
    pub output: String,
    pub format: Option<OutFormat>,
    pub format_level: Option<u32>,
    pub level: Option<u32>,
    pub uncompressed: bool,
    pub mem_per_thread: Option<u64>,
    pub max_memory: Option<String>,
    pub threads: usize,
    pub tmp_prefix: Option<String>,
    pub order: OrderFlag,
    /// `-N` given anywhere: name order is lexicographic (it sticks, §1.8).
    pub lexicographic: bool,
    pub tag: Option<String>,
    pub no_pg: bool,
    pub write_index: bool,
    pub verbosity: i32,
    pub progress: Option<bool>,
    pub progress_interval: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// `argv[0] sort args…` joined by spaces, tabs made spaces (htslib's
    /// `stringify_argv`), for the @PG CL field.
    pub command_line: String,
}

/// What parsing produced: run, or print something and exit.
#[derive(Debug)]
pub enum Parsed {
    Run(Box<SortArgs>),
    /// Print to stdout and exit 0 (`--help`, or no input and stdin a TTY).
    Usage,
    Version,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ArgError(pub String);

impl From<lexopt::Error> for ArgError {
    fn from(e: lexopt::Error) -> Self {
        ArgError(e.to_string())
    }
}

pub const USAGE: &str = "\
Usage: alnsort sort [options...] [in.bam|in.sam|-]
Options (as samtools sort):
  -l INT     Set compression level, from 0 (uncompressed) to 9 (best)
  -u         Output uncompressed data (equivalent to -l 0)
  -m INT     Set maximum memory per thread; suffix K/M/G recognized [768M]
  -M         Use minimiser for clustering unaligned/unplaced reads (not supported yet)
  -n         Sort by read name (natural): cannot be used with samtools index
  -N         Sort by read name (not natural): cannot be used with samtools index
  -t TAG     Sort by value of TAG. Uses position as secondary index (or read name if -n is set)
  -o FILE    Write final output to FILE rather than standard output
  -T PREFIX  Write temporary files to a private directory under PREFIX's directory
      --no-PG
             Do not add a PG line
      --template-coordinate
             Sort by template-coordinate
      --write-index
             Automatically index the output files (CSI; FILE##idx##FILE.bai for BAI)
  -O, --output-fmt FORMAT[,OPT[=VAL]]...
             Specify output format (SAM, BAM) and options (level=N)
      --output-fmt-option OPT[=VAL]
             Specify a single output file format option (level=N)
  -@, --threads INT
             Number of threads for sorting and compression; below 2 is single-threaded [1]
      --verbosity INT
             Set level of verbosity
alnsort additions:
      --max-memory SIZE
             Total memory budget for the whole process (1.5G, 800M, 80%); overrides -m
      --progress / --no-progress
             Force the progress display on stderr on or off (default: on when stderr is a terminal;
             when it is not, --progress writes a plain line every 10 s)
      --progress-interval SECS
             Seconds between those plain lines (fractions allowed); implies --progress
      --stats-json FILE
             Write records, bytes, runs, per-phase times and peak RSS as JSON
";

fn parse_int(opt: &str, v: &str) -> Result<i64, ArgError> {
    v.trim().parse::<i64>().map_err(|_| {
        ArgError(format!(
            "invalid value '{v}' for {opt}: expected an integer"
        ))
    })
}

fn parse_seconds(opt: &str, v: &str) -> Result<f64, ArgError> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.01 => Ok(s),
        _ => Err(ArgError(format!(
            "invalid value '{v}' for {opt}: expected seconds, at least 0.01 (e.g. 10 or 0.5)"
        ))),
    }
}

/// Parses samtools' `-O FMT[,opt=val...]`.
fn parse_output_fmt(v: &str, args: &mut SortArgs) -> Result<(), ArgError> {
    let mut parts = v.split(',');
    let fmt = parts.next().unwrap_or("").to_ascii_lowercase();
    args.format = Some(match fmt.as_str() {
        "bam" => OutFormat::Bam,
        "sam" => OutFormat::Sam,
        "sam.gz" => OutFormat::SamGz,
        "cram" => OutFormat::Cram,
        other => {
            return Err(ArgError(format!(
                "unknown output format '{other}': alnsort writes SAM or BAM"
            )))
        }
    });
    for opt in parts {
        parse_fmt_option(opt, args)?;
    }
    Ok(())
}

fn parse_fmt_option(opt: &str, args: &mut SortArgs) -> Result<(), ArgError> {
    match opt.split_once('=') {
        Some(("level", n)) => {
            let n = parse_int("level", n)?;
            if !(0..=9).contains(&n) {
                return Err(ArgError(format!(
                    "compression level {n} is out of range 0..9"
                )));
            }
            args.format_level = Some(n as u32);
            Ok(())
        }
        Some(("nthreads", _)) | Some(("reference", _)) => Ok(()),
        _ => Err(ArgError(format!(
            "unsupported output format option '{opt}' (alnsort knows level=N)"
        ))),
    }
}

/// htslib's `stringify_argv`: arguments joined by spaces, tabs replaced.
fn stringify(argv0: &str, rest: &[OsString]) -> String {
    let mut s = argv0.to_string();
    s.push_str(" sort");
    for a in rest {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s.replace('\t', " ")
}

/// Parses the arguments after `alnsort sort`. `argv0` is the program name as
/// typed (it begins the @PG CL, as samtools' does).
pub fn parse(argv0: &str, rest: Vec<OsString>, stdin_is_tty: bool) -> Result<Parsed, ArgError> {
    let mut a = SortArgs {
        input: "-".into(),
        output: "-".into(),
        format: None,
        format_level: None,
        level: None,
        uncompressed: false,
        mem_per_thread: None,
        max_memory: None,
        threads: 0,
        tmp_prefix: None,
        order: OrderFlag::Coordinate,
        lexicographic: false,
        tag: None,
        no_pg: false,
        write_index: false,
        verbosity: 2,
        progress: None,
        progress_interval: None,
        stats_json: None,
        command_line: stringify(argv0, &rest),
    };
    let no_args = rest.is_empty();
    let mut positional: Vec<String> = Vec::new();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        match arg {
            Short('l') => {
                let v = p.value()?.string()?;
                let n = parse_int("-l", &v)?;
                // samtools appends min(level, 9) to the mode; negative means the default.
                a.level = if n < 0 { None } else { Some(n.min(9) as u32) };
            }
            Short('u') => a.uncompressed = true,
            Short('m') => {
                let v = p.value()?.string()?;
                a.mem_per_thread = Some(memsize::parse_per_thread(&v).map_err(|e| ArgError(e.0))?);
            }
            Short('n') => a.order = OrderFlag::Name,
            Short('N') => {
                a.order = OrderFlag::Name;
                a.lexicographic = true;
            }
            Short('o') => a.output = p.value()?.string()?,
            Short('O') | Long("output-fmt") => {
                let v = p.value()?.string()?;
                parse_output_fmt(&v, &mut a)?;
            }
            Long("output-fmt-option") => {
                let v = p.value()?.string()?;
                parse_fmt_option(&v, &mut a)?;
            }
            Short('T') => a.tmp_prefix = Some(p.value()?.string()?),
            Short('@') | Long("threads") => {
                let v = p.value()?.string()?;
                let n = parse_int("-@", &v)?;
                a.threads = n.max(0) as usize;
            }
            Short('t') => a.tag = Some(p.value()?.string()?),
            Short('M') => a.order = OrderFlag::Minimiser,
            Short('I') => {
                p.value()?;
                a.order = OrderFlag::Minimiser;
            }
            Short('K') | Short('w') => {
                let v = p.value()?.string()?;
                parse_int("-K/-w", &v)?;
            }
            Short('R') | Short('H') => {}
            Long("template-coordinate") => a.order = OrderFlag::TemplateCoordinate,
            Long("no-PG") => a.no_pg = true,
            Long("write-index") => a.write_index = true,
            Long("verbosity") => {
                let v = p.value()?.string()?;
                a.verbosity = parse_int("--verbosity", &v)? as i32;
            }
            Long("max-memory") => a.max_memory = Some(p.value()?.string()?),
            Long("progress") => a.progress = Some(true),
            Long("no-progress") => a.progress = Some(false),
            Long("progress-interval") => {
                let v = p.value()?.string()?;
                a.progress_interval = Some(parse_seconds("--progress-interval", &v)?);
            }
            Long("stats-json") => a.stats_json = Some(PathBuf::from(p.value()?)),
            Long("reference") | Long("input-fmt-option") => {
                p.value()?; // CRAM reference / input options: nothing to do for SAM/BAM input
            }
            Short('h') | Long("help") => return Ok(Parsed::Usage),
            Long("version") => return Ok(Parsed::Version),
            Value(v) => positional.push(v.string()?),
            _ => return Err(arg.unexpected().into()),
        }
    }
    if no_args && stdin_is_tty {
        return Ok(Parsed::Usage);
    }
    match positional.len() {
        0 => {}
        1 => a.input = positional.remove(0),
        2 => {
            return Err(ArgError(
                "too many arguments: alnsort sort takes one input; the legacy 'sort in.bam out.prefix' form \
                 is not supported, use -o FILE"
                    .into(),
            ))
        }
        _ => return Err(ArgError("too many arguments: alnsort sort takes one input file".into())),
    }
    Ok(Parsed::Run(Box::new(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<SortArgs, ArgError> {
        match parse("alnsort", args.iter().map(OsString::from).collect(), false)? {
            Parsed::Run(a) => Ok(*a),
            other => panic!("expected Run, got {other:?}"),
        }
    }

    #[test]
    fn samtools_style_clusters_and_attached_values() {
        let a = run(&["-@4", "-m1G", "-nu", "-oout.bam", "in.bam"]).unwrap();
        assert_eq!(a.threads, 4);
        assert_eq!(a.mem_per_thread, Some(1 << 30));
        assert_eq!(a.order, OrderFlag::Name);
        assert!(a.uncompressed);
        assert_eq!(a.output, "out.bam");
        assert_eq!(a.input, "in.bam");
        assert_eq!(a.command_line, "alnsort sort -@4 -m1G -nu -oout.bam in.bam");
    }

    #[test]
    fn last_order_wins_and_n_uppercase_sticks() {
        let a = run(&["-N", "--template-coordinate", "-n"]).unwrap();
        assert_eq!(a.order, OrderFlag::Name);
        assert!(a.lexicographic);
        let a = run(&["-n", "--template-coordinate"]).unwrap();
        assert_eq!(a.order, OrderFlag::TemplateCoordinate);
    }

    #[test]
    fn output_format_and_options() {
        let a = run(&["-O", "SAM,level=3", "x.bam"]).unwrap();
        assert_eq!(a.format, Some(OutFormat::Sam));
        assert_eq!(a.format_level, Some(3));
        assert!(run(&["-O", "vcf"]).is_err());
        let a = run(&["--output-fmt-option", "level=1"]).unwrap();
        assert_eq!(a.format_level, Some(1));
        let a = run(&["-l", "12"]).unwrap();
        assert_eq!(a.level, Some(9));
    }

    #[test]
    fn positional_rules() {
        assert!(run(&["a.bam", "out"]).unwrap_err().0.contains("legacy"));
        assert!(run(&["a", "b", "c"]).is_err());
        assert_eq!(run(&[]).unwrap().input, "-");
        assert!(matches!(
            parse("alnsort", vec![], true).unwrap(),
            Parsed::Usage
        ));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(run(&["-m", "1.5G"]).is_err());
        assert!(run(&["-@", "two"]).is_err());
        assert!(run(&["--bogus"]).is_err());
    }
}
