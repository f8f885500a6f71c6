//! `alnsort index`'s run: a BAI or CSI for each BAM (`alnsort_bam::index_file`, htslib's offsets) and a `.crai` for each CRAM (`alnsort_cram::crai`), written under a temporary name and renamed into place; the CSI and `.crai` compressed with the system's zlib where it is found (`crate::io::zlib`), as samtools compresses them.

use crate::io::cleanup::{Debris, PendingFile};
use crate::options::index::IndexArgs;
use alnsort_bam::index_file::{index_bam, IndexBamError};
use alnsort_bgzf::ParallelReader;
use alnsort_index::IndexFormat;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
        let bytes = crate::io::zlib::crai_bytes(&crai.text);
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
    let bytes = crate::io::zlib::index_file_bytes(&indexed.index);
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
