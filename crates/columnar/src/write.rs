//! The dataset writer: records in output order in, Parquet files out,
//! one folder per reference in coordinate order, row groups cut by rows
//! and by position, each row group built and encoded by a job on the
//! injected pool and appended to its file in order; written under a
//! temporary name and renamed into place whole.

use crate::error::ColumnarError;
use crate::partition;
use crate::read::{parquet_files, Marker};
use crate::record::Columns;
use crate::schema::{self, col};
use alnsort_bam::header::Header;
use alnsort_bam::RecordRef;
use alnsort_pipeline::OrderedQueue;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use rayon::ThreadPool;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// The key range this writer holds of a distributed sort (its files
    /// are named and ordered by it: [`schema::KEY_RANGE`]); `None` for a
    /// whole dataset.
    pub range: Option<usize>,
}

/// Zstandard level 1, chosen by measurement (bench/results/
/// 2026-12-07-parquet.md, the benchmark BAM at `-@2`): smaller than level 3
/// here (82.6 against 84.0 MB) for about 30% less CPU; level 3's larger
/// compression contexts also cost page faults per page compressed.
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            codec: Codec::Zstd(DEFAULT_ZSTD_LEVEL),
            max_group_rows: 65_536,
            min_group_rows: 4_096,
            window: 1_000_000,
            command: String::new(),
            range: None,
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

/// The file records are being added to, and what its rows share.
struct OpenFile {
    path: PathBuf,
    /// The reference id of its records (coordinate order), or 0.
    key: i32,
    /// The window of the group being filled.
    window: i64,
}

/// A file whose row groups are being appended, oldest first.
struct FileOut {
    writer: SerializedFileWriter<File>,
    path: PathBuf,
}

/// What the encoding jobs share: the reference names and the column
/// writers' factory (the same schema and encoding properties in every
/// file; only the footer's metadata differs between files).
struct EncodeShared {
    names: Vec<String>,
    factory: ArrowRowGroupWriterFactory,
}

/// An encoded row group: its column chunks, and the record buffer back
/// for reuse.
type Encoded = (Result<Vec<ArrowColumnChunk>, ColumnarError>, Vec<u8>);

/// The steps the writer takes in order as jobs finish: append the next
/// encoded row group to the oldest open file, or close that file.
enum Step {
    Group,
    Close,
}

/// Writes the records of one run into a dataset directory.
pub struct DatasetWriter {
    dest: PathBuf,
    tmp: PathBuf,
    names: Vec<String>,
    metadata: Vec<KeyValue>,
    coordinate: bool,
    opts: WriteOptions,
    /// The framed records of the row group being filled, how many, and
    /// the index of its first record.
    group: Vec<u8>,
    group_rows: usize,
    group_first: u64,
    open: Option<OpenFile>,
    /// The files with row groups still to append or to close, oldest first.
    files: VecDeque<FileOut>,
    shared: Option<Arc<EncodeShared>>,
    queue: OrderedQueue<Encoded>,
    steps: VecDeque<Step>,
    /// Row groups in flight at most (twice the pool's threads).
    depth: usize,
    spare: Vec<Vec<u8>>,
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
    /// says the order; `coordinate` cuts the files by reference), its row
    /// groups encoded on POOL. DIR is checked now ([`check_destination`])
    /// and replaced at [`DatasetWriter::finish`].
    pub fn create(
        dir: &Path,
        header: &Header,
        coordinate: bool,
        opts: WriteOptions,
        pool: Arc<ThreadPool>,
    ) -> Result<DatasetWriter, ColumnarError> {
        let tmp = staging_folder(dir)?;
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
        let depth = 2 * pool.current_num_threads().max(1);
        Ok(DatasetWriter {
            dest: dir.to_path_buf(),
            tmp,
            names,
            metadata,
            coordinate,
            opts,
            group: Vec::new(),
            group_rows: 0,
            group_first: 0,
            open: None,
            files: VecDeque::new(),
            shared: None,
            queue: OrderedQueue::new(pool, "Parquet encoding"),
            steps: VecDeque::new(),
            depth,
            spare: Vec::new(),
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
        if let Some(range) = self.opts.range {
            metadata.push(KeyValue::new(schema::KEY_RANGE.into(), range.to_string()));
        }
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
        while folder
            .join(partition::file_name(self.opts.range, n))
            .exists()
        {
            n += 1;
        }
        let path = folder.join(partition::file_name(self.opts.range, n));
        let file = File::create(&path).map_err(io_err(&path))?;
        // The arrow writer puts the Arrow schema in the file's metadata;
        // row groups then go to its file writer whole.
        let (writer, factory) =
            ArrowWriter::try_new(file, schema::schema(), Some(self.properties()))
                .and_then(|w| w.into_serialized_writer())
                .map_err(pq_err(&path))?;
        if self.shared.is_none() {
            self.shared = Some(Arc::new(EncodeShared {
                names: self.names.clone(),
                factory,
            }));
        }
        self.summary.files += 1;
        self.files.push_back(FileOut {
            writer,
            path: path.clone(),
        });
        self.open = Some(OpenFile {
            path,
            key,
            window: -1,
        });
        Ok(())
    }

    /// The rows collected so far handed to a job as one row group; then
    /// the groups done are appended, waiting for the oldest while too many
    /// are in flight.
    fn flush_group(&mut self) -> Result<(), ColumnarError> {
        if self.group_rows == 0 {
            return Ok(());
        }
        let open = self.open.as_ref().expect("a file is open while rows wait");
        let shared = Arc::clone(self.shared.as_ref().expect("set when the file opened"));
        let next = self.spare.pop().unwrap_or_default();
        let bytes = std::mem::replace(&mut self.group, next);
        let first = self.group_first;
        let path = open.path.clone();
        self.group_rows = 0;
        self.queue.push(move || {
            let encoded = encode_group(&shared, &bytes, first, &path);
            (encoded, bytes)
        });
        self.steps.push_back(Step::Group);
        while self.queue.len() > self.depth {
            self.take_step()?;
        }
        while matches!(self.steps.front(), Some(Step::Close)) {
            self.take_step()?;
        }
        Ok(())
    }

    /// Takes the oldest step: appends the oldest encoded row group to the
    /// oldest open file (waiting for it), or closes that file.
    fn take_step(&mut self) -> Result<(), ColumnarError> {
        let Some(step) = self.steps.pop_front() else {
            return Ok(());
        };
        match step {
            Step::Group => {
                let out = self.files.front_mut().expect("a group's file is open");
                let (chunks, mut bytes) = match self.queue.pop() {
                    Some(Ok(done)) => done,
                    Some(Err(lost)) => {
                        return Err(ColumnarError::Encoding {
                            path: out.path.clone(),
                            problem: lost.to_string(),
                        })
                    }
                    None => unreachable!("a step for every job queued"),
                };
                bytes.clear();
                self.spare.push(bytes);
                let mut row_group = out.writer.next_row_group().map_err(pq_err(&out.path))?;
                for chunk in chunks? {
                    chunk
                        .append_to_row_group(&mut row_group)
                        .map_err(pq_err(&out.path))?;
                }
                row_group.close().map_err(pq_err(&out.path))?;
            }
            Step::Close => {
                let out = self.files.pop_front().expect("a file to close");
                out.writer.close().map_err(pq_err(&out.path))?;
            }
        }
        Ok(())
    }

    fn close_file(&mut self) -> Result<(), ColumnarError> {
        self.flush_group()?;
        if self.open.take().is_some() {
            self.steps.push_back(Step::Close);
        }
        Ok(())
    }

    /// Every step queued, taken.
    fn drain(&mut self) -> Result<(), ColumnarError> {
        while !self.steps.is_empty() {
            self.take_step()?;
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
        let rows = self.group_rows;
        let open = self.open.as_mut().expect("opened above");
        let cut = rows >= self.opts.max_group_rows
            || (rows >= self.opts.min_group_rows && window != open.window);
        if rows == 0 || cut {
            open.window = window;
        }
        if cut {
            self.flush_group()?;
        }
        if self.group_rows == 0 {
            self.group_first = record;
        }
        self.group.extend_from_slice(framed);
        self.group_rows += 1;
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
        self.drain()?;
        let marker = self.tmp.join(schema::MARKER_FILE);
        let text = Marker {
            files: self.summary.files,
            records: self.summary.records,
        }
        .text();
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
    /// A dataset not finished is removed: nothing is left behind (the
    /// jobs in flight are waited for first).
    fn drop(&mut self) {
        self.queue.drain();
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

/// One row group's records (framed, laid end to end; the first is record
/// FIRST of the output) as the dataset's columns, encoded and compressed
/// into column chunks: the job of one row group.
fn encode_group(
    shared: &EncodeShared,
    mut bytes: &[u8],
    first: u64,
    path: &Path,
) -> Result<Vec<ArrowColumnChunk>, ColumnarError> {
    let mut cols = Columns::new();
    let mut record = first;
    while bytes.len() >= 4 {
        let n = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize + 4;
        let rec = RecordRef::with_block_size(&bytes[..n]);
        cols.push(rec, &shared.names)
            .map_err(|problem| ColumnarError::Record {
                record,
                name: String::from_utf8_lossy(rec.read_name()).into_owned(),
                problem,
            })?;
        record += 1;
        bytes = &bytes[n..];
    }
    let batch = cols.finish().map_err(|source| ColumnarError::Arrow {
        path: path.to_path_buf(),
        source,
    })?;
    let mut writers = shared
        .factory
        .create_column_writers(0)
        .map_err(pq_err(path))?;
    let schema = batch.schema();
    let mut next = writers.iter_mut();
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        for leaf in compute_leaves(field, column).map_err(pq_err(path))? {
            let writer = next.next().expect("a column writer per leaf of the schema");
            writer.write(&leaf).map_err(pq_err(path))?;
        }
    }
    writers
        .into_iter()
        .map(|w| w.close().map_err(pq_err(path)))
        .collect()
}

/// One dataset at DEST from the datasets PARTS, each a key range of a
/// distributed sort written with [`WriteOptions::range`], in range order:
/// their files moved (not copied) into DEST's folders beside each other,
/// one marker counting them all; built in a temporary folder and renamed
/// into place whole (a dataset alnsort wrote there before is replaced;
/// anything else refused). A part that is not a dataset is refused by name.
pub fn assemble(parts: &[PathBuf], dest: &Path) -> Result<WriteSummary, ColumnarError> {
    let tmp = staging_folder(dest)?;
    // Removes the temporary folder unless it was renamed into place.
    let mut closed = Closed {
        tmp: tmp.clone(),
        dest: dest.to_path_buf(),
        summary: WriteSummary::default(),
        committed: false,
    };
    let mut total = Marker::default();
    for part in parts {
        let marker = Marker::read(part)?;
        let mut files = Vec::new();
        parquet_files(part, 1, &mut files)?;
        if files.len() != marker.files {
            return Err(ColumnarError::Dataset {
                path: part.clone(),
                problem: format!(
                    "{} Parquet files where {} says {}",
                    files.len(),
                    schema::MARKER_FILE,
                    marker.files
                ),
            });
        }
        for file in files {
            let rel = file.strip_prefix(part).expect("found under the part");
            let to = tmp.join(rel);
            if to.exists() {
                return Err(ColumnarError::Dataset {
                    path: file.clone(),
                    problem: format!(
                        "another part has a file of the same name ({}): not a part of a distributed sort",
                        rel.display()
                    ),
                });
            }
            if let Some(folder) = to.parent() {
                fs::create_dir_all(folder).map_err(io_err(folder))?;
            }
            fs::rename(&file, &to).map_err(io_err(&file))?;
        }
        total.files += marker.files;
        total.records += marker.records;
    }
    let marker = tmp.join(schema::MARKER_FILE);
    fs::write(&marker, total.text()).map_err(io_err(&marker))?;
    closed.summary = WriteSummary {
        records: total.records,
        files: total.files,
        bytes: dir_size(&tmp).map_err(io_err(&tmp))?,
    };
    closed.commit()
}

/// Checks DEST ([`check_destination`]) and makes the empty folder a
/// dataset for DEST is built in, beside it (so that the finished dataset
/// is renamed into place whole): `.NAME.alnsort-tmp-PID`, emptied first if
/// a run of the same process id left one.
fn staging_folder(dest: &Path) -> Result<PathBuf, ColumnarError> {
    check_destination(dest)?;
    let file_name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "dataset".into());
    let tmp = dest.with_file_name(format!(".{file_name}.alnsort-tmp-{}", std::process::id()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    Ok(tmp)
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
