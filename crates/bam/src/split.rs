//! Cutting a BAM file into splits for map tasks (the distributed sort).
//!
//! A split is the records between two record-start virtual offsets. The
//! first split starts where the header ends (proven by parsing the
//! header). The others start, when a BAI or CSI lies beside the file, at
//! record starts the index names ([`index_starts`]); otherwise at
//! **guessed** boundaries: from a byte
//! position, the first BGZF block start (a block header whose BSIZE leads
//! to another block header or to the end of the file), then the first
//! uncompressed offset where [`GUESS_RECORDS`] records in a row pass
//! [`validate_record`] (the full check every record read gets: lengths,
//! reference ids, a NUL-terminated name, CIGAR and sequence lengths, the
//! aux fields), or that chain runs exactly to the end of the data.
//!
//! A guess can be wrong (the bytes of a record's middle can look like
//! records; Hadoop-BAM's guesser failed up to 2 in 10,000 splits on real
//! data), so a guess is never trusted alone: the map task of the split
//! *before* it reads sequentially from a proven start and reports the
//! offset of the first record at or past its end ([`proven_end`]); that
//! is a record start proven by parsing. The driver compares it with the
//! next split's start; on a mismatch it repairs by running the next map
//! task again from the proven offset (its first output is discarded):
//! every record is then read exactly once, starting only at proven
//! boundaries.

use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use alnsort_bgzf::block::parse_header;
use alnsort_bgzf::{BgzfError, ParallelReader, ReadAhead};

use crate::header::{read_bam_header, Header, HeaderError};
use crate::reader::{read_buffer, BamScanner, RangeEnd, ReadError, ScanOptions};
use crate::validate::validate_record;

/// Records in a row that must check out after a guessed record start.
pub const GUESS_RECORDS: usize = 10;

/// Uncompressed bytes inflated from a guessed block start while looking
/// for a record start and checking the records after it.
const GUESS_WINDOW: usize = 4 << 20;

/// Uncompressed bytes inflated between searches of a growing window.
const GUESS_STEP: usize = 64 << 10;

/// Compressed bytes searched for a block start after a byte position.
const BLOCK_SEARCH: usize = 2 * alnsort_bgzf::MAX_BLOCK_SIZE + 64;

/// Why splits could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    /// Opening, seeking or reading the file failed.
    #[error("{file}: at byte offset {offset}")]
    Io {
        file: Arc<str>,
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// The file is not BGZF-compressed BAM (a SAM file cannot be split).
    #[error("{file}: not a BAM file; only BAM inputs can be split")]
    NotBam { file: Arc<str> },
    /// The BAM header does not parse.
    #[error("{file}: bad BAM header")]
    Header {
        file: Arc<str>,
        #[source]
        source: HeaderError,
    },
    /// The BGZF layer failed.
    #[error("{file}: reading BGZF blocks")]
    Bgzf {
        file: Arc<str>,
        #[source]
        source: BgzfError,
    },
    /// Reading records failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// The header of the BAM file at `path` and the virtual offset of its
/// first record (where the header ends).
pub fn read_header(
    path: &Path,
    pool: Arc<rayon::ThreadPool>,
) -> Result<(Header, u64, u64), SplitError> {
    let name: Arc<str> = path.display().to_string().into();
    let io_err = |offset, source| SplitError::Io {
        file: Arc::clone(&name),
        offset,
        source,
    };
    let mut file = File::open(path).map_err(|e| io_err(0, e))?;
    let size = file.metadata().map_err(|e| io_err(0, e))?.len();
    let mut magic = Vec::new();
    (&mut file)
        .take(alnsort_bgzf::block::HEADER_LEN as u64)
        .read_to_end(&mut magic)
        .map_err(|e| io_err(0, e))?;
    if !alnsort_bgzf::is_bgzf(&magic) {
        return Err(SplitError::NotBam { file: name });
    }
    file.seek(SeekFrom::Start(0)).map_err(|e| io_err(0, e))?;
    // Every task reads the header: a block or two, not a stream's worth.
    let mut reader = ParallelReader::starting_at_with(
        io::BufReader::with_capacity(read_buffer(ReadAhead::Peek), file),
        pool,
        Vec::new(),
        0,
        ReadAhead::Peek,
    )
    .map_err(|source| SplitError::Bgzf {
        file: Arc::clone(&name),
        source,
    })?;
    let header = read_bam_header(&mut reader).map_err(|source| SplitError::Header {
        file: Arc::clone(&name),
        source,
    })?;
    let first = reader.position().virtual_offset();
    Ok((header, first, size))
}

/// Guessed record starts that cut the BAM at `path` into about `parts`
/// splits of equal compressed bytes: sorted, distinct, beginning with
/// `first` (the proven start after the header). Fewer come back when
/// positions find no record start (records longer than the gap).
pub fn guess_starts(
    path: &Path,
    n_ref: usize,
    first: u64,
    size: u64,
    parts: usize,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<Vec<u64>, SplitError> {
    let indexed = index_starts(path);
    let mut starts = vec![first];
    for i in 1..parts.max(1) {
        let at = size * i as u64 / parts as u64;
        if at <= first >> 16 {
            continue;
        }
        if let Some(v) = start_near(path, n_ref, at, indexed.as_deref(), pool)? {
            if v > *starts.last().unwrap_or(&0) {
                starts.push(v);
            }
        }
    }
    Ok(starts)
}

/// A record start in or after the first BGZF block at or past compressed
/// byte `at`: the first one `indexed` (from [`index_starts`]) names there,
/// else a guess ([`guess_record_start`]); `None` when neither finds one.
pub fn start_near(
    path: &Path,
    n_ref: usize,
    at: u64,
    indexed: Option<&[u64]>,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<Option<u64>, SplitError> {
    let from_index = indexed.and_then(|v| {
        let k = v.partition_point(|&o| o >> 16 < at);
        v.get(k).copied()
    });
    match from_index {
        Some(v) => Ok(Some(v)),
        None => guess_record_start(path, n_ref, at, pool),
    }
}

/// Record starts named by the BAI or CSI index beside `path`
/// (`PATH.bai`, `PATH.csi`, or the `.bam` name with `.bai`), sorted and
/// distinct: every chunk of every bin begins at a record start, and so do
/// the linear index's entries (BAI) and the bins' first offsets (CSI). `None`
/// when there is no index or it does not parse. An index that does not
/// belong to the file gives wrong starts, which the maps' proven ends
/// find out as they find out wrong guesses.
pub fn index_starts(path: &Path) -> Option<Vec<u64>> {
    let name = path.as_os_str().to_string_lossy().into_owned();
    let mut candidates = vec![format!("{name}.bai"), format!("{name}.csi")];
    if let Some(stem) = name.strip_suffix(".bam") {
        candidates.push(format!("{stem}.bai"));
    }
    candidates
        .iter()
        .find_map(|c| std::fs::read(c).ok().and_then(|b| parse_index_starts(&b)))
}

/// The record starts a BAI names (chunk starts and linear-index entries),
/// or a CSI (chunk starts and bins' `loff`): `alnsort_index::IndexReader`,
/// the one index parser.
fn parse_index_starts(bytes: &[u8]) -> Option<Vec<u64>> {
    let index = alnsort_index::IndexReader::parse(Path::new("index"), bytes).ok()?;
    Some(index.record_starts())
}

/// The guessed virtual offset of the first record starting in or after
/// the first BGZF block at or past compressed byte `at`; `None` when none
/// is found (the end of the data comes first).
pub fn guess_record_start(
    path: &Path,
    n_ref: usize,
    at: u64,
    pool: &Arc<rayon::ThreadPool>,
) -> Result<Option<u64>, SplitError> {
    let name: Arc<str> = path.display().to_string().into();
    let io_err = |offset, source| SplitError::Io {
        file: Arc::clone(&name),
        offset,
        source,
    };
    let mut file = File::open(path).map_err(|e| io_err(at, e))?;
    let size = file.metadata().map_err(|e| io_err(at, e))?.len();
    file.seek(SeekFrom::Start(at)).map_err(|e| io_err(at, e))?;
    let mut window = Vec::new();
    (&mut file)
        .take(BLOCK_SEARCH as u64)
        .read_to_end(&mut window)
        .map_err(|e| io_err(at, e))?;
    let Some(block) = find_block_start(&window, at, size) else {
        return Ok(None);
    };
    file.seek(SeekFrom::Start(block))
        .map_err(|e| io_err(block, e))?;
    // The search stops at the first offset that checks out, mostly in the
    // first block.
    let mut reader = ParallelReader::starting_at_with(
        io::BufReader::with_capacity(read_buffer(ReadAhead::Peek), file),
        Arc::clone(pool),
        Vec::new(),
        block,
        ReadAhead::Peek,
    )
    .map_err(|source| SplitError::Bgzf {
        file: Arc::clone(&name),
        source,
    })?;
    // Inflate a window, noting where each block's data starts. The search
    // runs as the window grows and stops at the first offset that checks
    // out: the answer is the one the whole window would give, since a
    // candidate is passed over only when it fails on bytes the whole
    // window holds too.
    let mut data = Vec::new();
    let mut blocks: Vec<(usize, u64)> = Vec::new();
    let mut at_end = false;
    let mut from = 0;
    let mut tried = 0;
    let found = loop {
        let n = match reader.fill_block() {
            Ok([]) => {
                at_end = true;
                0
            }
            Ok(chunk) => {
                data.extend_from_slice(chunk);
                chunk.len()
            }
            Err(source) => {
                return Err(SplitError::Bgzf {
                    file: Arc::clone(&name),
                    source,
                })
            }
        };
        if n > 0 {
            // The whole block's data was taken, so the reader is at its start.
            blocks.push((data.len() - n, reader.position().block_offset));
            reader.consume(n);
        }
        let full = at_end || data.len() >= GUESS_WINDOW;
        if !full && data.len() - tried < GUESS_STEP {
            continue;
        }
        tried = data.len();
        match search_record_start(&data, n_ref, at_end, full, from) {
            Search::At(u) => break Some(u),
            Search::NeedMore(u) => from = u,
            Search::None if full => break None,
            Search::None => from = data.len(),
        }
    };
    let Some(u) = found else {
        return Ok(None);
    };
    let i = blocks.partition_point(|b| b.0 <= u) - 1;
    let (ustart, addr) = blocks[i];
    Ok(Some((addr << 16) | (u - ustart) as u64))
}

/// The first offset in `window` (read from compressed offset `at`) where
/// a BGZF block header starts whose BSIZE leads to another block header
/// or to the end of the file (`size`).
fn find_block_start(window: &[u8], at: u64, size: u64) -> Option<u64> {
    (0..window.len().saturating_sub(18)).find_map(|i| {
        if window[i..i + 4] != [31, 139, 8, 4] {
            return None;
        }
        let offset = at + i as u64;
        let header = parse_header(&window[i..], offset).ok()?;
        let next = offset + header.bsize as u64;
        if next == size {
            return Some(offset);
        }
        let j = i + header.bsize;
        match window.get(j..) {
            Some(rest) if rest.len() >= 18 => parse_header(rest, next).ok().map(|_| offset),
            // The next header lies past the window: trust the first.
            _ => Some(offset),
        }
    })
}

/// What [`search_record_start`] found.
#[derive(Debug, PartialEq, Eq)]
enum Search {
    /// The first offset (from `from`) where the records check out.
    At(usize),
    /// Every offset before this one fails; this one needs more data.
    NeedMore(usize),
    /// Every offset from `from` fails.
    None,
}

/// The first offset of `data` (from `from`) where [`GUESS_RECORDS`]
/// records in a row check out (or a chain of them reaches the end of the
/// data, when `at_end`), in a window that may grow (`full`: it will not):
/// an offset whose records run past a window that is not full is not
/// judged ([`Search::NeedMore`]). A record
/// longer than any window can hold fails at once, as it would in the
/// whole window.
fn search_record_start(data: &[u8], n_ref: usize, at_end: bool, full: bool, from: usize) -> Search {
    // The whole window ends within one block past GUESS_WINDOW.
    let most = GUESS_WINDOW + alnsort_bgzf::MAX_BLOCK_SIZE;
    for u in from..data.len() {
        let mut at = u;
        let mut verdict = Some(true);
        for _ in 0..GUESS_RECORDS {
            if at == data.len() {
                verdict = if full { Some(at_end && at > u) } else { None };
                break;
            }
            let Some(size) = data.get(at..at + 4) else {
                verdict = if full { Some(false) } else { None };
                break;
            };
            let len = u32::from_le_bytes([size[0], size[1], size[2], size[3]]) as usize;
            let Some(rec) = data.get(at + 4..at + 4 + len) else {
                verdict = if full || at + 4 + len > most {
                    Some(false)
                } else {
                    None
                };
                break;
            };
            if validate_record(rec, n_ref).is_err() {
                verdict = Some(false);
                break;
            }
            at += 4 + len;
        }
        match verdict {
            Some(true) => return Search::At(u),
            Some(false) => {}
            None => return Search::NeedMore(u),
        }
    }
    Search::None
}

/// The virtual offset of the first record at or past `end` when reading
/// sequentially from the record start `start` (the proven end of the
/// split `[start, end)`), or `None` when the file's records end first.
/// `last` is the start of the last record the split's reading took (None
/// when it took none): reading resumes there, so this costs a block or two.
pub fn proven_end(
    path: &Path,
    start: u64,
    last: Option<u64>,
    end: u64,
    pool: Arc<rayon::ThreadPool>,
) -> Result<Option<u64>, SplitError> {
    let name: Arc<str> = path.display().to_string().into();
    let from = last.unwrap_or(start);
    let file = File::open(path).map_err(|source| SplitError::Io {
        file: Arc::clone(&name),
        offset: from >> 16,
        source,
    })?;
    let mut scanner = BamScanner::open_at(
        Arc::clone(&name),
        file,
        pool,
        from,
        ScanOptions {
            batch_bytes: 1,
            end: RangeEnd::Records(if last.is_some() { 2 } else { 1 }),
            read_ahead: ReadAhead::Peek,
            ..ScanOptions::default()
        },
    )?;
    let mut offsets = Vec::new();
    while let Some(b) = scanner.next_batch()? {
        offsets.extend_from_slice(&b.voffsets);
    }
    let next = if last.is_some() {
        offsets.get(1).copied()
    } else {
        offsets.first().copied()
    };
    debug_assert!(next.is_none_or(|n| n >= end || last.is_none()));
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::pool;
    use crate::writer::{Format, Writer, WriterOptions};
    use alnsort_bgzf::CompressionLevel;

    /// A framed record on reference `tid` at `pos` with a name and bases.
    fn record(tid: i32, pos: i32, name: &str, l_seq: usize) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&tid.to_le_bytes());
        r.extend_from_slice(&pos.to_le_bytes());
        r.push(name.len() as u8 + 1);
        r.push(30);
        r.extend_from_slice(&4680u16.to_le_bytes());
        r.extend_from_slice(&1u16.to_le_bytes());
        r.extend_from_slice(&0u16.to_le_bytes());
        r.extend_from_slice(&(l_seq as u32).to_le_bytes());
        r.extend_from_slice(&(-1i32).to_le_bytes());
        r.extend_from_slice(&(-1i32).to_le_bytes());
        r.extend_from_slice(&0i32.to_le_bytes());
        r.extend_from_slice(name.as_bytes());
        r.push(0);
        r.extend_from_slice(&((l_seq as u32) << 4).to_le_bytes());
        r.extend(std::iter::repeat_n(0x12, l_seq.div_ceil(2)));
        r.extend(std::iter::repeat_n(30, l_seq));
        let mut framed = (r.len() as u32).to_le_bytes().to_vec();
        framed.extend(r);
        framed
    }

    /// The search over a growing window, as `guess_record_start` runs it.
    fn grown(data: &[u8], n_ref: usize, step: usize) -> Option<usize> {
        let (mut from, mut len) = (0, 0);
        loop {
            len = (len + step).min(data.len());
            let full = len == data.len();
            match search_record_start(&data[..len], n_ref, full, full, from) {
                Search::At(u) => return Some(u),
                Search::NeedMore(u) => from = u,
                Search::None if full => return None,
                Search::None => from = len,
            }
        }
    }

    #[test]
    fn a_growing_window_finds_what_the_whole_window_finds() {
        // Junk (the tail of a record, and a length that claims 16 MiB),
        // then records; and records of every size around the steps.
        let mut data = vec![7u8; 37];
        data.extend_from_slice(&(16u32 << 20).to_le_bytes());
        data.extend_from_slice(&[0u8; 100]);
        let junk = data.len();
        for i in 0..200 {
            data.extend(record(
                0,
                i * 11,
                &format!("r{i}"),
                50 + (i as usize * 13) % 700,
            ));
        }
        let whole = search_record_start(&data, 1, true, true, 0);
        assert!(matches!(whole, Search::At(u) if u <= junk), "{whole:?}");
        let Search::At(want) = whole else {
            unreachable!()
        };
        for step in [1, 7, 64, 333, 4096, data.len()] {
            assert_eq!(grown(&data, 1, step), Some(want), "step {step}");
        }
        // A window that is not full never judges an offset on bytes it
        // lacks: cut inside the tenth record after the start.
        let cut = want + 200;
        assert_eq!(
            search_record_start(&data[..cut], 1, false, false, want),
            Search::NeedMore(want)
        );
        // No record start at all: nothing, at any step.
        let junk_only = vec![0xffu8; 5000];
        assert_eq!(
            search_record_start(&junk_only, 1, true, true, 0),
            Search::None
        );
        assert_eq!(grown(&junk_only, 1, 100), None);
    }

    #[test]
    fn guessed_starts_are_record_starts_and_the_proven_ends_meet_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("in.bam");
        let header = Arc::new(
            crate::header::parse_sam_header([&b"@SQ\tSN:c1\tLN:1000000"[..]]).expect("header"),
        );
        let file = File::create(&path).expect("create");
        let level = CompressionLevel::new(1).expect("level");
        let mut w = Writer::new(
            file,
            header,
            WriterOptions::whole(Format::Bam, level),
            pool(),
        )
        .expect("w");
        for i in 0..20_000 {
            w.write_record(&record(
                0,
                i * 7,
                &format!("read{i}"),
                40 + (i as usize % 90),
            ))
            .expect("write");
        }
        w.finish().expect("finish");
        check_splits(&path, None);

        // With a BAI beside the file, the starts are the index's chunk starts.
        let indexed = dir.path().join("indexed.bam");
        let header = Arc::new(
            crate::header::parse_sam_header([&b"@SQ\tSN:c1\tLN:10000000"[..]]).expect("header"),
        );
        let options = WriterOptions {
            index: Some(alnsort_index::IndexFormat::Bai),
            ..WriterOptions::whole(Format::Bam, level)
        };
        let file = File::create(&indexed).expect("create");
        let mut w = Writer::new(file, header, options, pool()).expect("w");
        for i in 0..20_000 {
            w.write_record(&record(
                0,
                i * 400,
                &format!("read{i}"),
                40 + (i as usize % 90),
            ))
            .expect("write");
        }
        let done = w.finish().expect("finish");
        let bai = done.index.expect("index").file_bytes();
        std::fs::write(dir.path().join("indexed.bam.bai"), &bai).expect("write the BAI");
        let from_index = index_starts(&indexed).expect("the BAI parses");
        assert!(from_index.len() > 10, "{}", from_index.len());
        check_splits(&indexed, Some(&from_index));
    }

    /// Guessed (or indexed) starts are record starts, and each split's
    /// proven end meets the next split's start.
    fn check_splits(path: &Path, indexed: Option<&[u64]>) {
        let path = path.to_path_buf();
        let (header, first, size) = read_header(&path, pool()).expect("header");
        // Every record start, by a sequential scan.
        let file = File::open(&path).expect("open");
        let mut scanner =
            BamScanner::open_at("in".into(), file, pool(), first, ScanOptions::default())
                .expect("scanner");
        let mut all = Vec::new();
        while let Some(b) = scanner.next_batch().expect("scan") {
            all.extend_from_slice(&b.voffsets);
        }
        let starts = guess_starts(&path, header.n_ref(), first, size, 5, &pool()).expect("guess");
        assert_eq!(starts.len(), 5, "{starts:?}");
        for s in &starts {
            assert!(all.binary_search(s).is_ok(), "{s:#x} is not a record start");
        }
        if let Some(indexed) = indexed {
            for s in &starts[1..] {
                assert!(
                    indexed.binary_search(s).is_ok(),
                    "{s:#x} is not the index's"
                );
            }
        } else {
            assert_eq!(index_starts(&path), None);
        }
        // The proven end of each split is the next split's start.
        for w in starts.windows(2) {
            let last = all[all.partition_point(|&v| v < w[1]) - 1];
            assert_eq!(
                proven_end(&path, w[0], Some(last), w[1], pool()).expect("end"),
                Some(w[1])
            );
        }
        // A wrong guess (a record's middle) is found out: the proven end
        // of the split before it is the next true record start.
        let wrong = all[100] + 9;
        let end = proven_end(&path, first, Some(all[100]), wrong, pool()).expect("end");
        assert_eq!(end, Some(all[101]));
        assert_ne!(end, Some(wrong));
        // The last split has no end.
        assert_eq!(
            proven_end(
                &path,
                all[all.len() - 1],
                Some(all[all.len() - 1]),
                u64::MAX,
                pool()
            )
            .expect("end"),
            None
        );
    }
}
