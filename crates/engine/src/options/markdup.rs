//! Duplicate marking's options (`--markdup` and its group): their ids, the values as given, how each is applied, and the resolved `MarkdupConfig`.

use crate::error::{ArgError, ConfigError, Result};
use alnsort_markdup::decision::TaggingPolicy;
use alnsort_markdup::extract::{BarcodeTags, Scoring};
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
    pub other_given: Option<&'static str>,
}

/// Applies one option of the group.
pub fn apply_arg(a: &mut MarkdupArgs, opt: MdOpt, value: Option<String>) -> Result<(), ArgError> {
    let val = || value.clone().unwrap_or_default();
    match opt {
        MdOpt::Markdup => {
            a.enabled = true;
            return Ok(());
        }
        MdOpt::Metrics => {
            a.metrics = Some(PathBuf::from(val()));
            a.other_given = Some("--metrics");
        }
        MdOpt::RemoveDuplicates => {
            a.remove_duplicates = true;
            a.other_given = Some("--remove-duplicates");
        }
        MdOpt::OpticalDistance => {
            let v = val();
            let n: i32 = v.trim().parse().map_err(|_| {
                ArgError::Invalid(format!(
                    "--optical-distance '{v}': expected a whole number of pixels (Picard's OPTICAL_DUPLICATE_PIXEL_DISTANCE, default 100)"
                ))
            })?;
            if n < 0 {
                return Err(ArgError::Invalid(format!(
                    "--optical-distance {n}: must be 0 or more"
                )));
            }
            a.optical_distance = Some(n);
            a.other_given = Some("--optical-distance");
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
            a.other_given = Some("--duplicate-scoring");
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
            a.other_given = Some("--tagging-policy");
        }
        MdOpt::RemoveSequencingDuplicates => {
            a.remove_sequencing_duplicates = true;
            a.other_given = Some("--remove-sequencing-duplicates");
        }
        MdOpt::BarcodeTag => {
            a.barcode_tags.umi = Some(parse_tag("--barcode-tag", &val())?);
            a.other_given = Some("--barcode-tag");
        }
        MdOpt::ReadOneBarcodeTag => {
            a.barcode_tags.read_one = Some(parse_tag("--read-one-barcode-tag", &val())?);
            a.other_given = Some("--read-one-barcode-tag");
        }
        MdOpt::ReadTwoBarcodeTag => {
            a.barcode_tags.read_two = Some(parse_tag("--read-two-barcode-tag", &val())?);
            a.other_given = Some("--read-two-barcode-tag");
        }
        MdOpt::ReadNameRegex => {
            a.name_parser =
                alnsort_markdup::optical::NameParser::from_picard_arg(&val()).map_err(|e| {
                    ArgError::Value {
                        what: "--read-name-regex".into(),
                        source: e.into(),
                    }
                })?;
            a.other_given = Some("--read-name-regex");
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

/// Resolves the group's options; `None` without `--markdup`.
pub fn resolve(a: &MarkdupArgs) -> Result<Option<MarkdupConfig>, ConfigError> {
    if !a.enabled {
        if let Some(opt) = a.other_given {
            return Err(ConfigError::Invalid(format!(
                "{opt} needs --markdup (it is an option of duplicate marking)"
            )));
        }
        return Ok(None);
    }
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
