//! Engine-level tests: the whole `Sorter` against a stable std sort, across
//! budgets (tiny ones force spills and background fan-in), pool sizes and
//! key kinds; temp-file cleanup; the error paths.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use crate::test_support::pool;
use crate::{KeyKind, SortConfig, SortError, SortStats, Sorter};

type Input = Vec<(Vec<u8>, Vec<u8>)>;

fn config(dir: &Path, kind: KeyKind, budget: usize, max_open_runs: usize) -> SortConfig {
    SortConfig {
        memory_budget: budget,
        temp_dir: dir.to_path_buf(),
        key_kind: kind,
        max_open_runs,
        merge_partition_bytes: 0,
        chunk_fill: Default::default(),
        expected_bytes: 0,
    }
}

/// Records carry their input index, so the expected output is the input
/// stably sorted by key (std's `sort_by` is stable).
fn expected(input: &Input) -> Vec<Vec<u8>> {
    let mut idx: Vec<(Vec<u8>, usize)> = input
        .iter()
        .enumerate()
        .map(|(i, (k, _))| (k.clone(), i))
        .collect();
    idx.sort_by(|a, b| a.0.cmp(&b.0));
    idx.into_iter().map(|(_, i)| input[i].1.clone()).collect()
}

/// Sorts `input` and returns the records in output order and the stats.
fn run_sort(input: &Input, config: SortConfig, threads: usize) -> (Vec<Vec<u8>>, SortStats) {
    let dir = config.temp_dir.clone();
    let mut sorter = Sorter::new(config, pool(threads)).expect("sorter");
    for (k, r) in input {
        sorter.push(k, r).expect("push");
    }
    let mut merged = sorter.finish().expect("finish");
    let mut out = Vec::with_capacity(input.len());
    while let Some((key, record)) = merged.next_entry().expect("next") {
        let i = index_of(record);
        assert_eq!(key, input[i].0.as_slice(), "key travels with its record");
        out.push(record.to_vec());
    }
    assert!(
        merged.next_record().expect("after end").is_none(),
        "end is sticky"
    );
    let stats = merged.stats();
    drop(merged);
    assert_eq!(temp_files(&dir), 0, "temp files left after finish + drop");
    (out, stats)
}

/// Ends the input and returns the merged records and the final stats, with
/// the merge dropped (its run files deleted).
fn finish_and_collect(sorter: Sorter) -> (Vec<Vec<u8>>, SortStats) {
    let mut merged = sorter.finish().expect("finish");
    let mut got = Vec::new();
    while let Some(r) = merged.next_record().expect("next") {
        got.push(r.to_vec());
    }
    (got, merged.stats())
}

fn temp_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).expect("read temp dir").count()
}

fn index_of(record: &[u8]) -> usize {
    u32::from_be_bytes(
        record[..4]
            .try_into()
            .expect("records start with their index"),
    ) as usize
}

/// `n` records of `kind` keys with many ties (97 distinct fixed keys, or
/// 1000 variable ones) and payloads of mixed lengths, empty included.
fn tied_input(kind: KeyKind, n: u64) -> Input {
    let keys = (0..n)
        .map(|i| match kind {
            KeyKind::Fixed8 => ((i * 7919) % 97).to_be_bytes().to_vec(),
            KeyKind::Variable => format!("k{}", (i * 31) % 1000).into_bytes(),
        })
        .collect();
    make_input(keys, &[0, 13, 70, 5, 300])
}

fn make_input(keys: Vec<Vec<u8>>, payload_lens: &[usize]) -> Input {
    keys.into_iter()
        .enumerate()
        .map(|(i, key)| {
            let len = payload_lens
                .get(i % payload_lens.len().max(1))
                .copied()
                .unwrap_or(0);
            let mut record = (i as u32).to_be_bytes().to_vec();
            record.extend((0..len).map(|j| (i + j) as u8));
            (key, record)
        })
        .collect()
}

fn fixed_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            (0u64..6).prop_map(|k| k << 20),
            any::<u64>(),
            (0u64..3).prop_map(|t| (t << 32) | 7)
        ]
        .prop_map(|k| k.to_be_bytes().to_vec()),
        0..400,
    )
}

fn variable_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(0xff)], 0..11),
        0..400,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn output_is_the_stable_sort_for_any_budget_and_pool(
        fixed in any::<bool>(),
        fixed_k in fixed_keys(),
        var_k in variable_keys(),
        lens in prop::collection::vec(0usize..120, 1..8),
        budget in 256usize..12_000,
        threads in 1usize..=3,
        max_open_runs in prop_oneof![Just(0usize), Just(2), Just(3)],
    ) {
        let (kind, keys) = if fixed { (KeyKind::Fixed8, fixed_k) } else { (KeyKind::Variable, var_k) };
        let input = make_input(keys, &lens);
        // Keep every record within the half-budget limit.
        prop_assume!(input.iter().all(|(k, r)| k.len() + r.len() <= budget / 2));
        let dir = tempfile::tempdir().expect("tempdir");
        let (got, stats) = run_sort(&input, config(dir.path(), kind, budget, max_open_runs), threads);
        prop_assert_eq!(got, expected(&input));
        prop_assert_eq!(stats.records, input.len() as u64);
        if max_open_runs != 0 {
            prop_assert!(stats.final_sources <= (max_open_runs + crate::plan::SUB_BATCHES) as u64);
        }
    }
}

#[test]
fn output_is_identical_for_every_budget_and_thread_count() {
    let keys: Vec<Vec<u8>> = (0..3_000u64)
        .map(|i| ((i * 7919) % 97).to_be_bytes().to_vec())
        .collect();
    let input = make_input(keys, &[0, 13, 70, 5]);
    let mut outputs = Vec::new();
    for (budget, threads, max_open_runs) in [
        (1 << 24, 1, 0),
        (4_096, 1, 2),
        (4_096, 3, 3),
        (20_000, 2, 0),
        (700, 2, 2),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (out, stats) = run_sort(
            &input,
            config(dir.path(), KeyKind::Fixed8, budget, max_open_runs),
            threads,
        );
        if budget < 1 << 20 {
            assert!(stats.spills > 0, "budget {budget} should spill: {stats:?}");
        }
        outputs.push(out);
    }
    assert_eq!(outputs[0], expected(&input));
    assert!(outputs.iter().all(|o| *o == outputs[0]));
}

#[test]
fn many_spills_with_two_open_runs_fan_in_in_the_background() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys: Vec<Vec<u8>> = (0..20_000u64)
        .map(|i| format!("k{}", (i * 31) % 1000).into_bytes())
        .collect();
    let input = make_input(keys, &[50]);
    let (got, stats) = run_sort(
        &input,
        config(dir.path(), KeyKind::Variable, 16 << 10, 2),
        2,
    );
    assert_eq!(got, expected(&input));
    assert!(stats.spills > 10, "{stats:?}");
    assert!(stats.fanin_merges > 0, "{stats:?}");
    assert!(stats.merge_passes >= 2, "{stats:?}");
    assert_eq!(stats.runs_written, stats.spills + stats.fanin_merges);
    assert!(stats.run_bytes_compressed > 0 && stats.run_bytes_raw > 0);
}

#[test]
fn peak_bytes_stay_within_the_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = 4 << 20;
    let keys: Vec<Vec<u8>> = (0..100_000u64)
        .map(|i| {
            (i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .to_be_bytes()
                .to_vec()
        })
        .collect();
    let input = make_input(keys, &[200]);
    let (got, stats) = run_sort(&input, config(dir.path(), KeyKind::Fixed8, budget, 0), 2);
    assert_eq!(got, expected(&input));
    assert!(stats.spills >= 4, "{stats:?}");
    assert!(stats.peak_bytes <= budget as u64, "{stats:?}");
    assert!(
        stats.peak_bytes >= budget as u64 / 3,
        "the chunk is most of the budget: {stats:?}"
    );
}

#[test]
fn empty_input_gives_empty_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (got, stats) = run_sort(
        &Vec::new(),
        config(dir.path(), KeyKind::Variable, 1 << 20, 0),
        1,
    );
    assert!(got.is_empty());
    assert_eq!(stats.final_sources, 0);
}

#[test]
fn record_up_to_half_the_budget_is_accepted_larger_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = 8_192;
    let mut sorter =
        Sorter::new(config(dir.path(), KeyKind::Fixed8, budget, 0), pool(1)).expect("sorter");
    let mut big = 1u32.to_be_bytes().to_vec();
    big.resize(budget / 2 - 8, 0xab);
    sorter
        .push(&5u64.to_be_bytes(), &0u32.to_be_bytes())
        .expect("small");
    sorter
        .push(&1u64.to_be_bytes(), &big)
        .expect("half the budget fits");
    let too_big = vec![0u8; budget / 2];
    let err = sorter
        .push(&2u64.to_be_bytes(), &too_big)
        .expect_err("over half");
    assert!(
        matches!(err, SortError::RecordTooLarge { record: 2, len, limit } if len == budget / 2 + 8 && limit == budget / 2)
    );
    let err = sorter
        .push(b"short", b"")
        .expect_err("fixed keys are 8 bytes");
    assert!(matches!(err, SortError::KeyLength { record: 2, len: 5 }));
    // Bad input does not poison the sorter.
    sorter
        .push(&3u64.to_be_bytes(), &2u32.to_be_bytes())
        .expect("still usable");
    let mut merged = sorter.finish().expect("finish");
    let mut order = Vec::new();
    while let Some(r) = merged.next_record().expect("next") {
        order.push((index_of(r), r.len()));
    }
    assert_eq!(order, [(1, big.len()), (2, 4), (0, 4)]);
}

#[test]
fn corrupt_run_is_an_error_and_temp_files_are_removed() {
    // One loser tree, and the final merge cut into key ranges.
    for partition in [0, 200] {
        corrupt_run_case(partition);
    }
}

fn corrupt_run_case(partition: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys: Vec<Vec<u8>> = (0..5_000u64)
        .map(|i| (i % 13).to_be_bytes().to_vec())
        .collect();
    let input = make_input(keys, &[30]);
    // Enough open runs that no background fan-in is writing while the
    // test damages the files.
    let mut cfg = config(dir.path(), KeyKind::Fixed8, 8_192, 1_000);
    cfg.merge_partition_bytes = partition;
    let mut sorter = Sorter::new(cfg, pool(2)).expect("sorter");
    for (k, r) in &input {
        sorter.push(k, r).expect("push");
    }
    // Let the background spill finish writing before the damage.
    sorter.settle_spill().expect("spill");
    assert!(sorter.stats().spills > 2);
    assert_eq!(sorter.stats().fanin_merges, 0);
    // Damage the payload of every run's first frame.
    for entry in std::fs::read_dir(dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        let mut bytes = std::fs::read(&path).expect("read run");
        bytes[8 + crate::runfile::HEADER_LEN + 2] ^= 0xff;
        std::fs::write(&path, bytes).expect("write run");
    }
    let err = match sorter.finish() {
        Err(e) => e,
        Ok(mut merged) => loop {
            match merged.next_record() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("corruption went unnoticed"),
                Err(e) => {
                    assert!(matches!(merged.next_record(), Err(SortError::AfterError)));
                    break e;
                }
            }
        },
    };
    match err.root() {
        SortError::CorruptRun { path, offset, .. } => {
            assert!(path.starts_with(dir.path()));
            assert_eq!(
                *offset, 8,
                "the first frame follows the 8-byte magic: {err}"
            );
        }
        other => panic!("expected CorruptRun, got {other:?}"),
    }
    assert_eq!(temp_files(dir.path()), 0, "temp files left after an error");
}

#[test]
fn missing_temp_dir_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gone = dir.path().join("gone");
    let mut sorter =
        Sorter::new(config(&gone, KeyKind::Variable, 1_024, 0), pool(1)).expect("sorter");
    let err = (0..1_000u32)
        .find_map(|i| sorter.push(b"key", &i.to_be_bytes()).err())
        .expect("the first spill fails");
    assert!(err.to_string().contains("gone"), "{err}");
    assert!(matches!(
        sorter.push(b"k", b"r"),
        Err(SortError::AfterError)
    ));
}

#[test]
fn dropping_a_sorter_mid_fan_in_removes_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sorter =
        Sorter::new(config(dir.path(), KeyKind::Fixed8, 4_096, 2), pool(2)).expect("sorter");
    for i in 0..30_000u64 {
        sorter
            .push(&(i % 1_000).to_be_bytes(), &[7u8; 40])
            .expect("push");
    }
    assert!(sorter.stats().spills > 2);
    drop(sorter);
    assert_eq!(temp_files(dir.path()), 0);
}

#[test]
fn large_records_fill_the_chunk_early() {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = 64 << 10;
    let keys: Vec<Vec<u8>> = (0..40u64).map(|i| (i % 7).to_be_bytes().to_vec()).collect();
    // Records of ~1/3 of the budget: each gets a sub-batch of its own.
    let input = make_input(keys, &[budget / 3]);
    let (got, stats) = run_sort(&input, config(dir.path(), KeyKind::Fixed8, budget, 0), 2);
    assert_eq!(got, expected(&input));
    assert!(
        stats.spills >= 10,
        "a chunk holds ~2 such records, not 8: {stats:?}"
    );
    // Each open run holds at least one whole record (double-buffered), so
    // with records this large the final merge exceeds the budget by design.
    let per_run = 4 * (budget as u64 / 3 + 64);
    assert!(
        stats.peak_bytes <= budget as u64 + stats.final_sources * per_run,
        "{stats:?}"
    );
}

/// A sorter whose spills wait at a gate; the first spill (the first
/// chunk's oldest share, which `push` waits for) is let through. Returns
/// the sorter with its second spill (the next share) held in flight, the
/// gate's sender, and how many records of `input` were pushed.
fn sorter_with_held_spill(
    input: &Input,
    config: SortConfig,
    share: usize,
) -> (Sorter, crossbeam_channel::Sender<()>, usize) {
    let mut sorter = Sorter::new(config, pool(2)).expect("sorter");
    sorter.set_spill_sub_batches(share);
    let (gate, held) = crossbeam_channel::unbounded();
    gate.send(()).expect("gate open");
    sorter.set_spill_gate(held);
    let mut pushed = 0;
    while !sorter.spill_running() {
        let (k, r) = &input[pushed];
        sorter.push(k, r).expect("push");
        pushed += 1;
    }
    assert_eq!(
        sorter.stats().spills,
        1,
        "the first chunk's oldest share was spilled in line"
    );
    let plan = *sorter.plan();
    assert_eq!(
        sorter.closed_sub_batches(),
        plan.sub_batches - 2 * plan.spill_sub_batches,
        "two shares of the full chunk went to spills, the rest stays: {plan:?}"
    );
    (sorter, gate, pushed)
}

fn spill_input(records: u64) -> Input {
    let keys: Vec<Vec<u8>> = (0..records)
        .map(|i| {
            (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) % 5_000)
                .to_be_bytes()
                .to_vec()
        })
        .collect();
    make_input(keys, &[60])
}

/// Spill shares the tests try: one sub-batch, two, half the chunk.
const SHARES: [usize; 3] = [1, 2, 4];

#[test]
fn reading_goes_on_while_a_spill_is_in_flight() {
    for share in SHARES {
        reading_goes_on_while_a_spill_of_a_share_is_in_flight(share);
    }
}

fn reading_goes_on_while_a_spill_of_a_share_is_in_flight(share: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = spill_input(20_000);
    let config = config(dir.path(), KeyKind::Fixed8, 64 << 10, 1_000);
    let (mut sorter, gate, mut pushed) = sorter_with_held_spill(&input, config, share);
    // The held spill owns a share of the chunk, and as much was freed by
    // the first: while a share is a sub-batch more than the one filling, a
    // whole sub-batch more is read, sorted and closed while it is still
    // running; else the filling one takes records.
    let closed = sorter.closed_sub_batches();
    let during = pushed;
    if sorter.plan().spill_sub_batches >= 2 {
        while sorter.closed_sub_batches() == closed {
            let (k, r) = &input[pushed];
            sorter.push(k, r).expect("push while spilling");
            pushed += 1;
        }
    } else {
        let per_sub_batch = pushed / sorter.plan().sub_batches;
        for (k, r) in &input[pushed..pushed + per_sub_batch / 2] {
            sorter.push(k, r).expect("push while spilling");
        }
        pushed += per_sub_batch / 2;
    }
    assert!(
        sorter.spill_running(),
        "the gate still holds the spill, yet push returned"
    );
    assert!(pushed - during > 10, "{} records", pushed - during);
    drop(gate);
    for (k, r) in &input[pushed..] {
        sorter.push(k, r).expect("push");
    }
    let (got, stats) = finish_and_collect(sorter);
    assert_eq!(got, expected(&input));
    assert!(stats.spills >= 4, "{stats:?}");
    assert!(stats.spill_wait_ns > 0, "the first spill is waited for");
    assert_eq!(temp_files(dir.path()), 0);
}

#[test]
fn finish_stops_the_spill_in_flight_and_merges_its_rest_from_memory() {
    for (kind, share) in [KeyKind::Fixed8, KeyKind::Variable]
        .into_iter()
        .flat_map(|kind| SHARES.map(|share| (kind, share)))
    {
        for partition in [0, 4 << 10] {
            let dir = tempfile::tempdir().expect("tempdir");
            // Few keys, so ties cross the stopped run and its unwritten
            // records, and the stream must keep input order among them.
            let input = spill_input(24_000);
            let budget = 2 << 20;
            let config = SortConfig {
                merge_partition_bytes: partition,
                ..config(dir.path(), kind, budget, 4)
            };
            let (mut sorter, gate, pushed) = sorter_with_held_spill(&input, config.clone(), share);
            // The chunk's raw bytes as a run would hold them.
            let chunk_raw: usize = input[..pushed]
                .iter()
                .map(|(k, r)| k.len() + r.len() + 2)
                .sum();
            // The input ends while the second spill (the first chunk's next
            // share, thousands of records) is held, after half a sub-batch
            // more (the room the first spill freed): it is stopped before
            // it starts, writes the records up to its first look at the
            // flag, and leaves the rest in memory.
            let plan = *sorter.plan();
            let end = (pushed + pushed / plan.sub_batches / 2).min(input.len());
            let input = input[..end].to_vec();
            for (k, r) in &input[pushed..] {
                sorter.push(k, r).expect("push");
            }
            let share_raw = chunk_raw * plan.spill_sub_batches / plan.sub_batches;
            sorter.request_spill_stop();
            drop(gate);
            let (got, stats) = finish_and_collect(sorter);
            assert_eq!(
                got,
                expected(&input),
                "{kind:?} share {share} partition {partition}"
            );
            assert_eq!(stats.spills, 2, "no spill after the held one: {stats:?}");
            // The first spill's share and a little of the stopped one.
            assert!(
                stats.run_bytes_raw < (share_raw + chunk_raw / 4) as u64,
                "{chunk_raw} raw bytes in the chunk, runs hold {stats:?}"
            );
            assert!(stats.peak_bytes <= budget as u64, "{stats:?}");
            assert_eq!(temp_files(dir.path()), 0);
            // The same stream when finish finds the spill wherever it is.
            let (whole, _) = run_sort(&input, config, 2);
            assert_eq!(whole, got);
        }
    }
}

#[test]
fn spilling_in_shares_stays_within_the_budget_when_spills_are_slow() {
    for share in SHARES {
        spilling_a_share_at_a_time_stays_within_the_budget(share);
    }
}

fn spilling_a_share_at_a_time_stays_within_the_budget(share: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = 256 << 10;
    let keys: Vec<Vec<u8>> = (0..40_000u64)
        .map(|i| format!("r{}", (i * 7_919) % 3_001).into_bytes())
        .collect();
    let input = make_input(keys, &[40, 90, 0]);
    let mut sorter =
        Sorter::new(config(dir.path(), KeyKind::Variable, budget, 0), pool(3)).expect("sorter");
    sorter.set_spill_sub_batches(share);
    // Every spill waits a few milliseconds at the gate, so `push` fills the
    // free share while the spill's is held, and has to wait for it.
    let (gate, held) = crossbeam_channel::unbounded();
    sorter.set_spill_gate(held);
    let opener = std::thread::spawn(move || {
        while gate.send(()).is_ok() {
            std::thread::sleep(std::time::Duration::from_millis(3));
        }
    });
    for (k, r) in &input {
        sorter.push(k, r).expect("push");
    }
    let (got, stats) = finish_and_collect(sorter);
    opener.join().expect("opener thread");
    assert_eq!(got, expected(&input));
    assert!(stats.spills >= 6, "share {share}: {stats:?}");
    assert!(stats.spill_wait_ns > 0, "share {share}: {stats:?}");
    assert!(stats.peak_bytes <= budget as u64, "{stats:?}");
    assert!(
        stats.peak_bytes >= budget as u64 / 3,
        "the chunk, spilling and filling, is most of the budget: {stats:?}"
    );
    assert_eq!(temp_files(dir.path()), 0);
}

#[test]
fn a_background_spill_error_surfaces_from_the_next_push() {
    let dir = tempfile::tempdir().expect("tempdir");
    let temp = dir.path().join("spills");
    std::fs::create_dir(&temp).expect("mkdir");
    let input = spill_input(20_000);
    let config = config(&temp, KeyKind::Fixed8, 64 << 10, 1_000);
    let (mut sorter, gate, pushed) = sorter_with_held_spill(&input, config, 1);
    std::fs::remove_dir_all(&temp).expect("remove temp dir");
    drop(gate);
    let err = input[pushed..]
        .iter()
        .find_map(|(k, r)| sorter.push(k, r).err())
        .expect("the held spill fails once released");
    assert!(
        matches!(err, SortError::StatFs { ref dir, .. } if *dir == temp),
        "{err:?}"
    );
    assert!(matches!(
        sorter.push(&[0; 8], b"r"),
        Err(SortError::AfterError)
    ));
    assert!(matches!(sorter.finish(), Err(SortError::AfterError)));
}

#[test]
fn a_background_spill_error_surfaces_from_finish() {
    let dir = tempfile::tempdir().expect("tempdir");
    let temp = dir.path().join("spills");
    std::fs::create_dir(&temp).expect("mkdir");
    let input = spill_input(20_000);
    let config = config(&temp, KeyKind::Fixed8, 64 << 10, 1_000);
    let (sorter, gate, _) = sorter_with_held_spill(&input, config, 1);
    std::fs::remove_dir_all(&temp).expect("remove temp dir");
    drop(gate);
    let err = sorter.finish().expect_err("the held spill fails");
    assert!(err.to_string().contains("spills"), "{err}");
}

#[test]
fn dropping_a_sorter_during_a_background_spill_removes_its_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = spill_input(20_000);
    let config = config(dir.path(), KeyKind::Fixed8, 64 << 10, 1_000);
    let (sorter, gate, _) = sorter_with_held_spill(&input, config, 1);
    assert!(temp_files(dir.path()) > 0, "the first spill's run exists");
    // Opens the gate while `drop` is already waiting for the spill.
    let opener = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        drop(gate);
    });
    drop(sorter);
    opener.join().expect("opener thread");
    assert_eq!(temp_files(dir.path()), 0);
}

/// Runs `input` with the final merge cut into partitions of about
/// `partition` bytes.
fn run_partitioned(
    input: &Input,
    kind: KeyKind,
    budget: usize,
    partition: usize,
    threads: usize,
) -> (Vec<Vec<u8>>, SortStats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(dir.path(), kind, budget, 0);
    cfg.merge_partition_bytes = partition;
    run_sort(input, cfg, threads)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The final merge cut into key ranges, from one record per partition
    /// to a few hundred, over in-memory batches and spilled runs alike,
    /// gives exactly the stable sort: cuts through long runs of equal keys
    /// and through the middle of run frames included.
    #[test]
    fn partitioned_final_merge_is_the_stable_sort(
        fixed in any::<bool>(),
        fixed_k in fixed_keys(),
        var_k in variable_keys(),
        lens in prop::collection::vec(0usize..120, 1..8),
        budget in prop_oneof![2_000usize..12_000, Just(1 << 20)],
        partition in prop_oneof![Just(1usize), 2usize..64, 64usize..4_000],
        threads in 1usize..=3,
    ) {
        let (kind, keys) = if fixed { (KeyKind::Fixed8, fixed_k) } else { (KeyKind::Variable, var_k) };
        let input = make_input(keys, &lens);
        prop_assume!(input.iter().all(|(k, r)| k.len() + r.len() <= budget / 2));
        let (got, stats) = run_partitioned(&input, kind, budget, partition, threads);
        prop_assert_eq!(got, expected(&input));
        prop_assert!(stats.merge_partitions >= 1);
    }
}

#[test]
fn partitions_cut_equal_keys_and_spilled_runs() {
    // 3,000 records, a third with one shared key: cuts must fall inside the
    // stretch of equal keys (by source and position) for the partitions to
    // stay small, and the stream must still be the stable sort.
    let keys: Vec<Vec<u8>> = (0..3_000u64)
        .map(|i| {
            let k = if i % 3 == 0 { 42 } else { (i * 7919) % 1000 };
            k.to_be_bytes().to_vec()
        })
        .collect();
    let input = make_input(keys, &[20, 60, 5]);
    let want = expected(&input);
    for (budget, partition) in [(16_000, 512), (1 << 20, 512), (16_000, 1)] {
        let (got, stats) = run_partitioned(&input, KeyKind::Fixed8, budget, partition, 3);
        assert_eq!(got, want, "budget {budget}, partition {partition}");
        assert!(
            stats.merge_partitions > 20,
            "budget {budget}: only {} partitions",
            stats.merge_partitions
        );
        if budget < 1 << 20 {
            assert!(stats.runs_written > 2, "{stats:?}");
        }
    }
}

#[test]
fn automatic_partitioning_only_with_threads() {
    let keys: Vec<Vec<u8>> = (0..20_000u64)
        .map(|i| ((i * 2654435761) % 100_000).to_be_bytes().to_vec())
        .collect();
    let input = make_input(keys, &[60]);
    let want = expected(&input);
    let dir = tempfile::tempdir().expect("tempdir");
    let (got, one) = run_sort(&input, config(dir.path(), KeyKind::Fixed8, 8 << 20, 0), 1);
    assert_eq!(got, want);
    assert_eq!(one.merge_partitions, 1, "one thread merges in one piece");
    let (got, two) = run_sort(&input, config(dir.path(), KeyKind::Fixed8, 8 << 20, 0), 2);
    assert_eq!(got, want);
    assert!(two.merge_partitions > 2, "{two:?}");
}

#[test]
fn dropping_a_partitioned_merge_midway_removes_the_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let keys: Vec<Vec<u8>> = (0..20_000u64)
        .map(|i| ((i * 7919) % 5_000).to_be_bytes().to_vec())
        .collect();
    let input = make_input(keys, &[40]);
    let mut cfg = config(dir.path(), KeyKind::Fixed8, 64 << 10, 0);
    cfg.merge_partition_bytes = 4 << 10;
    let mut sorter = Sorter::new(cfg, pool(3)).expect("sorter");
    for (k, r) in &input {
        sorter.push(k, r).expect("push");
    }
    let mut merged = sorter.finish().expect("finish");
    assert!(merged.stats().runs_written > 2);
    assert!(merged.stats().merge_partitions > 10);
    for _ in 0..5_000 {
        assert!(merged.next_record().expect("next").is_some());
    }
    assert!(temp_files(dir.path()) > 0, "runs are still being read");
    drop(merged);
    assert_eq!(
        temp_files(dir.path()),
        0,
        "partition jobs let go of the runs"
    );
}

/// `push_batch` with input batches of any size is `push` record by record:
/// the same output and the same sub-batches, spills and runs, whether the
/// input batches add up the sorter's chunk fill (taken whole when they fit,
/// `Batch::for_input_filling`) or not (walked record by record), under
/// either fill.
#[test]
fn push_batch_is_push_record_by_record() {
    let arena = crate::ChunkFill::Arena {
        overhead: 44,
        align: 8,
    };
    let cases = [
        (KeyKind::Fixed8, 4_096, 1),
        (KeyKind::Fixed8, 20_000, 3),
        (KeyKind::Variable, 6_000, 2),
        (KeyKind::Variable, 1 << 24, 2),
    ];
    for ((kind, budget, threads), fill, filling) in cases.into_iter().flat_map(|c| {
        [
            (c, crate::ChunkFill::Held, false),
            (c, crate::ChunkFill::Held, true),
            (c, arena, false),
            (c, arena, true),
        ]
    }) {
        let config = |dir: &Path| SortConfig {
            chunk_fill: fill,
            expected_bytes: 0,
            ..config(dir, kind, budget, 3)
        };
        let input = tied_input(kind, 4_000);
        let dir = tempfile::tempdir().expect("tempdir");
        let (want, want_stats) = run_sort(&input, config(dir.path()), threads);
        let mut sorter = Sorter::new(config(dir.path()), pool(threads)).expect("sorter");
        let mut rest = &input[..];
        let mut size = 1;
        while !rest.is_empty() {
            let (now, later) = rest.split_at(size.min(rest.len()));
            let mut batch = if filling {
                crate::batch::Batch::for_input_filling(kind, sorter.chunk_fill(), 1 << 10, 16)
            } else {
                crate::batch::Batch::for_input(kind, 1 << 10, 16)
            };
            for (k, r) in now {
                assert!(batch.try_push(k, r));
            }
            sorter.push_batch(batch).expect("push_batch");
            rest = later;
            size = size * 3 % 1_000 + 1;
        }
        let (got, stats) = finish_and_collect(sorter);
        let case = format!("{kind:?} budget {budget} {fill:?} filling {filling}");
        assert_eq!(got, want, "{case}");
        assert_eq!(
            (
                stats.records,
                stats.bytes,
                stats.spills,
                stats.runs_written,
                stats.final_sources
            ),
            (
                want_stats.records,
                want_stats.bytes,
                want_stats.spills,
                want_stats.runs_written,
                want_stats.final_sources
            ),
            "{case}"
        );
        if budget < 1 << 20 {
            assert!(stats.spills > 0, "{case} should spill");
        }
    }
}

/// `push_batch_then` copies the records on the pool, not on the calling
/// thread: with the pool's only worker held, the call still returns, the
/// batch is not handed back until the worker is free, and then it is handed
/// back from the worker, the records sorted as given.
#[test]
fn push_batch_copies_records_on_the_pool() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pool = pool(1);
    let mut sorter = Sorter::new(
        config(dir.path(), KeyKind::Variable, 1 << 20, 0),
        Arc::clone(&pool),
    )
    .expect("sorter");
    let (hold_tx, hold_rx) = crossbeam_channel::bounded::<()>(0);
    pool.spawn(move || {
        let _ = hold_rx.recv();
    });
    let mut batch = crate::batch::Batch::for_input(KeyKind::Variable, 1 << 10, 2);
    assert!(batch.try_push(b"b", b"second"));
    assert!(batch.try_push(b"a", b"first"));
    let (back_tx, back_rx) = crossbeam_channel::bounded(1);
    sorter
        .push_batch_then(batch, move |b| {
            back_tx
                .send((b.len(), rayon::current_thread_index()))
                .expect("send");
        })
        .expect("push_batch_then");
    assert!(
        back_rx.try_recv().is_err(),
        "the batch is held until its copy job has run"
    );
    hold_tx.send(()).expect("release the worker");
    let (len, thread) = back_rx.recv().expect("handed back");
    assert_eq!(
        (len, thread),
        (2, Some(0)),
        "handed back by the pool worker"
    );
    let (got, _) = finish_and_collect(sorter);
    assert_eq!(got, vec![b"first".to_vec(), b"second".to_vec()]);
}

#[test]
fn push_batch_refuses_a_record_over_the_limit_and_adds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sorter =
        Sorter::new(config(dir.path(), KeyKind::Variable, 1_000, 0), pool(1)).expect("sorter");
    let mut batch = crate::batch::Batch::for_input(KeyKind::Variable, 1 << 10, 2);
    assert!(batch.try_push(b"a", b"small"));
    assert!(batch.try_push(b"b", &[0; 600]));
    let err = sorter.push_batch(batch).expect_err("600 > 500");
    assert!(
        matches!(
            err,
            SortError::RecordTooLarge {
                record: 1,
                len: 601,
                limit: 500
            }
        ),
        "{err:?}"
    );
    assert_eq!(sorter.stats().records, 0);
}

/// `next_chunk` hands out the partitioned merge's stream as owned chunks
/// that can be read after the merge has moved on (and on another thread),
/// and mixes with `next_entry`: together they give exactly the stream
/// `next_entry` alone gives, from runs and in-memory batches alike.
#[test]
fn chunks_give_the_same_stream_as_entries() {
    for (kind, budget) in [(KeyKind::Fixed8, 40_000), (KeyKind::Variable, 1 << 24)] {
        let input = tied_input(kind, 5_000);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = config(dir.path(), kind, budget, 0);
        cfg.merge_partition_bytes = 8 << 10;
        let (want, _) = run_sort(&input, cfg.clone(), 3);
        let mut sorter = Sorter::new(cfg, pool(3)).expect("sorter");
        for (k, r) in &input {
            sorter.push(k, r).expect("push");
        }
        let mut merged = sorter.finish().expect("finish");
        assert!(merged.has_chunks(), "{kind:?}: partitioned");
        let mut chunks = Vec::new();
        let mut got = Vec::new();
        let mut turn = 0;
        loop {
            turn += 1;
            if turn % 3 == 0 {
                match merged.next_entry().expect("entry") {
                    Some((_, r)) => got.push(Some(r.to_vec())),
                    None => break,
                }
            } else {
                match merged.next_chunk().expect("chunk") {
                    Some(c) => {
                        assert!(!c.is_empty());
                        got.push(None);
                        chunks.push(c);
                    }
                    None => break,
                }
            }
        }
        assert!(chunks.len() > 10, "{kind:?}: {} chunks", chunks.len());
        // Read the chunks only now, on another thread.
        let from_chunks: Vec<Vec<Vec<u8>>> = std::thread::spawn(move || {
            chunks
                .iter()
                .map(|c| {
                    check_fitting(c);
                    (0..c.len())
                        .map(|i| {
                            // The length the writer cuts blocks by is the record's.
                            assert_eq!(c.record_len(i), c.record(i).len());
                            c.record(i).to_vec()
                        })
                        .collect()
                })
                .collect()
        })
        .join()
        .expect("reader thread");
        let mut chunk_iter = from_chunks.into_iter();
        let mut stream = Vec::new();
        for item in got {
            match item {
                Some(r) => stream.push(r),
                None => stream.extend(chunk_iter.next().expect("chunk")),
            }
        }
        assert_eq!(stream, want, "{kind:?}");
    }
}

/// `Chunk::fitting` (running sums, searched) is the walk that takes the
/// records one by one: from every start, for rooms that a prefix of the
/// records fills exactly (with the zero-length records after it left out),
/// overshoots by one byte, or that hold all the rest, with each record
/// counted as it is and as many bytes shorter as the shortest has.
fn check_fitting(c: &crate::Chunk) {
    let one_by_one = |from: usize, room: usize, less: usize| {
        let (mut k, mut bytes) = (0, 0);
        while from + k < c.len() {
            let len = c.record_len(from + k) - less;
            if bytes + len > room {
                break;
            }
            bytes += len;
            k += 1;
            if bytes == room {
                break;
            }
        }
        (k, bytes)
    };
    let shortest = (0..c.len()).map(|i| c.record_len(i)).min().unwrap_or(0);
    for less in [0, shortest] {
        for from in (0..c.len()).step_by(7) {
            let mut rooms = vec![1, 300, 1 << 16, usize::MAX / 2];
            let mut total = 0;
            for i in from..c.len().min(from + 40) {
                total += c.record_len(i) - less;
                rooms.extend([total, total + 1, total.saturating_sub(1)]);
            }
            for room in rooms {
                assert_eq!(
                    c.fitting(from, room, less),
                    one_by_one(from, room, less),
                    "from {from}, room {room}, less {less}"
                );
            }
        }
    }
}

/// Records of `len` bytes with 16-byte (`Variable`) or 8-byte keys, each counting `len + 44`
/// rounded to 8 in an arena (samtools' `-m` rule, as the CLI sets it).
fn arena_input(kind: KeyKind, records: usize, len: usize) -> Input {
    (0..records)
        .map(|i| {
            let key = match kind {
                KeyKind::Fixed8 => (((i * 7919) % records) as u64).to_be_bytes().to_vec(),
                KeyKind::Variable => format!("{:016}", (i * 7919) % records).into_bytes(),
            };
            let mut rec = (i as u32).to_be_bytes().to_vec();
            rec.resize(len, b'r');
            (key, rec)
        })
        .collect()
}

#[test]
fn an_arena_budget_spills_exactly_where_the_arena_is_full() {
    let fill = crate::ChunkFill::Arena {
        overhead: 44,
        align: 8,
    };
    let (records, len): (usize, usize) = (20_000, 300);
    let slot = (len + 44).next_multiple_of(8);
    for kind in [KeyKind::Variable, KeyKind::Fixed8] {
        let input = arena_input(kind, records, len);
        let dir = tempfile::tempdir().expect("tempdir");
        // The arena holds every record: nothing is spilled.
        let mut cfg = config(dir.path(), kind, records * slot + slot, 0);
        cfg.chunk_fill = fill;
        let (out, stats) = run_sort(&input, cfg.clone(), 2);
        assert_eq!(out, expected(&input));
        assert_eq!(stats.spills, 0, "{stats:?}");
        // The same budget counted in held bytes (records, keys, entries,
        // and the final merge's reserve) spills.
        cfg.chunk_fill = crate::ChunkFill::Held;
        let (out, stats) = run_sort(&input, cfg.clone(), 2);
        assert_eq!(out, expected(&input));
        assert!(stats.spills > 0, "{stats:?}");
        // One record's slot short of the arena: spilled, as the arena would.
        cfg.chunk_fill = fill;
        cfg.memory_budget = records * slot - slot;
        let (out, stats) = run_sort(&input, cfg, 2);
        assert_eq!(out, expected(&input));
        assert!(stats.spills > 0, "{stats:?}");
    }
}
