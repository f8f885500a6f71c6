//! samtools markdup's marking options that `alnsort markdup` and `alnsort sort --markdup=samtools` share: the combination checked after the command line (`Combination`), the sort's options as given (`MarkingGiven`) and what they resolve into (`SortMarking`).

use crate::error::ArgError;
use alnsort_markdup::samtools::coords::{build_regex, CoordRegex};
use alnsort_markdup::samtools::{Barcode, Mode, Options, BARCODE_NAME_REGEX};

/// The options of samtools markdup whose meaning depends on others given
/// with them (the barcode's source, `--move-umi-to-tag`, the name
/// coordinates' regex): checked together and put in [`Options`] once the
/// whole command line is read, as samtools checks them after its loop.
/// `alnsort markdup` and `alnsort sort --markdup=samtools` share it.
#[derive(Debug, Clone)]
pub struct Combination {
    pub read_coords: Option<String>,
    pub coords_order: String,
    pub barcode_tag: Option<String>,
    pub barcode_name: bool,
    pub barcode_rgx: Option<String>,
    pub move_umi: bool,
    pub umi_sep: u8,
}

impl Default for Combination {
    fn default() -> Self {
        Combination {
            read_coords: None,
            coords_order: "txy".to_string(),
            barcode_tag: None,
            barcode_name: false,
            barcode_rgx: None,
            move_umi: false,
            umi_sep: b':',
        }
    }
}

impl Combination {
    /// Checks the combination and sets what it says in `m`.
    pub fn apply(self, m: &mut Options) -> Result<(), ArgError> {
        if self.barcode_tag.is_some() && self.barcode_name {
            return Err(ArgError::Invalid(
                "cannot specify --barcode-tag and --barcode-name (or --barcode-rgx) at same time"
                    .into(),
            ));
        }
        if self.move_umi && !self.barcode_name {
            return Err(ArgError::Invalid(
                "--move-umi-to-tag requires --barcode-name or --barcode-rgx".into(),
            ));
        }
        if self.move_umi {
            m.move_umi = Some(self.umi_sep);
        }
        if let Some(rx) = self.read_coords {
            m.read_coords = Some(
                CoordRegex::new(&rx, &self.coords_order)
                    .map_err(|e| ArgError::Invalid(format!("--read-coords {rx}: {e}")))?,
            );
        }
        if let Some(tag) = self.barcode_tag {
            let b = tag.as_bytes();
            if b.len() < 2 {
                return Err(ArgError::Invalid(format!(
                    "--barcode-tag {tag}: a tag has two characters"
                )));
            }
            m.barcode = Barcode::Tag([b[0], b[1]]);
        } else if self.barcode_name {
            let pattern = self.barcode_rgx.as_deref().unwrap_or(BARCODE_NAME_REGEX);
            let rx = build_regex(pattern).map_err(|e| ArgError::Value {
                what: format!("barcode regex fail on {pattern}"),
                source: Box::new(e),
            })?;
            m.barcode = Barcode::Regex(rx);
        }
        Ok(())
    }
}

/// `alnsort sort --markdup=samtools`'s options as given (the rows of
/// `alnsort sort`'s group "Duplicate marking" that are samtools
/// markdup's), resolved into a [`SortMarking`] once the command line is
/// read.
#[derive(Debug, Clone, Default)]
pub struct MarkingGiven {
    pub mode: Option<Mode>,
    pub supplementary: bool,
    pub include_fails: bool,
    pub clear: bool,
    pub duplicate_count: bool,
    pub tag_original: bool,
    pub max_length: Option<i64>,
    pub read_groups: bool,
    pub no_multi_dup: bool,
    pub remove_duplicates: bool,
    pub optical_distance: Option<i64>,
    pub barcode_tag: Option<String>,
    pub combination: Combination,
    pub stats_file: Option<String>,
    pub report: bool,
    pub json: bool,
}

/// What `alnsort sort --markdup=samtools` marks with and reports.
#[derive(Debug, Clone)]
pub struct SortMarking {
    pub marking: Options,
    /// `--markdup-report`, `--markdup-stats`, `--markdup-json`: statistics
    /// wanted (to the file, else standard error).
    pub stats: bool,
    pub stats_file: Option<String>,
    pub json: bool,
}

impl MarkingGiven {
    /// The options for samtools' marker and the statistics wanted.
    pub fn resolve(mut self) -> Result<SortMarking, ArgError> {
        let mut m = Options {
            remove_duplicates: self.remove_duplicates,
            supplementary: self.supplementary,
            tag_original: self.tag_original,
            clear: self.clear,
            include_fails: self.include_fails,
            multi_dup: !self.no_multi_dup,
            read_groups: self.read_groups,
            duplicate_count: self.duplicate_count,
            ..Options::default()
        };
        if let Some(mode) = self.mode {
            m.mode = mode;
        }
        if let Some(l) = self.max_length {
            m.max_length = l;
        }
        if let Some(d) = self.optical_distance {
            m.optical_distance = d;
        }
        self.combination.barcode_tag = self.barcode_tag.take();
        self.combination.apply(&mut m)?;
        Ok(SortMarking {
            marking: m,
            stats: self.report || self.json || self.stats_file.is_some(),
            stats_file: self.stats_file,
            json: self.json,
        })
    }
}
