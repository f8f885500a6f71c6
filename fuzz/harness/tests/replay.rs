//! Replays the committed corpus (`fuzz/corpus/<target>/*`) and any crash
//! reproducers kept in `fuzz/regressions/<target>/*` through the target
//! bodies, on stable Rust without libFuzzer: what CI runs when it cannot
//! fuzz, and the regression test for every bug the fuzzer found.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        if let Ok(rd) = std::fs::read_dir(root.join(dir).join(target)) {
            files.extend(
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file()),
            );
        }
    }
    files.sort();
    files
}

fn replay(target: &str, body: fn(&[u8])) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no seed corpus for {target}");
    for f in &files {
        let data = std::fs::read(f).expect("corpus file");
        body(&data);
    }
}

#[test]
fn bgzf_block() {
    replay("bgzf_block", alnsort_fuzz_harness::bgzf_block);
}

#[test]
fn bam_record() {
    replay("bam_record", alnsort_fuzz_harness::bam_record);
}

#[test]
fn sam_line() {
    replay("sam_line", alnsort_fuzz_harness::sam_line);
}

#[test]
fn header() {
    replay("header", alnsort_fuzz_harness::header);
}

#[test]
fn sort_tiny_budget() {
    replay("sort_tiny_budget", alnsort_fuzz_harness::sort_tiny_budget);
}

/// The sort target must really exercise spills and multi-pass merges: a
/// long deterministic input at the smallest budget.
#[test]
fn sort_tiny_budget_long_input() {
    let mut data = vec![3u8, 0, 1, 2];
    let mut x = 0x2545_f491u32;
    for _ in 0..6 * 1200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        data.push(x as u8);
    }
    for order in 0..8u8 {
        data[0] = order;
        let stats = alnsort_fuzz_harness::sort_tiny_budget_stats(&data).expect("configured");
        assert!(stats.records > 300, "order {order}: {stats:?}");
        assert!(stats.spills >= 3, "order {order}: did not spill: {stats:?}");
        assert!(
            stats.merge_passes >= 2,
            "order {order}: no multi-pass merge with max_open_runs 2: {stats:?}"
        );
    }
}

#[test]
fn cram() {
    replay("cram", alnsort_fuzz_harness::cram);
}

/// Each CRAM seed really reaches record decoding: all 30 records of the
/// generated SAM decode, through the reference where the seed needs one.
#[test]
fn cram_seeds_decode_whole() {
    for f in inputs("cram")
        .iter()
        .filter(|p| p.to_string_lossy().contains("/corpus/"))
    {
        let data = std::fs::read(f).expect("seed");
        let o = alnsort_fuzz_harness::cram_outcome(&data);
        assert!(o.opened && !o.failed, "{}: {o:?}", f.display());
        assert_eq!(o.records, 30, "{}: {o:?}", f.display());
        assert_eq!(
            alnsort_fuzz_harness::cram_reseal(&data),
            data,
            "{}",
            f.display()
        );
    }
}

/// A damaged header container (README finding 9) is refused when the file
/// is opened, naming the file and what is wrong, as samtools refuses it:
/// not read as a file without records.
#[test]
fn cram_header_container_damage_is_an_error() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../regressions/cram");
    for (name, what) in [
        (
            "header-container-claims-2g",
            "the header container's padding cut short",
        ),
        (
            "header-container-cut-in-its-padding-block",
            "block cut short",
        ),
    ] {
        let data = std::fs::read(root.join(name)).expect("regression file");
        let o = alnsort_fuzz_harness::cram_outcome(&data);
        assert!(!o.opened && o.failed, "{name}: {o:?}");
        let refs = alnsort_cram::RefSource::default();
        let e = match alnsort_cram::CramReader::open("x.cram", &data[..], &refs) {
            Ok(_) => panic!("{name} opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.starts_with("x.cram: CRAM file definition or header: ") && e.contains(what),
            "{name}: {e}"
        );
    }
}

/// A short deterministic mutation run over every CRAM seed (longer runs:
/// `CRAM_MUTATION_ROUNDS`); a good share of mutants must still decode, so
/// that the edits reach the record decoder rather than only the framing.
#[test]
fn cram_mutations() {
    let rounds = std::env::var("CRAM_MUTATION_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for f in inputs("cram")
        .iter()
        .filter(|p| p.to_string_lossy().contains("/corpus/"))
    {
        let data = std::fs::read(f).expect("seed");
        let decoded = alnsort_fuzz_harness::cram_mutations(&data, rounds, &mut state);
        assert!(
            decoded > rounds / 10,
            "{}: {decoded} of {rounds} decoded",
            f.display()
        );
    }
}
