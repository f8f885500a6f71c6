//! The dataset reader: the files found and checked (marker, schema
//! version, columns, file order), the header rebuilt, and the rows made
//! BAM record bytes again in the dataset's order.

use crate::error::ColumnarError;
use crate::record::{check_columns, rows_to_records};
use crate::schema;
use alnsort_bam::header::{read_bam_header, Header};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

/// Rows decoded per batch.
const BATCH_ROWS: usize = 8_192;

/// An opened dataset.
pub struct Dataset {
    dir: PathBuf,
    header: Header,
    sort_order: String,
    command: String,
    records: u64,
    /// Its files in record order.
    files: Vec<PathBuf>,
}

/// Whether PATH looks like a dataset alnsort wrote: a folder holding the
/// marker file.
pub fn is_dataset(path: &Path) -> bool {
    path.is_dir() && path.join(schema::MARKER_FILE).is_file()
}

fn not_a_dataset(path: &Path, missing: impl Into<String>) -> ColumnarError {
    ColumnarError::NotADataset {
        path: path.to_path_buf(),
        missing: missing.into(),
    }
}

/// What a dataset's marker file says: how many files and records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marker {
    pub files: usize,
    pub records: u64,
}

impl Marker {
    /// The marker of the dataset DIR, refused (by what it lacks) when
    /// absent, of another schema version or without its counts.
    pub fn read(dir: &Path) -> Result<Marker, ColumnarError> {
        let marker = dir.join(schema::MARKER_FILE);
        let text = fs::read_to_string(&marker)
            .map_err(|_| not_a_dataset(dir, format!("no {} file", schema::MARKER_FILE)))?;
        let field = |key: &str| -> Option<&str> {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        };
        let version = field("schema_version").unwrap_or("");
        if version != schema::SCHEMA_VERSION {
            return Err(not_a_dataset(
                dir,
                format!(
                    "schema version {} (found {version:?} in {})",
                    schema::SCHEMA_VERSION,
                    schema::MARKER_FILE
                ),
            ));
        }
        let files: usize = field("files").and_then(|v| v.parse().ok()).ok_or_else(|| {
            not_a_dataset(dir, format!("a file count in {}", schema::MARKER_FILE))
        })?;
        let records: u64 = field("records")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                not_a_dataset(dir, format!("a record count in {}", schema::MARKER_FILE))
            })?;
        Ok(Marker { files, records })
    }

    /// The marker file's text.
    pub fn text(&self) -> String {
        format!(
            "schema_version {}\nfiles {}\nrecords {}\n",
            schema::SCHEMA_VERSION,
            self.files,
            self.records
        )
    }
}

/// The Parquet files of DIR and of its folders DEPTH deep.
pub(crate) fn parquet_files(
    dir: &Path,
    depth: usize,
    out: &mut Vec<PathBuf>,
) -> Result<(), ColumnarError> {
    let io = |source| ColumnarError::Io {
        path: dir.to_path_buf(),
        source,
    };
    for e in fs::read_dir(dir).map_err(io)? {
        let path = e.map_err(io)?.path();
        if path.is_dir() && depth > 0 {
            parquet_files(&path, depth - 1, out)?;
        } else if path.extension().is_some_and(|x| x == "parquet") {
            out.push(path);
        }
    }
    Ok(())
}

impl Dataset {
    /// Opens the dataset DIR: refuses a folder without the marker, a file
    /// of another schema version or without the columns (each named), and
    /// a set of files with one missing.
    pub fn open(dir: &Path) -> Result<Dataset, ColumnarError> {
        if !dir.is_dir() {
            return Err(not_a_dataset(dir, "not a directory"));
        }
        let Marker {
            files: n_files,
            records,
        } = Marker::read(dir)?;
        let mut paths = Vec::new();
        parquet_files(dir, 1, &mut paths)?;
        // (range, file index) -> file
        let mut placed: Vec<((usize, usize), PathBuf)> = Vec::with_capacity(n_files);
        let mut first_meta: Option<HashMap<String, String>> = None;
        for path in paths {
            let file = File::open(&path).map_err(|source| ColumnarError::Io {
                path: path.clone(),
                source,
            })?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|source| {
                ColumnarError::Parquet {
                    path: path.clone(),
                    source,
                }
            })?;
            let meta: HashMap<String, String> = builder
                .metadata()
                .file_metadata()
                .key_value_metadata()
                .map(|kv| {
                    kv.iter()
                        .filter_map(|e| Some((e.key.clone(), e.value.clone()?)))
                        .collect()
                })
                .unwrap_or_default();
            let mut missing: Vec<String> = [
                schema::KEY_SCHEMA_VERSION,
                schema::KEY_HEADER,
                schema::KEY_REFERENCES,
                schema::KEY_FILE_INDEX,
            ]
            .iter()
            .filter(|k| !meta.contains_key(**k))
            .map(|k| format!("metadata key {k:?}"))
            .collect();
            if let Some(v) = meta.get(schema::KEY_SCHEMA_VERSION) {
                if v != schema::SCHEMA_VERSION {
                    missing.push(format!(
                        "schema version {} (found {v:?})",
                        schema::SCHEMA_VERSION
                    ));
                }
            }
            if let Err(cols) = check_columns(builder.schema()) {
                missing.push(cols);
            }
            if !missing.is_empty() {
                return Err(not_a_dataset(&path, missing.join(", ")));
            }
            let number = |key: &str, below: usize| -> Result<usize, ColumnarError> {
                meta.get(key).map_or(Ok(0), |v| {
                    v.parse().ok().filter(|&i| i < below).ok_or_else(|| {
                        not_a_dataset(&path, format!("a {key} below {below} (found {v:?})"))
                    })
                })
            };
            let place = (
                number(schema::KEY_RANGE, usize::MAX)?,
                number(schema::KEY_FILE_INDEX, n_files)?,
            );
            placed.push((place, path));
            if first_meta.is_none() {
                first_meta = Some(meta);
            }
        }
        placed.sort();
        // Each range's files are numbered 0, 1, ... and the count is the
        // marker's: a file lost or left over is named.
        if placed.len() != n_files {
            return Err(ColumnarError::Dataset {
                path: dir.to_path_buf(),
                problem: format!(
                    "{} Parquet files where {} says {n_files}",
                    placed.len(),
                    schema::MARKER_FILE
                ),
            });
        }
        let mut expected = 0;
        for (i, ((range, index), path)) in placed.iter().enumerate() {
            if i > 0 && placed[i - 1].0 .0 != *range {
                expected = 0;
            }
            if *index != expected {
                let problem = if i > 0 && placed[i - 1].0 == (*range, *index) {
                    format!(
                        "file index {index} of range {range} is also {}",
                        placed[i - 1].1.display()
                    )
                } else {
                    format!("file {expected} of range {range} is missing (found file {index})")
                };
                return Err(ColumnarError::Dataset {
                    path: path.clone(),
                    problem,
                });
            }
            expected += 1;
        }
        let files: Vec<PathBuf> = placed.into_iter().map(|(_, p)| p).collect();
        let meta = first_meta.ok_or_else(|| not_a_dataset(dir, "a Parquet file"))?;
        let header = header_from(&meta[schema::KEY_HEADER], &meta[schema::KEY_REFERENCES])
            .map_err(|problem| ColumnarError::Dataset {
                path: files[0].clone(),
                problem,
            })?;
        Ok(Dataset {
            dir: dir.to_path_buf(),
            header,
            sort_order: meta
                .get(schema::KEY_SORT_ORDER)
                .cloned()
                .unwrap_or_default(),
            command: meta.get(schema::KEY_COMMAND).cloned().unwrap_or_default(),
            records,
            files,
        })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn sort_order(&self) -> &str {
        &self.sort_order
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    /// The record count the marker gives.
    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// A reader of the records in order.
    pub fn reader(&self) -> Records {
        let lookup = self.header.ref_lookup();
        Records {
            files: self.files.clone(),
            next_file: 0,
            current: None,
            lookup,
            dir: self.dir.clone(),
            rows_done: 0,
            total: 0,
            expected: self.records,
        }
    }
}

/// The header from its text and the BAM reference list (`name\tlength`
/// lines), read as a BAM header is.
fn header_from(text: &str, refs: &str) -> Result<Header, String> {
    let mut bytes = b"BAM\x01".to_vec();
    bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
    bytes.extend_from_slice(text.as_bytes());
    let lines: Vec<&str> = refs.lines().collect();
    bytes.extend_from_slice(&(lines.len() as i32).to_le_bytes());
    for l in lines {
        let (name, len) = l
            .rsplit_once('\t')
            .ok_or_else(|| format!("reference line {l:?} has no length"))?;
        let len: u64 = len
            .parse()
            .map_err(|_| format!("reference line {l:?} has no length"))?;
        bytes.extend_from_slice(&(name.len() as i32 + 1).to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&(len.min(u64::from(u32::MAX)) as u32).to_le_bytes());
    }
    read_bam_header(&mut bytes.as_slice()).map_err(|e| e.to_string())
}

/// The records of a dataset, a batch at a time.
pub struct Records {
    files: Vec<PathBuf>,
    next_file: usize,
    current: Option<(ParquetRecordBatchReader, PathBuf)>,
    lookup: alnsort_bam::header::RefLookup,
    dir: PathBuf,
    /// Rows read from the current file.
    rows_done: u64,
    total: u64,
    expected: u64,
}

impl Records {
    /// Appends the next batch's records (BAM bytes, each with its
    /// `block_size`) to OUT; 0 at the end.
    pub fn next_batch(&mut self, out: &mut Vec<u8>) -> Result<usize, ColumnarError> {
        loop {
            if self.current.is_none() {
                if self.next_file == self.files.len() {
                    if self.total != self.expected {
                        return Err(ColumnarError::Dataset {
                            path: self.dir.clone(),
                            problem: format!(
                                "{} records read, {} marks {}",
                                self.total,
                                schema::MARKER_FILE,
                                self.expected
                            ),
                        });
                    }
                    return Ok(0);
                }
                let path = self.files[self.next_file].clone();
                self.next_file += 1;
                let file = File::open(&path).map_err(|source| ColumnarError::Io {
                    path: path.clone(),
                    source,
                })?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                    .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                    .map_err(|source| ColumnarError::Parquet {
                        path: path.clone(),
                        source,
                    })?;
                self.current = Some((reader, path));
                self.rows_done = 0;
            }
            let (reader, path) = self.current.as_mut().expect("set above");
            match reader.next() {
                None => self.current = None,
                Some(Err(source)) => {
                    return Err(ColumnarError::Arrow {
                        path: path.clone(),
                        source,
                    })
                }
                Some(Ok(batch)) => {
                    let lookup = &self.lookup;
                    let n = rows_to_records(&batch, &|name| lookup.get(name.as_bytes()), out)
                        .map_err(|(row, problem)| ColumnarError::Row {
                            path: path.clone(),
                            row: self.rows_done + row as u64,
                            problem,
                        })?;
                    self.rows_done += n as u64;
                    self.total += n as u64;
                    if n > 0 {
                        return Ok(n);
                    }
                }
            }
        }
    }
}
