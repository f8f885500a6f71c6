//! A Parquet dataset as the run's output (`-O parquet -o DIR`, through
//! `alnsort_columnar::DatasetWriter`) and as an input (a directory that
//! alnsort wrote, read back as BAM records).

use crate::config::Config;
use crate::error::{Error, Result};
use crate::io::cleanup::Debris;
use alnsort_bam::header::Header;
use alnsort_bam::keys::SortOrder;
use alnsort_bam::qc::{QcRecord, QcTally, ReadBack};
use alnsort_bam::RecordRef;
use alnsort_columnar::DatasetWriter;
use std::path::{Path, PathBuf};

/// The dataset being written and what the run reports about it.
pub struct ParquetSink {
    writer: DatasetWriter,
    temp: PathBuf,
    debris: Debris,
    pub records: u64,
    pub bytes: u64,
    /// `--flagstat`/`--idxstats` counts.
    pub qc: Option<QcTally>,
}

/// Refuses a destination that is neither absent, an empty folder nor a
/// dataset alnsort wrote: before any input is read.
pub fn check_destination(cfg: &Config) -> Result<()> {
    if let Some(dir) = &cfg.output {
        alnsort_columnar::write::check_destination(dir)?;
    }
    Ok(())
}

impl ParquetSink {
    /// Starts the dataset at the run's output directory; its temporary
    /// folder is the run's debris until it is renamed into place.
    pub fn create(
        cfg: &Config,
        header: &Header,
        count_qc: bool,
        debris: &Debris,
        pool: std::sync::Arc<rayon::ThreadPool>,
    ) -> Result<ParquetSink> {
        let Some(dir) = &cfg.output else {
            return Err(Error::Internal("Parquet output without a directory".into()));
        };
        Self::create_at(cfg, dir, header, count_qc, debris, pool)
    }

    /// [`ParquetSink::create`] at DIR rather than the run's output (a
    /// stage reduce's part).
    pub fn create_at(
        cfg: &Config,
        dir: &Path,
        header: &Header,
        count_qc: bool,
        debris: &Debris,
        pool: std::sync::Arc<rayon::ThreadPool>,
    ) -> Result<ParquetSink> {
        let Some(opts) = &cfg.columnar else {
            return Err(Error::Internal("Parquet output without its options".into()));
        };
        let coordinate = cfg.order == SortOrder::Coordinate;
        let writer = DatasetWriter::create(dir, header, coordinate, opts.clone(), pool)?;
        let temp = writer.temp_path().to_path_buf();
        debris.add(temp.clone());
        Ok(ParquetSink {
            writer,
            temp,
            debris: debris.clone(),
            records: 0,
            bytes: 0,
            qc: count_qc.then(|| QcTally::new(header.n_ref())),
        })
    }

    /// Appends one record (with its `block_size`).
    pub fn write_record(&mut self, rec: &[u8]) -> Result<()> {
        self.records += 1;
        self.bytes += rec.len() as u64;
        if let Some(qc) = &mut self.qc {
            qc.push(&QcRecord::of(
                RecordRef::with_block_size(rec),
                ReadBack::Binary,
            ));
        }
        Ok(self.writer.write_record(rec)?)
    }

    /// Writes the rest; the dataset waits for [`ClosedSink::commit`].
    pub fn close(self) -> Result<ClosedSink> {
        Ok(ClosedSink {
            closed: self.writer.close()?,
            temp: self.temp,
            debris: self.debris,
        })
    }
}

/// A dataset written whole, not yet in place.
pub struct ClosedSink {
    closed: alnsort_columnar::Closed,
    temp: PathBuf,
    debris: Debris,
}

impl ClosedSink {
    /// Bytes of the dataset's files.
    pub fn bytes(&self) -> u64 {
        self.closed.summary().bytes
    }

    /// Renames the dataset into place.
    pub fn commit(self) -> Result<()> {
        self.closed.commit()?;
        self.debris.forget(&self.temp);
        Ok(())
    }
}

/// Whether PATH is a dataset directory alnsort can read as input.
pub fn is_dataset(path: &Path) -> bool {
    alnsort_columnar::read::is_dataset(path)
}

/// Record bytes gathered into one batch of the input (about what a BGZF
/// input's scanner hands on).
const INPUT_BATCH_BYTES: usize = 4 << 20;

/// Starts reading a dataset's records: the reading thread decodes the
/// Parquet files into BAM records, a batch at a time, and each batch goes
/// to `job` on the pool, results in input order (as
/// `io::input::spawn_batches` does for the other formats).
pub(crate) fn spawn_dataset_batches<T, F>(
    name: &str,
    mut reader: alnsort_columnar::read::Records,
    pool: &std::sync::Arc<rayon::ThreadPool>,
    stage: &'static str,
    depth: usize,
    job: F,
) -> Result<(
    alnsort_pipeline::Ordered<Result<T>>,
    crate::report::progress::ScanTime,
)>
where
    T: Send + 'static,
    F: Fn(&alnsort_bam::reader::RawBatch) -> Result<T> + Send + Sync + 'static,
{
    use crate::error::Context;
    let time = crate::report::progress::ScanTime::default();
    let timed = time.timer();
    let mut first_record = 0u64;
    let started = alnsort_pipeline::Ordered::spawn(
        std::sync::Arc::clone(pool),
        stage,
        depth,
        move |emit| {
            timed(&mut || {
                alnsort_pipeline::pump(
                    || {
                        let mut data = Vec::new();
                        let mut n = 0;
                        while data.len() < INPUT_BATCH_BYTES {
                            let got = reader.next_batch(&mut data)?;
                            if got == 0 {
                                break;
                            }
                            n += got;
                        }
                        if n == 0 {
                            return Ok(None);
                        }
                        let mut raw = alnsort_bam::reader::RawBatch::framed(data);
                        raw.first_record = first_record;
                        raw.voffsets = vec![0; n];
                        first_record += n as u64;
                        Ok(Some(raw))
                    },
                    emit,
                )
            })
        },
        move |item: std::result::Result<
            alnsort_bam::reader::RawBatch,
            alnsort_columnar::ColumnarError,
        >|
              -> Result<T> { job(&item?) },
    );
    let batches = started.with_context(|| format!("{name}: starting the input reader thread"))?;
    Ok((batches, time))
}
