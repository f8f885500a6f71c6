//! `-O parquet[,codec=zstd|snappy][,level=N]`: the options of a Parquet
//! dataset output resolved, and those it cannot honour refused by name.

use crate::error::ConfigError;
use crate::options::sort::{OutFormat, SortOptions};
use alnsort_columnar::{Codec, WriteOptions};

/// The dataset's write options when FORMAT is Parquet (`None` otherwise,
/// where `codec=` is refused); the options that make no sense for a
/// dataset are refused, each by name.
pub fn resolve(a: &SortOptions, format: OutFormat) -> Result<Option<WriteOptions>, ConfigError> {
    let refuse = |what: &str| Err(ConfigError::Invalid(what.to_string()));
    if format != OutFormat::Parquet {
        if let Some(c) = &a.parquet_codec {
            return Err(ConfigError::Invalid(format!(
                "output format option codec={c} applies to Parquet output only"
            )));
        }
        return Ok(None);
    }
    let output = a.output.split("##idx##").next().unwrap_or("");
    if output == "-" || output.is_empty() {
        return refuse("-O parquet writes a directory: give it with -o DIR (standard output cannot hold a dataset)");
    }
    if a.output.contains("##idx##") || a.write_index {
        return refuse(
            "--write-index cannot be honoured for Parquet output (a dataset has no BAI/CSI; \
             readers prune its files and row groups by reference folder and statistics)",
        );
    }
    if a.uncompressed {
        return refuse("-u (uncompressed BAM) cannot be honoured for Parquet output");
    }
    if a.level.is_some() {
        return refuse(
            "-l sets the BAM/BGZF deflate level and cannot be honoured for Parquet output \
             (use -O parquet,level=N for the zstd level)",
        );
    }
    let codec = match a.parquet_codec.as_deref() {
        None | Some("zstd") => {
            let level = a
                .format_level
                .map(|l| l as i32)
                .unwrap_or(alnsort_columnar::write::DEFAULT_ZSTD_LEVEL);
            if level < 1 {
                return refuse("-O parquet,level=0: zstd levels are 1..9 (snappy: codec=snappy)");
            }
            Codec::Zstd(level)
        }
        Some("snappy") => {
            if let Some(l) = a.format_level {
                return Err(ConfigError::Invalid(format!(
                    "-O parquet,codec=snappy,level={l}: snappy has no levels"
                )));
            }
            Codec::Snappy
        }
        Some(other) => {
            return Err(ConfigError::Invalid(format!(
                "-O parquet,codec={other}: the codecs are zstd and snappy"
            )))
        }
    };
    Ok(Some(WriteOptions {
        codec,
        command: a.command_line.clone(),
        range: None,
        ..WriteOptions::default()
    }))
}
