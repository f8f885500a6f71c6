//! Runs the duplicate-marking core over a name-grouped BAM file and prints,
//! for every input record, its index and whether 0x400 would be set
//! (`INDEX\t0|1`), then writes Picard's metrics file. `--coordinate` treats
//! the input as coordinate-sorted (Picard's `ASSUME_SORT_ORDER=coordinate`).
//!
//! ```text
//! cargo run --release -p alnsort-markdup --example markdup_flags -- [--coordinate] in.bam metrics.txt
//! ```
//!
//! The differential tests (`tests/markdup/`) compare this against Picard
//! MarkDuplicates 3.4.0 with `ASSUME_SORT_ORDER=queryname`.

use std::io::{BufReader, BufWriter, Read, Write};

use alnsort_bam::header::read_bam_header;
use alnsort_bam::RecordRef;
use alnsort_markdup::{
    base_quality_score, five_prime_coordinate, InputOrder, MarkDuplicates, PicardCommandLine,
    ReadGroups, ReadInfo,
};

fn tag<'a>(line: &'a [u8], key: &[u8; 2]) -> Option<&'a [u8]> {
    line.split(|&b| b == b'\t')
        .skip(1)
        .find(|f| f.len() >= 3 && &f[..2] == key && f[2] == b':')
        .map(|f| &f[3..])
}

/// The `RG:Z` value of a record, if any.
fn record_rg(rec: &RecordRef) -> Option<Vec<u8>> {
    Some(rec.aux().find(*b"RG")?.string()?.to_vec())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    let order = if args.get(1).map(String::as_str) == Some("--coordinate") {
        args.remove(1);
        InputOrder::Coordinate
    } else {
        InputOrder::Queryname
    };
    if args.len() != 3 {
        eprintln!("usage: markdup_flags [--coordinate] IN.bam METRICS.txt");
        std::process::exit(2);
    }
    let file = std::fs::File::open(&args[1])?;
    let mut input = BufReader::new(flate2::read::MultiGzDecoder::new(BufReader::new(file)));
    let header = read_bam_header(&mut input)?;

    let rgs = header
        .lines()
        .iter()
        .filter(|l| l.starts_with(b"@RG\t"))
        .filter_map(|l| {
            let id = tag(l, b"ID")?.to_vec();
            let lb = tag(l, b"LB").map(|v| String::from_utf8_lossy(v).into_owned());
            Some((id, lb))
        });
    let mut md = MarkDuplicates::with_order(ReadGroups::new(rgs), order);

    let mut size = [0u8; 4];
    let mut buf = Vec::new();
    loop {
        match input.read_exact(&mut size) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e.into()),
        }
        buf.resize(u32::from_le_bytes(size) as usize, 0);
        input.read_exact(&mut buf)?;
        let rec = RecordRef::new(&buf);
        let cigar: Vec<(u8, u32)> = rec.cigar().ops().collect();
        let reverse = rec.flag() & alnsort_markdup::flags::REVERSE != 0;
        let rg = record_rg(&rec);
        let rg = md.read_groups_mut().resolve(rg.as_deref());
        md.push(&ReadInfo {
            name: rec.read_name(),
            flag: rec.flag(),
            ref_id: rec.ref_id(),
            mate_ref_id: rec.next_ref_id(),
            five_prime: five_prime_coordinate(rec.pos(), rec.reference_length(), &cigar, reverse),
            score: base_quality_score(rec.qual(), rec.flag()),
            rg,
            barcodes: Default::default(),
        })?;
    }
    let outcome = md.finish()?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    for (i, d) in outcome.duplicate.iter().enumerate() {
        writeln!(out, "{i}\t{}", d as u8)?;
    }
    out.flush()?;
    // The flags go to standard output: Picard's OUTPUT is "-" here.
    let picard = PicardCommandLine::new([&args[1]], "-", &args[2]);
    let command_line = std::env::args().collect::<Vec<_>>().join(" ");
    std::fs::write(
        &args[2],
        outcome.metrics.to_text_with_command(&picard, &command_line),
    )?;
    Ok(())
}
