//! Resolves the parsed arguments into one `Config` the pipeline runs from:
//! the sort order (with samtools' precedence rules), the @HD values that order
//! writes, the output format and level, the total memory budget, and where
//! temp files and the index go. Every refusal happens here, before any input
//! is read.
//!
//! Sizes: `resolve` (about 220 lines) is samtools' resolution of the
//! options in its order (order and `@HD`, format, CRAM options, level,
//! threads, budget, temporary directory, index, reports, duplicate
//! marking), each step a few lines that read the steps before it.

use crate::error::ConfigError;
use crate::options::memsize::SystemMemory;
use crate::options::sort::{OrderFlag, OutFormat, SortOptions};
use alnsort_bam::keys::minimiser::{Minimiser, MinimiserIndex};
use alnsort_bam::keys::{SortOrder, TagSecondary};
use alnsort_bam::reader::UnknownReference;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    Csi,
    Bai,
}

#[derive(Debug, Clone)]
pub struct IndexTarget {
    pub kind: IndexKind,
    pub path: PathBuf,
}

/// What the header's @HD line says for the chosen order (§2 of the
/// samtools-sort reference; samtools 1.24 strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HdValues {
    pub so: String,
    pub go: Option<String>,
    pub ss: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub input: String,
    /// Several inputs (more than one) are merged as samtools merge would
    /// (headers and record order) and sorted as one; otherwise `input`.
    pub inputs: Vec<String>,
    /// `None` is stdout.
    pub output: Option<PathBuf>,
    pub format: OutFormat,
    /// BGZF level for BAM / SAM.gz output (0 = stored blocks).
    pub level: u32,
    pub order: SortOrder,
    pub hd: HdValues,
    /// The @HD values instead of `hd` when no record is placed (`tid >= 0`):
    /// samtools' minimiser order decides its SO after reading.
    pub hd_all_unplaced: Option<HdValues>,
    pub threads: usize,
    /// With `explicit_total`, the bytes the whole process may use
    /// (`--max-memory`); otherwise samtools' record buffer, `-m` x threads.
    pub memory_budget: u64,
    pub explicit_total: bool,
    /// Directory under which the private temp directory is made.
    pub temp_parent: PathBuf,
    /// Check at the start that the temporary space the inputs' sizes
    /// promise is free (`run::tmp_space`); off with `--no-tmp-space-check`.
    pub tmp_space_check: bool,
    /// `--resume DIR` (`crate::run::resume`).
    pub resume: Option<PathBuf>,
    pub index: Option<IndexTarget>,
    pub pg: Option<String>,
    pub verbosity: i32,
    pub progress: Option<bool>,
    /// Seconds between the plain-text progress lines on a non-terminal.
    pub progress_interval: Option<f64>,
    pub stats_json: Option<PathBuf>,
    /// `--mqc`: the report as MultiQC custom content.
    pub mqc: Option<PathBuf>,
    /// `--flagstat`, `--flagstat-format`, `--idxstats`.
    pub qc: crate::options::qc::QcArgs,
    /// The command line as given (for `--stats-json`; @PG's CL is `pg`).
    pub command_line: String,
    /// Warnings to print once the run starts (samtools prints these too).
    pub warnings: Vec<String>,
    /// What a SAM record naming a reference the header lacks does
    /// (`--unknown-reference`).
    pub unknown_reference: UnknownReference,
    /// Where CRAM references are found (`--reference`, `REF_PATH`,
    /// `REF_CACHE`), for CRAM input and output.
    pub refs: alnsort_cram::RefSource,
    /// CRAM output options (`-O cram,version=…`).
    pub cram: alnsort_cram::CramOptions,
    /// Parquet output options (`-O parquet,codec=…`); `None` for other formats.
    pub columnar: Option<alnsort_columnar::WriteOptions>,
    /// `--markdup` and its options; `None` without it.
    pub markdup: Option<crate::options::markdup::MarkdupConfig>,
    /// `--markdup=samtools` and its options (`run::sort_samtools`); `None`
    /// without it.
    pub samtools_markdup: Option<crate::options::samtools_marking::SortMarking>,
    /// Where the live progress line is drawn: a screen of the run's own
    /// unless the caller hands in the one its signal handling clears.
    pub screen: crate::report::progress::Screen,
}

impl Config {
    /// The header edits samtools sort makes: @HD for the order, then @PG.
    /// `all_unplaced`: no record is placed (`tid >= 0`), which changes
    /// minimiser order's @HD.
    pub fn edit_header(&self, header: &mut alnsort_bam::header::Header, all_unplaced: bool) {
        let hd = match &self.hd_all_unplaced {
            Some(hd) if all_unplaced => hd,
            _ => &self.hd,
        };
        header.set_sort_order(&hd.so, hd.go.as_deref(), hd.ss.as_deref());
        if let Some(cl) = &self.pg {
            header.add_pg("alnsort", "alnsort", env!("CARGO_PKG_VERSION"), cl);
        }
    }

    /// Prints [`Config::warnings`] on standard error, one line each, as
    /// `alnsort sort` prints them when its run starts. Every run that
    /// decides from a configuration calls this once: `run_sort`,
    /// `run_merge` and the stages' assemble (the step that writes the
    /// output and its index), so `alnsort sort`, `alnsort merge`, the
    /// stage subcommands and the Python stages warn alike.
    pub fn print_warnings(&self) {
        for w in &self.warnings {
            eprintln!("[W::alnsort] {w}");
        }
    }
}

/// samtools' default BAM level when `-l` is not given: htslib's default for
/// a libdeflate build (see alnsort_bgzf::block::CompressionLevel docs).
fn default_level() -> u32 {
    alnsort_bgzf::block::CompressionLevel::default().get()
}

/// Builds the `-I` index as samtools does before it reads any input.
fn minimiser_index(path: &Path, a: &SortOptions) -> Result<MinimiserIndex, ConfigError> {
    let io_fail = |doing| {
        move |source| ConfigError::MinimiserFile {
            path: path.to_path_buf(),
            doing,
            source,
        }
    };
    let file = std::fs::File::open(path).map_err(io_fail("cannot open"))?;
    let mut reader = BufReader::new(file);
    let gzip = reader
        .fill_buf()
        .map_err(io_fail("cannot read"))?
        .starts_with(&[0x1f, 0x8b]);
    let input: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::new(flate2::bufread::MultiGzDecoder::new(reader)))
    } else {
        Box::new(reader)
    };
    MinimiserIndex::from_fasta(input, a.kmer, a.window, a.squash).map_err(|source| {
        ConfigError::MinimiserFasta {
            path: path.to_path_buf(),
            source,
        }
    })
}

fn resolve_order(a: &SortOptions) -> Result<(SortOrder, HdValues), ConfigError> {
    let name_ss = |lex: bool| {
        if lex {
            "queryname:lexicographical"
        } else {
            "queryname:natural"
        }
    };
    // samtools builds the index whenever -I is given, even when -t then
    // makes the order a tag order; a bad file fails either way.
    let index = match &a.minimiser_ref {
        Some(p) => Some(Arc::new(minimiser_index(p, a)?)),
        None => None,
    };
    if let Some(tag) = &a.tag {
        // samtools uses only the first two characters of TAG (§1.5); the SS
        // string shows them (a one-character tag shows one).
        let shown: String = tag.chars().take(2).collect();
        let (secondary, tail) = match a.order {
            OrderFlag::Name => (
                TagSecondary::Name {
                    natural: !a.lexicographic,
                },
                name_ss(a.lexicographic),
            ),
            _ => (TagSecondary::Coordinate, "coordinate"),
        };
        let order = SortOrder::Tag {
            tag: tag.as_bytes().to_vec(),
            secondary,
        };
        let hd = HdValues {
            so: "unsorted".into(),
            go: None,
            // samtools builds SS from a 3-byte tag buffer, so a one-character
            // tag's NUL ends the string before the secondary order (§2).
            ss: Some(if shown.len() < 2 {
                format!("unsorted:{shown}")
            } else {
                format!("unsorted:{shown}:{tail}")
            }),
        };
        return Ok((order, hd));
    }
    Ok(match a.order {
        OrderFlag::Coordinate => (
            SortOrder::Coordinate,
            HdValues {
                so: "coordinate".into(),
                go: None,
                ss: None,
            },
        ),
        OrderFlag::Name => (
            SortOrder::Name {
                natural: !a.lexicographic,
            },
            HdValues {
                so: "queryname".into(),
                go: None,
                ss: Some(name_ss(a.lexicographic).into()),
            },
        ),
        OrderFlag::TemplateCoordinate => (
            SortOrder::TemplateCoordinate,
            HdValues {
                so: "unsorted".into(),
                go: Some("query".into()),
                ss: Some("unsorted:template-coordinate".into()),
            },
        ),
        OrderFlag::Minimiser => (
            SortOrder::Minimiser(Minimiser {
                kmer: a.kmer.clamp(1, 31),
                reverse: !a.no_reverse,
                squash: a.squash,
                index,
            }),
            HdValues {
                so: "coordinate".into(),
                go: None,
                ss: Some("coordinate:minhash".into()),
            },
        ),
    })
}

/// Minimiser order's @HD when no record is placed (samtools 1.22+).
fn minimiser_all_unplaced_hd(order: &SortOrder) -> Option<HdValues> {
    matches!(order, SortOrder::Minimiser(_)).then(|| HdValues {
        so: "unsorted".into(),
        go: None,
        ss: Some("unsorted:minhash".into()),
    })
}

/// Output format from `-O`, else the file extension (htslib's
/// `sam_open_mode`: .sam, .bam, .cram, with .gz/.bgz after .sam), else BAM.
/// The output format the options give (`-O`, else the output's extension).
pub fn format_of(a: &SortOptions) -> OutFormat {
    resolve_format(a)
}

fn resolve_format(a: &SortOptions) -> OutFormat {
    if let Some(f) = a.format {
        return match (f, a.format_level) {
            (OutFormat::Sam, Some(_)) => OutFormat::SamGz,
            (f, _) => f,
        };
    }
    let name = a
        .output
        .split("##idx##")
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let mut exts = name.rsplit('.');
    match (exts.next(), exts.next()) {
        (Some("sam"), _) => OutFormat::Sam,
        (Some("cram"), _) => OutFormat::Cram,
        (Some("gz" | "bgz" | "bgzf"), Some("sam")) => OutFormat::SamGz,
        _ => OutFormat::Bam,
    }
}

pub fn resolve(a: &SortOptions) -> Result<Config, ConfigError> {
    let (order, hd) = resolve_order(a)?;
    let hd_all_unplaced = minimiser_all_unplaced_hd(&order);
    let format = resolve_format(a);
    let columnar = crate::options::columnar::resolve(a, format)?;
    let mut cram = alnsort_cram::CramOptions::default();
    for (k, v) in &a.cram_options {
        if format != OutFormat::Cram {
            return Err(ConfigError::Invalid(format!(
                "output format option {k}={v} applies to CRAM output only"
            )));
        }
        cram.set(k, v).map_err(ConfigError::Cram)?;
    }
    cram.check().map_err(ConfigError::Cram)?;
    if format == OutFormat::Cram {
        if a.uncompressed {
            return Err(ConfigError::Invalid(
                "-u (uncompressed output) cannot be honoured for CRAM output".into(),
            ));
        }
        cram.level = a.format_level.or(a.level);
        // A reference that cannot be read is found now, not when the
        // first CRAM container is written after the whole sort.
        if let Some(r) = &a.reference {
            if let Err(source) = std::fs::File::open(r) {
                return Err(ConfigError::Reference {
                    path: r.clone(),
                    source,
                });
            }
        }
    }
    let level = if a.uncompressed {
        0
    } else {
        a.format_level.or(a.level).unwrap_or_else(default_level)
    };
    let threads = a.threads.max(1);
    let memory_budget = match &a.max_memory {
        Some(s) => {
            crate::options::memsize::parse_total(s, &SystemMemory).map_err(ConfigError::Size)?
        }
        None => {
            a.mem_per_thread
                .unwrap_or(crate::options::memsize::DEFAULT_PER_THREAD)
                * threads as u64
        }
    };
    let (out_path, idx_path) = match a.output.split_once("##idx##") {
        Some((o, i)) => (o.to_string(), Some(i.to_string())),
        None => (a.output.clone(), None),
    };
    let output = if out_path == "-" {
        None
    } else {
        Some(PathBuf::from(&out_path))
    };
    let mut warnings = Vec::new();
    let index = if a.write_index {
        let Some(out) = &output else {
            return Err(ConfigError::Invalid(
                "--write-index needs an output file (-o FILE); it cannot index standard output"
                    .into(),
            ));
        };
        // An index beside a device or a pipe (`-o /dev/null --write-index`)
        // would be written as /dev/null.csi: refuse before reading anything.
        if std::fs::metadata(out).is_ok_and(|m| !m.is_file()) {
            return Err(ConfigError::Invalid(format!(
                "--write-index needs a regular output file, and {} is not one (a device, pipe or directory)",
                out.display()
            )));
        }
        // samtools indexes minimiser order too: placed reads are by coordinate.
        if !matches!(order, SortOrder::Coordinate | SortOrder::Minimiser(_)) {
            warnings.push(
                "Ignoring --write-index as it only works for position sorted files".to_string(),
            );
            None
        } else if !matches!(format, OutFormat::Bam | OutFormat::Cram) {
            return Err(ConfigError::Invalid(
                "--write-index is supported for BAM and CRAM output only".into(),
            ));
        } else if format == OutFormat::Cram && order != SortOrder::Coordinate {
            return Err(ConfigError::Invalid(
                "--write-index with CRAM output is supported for coordinate order only".into(),
            ));
        } else {
            // CRAM output gets a .crai (kind then names no format: see
            // `crate::io::output`), as samtools writes one.
            let suffix = if format == OutFormat::Cram {
                ".crai"
            } else {
                ".csi"
            };
            let path = idx_path.map(PathBuf::from).unwrap_or_else(|| {
                let mut p = out.clone().into_os_string();
                p.push(suffix);
                PathBuf::from(p)
            });
            let kind = if path.extension().is_some_and(|e| e == "bai") {
                IndexKind::Bai
            } else {
                IndexKind::Csi
            };
            Some(IndexTarget { kind, path })
        }
    } else {
        None
    };
    // The report files must not replace the output, its index or each other.
    let [flagstat, idxstats] = a.qc.files();
    let reports = [
        ("--stats-json", a.stats_json.as_deref()),
        ("--mqc", a.mqc.as_deref()),
        flagstat,
        idxstats,
    ];
    for (n, (opt, file)) in reports.iter().enumerate() {
        let Some(file) = file else { continue };
        let same = |p: &std::path::Path| {
            p == *file
                || std::fs::canonicalize(p)
                    .ok()
                    .is_some_and(|c| std::fs::canonicalize(file).ok() == Some(c))
        };
        let clash = output
            .as_deref()
            .filter(|o| same(o))
            .or_else(|| index.as_ref().map(|i| i.path.as_path()).filter(|i| same(i)));
        if let Some(p) = clash {
            return Err(ConfigError::Invalid(format!(
                "{opt} {} names the same file as the output or its index ({}): the report would replace it",
                file.display(),
                p.display()
            )));
        }
        if let Some((other, _)) = reports[..n].iter().find(|(_, f)| f.is_some_and(same)) {
            return Err(ConfigError::Invalid(format!(
                "{opt} {} names the same file as {other}: give each report its own file",
                file.display()
            )));
        }
    }
    if let Some(m) = &a.mqc {
        if !m.to_string_lossy().ends_with("_mqc.json") {
            warnings.push(format!(
                "--mqc {}: MultiQC finds custom content in files whose names end in _mqc.json; \
                 this one is read only where MultiQC's configuration names it",
                m.display()
            ));
        }
    }
    crate::options::markdup::check_metrics_path(
        &a.markdup,
        &[
            output.as_deref(),
            index.as_ref().map(|i| i.path.as_path()),
            a.stats_json.as_deref(),
            a.mqc.as_deref(),
            a.qc.flagstat.as_deref(),
            a.qc.idxstats.as_deref(),
        ],
    )?;
    if a.progress == Some(false) && a.progress_interval.is_some() {
        return Err(ConfigError::Invalid(
            "--progress-interval sets how often progress is shown, and --no-progress turns it off: give one of them".into(),
        ));
    }
    let temp_parent = match &a.tmp_prefix {
        Some(t) => {
            let p = PathBuf::from(t);
            if p.is_dir() {
                p
            } else {
                match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                }
            }
        }
        None => match std::env::var_os("TMPDIR").filter(|v| !v.is_empty()) {
            Some(t) => PathBuf::from(t),
            None => match output.as_ref().and_then(|o| o.parent()) {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            },
        },
    };
    Ok(Config {
        tmp_space_check: !a.no_tmp_space_check,
        input: a.input.clone(),
        inputs: a.inputs.clone(),
        screen: Default::default(),
        output,
        format,
        level,
        order,
        hd,
        hd_all_unplaced,
        threads,
        memory_budget,
        explicit_total: a.max_memory.is_some(),
        temp_parent,
        resume: a.resume.clone(),
        index,
        pg: if a.no_pg {
            None
        } else {
            Some(a.command_line.clone())
        },
        verbosity: a.verbosity,
        progress: a.progress.or(a.progress_interval.map(|_| true)),
        progress_interval: a.progress_interval,
        stats_json: a.stats_json.clone(),
        mqc: a.mqc.clone(),
        qc: a.qc.clone(),
        command_line: a.command_line.clone(),
        warnings,
        unknown_reference: a.unknown_reference,
        refs: alnsort_cram::RefSource::from_env(a.reference.clone()),
        cram,
        columnar,
        markdup: crate::options::markdup::resolve(&a.markdup)?,
        samtools_markdup: crate::options::markdup::resolve_samtools(&a.markdup)?,
    })
}
