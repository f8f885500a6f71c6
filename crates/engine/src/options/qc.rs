//! `--flagstat`, `--flagstat-format` and `--idxstats` as given (`QcArgs`), shared by `sort`, `merge` and `MarkDuplicates`.

use alnsort_bam::qc::FlagstatFormat;
use std::path::{Path, PathBuf};

/// The reports asked for (`--flagstat`, `--flagstat-format`, `--idxstats`).
#[derive(Debug, Clone, Default)]
pub struct QcArgs {
    pub flagstat: Option<PathBuf>,
    pub flagstat_format: FlagstatFormat,
    pub idxstats: Option<PathBuf>,
}

impl QcArgs {
    /// Whether any report is asked for.
    pub fn any(&self) -> bool {
        self.flagstat.is_some() || self.idxstats.is_some()
    }

    /// The reports' (option, file) pairs, for the checks that they do not
    /// name the output, its index or another report.
    pub fn files(&self) -> [(&'static str, Option<&Path>); 2] {
        [
            ("--flagstat", self.flagstat.as_deref()),
            ("--idxstats", self.idxstats.as_deref()),
        ]
    }
}

/// `--flagstat-format`'s value.
pub fn parse_flagstat_format(text: &str) -> std::result::Result<FlagstatFormat, String> {
    FlagstatFormat::from_name(text).ok_or_else(|| {
        format!(
            "--flagstat-format '{text}': expected 'default', 'json' or 'tsv' \
             (samtools flagstat -O's formats)"
        )
    })
}
