//! `--flagstat FILE` and `--idxstats FILE`: the text `samtools flagstat` and `samtools idxstats` 1.24 print for the output, from counts taken as the records go out.
//!
//! The counts are `alnsort_bam::qc`'s, taken by the output's writer
//! (`Writer::count_qc`: for BAM in the compression jobs, where each record
//! is copied anyway, for SAM as each line is formatted; CRAM's by
//! `output::Output` as each record is handed to the encoder). The files are
//! created beside their destinations before any input is read and renamed
//! into place after the output.
//!
//! What `samtools idxstats` prints depends on how it reads the file
//! ([`idxstats_form`]): a BAM output whose index is written where htslib
//! looks for it (`OUT.csi`, `OUT.bai`, or the name with `.bam` replaced) is
//! read from the index's pseudo-bins (secondary and supplementary records
//! count as mapped, placed unmapped reads as unmapped on their reference,
//! the last line `*\t0\t0\t<records without a reference>`); any other
//! output (BAM without such an index, SAM, CRAM) is scanned, the last line
//! `*\t0\t<without 0x4>\t<with 0x4>`, and samtools refuses a file in which a
//! reference's records are not together ("file is not position sorted"):
//! alnsort then fails the run as samtools would fail, naming the record,
//! and leaves no output behind.

use crate::config::Config;
use crate::error::{Context, Error, Result};
use crate::io::cleanup::Debris;
use crate::io::cleanup::StatsFile;
use crate::options::sort::OutFormat;
use alnsort_bam::header::Header;
use alnsort_bam::qc::{FlagstatFormat, IdxstatsForm, QcTally};
use std::path::{Path, PathBuf};

/// How `samtools idxstats OUT` reads what `cfg` writes.
pub fn idxstats_form(cfg: &Config) -> IdxstatsForm {
    let (Some(out), Some(index)) = (&cfg.output, &cfg.index) else {
        return IdxstatsForm::Scan;
    };
    if cfg.format != OutFormat::Bam {
        return IdxstatsForm::Scan;
    }
    if htslib_finds(out, &index.path) {
        IdxstatsForm::Index
    } else {
        IdxstatsForm::Scan
    }
}

/// Whether htslib's `hts_idx_check_local` finds `index` for the BAM file
/// `out`: `OUT.csi`, `OUT.bai`, or OUT with its extension replaced by
/// `.csi` or `.bai`.
fn htslib_finds(out: &Path, index: &Path) -> bool {
    let o = out.as_os_str().to_string_lossy();
    let base = match o.rfind('.') {
        Some(dot) if !o[dot..].contains('/') => &o[..dot],
        _ => &o[..],
    };
    let i = index.as_os_str().to_string_lossy();
    [".csi", ".bai"]
        .iter()
        .any(|ext| i == format!("{o}{ext}") || i == format!("{base}{ext}"))
}

/// The report files, created before the run reads its input.
pub struct QcFiles {
    flagstat: Option<(PathBuf, FlagstatFormat, StatsFile)>,
    idxstats: Option<(PathBuf, IdxstatsForm, StatsFile)>,
}

impl QcFiles {
    /// Creates the temporary files beside the reports `cfg` asks for, or
    /// says which cannot be created; `None` when none is asked for.
    pub fn prepare(cfg: &Config, debris: &Debris) -> Result<Option<QcFiles>> {
        if !cfg.qc.any() {
            return Ok(None);
        }
        let create = |opt: &str, p: &PathBuf| {
            StatsFile::create(p, debris)
                .with_context(|| format!("{opt} {}: cannot create the report file", p.display()))
        };
        let flagstat = match &cfg.qc.flagstat {
            Some(p) => Some((p.clone(), cfg.qc.flagstat_format, create("--flagstat", p)?)),
            None => None,
        };
        let idxstats = match &cfg.qc.idxstats {
            Some(p) => Some((p.clone(), idxstats_form(cfg), create("--idxstats", p)?)),
            None => None,
        };
        Ok(Some(QcFiles { flagstat, idxstats }))
    }

    /// The reports' texts for the counts `qc` of a file with `header`; an
    /// error where samtools would print no table.
    pub fn render(self, qc: &QcTally, header: &Header) -> Result<Rendered> {
        let mut files = Vec::new();
        if let Some((path, format, file)) = self.flagstat {
            files.push((path, file, qc.flagstat.render(format)));
        }
        if let Some((path, form, file)) = self.idxstats {
            let text = qc.idxstats.render(header, form).map_err(|e| {
                Error::Refused(format!(
                    "--idxstats {}: {e}; the output is not kept",
                    path.display()
                ))
            })?;
            files.push((path, file, text));
        }
        Ok(Rendered(files))
    }
}

/// The reports' texts, ready to be written once the output is in place.
pub struct Rendered(Vec<(PathBuf, StatsFile, String)>);

impl Rendered {
    /// Writes each report and renames it into place.
    pub fn write(self) -> Result<()> {
        for (path, file, text) in self.0 {
            file.write(&text).with_context(|| {
                format!(
                    "the output is complete, but writing the report to {} failed",
                    path.display()
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::qc::parse_flagstat_format;

    #[test]
    fn htslib_finds_the_index_names_it_tries() {
        let out = Path::new("dir/x.bam");
        for found in ["dir/x.bam.csi", "dir/x.bam.bai", "dir/x.csi", "dir/x.bai"] {
            assert!(htslib_finds(out, Path::new(found)), "{found}");
        }
        for missed in ["dir/x.bam.idx", "other/x.bam.bai", "dir/y.bai"] {
            assert!(!htslib_finds(out, Path::new(missed)), "{missed}");
        }
        assert!(htslib_finds(Path::new("a.b/x"), Path::new("a.b/x.bai")));
        assert!(!htslib_finds(Path::new("a.b/x"), Path::new("a.bai")));
    }

    #[test]
    fn formats_are_samtools_names() {
        assert_eq!(parse_flagstat_format("JSON"), Ok(FlagstatFormat::Json));
        assert_eq!(parse_flagstat_format("tsv"), Ok(FlagstatFormat::Tsv));
        assert!(parse_flagstat_format("yaml").is_err());
    }
}
