//! The dataset writer: records in output order in, Parquet files out,
//! one folder per reference in coordinate order, row groups cut by rows
//! and by position; written under a temporary name and renamed into place
//! whole.

use crate::error::ColumnarError;
use crate::partition;
use crate::record::Columns;
use crate::schema::{self, col};
use alnsort_bam::header::Header;
use alnsort_bam::RecordRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// The compression of the column chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// Zstandard at a level (1-22).
    Zstd(i32),
    Snappy,
}

/// How the dataset is written.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    pub codec: Codec,
    /// A row group ends at this many rows.
    pub max_group_rows: usize,
    /// ... or, once it holds `min_group_rows`, where the position crosses
    /// a multiple of `window` bases (coordinate order only): a region
    /// query then reads the groups that overlap it, not a whole reference.
    pub min_group_rows: usize,
    pub window: i64,
    /// The command line, kept in the file metadata.
    pub command: String,
}

/// Zstandard level 3, zstd's own default (`ZSTD_CLEVEL_DEFAULT`).
pub const DEFAULT_ZSTD_LEVEL: i32 = 3;

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            codec: Codec::Zstd(DEFAULT_ZSTD_LEVEL),
            max_group_rows: 65_536,
            min_group_rows: 4_096,
            window: 1_000_000,
            command: String::new(),
        }
    }
}

/// What was written.
#[derive(Clone, Debug, Default)]
pub struct WriteSummary {
    pub records: u64,
    pub files: usize,
    pub bytes: u64,
}

/// The file being written and what its rows share.
struct OpenFile {
    writer: ArrowWriter<File>,
    path: PathBuf,
    /// The reference id of its records (coordinate order), or 0.
    key: i32,
    /// The window of the group being filled.
    window: i64,
}

/// Writes the records of one run into a dataset directory.
pub struct DatasetWriter {
    dest: PathBuf,
    tmp: PathBuf,
    names: Vec<String>,
    metadata: Vec<KeyValue>,
    coordinate: bool,
    opts: WriteOptions,
    cols: Columns,
    open: Option<OpenFile>,
    /// The partition keys done (coordinate order).
    previous: Option<i32>,
    summary: WriteSummary,
    finished: bool,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ColumnarError + '_ {
    move |source| ColumnarError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn pq_err(path: &Path) -> impl FnOnce(parquet::errors::ParquetError) -> ColumnarError + '_ {
    move |source| ColumnarError::Parquet {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether DIR may be replaced by a new dataset: absent, an empty folder,
/// or a dataset alnsort wrote. Anything else is refused.
pub fn check_destination(dir: &Path) -> Result<(), ColumnarError> {
    match fs::symlink_metadata(dir) {
        Err(_) => Ok(()),
        Ok(m) if m.is_dir() => {
            let empty = fs::read_dir(dir).map_err(io_err(dir))?.next().is_none();
            if empty || dir.join(schema::MARKER_FILE).is_file() {
                Ok(())
            } else {
                Err(ColumnarError::Occupied {
                    path: dir.to_path_buf(),
                })
            }
        }
        Ok(_) => Err(ColumnarError::Occupied {
            path: dir.to_path_buf(),
        }),
    }
}

impl DatasetWriter {
    /// A writer of the dataset DIR for records under HEADER (whose `@HD SO`
    /// says the order; `coordinate` cuts the files by reference). DIR is
    /// checked now ([`check_destination`]) and replaced at
    /// [`DatasetWriter::finish`].
    pub fn create(
        dir: &Path,
        header: &Header,
        coordinate: bool,
        opts: WriteOptions,
    ) -> Result<DatasetWriter, ColumnarError> {
        check_destination(dir)?;
        let file_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "dataset".into());
        let tmp = dir.with_file_name(format!(".{file_name}.alnsort-tmp-{}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
        }
        fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        let names: Vec<String> = header
            .refs()
            .iter()
            .map(|r| String::from_utf8_lossy(&r.name).into_owned())
            .collect();
        let refs: String = header
            .refs()
            .iter()
            .map(|r| format!("{}\t{}\n", String::from_utf8_lossy(&r.name), r.len))
            .collect();
        let sort_order = sort_order(header);
        let metadata = vec![
            KeyValue::new(
                schema::KEY_SCHEMA_VERSION.into(),
                schema::SCHEMA_VERSION.to_string(),
            ),
            KeyValue::new(
                schema::KEY_HEADER.into(),
                String::from_utf8_lossy(&header.to_sam_text()).into_owned(),
            ),
            KeyValue::new(schema::KEY_REFERENCES.into(), refs),
            KeyValue::new(schema::KEY_SORT_ORDER.into(), sort_order),
            KeyValue::new(schema::KEY_COMMAND.into(), opts.command.clone()),
        ];
        Ok(DatasetWriter {
            dest: dir.to_path_buf(),
            tmp,
            names,
            metadata,
            coordinate,
            opts,
            cols: Columns::new(),
            open: None,
            previous: None,
            summary: WriteSummary::default(),
            finished: false,
        })
    }

    fn properties(&self) -> WriterProperties {
        let compression = match self.opts.codec {
            Codec::Zstd(level) => Compression::ZSTD(ZstdLevel::try_new(level).unwrap_or_default()),
            Codec::Snappy => Compression::SNAPPY,
        };
        let mut metadata = self.metadata.clone();
        metadata.push(KeyValue::new(
            schema::KEY_FILE_INDEX.into(),
            self.summary.files.to_string(),
        ));
        let mut b = WriterProperties::builder()
            .set_compression(compression)
            .set_max_row_group_size(usize::MAX)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_key_value_metadata(Some(metadata));
        // The long, nearly unique values: no dictionary, no statistics
        // (a region query filters on rname, pos and end).
        for c in [col::QNAME, col::SEQ, col::QUAL] {
            b = b
                .set_column_dictionary_enabled(ColumnPath::from(c), false)
                .set_column_statistics_enabled(ColumnPath::from(c), EnabledStatistics::None);
        }
        b.build()
    }

    fn open_file(&mut self, key: i32) -> Result<(), ColumnarError> {
        let folder = if self.coordinate {
            let name = (key >= 0).then(|| self.names[key as usize].as_bytes());
            self.tmp.join(partition::folder(name))
        } else {
            self.tmp.clone()
        };
        fs::create_dir_all(&folder).map_err(io_err(&folder))?;
        let mut n = 0;
        while folder.join(partition::file_name(n)).exists() {
            n += 1;
        }
        let path = folder.join(partition::file_name(n));
        let file = File::create(&path).map_err(io_err(&path))?;
        let writer = ArrowWriter::try_new(file, schema::schema(), Some(self.properties()))
            .map_err(pq_err(&path))?;
        self.summary.files += 1;
        self.open = Some(OpenFile {
            writer,
            path,
            key,
            window: -1,
        });
        Ok(())
    }

    /// The rows collected so far written as one row group.
    fn flush_group(&mut self) -> Result<(), ColumnarError> {
        if self.cols.rows() == 0 {
            return Ok(());
        }
        let open = self.open.as_mut().expect("a file is open while rows wait");
        let batch = self.cols.finish().map_err(|source| ColumnarError::Arrow {
            path: open.path.clone(),
            source,
        })?;
        open.writer.write(&batch).map_err(pq_err(&open.path))?;
        open.writer.flush().map_err(pq_err(&open.path))?;
        Ok(())
    }

    fn close_file(&mut self) -> Result<(), ColumnarError> {
        self.flush_group()?;
        if let Some(open) = self.open.take() {
            open.writer.close().map_err(pq_err(&open.path))?;
        }
        Ok(())
    }

    /// Appends one record (BAM bytes with `block_size`), in output order.
    pub fn write_record(&mut self, framed: &[u8]) -> Result<(), ColumnarError> {
        let rec = RecordRef::with_block_size(framed);
        let record = self.summary.records;
        let key = if self.coordinate { rec.ref_id() } else { 0 };
        if self.open.as_ref().map(|o| o.key) != Some(key) {
            if let Some(prev) = self.previous.or(self.open.as_ref().map(|o| o.key)) {
                let backwards = if key < 0 {
                    false
                } else {
                    prev < 0 || key < prev
                };
                if backwards && self.coordinate {
                    return Err(ColumnarError::OutOfOrder {
                        record,
                        ref_id: key,
                        previous: prev,
                    });
                }
            }
            self.close_file()?;
            self.previous = Some(key);
            self.open_file(key)?;
        }
        let window = if self.coordinate && self.opts.window > 0 {
            i64::from(rec.pos().max(0)) / self.opts.window
        } else {
            0
        };
        let rows = self.cols.rows();
        let open = self.open.as_mut().expect("opened above");
        let cut = rows >= self.opts.max_group_rows
            || (rows >= self.opts.min_group_rows && window != open.window);
        if rows == 0 || cut {
            open.window = window;
        }
        if cut {
            self.flush_group()?;
        }
        self.cols
            .push(rec, &self.names)
            .map_err(|problem| ColumnarError::Record {
                record,
                name: String::from_utf8_lossy(rec.read_name()).into_owned(),
                problem,
            })?;
        self.summary.records += 1;
        Ok(())
    }

    /// Appends records laid end to end (each with its `block_size`).
    pub fn write_records(&mut self, mut bytes: &[u8]) -> Result<(), ColumnarError> {
        while bytes.len() >= 4 {
            let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize + 4;
            self.write_record(&bytes[..n])?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Writes what is left and the marker file, then renames the dataset
    /// into place (replacing a dataset alnsort wrote there before).
    pub fn finish(self) -> Result<WriteSummary, ColumnarError> {
        self.close()?.commit()
    }

    /// Writes what is left and the marker file; the dataset is renamed
    /// into place by [`Closed::commit`] (dropped instead, it is removed).
    pub fn close(mut self) -> Result<Closed, ColumnarError> {
        self.close_file()?;
        if self.summary.files == 0 {
            // An empty dataset still carries the header and the schema.
            self.coordinate = false;
            self.open_file(0)?;
            self.close_file()?;
        }
        let marker = self.tmp.join(schema::MARKER_FILE);
        let text = format!(
            "schema_version {}\nfiles {}\nrecords {}\n",
            schema::SCHEMA_VERSION,
            self.summary.files,
            self.summary.records
        );
        fs::write(&marker, text).map_err(io_err(&marker))?;
        self.summary.bytes = dir_size(&self.tmp).map_err(io_err(&self.tmp))?;
        // The temporary folder is the Closed's to remove or rename now.
        self.finished = true;
        Ok(Closed {
            tmp: self.tmp.clone(),
            dest: self.dest.clone(),
            summary: self.summary.clone(),
            committed: false,
        })
    }

    /// The temporary folder the dataset is written in until `finish`.
    pub fn temp_path(&self) -> &Path {
        &self.tmp
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.summary.records
    }
}

impl Drop for DatasetWriter {
    /// A dataset not finished is removed: nothing is left behind.
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// A dataset written whole in its temporary folder.
pub struct Closed {
    tmp: PathBuf,
    dest: PathBuf,
    summary: WriteSummary,
    committed: bool,
}

impl Closed {
    pub fn summary(&self) -> &WriteSummary {
        &self.summary
    }

    /// Renames the dataset into place, replacing a dataset alnsort wrote
    /// there before (anything else there is refused).
    pub fn commit(mut self) -> Result<WriteSummary, ColumnarError> {
        check_destination(&self.dest)?;
        if self.dest.is_dir() {
            fs::remove_dir_all(&self.dest).map_err(io_err(&self.dest))?;
        }
        fs::rename(&self.tmp, &self.dest).map_err(io_err(&self.dest))?;
        self.committed = true;
        Ok(self.summary.clone())
    }
}

impl Drop for Closed {
    /// A dataset not renamed into place is removed.
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

/// The `@HD SO` value, `unknown` without one.
pub fn sort_order(header: &Header) -> String {
    header
        .lines()
        .iter()
        .find(|l| l.starts_with(b"@HD"))
        .and_then(|l| {
            l.split(|&b| b == b'\t')
                .find_map(|f| f.strip_prefix(b"SO:"))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn dir_size(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(total)
}
