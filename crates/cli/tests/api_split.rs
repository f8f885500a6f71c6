//! The sort crate's map/reduce API as a distributed driver would use it,
//! against the CLI's bytes: a BAM is cut at a record-start virtual offset
//! near its middle; each half is read (`BamScanner`, `Decoder`) into its
//! own `Sorter` that ends with `finish_runs` (two map tasks); the reduce
//! merges both halves' runs (`merge_runs`) into the bam `Writer`. With every
//! key that is the `alnsort sort` output byte for byte; cut into the key
//! ranges of `sample_splitters` and written as a headed, EOF-less part plus
//! a headerless final part, the concatenation is a valid BAM with the same
//! BGZF payload (header and records, in order) and exactly one EOF block
//! (its BGZF blocks are cut at the part boundary, so its compressed bytes
//! differ there).

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use alnsort_bam::header::{read_bam_header, Header};
use alnsort_bam::keys::KeyEncoder;
use alnsort_bam::reader::{BamScanner, Decoder, RangeEnd, ScanOptions};
use alnsort_bam::writer::{Format, Writer, WriterOptions};
use alnsort_bgzf::reader::ParallelReader;
use alnsort_bgzf::{decompress_all, CompressionLevel, EOF_BLOCK};
use alnsort_sort::batch::Batch;
use alnsort_sort::{
    merge_runs, sample_splitters, KeyKind, KeyRange, SortConfig, SortedRun, Sorter,
};

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/example.sam");

fn pool() -> Arc<rayon::ThreadPool> {
    Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool"),
    )
}

fn alnsort(args: &[&OsString]) {
    let status = Command::new(env!("CARGO_BIN_EXE_alnsort"))
        .arg("sort")
        .args(args)
        .status()
        .expect("run the alnsort binary");
    assert!(status.success(), "alnsort sort {args:?}: {status}");
}

/// `alnsort sort --no-PG -O bam <order> -o out input`.
fn cli_sort(order: &[&str], input: &Path, out: &Path) {
    let mut args: Vec<OsString> = ["-@", "2", "--no-PG", "-O", "bam"]
        .iter()
        .chain(order)
        .map(OsString::from)
        .collect();
    args.extend(["-o".into(), out.into(), input.into()]);
    alnsort(&args.iter().collect::<Vec<_>>());
}

/// A SAM file of `n` records in no order: paired names shared by two
/// records (ties for `-n` broken by flag only where the flags are equal),
/// positions drawn from a small range (many coordinate ties), and a tail
/// of unmapped records (all with the largest coordinate key).
fn generated_sam(path: &Path, n: usize) {
    let mut text = String::from(
        "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:100000\n@SQ\tSN:chr2\tLN:50000\n\
         @SQ\tSN:chr3\tLN:20000\n",
    );
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..n {
        let r = next();
        let name = format!("q{}", (r >> 8) % (n as u64 / 2 + 1));
        let seq: String = (0..60 + (r % 41) as usize)
            .map(|j| b"ACGT"[(j + i) % 4] as char)
            .collect();
        if r % 17 == 0 {
            text.push_str(&format!(
                "{name}\t4\t*\t0\t0\t*\t*\t0\t0\t{seq}\t*\tXI:i:{i}\n"
            ));
            continue;
        }
        let chrom = ["chr1", "chr2", "chr3"][(r % 3) as usize];
        let flag = [0, 16, 99, 147, 83, 163][((r >> 4) % 6) as usize];
        let pos = 1 + (r >> 20) % 2000;
        text.push_str(&format!(
            "{name}\t{flag}\t{chrom}\t{pos}\t{}\t{}M\t*\t0\t0\t{seq}\t*\tXI:i:{i}\n",
            r % 61,
            seq.len()
        ));
    }
    std::fs::write(path, text).expect("write the generated SAM");
}

/// Virtual offsets of every record of `bam`, and its header.
fn record_starts(bam: &Path) -> (Header, Vec<u64>) {
    let (header, reader) = open_bam(bam);
    let mut scanner = BamScanner::new("in.bam".into(), reader, ScanOptions::default());
    let mut starts = Vec::new();
    while let Some(batch) = scanner.next_batch().expect("scan") {
        starts.extend_from_slice(&batch.voffsets);
    }
    (header, starts)
}

fn open_bam(bam: &Path) -> (Header, ParallelReader) {
    let file = File::open(bam).expect("open the input BAM");
    let mut reader = ParallelReader::new(file, pool(), Vec::new()).expect("BGZF reader");
    let header = read_bam_header(&mut reader).expect("BAM header");
    (header, reader)
}

/// One map task: the records of `scanner` (one split) through a sorter
/// whose runs are kept.
fn map_task(
    mut scanner: BamScanner,
    header: &Arc<Header>,
    encoder: &Arc<KeyEncoder>,
    temp: &Path,
) -> Vec<SortedRun> {
    let kind = if encoder.is_fixed8() {
        KeyKind::Fixed8
    } else {
        KeyKind::Variable
    };
    let config = SortConfig {
        // Small enough that the generated input spills several runs.
        memory_budget: 256 << 10,
        temp_dir: temp.to_path_buf(),
        key_kind: kind,
        max_open_runs: 0,
        merge_partition_bytes: 0,
        chunk_fill: Default::default(),
    };
    let mut sorter = Sorter::new(config, pool()).expect("sorter");
    let decoder = Decoder {
        file: "in.bam".into(),
        header: Arc::clone(header),
        lookup: Arc::new(header.ref_lookup()),
        encoder: Arc::clone(encoder),
        record_limit: sorter.plan().record_limit,
        unknown_reference: Default::default(),
    };
    let mut records = 0u64;
    while let Some(raw) = scanner.next_batch().expect("read the split") {
        let mut batch = Batch::for_input(kind, raw.data.len(), raw.voffsets.len());
        decoder
            .decode(
                &raw,
                |key, rec| {
                    assert!(batch.try_push(key, rec), "the batch takes the record");
                    Ok(())
                },
                |w| panic!("unexpected warning {w}"),
            )
            .expect("decode");
        records += batch.len() as u64;
        sorter.push_batch(batch).expect("push_batch");
    }
    let out = sorter.finish_runs().expect("finish_runs");
    assert_eq!(out.stats.records, records);
    assert_eq!(
        out.runs.iter().map(SortedRun::records).sum::<u64>(),
        records
    );
    out.runs
}

/// Writes the records of `range` of `runs` with `options`; returns the
/// bytes and the record count.
fn reduce(
    runs: &[SortedRun],
    range: &KeyRange,
    kind: KeyKind,
    encoder: &KeyEncoder,
    header: &Arc<Header>,
    options: WriterOptions,
) -> (Vec<u8>, u64) {
    let mut merged = merge_runs(runs, range, kind, pool()).expect("merge_runs");
    let mut writer = Writer::new(Vec::new(), Arc::clone(header), options, pool()).expect("writer");
    let mut scratch = Vec::new();
    while let Some((key, rec)) = merged.next_entry().expect("merge") {
        writer
            .write_record(encoder.finish_record(key, rec, &mut scratch))
            .expect("write");
    }
    let done = writer.finish().expect("finish the part");
    (done.inner, done.records)
}

/// The whole check for one input SAM and one order.
fn check(dir: &Path, sam: &Path, order: &[&str], other_order: &[&str], big: bool) {
    let tag = format!(
        "{}{}",
        sam.file_stem().unwrap().to_string_lossy(),
        order.join("")
    );
    // The input: the SAM sorted in the other order, so this sort moves
    // records around.
    let input = dir.join(format!("{tag}.in.bam"));
    cli_sort(other_order, sam, &input);
    let want_path = dir.join(format!("{tag}.want.bam"));
    cli_sort(order, &input, &want_path);
    let want = std::fs::read(&want_path).expect("CLI output");

    // The options the CLI resolved, for the key order, @HD and level.
    let mut argv: Vec<OsString> = ["--no-PG", "-O", "bam"]
        .iter()
        .chain(order)
        .map(OsString::from)
        .collect();
    argv.extend(["-o".into(), want_path.clone().into(), input.clone().into()]);
    let alnsort::args::Parsed::Run(args) =
        alnsort::args::parse("alnsort", argv, false).expect("options parse")
    else {
        panic!("the options name a run");
    };
    let cfg = alnsort_engine::config::resolve(&args).expect("options resolve");

    let (header, starts) = record_starts(&input);
    let n = starts.len();
    assert!(n >= 4, "{tag}: {n} records");
    let mid = n / 2;
    let split = starts[mid];
    let header = Arc::new(header);
    let encoder = Arc::new(KeyEncoder::new(
        cfg.order.clone(),
        header.n_ref(),
        &header.library_map(),
    ));
    let kind = if encoder.is_fixed8() {
        KeyKind::Fixed8
    } else {
        KeyKind::Variable
    };
    let temp = dir.join(format!("{tag}.runs"));
    std::fs::create_dir_all(&temp).expect("temp dir");

    // Two map tasks: [start, split) and [split, end).
    let (_, reader) = open_bam(&input);
    let first = BamScanner::new(
        "in.bam".into(),
        reader,
        ScanOptions {
            end: RangeEnd::VirtualOffset(split),
            ..ScanOptions::default()
        },
    );
    let second = BamScanner::open_at(
        "in.bam".into(),
        File::open(&input).expect("open the input"),
        pool(),
        split,
        ScanOptions {
            first_record: mid as u64,
            ..ScanOptions::default()
        },
    )
    .expect("open at the split");
    let mut runs = map_task(first, &header, &encoder, &temp);
    let first_runs = runs.len();
    runs.extend(map_task(second, &header, &encoder, &temp));
    if big {
        assert!(
            first_runs >= 2 && runs.len() - first_runs >= 2,
            "{tag}: each map task spills several runs ({first_runs}, {})",
            runs.len() - first_runs
        );
    }

    let mut out_header = (*header).clone();
    alnsort_engine::edit_header(&mut out_header, &cfg, false);
    let out_header = Arc::new(out_header);
    let level = CompressionLevel::new(cfg.level).expect("level");

    // Reduce, every key: the CLI's bytes.
    let (whole, records) = reduce(
        &runs,
        &KeyRange::all(),
        kind,
        &encoder,
        &out_header,
        WriterOptions::whole(Format::Bam, level),
    );
    assert_eq!(records, n as u64, "{tag}");
    assert!(whole == want, "{tag}: the API's BAM differs from the CLI's");

    // Reduce in two key ranges, written as parts and concatenated, by
    // tasks that have only the runs' paths (as in another process).
    let runs: Vec<SortedRun> = runs
        .iter()
        .map(|r| SortedRun::open(r.path()).expect("reopen a run by its path"))
        .collect();
    let splitters = sample_splitters(&runs, 2);
    if big {
        assert_eq!(splitters.len(), 1, "{tag}: one splitter for two ranges");
    }
    let mut joined = Vec::new();
    let mut counts = Vec::new();
    for i in 0..=splitters.len() {
        let options = WriterOptions {
            header: i == 0,
            eof: i == splitters.len(),
            ..WriterOptions::whole(Format::Bam, level)
        };
        let (part, records) = reduce(
            &runs,
            &KeyRange::nth(&splitters, i),
            kind,
            &encoder,
            &out_header,
            options,
        );
        assert_eq!(
            part.ends_with(&EOF_BLOCK),
            i == splitters.len(),
            "{tag}: only the last part ends with the EOF block"
        );
        joined.extend(part);
        counts.push(records);
    }
    assert_eq!(counts.iter().sum::<u64>(), n as u64, "{tag}: {counts:?}");
    if big {
        assert!(
            counts.iter().all(|&c| c > n as u64 / 5),
            "{tag}: {counts:?}"
        );
    }
    assert_eq!(
        joined
            .windows(EOF_BLOCK.len())
            .filter(|w| *w == EOF_BLOCK)
            .count(),
        1,
        "{tag}: one EOF block"
    );
    assert!(
        decompress_all(&joined).expect("the parts are one BGZF stream")
            == decompress_all(&want).expect("CLI output inflates"),
        "{tag}: the ranged parts hold other bytes than the CLI's output"
    );

    // The runs outlive every merge; the driver removes them.
    assert_eq!(std::fs::read_dir(&temp).unwrap().count(), runs.len());
    for run in runs {
        run.remove().expect("remove a run");
    }
    assert_eq!(std::fs::read_dir(&temp).unwrap().count(), 0);
}

#[test]
fn two_map_tasks_and_a_reduce_give_the_cli_bytes() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("api_split.{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("test directory");
    let generated = dir.join("generated.sam");
    generated_sam(&generated, 40_000);
    for (sam, big) in [(Path::new(EXAMPLE), false), (generated.as_path(), true)] {
        check(&dir, sam, &[], &["-n"], big);
        check(&dir, sam, &["-n"], &[], big);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
