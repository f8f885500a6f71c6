//! Duplicate marking's options (`--markdup` and its group): their ids, the values as given, how each is applied, and the resolved `MarkdupConfig`.

use crate::error::{ArgError, ConfigError, Result};
use crate::options::samtools_marking::{MarkingGiven, SortMarking};
use alnsort_markdup::decision::TaggingPolicy;
use alnsort_markdup::extract::{BarcodeTags, Scoring};
use alnsort_markdup::samtools::Mode;
use std::path::PathBuf;
/// The duplicate-marking options of `alnsort sort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MdOpt {
    Markdup,
    Metrics,
    RemoveDuplicates,
    OpticalDistance,
    DuplicateScoring,
    TaggingPolicy,
    RemoveSequencingDuplicates,
    ReadNameRegex,
    BarcodeTag,
    ReadOneBarcodeTag,
    ReadTwoBarcodeTag,
    /// `--markdup=samtools` only (samtools markdup's letters in brackets):
    /// `--mode` (-m).
    Mode,
    /// `--mark-supplementary` (-S).
    MarkSupplementary,
    /// `--include-fails`.
    IncludeFails,
    /// `--clear-existing` (-c).
    ClearExisting,
    /// `--duplicate-count`.
    DuplicateCount,
    /// `--tag-original` (-t).
    TagOriginal,
    /// `--max-read-length` (-l).
    MaxReadLength,
    /// `--barcode-name`.
    BarcodeName,
    /// `--barcode-rgx`.
    BarcodeRgx,
    /// `--use-read-groups`.
    UseReadGroups,
    /// `--no-multi-dup`.
    NoMultiDup,
    /// `--read-coords`.
    ReadCoords,
    /// `--coords-order`.
    CoordsOrder,
    /// `--move-umi-to-tag`.
    MoveUmi,
    /// `--umi-separator`.
    UmiSeparator,
    /// `--markdup-stats FILE` (-f).
    MarkdupStats,
    /// `--markdup-report` (-s: the statistics on standard error).
    MarkdupReport,
    /// `--markdup-json` (--json).
    MarkdupJson,
}

/// Which tool's answer `--markdup` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flavour {
    /// Picard MarkDuplicates 3.4.0's (`--markdup`, `--markdup=picard`).
    #[default]
    Picard,
    /// `samtools collate | fixmate -m | sort | markdup` 1.24's
    /// (`--markdup=samtools`).
    Samtools,
}

impl MdOpt {
    /// The flavour an option belongs to; `None` for options of both
    /// (`--markdup` itself, `--remove-duplicates`, `--optical-distance`,
    /// `--barcode-tag`).
    fn flavour(self) -> Option<Flavour> {
        use MdOpt::*;
        match self {
            Markdup | RemoveDuplicates | OpticalDistance | BarcodeTag => None,
            Metrics
            | DuplicateScoring
            | TaggingPolicy
            | RemoveSequencingDuplicates
            | ReadNameRegex
            | ReadOneBarcodeTag
            | ReadTwoBarcodeTag => Some(Flavour::Picard),
            _ => Some(Flavour::Samtools),
        }
    }
}

fn parse_tag(opt: &str, v: &str) -> Result<[u8; 2], ArgError> {
    match v.as_bytes() {
        &[a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphanumeric() => Ok([a, b]),
        _ => Err(ArgError::Invalid(format!(
            "{opt} '{v}': expected a two-character SAM tag such as RX"
        ))),
    }
}

/// The options as given.
#[derive(Debug, Clone, Default)]
pub struct MarkdupArgs {
    pub enabled: bool,
    pub scoring: Scoring,
    pub metrics: Option<PathBuf>,
    pub remove_duplicates: bool,
    pub remove_sequencing_duplicates: bool,
    pub tagging: TaggingPolicy,
    pub optical_distance: Option<i32>,
    pub name_parser: alnsort_markdup::optical::NameParser,
    pub barcode_tags: BarcodeTags,
    /// Any option of the group other than `--markdup` itself, for the
    /// message when `--markdup` is missing.
    pub other_given: Option<String>,
    /// `--markdup`'s value.
    pub flavour: Flavour,
    /// The options given that belong to one flavour, for the refusal of
    /// those of the other.
    pub flavoured: Vec<(String, Flavour)>,
    /// `--markdup=samtools`'s options as given.
    pub samtools: MarkingGiven,
}

/// Applies one option of the group, `name` as the command line names it.
pub fn apply_arg(
    a: &mut MarkdupArgs,
    opt: MdOpt,
    name: &str,
    value: Option<String>,
) -> Result<(), ArgError> {
    let val = || value.clone().unwrap_or_default();
    if let Some(f) = opt.flavour() {
        a.flavoured.push((name.to_string(), f));
    }
    match opt {
        MdOpt::Markdup => {
            a.enabled = true;
            a.flavour = match value.as_deref() {
                None | Some("picard") => Flavour::Picard,
                Some("samtools") => Flavour::Samtools,
                Some(other) => {
                    return Err(ArgError::Invalid(format!(
                    "--markdup={other}: expected --markdup, --markdup=picard or --markdup=samtools"
                )))
                }
            };
            return Ok(());
        }
        MdOpt::Metrics => {
            a.metrics = Some(PathBuf::from(val()));
            a.other_given = Some("--metrics".into());
        }
        MdOpt::RemoveDuplicates => {
            a.remove_duplicates = true;
            a.other_given = Some("--remove-duplicates".into());
        }
        MdOpt::OpticalDistance => {
            let v = val();
            let n: i32 = v.trim().parse().map_err(|_| {
                ArgError::Invalid(format!(
                    "--optical-distance '{v}': expected a whole number of pixels (Picard's \
                     OPTICAL_DUPLICATE_PIXEL_DISTANCE, default 100; samtools markdup's -d, default 0: off)"
                ))
            })?;
            if n < 0 {
                return Err(ArgError::Invalid(format!(
                    "--optical-distance {n}: must be 0 or more"
                )));
            }
            a.optical_distance = Some(n);
            a.other_given = Some("--optical-distance".into());
        }
        MdOpt::DuplicateScoring => {
            let v = val();
            match v.as_str() {
                "sum-of-base-qualities" => a.scoring = Scoring::SumOfBaseQualities,
                "total-mapped-reference-length" => a.scoring = Scoring::TotalMappedReferenceLength,
                "random" => {
                    return Err(ArgError::Invalid(
                        "--duplicate-scoring random is not supported: Picard's RANDOM scores come from \
                         Java's random number generator seeded per run, which alnsort does not reproduce; \
                         use sum-of-base-qualities or total-mapped-reference-length"
                            .into(),
                    ))
                }
                other => {
                    return Err(ArgError::Invalid(format!(
                        "--duplicate-scoring '{other}': expected sum-of-base-qualities, \
                         total-mapped-reference-length or random"
                    )))
                }
            }
            a.other_given = Some("--duplicate-scoring".into());
        }
        MdOpt::TaggingPolicy => {
            let v = val();
            match v.as_str() {
                "none" => a.tagging = TaggingPolicy::None,
                "optical" => a.tagging = TaggingPolicy::Optical,
                "all" => a.tagging = TaggingPolicy::All,
                other => {
                    return Err(ArgError::Invalid(format!(
                        "--tagging-policy '{other}': expected none, optical or all"
                    )))
                }
            }
            a.other_given = Some("--tagging-policy".into());
        }
        MdOpt::RemoveSequencingDuplicates => {
            a.remove_sequencing_duplicates = true;
            a.other_given = Some("--remove-sequencing-duplicates".into());
        }
        MdOpt::BarcodeTag => {
            a.barcode_tags.umi = Some(parse_tag("--barcode-tag", &val())?);
            a.other_given = Some("--barcode-tag".into());
        }
        MdOpt::ReadOneBarcodeTag => {
            a.barcode_tags.read_one = Some(parse_tag("--read-one-barcode-tag", &val())?);
            a.other_given = Some("--read-one-barcode-tag".into());
        }
        MdOpt::ReadTwoBarcodeTag => {
            a.barcode_tags.read_two = Some(parse_tag("--read-two-barcode-tag", &val())?);
            a.other_given = Some("--read-two-barcode-tag".into());
        }
        MdOpt::Mode
        | MdOpt::MarkSupplementary
        | MdOpt::IncludeFails
        | MdOpt::ClearExisting
        | MdOpt::DuplicateCount
        | MdOpt::TagOriginal
        | MdOpt::MaxReadLength
        | MdOpt::BarcodeName
        | MdOpt::BarcodeRgx
        | MdOpt::UseReadGroups
        | MdOpt::NoMultiDup
        | MdOpt::ReadCoords
        | MdOpt::CoordsOrder
        | MdOpt::MoveUmi
        | MdOpt::UmiSeparator
        | MdOpt::MarkdupStats
        | MdOpt::MarkdupReport
        | MdOpt::MarkdupJson => {
            apply_samtools(&mut a.samtools, opt, value)?;
            a.other_given = Some(name.to_string());
        }
        MdOpt::ReadNameRegex => {
            a.name_parser =
                alnsort_markdup::optical::NameParser::from_picard_arg(&val()).map_err(|e| {
                    ArgError::Value {
                        what: "--read-name-regex".into(),
                        source: e.into(),
                    }
                })?;
            a.other_given = Some("--read-name-regex".into());
        }
    }
    Ok(())
}

/// What the run does about duplicates.
#[derive(Debug, Clone)]
pub struct MarkdupConfig {
    pub metrics: Option<PathBuf>,
    pub scoring: Scoring,
    pub remove_duplicates: bool,
    pub remove_sequencing_duplicates: bool,
    pub tagging: TaggingPolicy,
    pub optical_distance: i32,
    pub name_parser: alnsort_markdup::optical::NameParser,
    pub barcode_tags: BarcodeTags,
}

/// Applies one samtools row of `alnsort sort`'s duplicate-marking group
/// to `given`.
fn apply_samtools(
    given: &mut MarkingGiven,
    opt: MdOpt,
    value: Option<String>,
) -> Result<(), ArgError> {
    use MdOpt as O;
    let g = given;
    let v = value.unwrap_or_default();
    let int = |name: &str| crate::options::table::parse_c_int(name, &v);
    match opt {
        O::Mode => {
            g.mode = Some(match v.as_str() {
                "t" => Mode::Template,
                "s" => Mode::Sequence,
                other => {
                    return Err(ArgError::Invalid(format!(
                        "--mode '{other}': expected t (template start/end) or s (sequence start)"
                    )))
                }
            })
        }
        O::MarkSupplementary => g.supplementary = true,
        O::IncludeFails => g.include_fails = true,
        O::ClearExisting => g.clear = true,
        O::DuplicateCount => g.duplicate_count = true,
        O::TagOriginal => g.tag_original = true,
        O::MaxReadLength => g.max_length = Some(int("--max-read-length")?),
        O::BarcodeName => g.combination.barcode_name = true,
        O::BarcodeRgx => {
            g.combination.barcode_name = true;
            g.combination.barcode_rgx = Some(v);
        }
        O::UseReadGroups => g.read_groups = true,
        O::NoMultiDup => g.no_multi_dup = true,
        O::ReadCoords => g.combination.read_coords = Some(v),
        O::CoordsOrder => g.combination.coords_order = v,
        O::MoveUmi => g.combination.move_umi = true,
        O::UmiSeparator => match v.as_bytes() {
            [c] => g.combination.umi_sep = *c,
            _ => {
                return Err(ArgError::Invalid(format!(
                    "--umi-separator '{v}': expected one character"
                )))
            }
        },
        O::MarkdupStats => g.stats_file = Some(v),
        O::MarkdupReport => g.report = true,
        O::MarkdupJson => g.json = true,
        other => {
            return Err(ArgError::Invalid(format!(
                "{other:?} is not an option of --markdup=samtools"
            )))
        }
    }
    Ok(())
}

/// Refuses an option of the other flavour than the one chosen, by name.
fn check_flavour(a: &MarkdupArgs) -> Result<(), ConfigError> {
    match a.flavoured.iter().find(|(_, f)| *f != a.flavour) {
        Some((name, Flavour::Samtools)) => Err(ConfigError::Invalid(format!(
            "{name} is an option of --markdup=samtools (samtools markdup's answer); \
             with --markdup (Picard's answer) it has no meaning"
        ))),
        Some((name, Flavour::Picard)) => Err(ConfigError::Invalid(format!(
            "{name} is an option of --markdup=picard (Picard's answer); \
             --markdup=samtools does not take it"
        ))),
        None => Ok(()),
    }
}

/// Resolves `--markdup=samtools` and its options; `None` without it.
pub fn resolve_samtools(a: &MarkdupArgs) -> Result<Option<SortMarking>, ConfigError> {
    if !a.enabled || a.flavour != Flavour::Samtools {
        return Ok(None);
    }
    check_flavour(a)?;
    let mut given = a.samtools.clone();
    given.remove_duplicates = a.remove_duplicates;
    given.optical_distance = a.optical_distance.map(i64::from);
    if let Some(t) = a.barcode_tags.umi {
        given.barcode_tag = Some(String::from_utf8_lossy(&t).into_owned());
    }
    given
        .resolve()
        .map(Some)
        .map_err(|e| ConfigError::Invalid(e.to_string()))
}

/// Resolves the group's options; `None` without `--markdup` or with
/// `--markdup=samtools` ([`resolve_samtools`]).
pub fn resolve(a: &MarkdupArgs) -> Result<Option<MarkdupConfig>, ConfigError> {
    if !a.enabled {
        if let Some(opt) = &a.other_given {
            return Err(ConfigError::Invalid(format!(
                "{opt} needs --markdup (it is an option of duplicate marking)"
            )));
        }
        return Ok(None);
    }
    if a.flavour == Flavour::Samtools {
        return Ok(None);
    }
    check_flavour(a)?;
    Ok(Some(MarkdupConfig {
        metrics: a.metrics.clone(),
        scoring: a.scoring,
        remove_duplicates: a.remove_duplicates,
        remove_sequencing_duplicates: a.remove_sequencing_duplicates,
        tagging: a.tagging,
        name_parser: a.name_parser.clone(),
        barcode_tags: a.barcode_tags,
        optical_distance: a
            .optical_distance
            .unwrap_or(alnsort_markdup::optical::DEFAULT_PIXEL_DISTANCE),
    }))
}

/// Refuses a `--metrics` path that names one of the run's other files
/// (the output, its index, the stats file): the metrics would replace it.
pub fn check_metrics_path(
    a: &MarkdupArgs,
    others: &[Option<&std::path::Path>],
) -> Result<(), ConfigError> {
    let Some(m) = &a.metrics else { return Ok(()) };
    let same = |p: &std::path::Path| {
        p == m.as_path()
            || std::fs::canonicalize(p)
                .ok()
                .is_some_and(|c| std::fs::canonicalize(m).ok() == Some(c))
    };
    match others.iter().flatten().find(|p| same(p)) {
        Some(p) => Err(ConfigError::Invalid(format!(
            "--metrics {} names the same file as the output, its index or the stats ({}): the metrics would replace it",
            m.display(),
            p.display()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::options::sort_args::{parse_with, ParsedSort};
    use std::ffi::OsString;

    fn parse(args: &[&str]) -> Result<crate::config::Config, String> {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        let a = parse_with("alnsort", argv, false, &[]).map_err(|e| e.to_string())?;
        let ParsedSort::Run(o) = a.parsed else {
            return Err("not a run".into());
        };
        crate::config::resolve(&o).map_err(|e| e.to_string())
    }

    /// `--markdup` alone and `--markdup=picard` are Picard's answer,
    /// `--markdup=samtools` samtools'; the value is taken only after `=`.
    #[test]
    fn markdup_takes_an_optional_flavour() {
        for picard in [&["--markdup"][..], &["--markdup=picard"]] {
            let cfg = parse(&[picard, &["-o", "o.bam", "in.bam"]].concat()).unwrap();
            assert!(cfg.markdup.is_some() && cfg.samtools_markdup.is_none());
        }
        let cfg = parse(&["--markdup=samtools", "-o", "o.bam", "in.bam"]).unwrap();
        assert!(cfg.markdup.is_none() && cfg.samtools_markdup.is_some());
        // Without `=`, the next word is the input, not the value.
        let cfg = parse(&["--markdup", "samtools"]).unwrap();
        assert!(cfg.markdup.is_some());
        assert_eq!(cfg.inputs, vec!["samtools".to_string()]);
        let e = parse(&["--markdup=gatk", "in.bam"]).unwrap_err();
        assert!(e.contains("--markdup=gatk"), "{e}");
    }

    /// samtools markdup's options reach its marker; an option of the
    /// other flavour is refused by name.
    #[test]
    fn each_flavour_refuses_the_others_options_by_name() {
        let cfg = parse(&[
            "--markdup=samtools",
            "--mode",
            "s",
            "--mark-supplementary",
            "--remove-duplicates",
            "--optical-distance",
            "100",
            "--max-read-length",
            "250",
            "--barcode-tag",
            "BC",
            "--markdup-stats",
            "st.txt",
            "in.bam",
        ])
        .unwrap();
        let sm = cfg.samtools_markdup.unwrap();
        let m = &sm.marking;
        assert!(m.supplementary && m.remove_duplicates);
        assert_eq!((m.optical_distance, m.max_length), (100, 250));
        assert_eq!(m.mode, alnsort_markdup::samtools::Mode::Sequence);
        assert!(matches!(m.barcode, alnsort_markdup::samtools::Barcode::Tag(t) if t == *b"BC"));
        assert!(sm.stats && sm.stats_file.as_deref() == Some("st.txt"));
        let e = parse(&["--markdup=samtools", "--metrics", "m.txt", "in.bam"]).unwrap_err();
        assert!(e.contains("--metrics") && e.contains("picard"), "{e}");
        let e = parse(&["--markdup", "--mode", "t", "in.bam"]).unwrap_err();
        assert!(e.contains("--mode") && e.contains("samtools"), "{e}");
        let e = parse(&["--markdup=picard", "--tag-original", "in.bam"]).unwrap_err();
        assert!(e.contains("--tag-original"), "{e}");
        let e = parse(&["--include-fails", "in.bam"]).unwrap_err();
        assert!(e.contains("--include-fails needs --markdup"), "{e}");
        let e = parse(&["--markdup=samtools", "--move-umi-to-tag", "in.bam"]).unwrap_err();
        assert!(e.contains("--move-umi-to-tag"), "{e}");
    }
}
