//! Micro-benchmark of the sort engine's three hot loops on 4M synthetic
//! records: the radix sort of 8-byte keys, the variable-key comparison sort, and
//! the k-way merge (in memory, and from spilled runs).
//!
//! Run: `cargo run --release -p alnsort-sort --example sort_bench [records]
//! [threads] [max_open_runs]`. Prints M records/s and MB/s (of key + record
//! bytes) per stage, and for the engine the time `push` waited on spills.

use std::sync::Arc;
use std::time::Instant;

use alnsort_sort::batch::Batch;
use alnsort_sort::{KeyKind, SortConfig, Sorter};

/// Record body size: a short BAM record (150 bp read, no tags) is ~250
/// bytes, but 64 keeps 4M records in ~0.5 GB of memory for the benchmark.
const RECORD_BYTES: usize = 64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(4_000_000);
    let threads: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    // 0 = automatic; a large value keeps fan-in out of the spilling case.
    let max_open_runs: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(0);
    let pool = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()?,
    );

    let fixed_keys = coordinate_keys(n);
    let var_keys = name_keys(n);
    let record = vec![0x5au8; RECORD_BYTES];

    // 1. Radix sort of one batch of 8-byte keys.
    let mut batch = Batch::new(KeyKind::Fixed8, usize::MAX);
    for key in &fixed_keys {
        batch.try_push(key, &record);
    }
    let t = Instant::now();
    batch.sort();
    report(
        "radix sort, 8-byte keys (1 batch)",
        n,
        n * (8 + RECORD_BYTES),
        t,
    );
    drop(batch);

    // 2. Stable merge sort of variable keys.
    let mut batch = Batch::new(KeyKind::Variable, usize::MAX);
    for key in &var_keys {
        batch.try_push(key, &record);
    }
    let t = Instant::now();
    batch.sort();
    let var_bytes: usize = var_keys.iter().map(|k| k.len() + RECORD_BYTES).sum();
    report("comparison sort, variable keys (1 batch)", n, var_bytes, t);
    drop(batch);

    // 3. Whole engine: everything in memory (8 sub-batches, 8-way merge),
    //    then a budget 1/16 of the data (spills and a 16+-way merge).
    let data_bytes = n * (8 + RECORD_BYTES);
    for (label, budget) in [
        ("in memory", data_bytes * 3),
        ("spilling ", data_bytes / 16),
    ] {
        let dir = tempfile::tempdir()?;
        let config = SortConfig {
            memory_budget: budget,
            temp_dir: dir.path().to_path_buf(),
            key_kind: KeyKind::Fixed8,
            max_open_runs,
            merge_partition_bytes: 0,
            chunk_fill: Default::default(),
            expected_bytes: 0,
        };
        let mut sorter = Sorter::new(config, Arc::clone(&pool))?;
        let t = Instant::now();
        for key in &fixed_keys {
            sorter.push(key, &record)?;
        }
        let mut merged = sorter.finish()?;
        report(
            &format!("engine {label}: push + sort + spill"),
            n,
            data_bytes,
            t,
        );
        let t = Instant::now();
        let mut count = 0usize;
        let mut check = 0u64;
        while let Some((key, _)) = merged.next_entry()? {
            count += 1;
            check = check.wrapping_add(u64::from(key[7]));
        }
        let stats = merged.stats();
        report(
            &format!(
                "engine {label}: k-way merge ({} sources)",
                stats.final_sources
            ),
            count,
            data_bytes,
            t,
        );
        println!(
            "    spills {} (push waited {:.3} s) runs {} run bytes raw {} on disk {} (ratio {:.2}) peak {} MB checksum {check}",
            stats.spills,
            stats.spill_wait_ns as f64 / 1e9,
            stats.runs_written,
            stats.run_bytes_raw,
            stats.run_bytes_compressed,
            stats.run_bytes_compressed as f64 / stats.run_bytes_raw.max(1) as f64,
            stats.peak_bytes >> 20,
        );
    }
    Ok(())
}

fn report(label: &str, records: usize, bytes: usize, since: Instant) {
    let secs = since.elapsed().as_secs_f64();
    println!(
        "{label:<52} {secs:>7.3} s {:>8.2} M rec/s {:>8.0} MB/s",
        records as f64 / secs / 1e6,
        bytes as f64 / secs / 1e6,
    );
}

/// xorshift64*: reproducible keys without an RNG crate.
fn rng(seed: u64) -> impl FnMut() -> u64 {
    let mut s = seed | 1;
    move || {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        s.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `tid << 32 | pos` keys over 25 references of up to 250 Mbp, like an
/// unsorted human alignment.
fn coordinate_keys(n: usize) -> Vec<[u8; 8]> {
    let mut next = rng(1);
    (0..n)
        .map(|_| {
            let tid = next() % 25;
            let pos = next() % 250_000_000;
            ((tid << 32) | pos).to_be_bytes()
        })
        .collect()
}

/// Read-name-like keys ("SRR8000000.1234567" plus a flag byte), shuffled.
fn name_keys(n: usize) -> Vec<Vec<u8>> {
    let mut next = rng(2);
    (0..n)
        .map(|_| {
            let mut key =
                format!("SRR8{:06}.{}", next() % 1_000_000, next() % 50_000_000).into_bytes();
            key.push(0);
            key.push((next() % 2) as u8);
            key
        })
        .collect()
}
