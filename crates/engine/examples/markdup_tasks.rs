//! What each step of the duplicate-marking decision cut into tasks costs
//! (`alnsort_engine::stages::markdup::{collect, join_within, decide_bucket,
//! finish_split, assemble}`), against the one decide task over the whole
//! input (`stages_markdup::decide`), in one process with one thread: CPU
//! seconds (user + system, `getrusage`) and wall seconds per step, and the
//! bytes each step hands on. Checks that both give the same decision and
//! metrics.
//!
//! `cargo run --release -p alnsort-engine --example markdup_tasks -- IN.bam SPLITS BUCKETS NAME_BUCKETS [OPTION...]`
//! (OPTIONs: `alnsort sort`'s, `--markdup` added).

use std::path::PathBuf;
use std::time::Instant;

use alnsort_engine::options::sort::SortOptions;

use alnsort_engine::stages::markdup as stages_markdup;
use alnsort_engine::stages::markdup::{dist, Fixups, SetsDecided, WalkCarry};

/// CPU seconds (user + system) of the process so far.
fn cpu() -> f64 {
    // SAFETY: rusage is plain integers and timevals, for which all zero
    // bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

struct Step {
    cpu: f64,
    wall: Instant,
}

impl Step {
    fn start() -> Step {
        Step {
            cpu: cpu(),
            wall: Instant::now(),
        }
    }
    fn report(self, what: &str, bytes: usize) {
        println!(
            "{what:<28} cpu {:>7.2} s  wall {:>7.2} s  hands on {:>8.1} MB",
            cpu() - self.cpu,
            self.wall.elapsed().as_secs_f64(),
            bytes as f64 / 1e6
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        eprintln!("usage: markdup_tasks IN.bam SPLITS BUCKETS NAME_BUCKETS [OPTION...]");
        std::process::exit(2);
    }
    let input = PathBuf::from(&args[0]);
    let num = |i: usize| -> usize { args[i].parse().expect("a number") };
    let (splits, buckets, names) = (num(1), num(2), num(3));
    let mut argv: Vec<std::ffi::OsString> = vec!["--markdup".into(), "-@".into(), "1".into()];
    argv.extend(args[4..].iter().map(Into::into));
    argv.extend(["-o".into(), "unused.bam".into(), input.clone().into()]);
    let alnsort_engine::options::sort_args::ParsedSort::Run(options) =
        alnsort_engine::options::sort_args::parse("alnsort", argv, false).expect("options parse")
    else {
        panic!("the options name a run");
    };
    let options: SortOptions = *options;
    let inputs = vec![input];

    let s = Step::start();
    let one = stages_markdup::decide(&inputs, &options).expect("decide");
    s.report("one decide task", one.decisions.len());

    let specs = alnsort_engine::stages::plan::split(&inputs, splits, 1).expect("split");
    let s = Step::start();
    let shares: Vec<_> = specs
        .iter()
        .map(|sp| stages_markdup::collect(&inputs, sp, &options, buckets, names).expect("collect"))
        .collect();
    let (ends, halves, slots): (usize, usize, usize) = shares.iter().fold((0, 0, 0), |a, sh| {
        (
            a.0 + sh.ends.iter().map(Vec::len).sum::<usize>(),
            a.1 + sh.halves.iter().map(Vec::len).sum::<usize>(),
            a.2 + sh.slots.len(),
        )
    });
    s.report(&format!("collect ({splits} splits)"), ends + halves + slots);
    println!(
        "{:<28} fragment ends {:.1} MB, mate halves {:.1} MB, slots {:.1} MB",
        "",
        ends as f64 / 1e6,
        halves as f64 / 1e6,
        slots as f64 / 1e6
    );
    let bounds: Vec<_> = shares.iter().map(|sh| sh.boundary.clone()).collect();
    let continued = dist::continued_templates(&bounds);
    let fixups = Fixups::new(&bounds, &continued);

    let s = Step::start();
    let joined: Vec<Vec<Vec<u8>>> = (0..names)
        .map(|j| {
            let blocks: Vec<&[u8]> = shares.iter().map(|sh| &sh.halves[j][..]).collect();
            stages_markdup::join_within(&blocks, &fixups, buckets, &options, &[])
                .expect("join")
                .0
        })
        .collect();
    let pairs: usize = joined.iter().flatten().map(Vec::len).sum();
    s.report(&format!("join ({names} name buckets)"), pairs);

    let s = Step::start();
    let mut totals = SetsDecided::default();
    let mut lists = Vec::new();
    for b in 0..buckets {
        let mut blocks: Vec<&[u8]> = shares.iter().map(|sh| &sh.ends[b][..]).collect();
        blocks.extend(joined.iter().map(|j| &j[b][..]));
        let d = stages_markdup::decide_bucket(&inputs, &blocks, &fixups, &options)
            .expect("decide bucket");
        lists.push(d.by_split(specs.len()).expect("lists by split"));
        totals.add_counts(d);
    }
    let listed: usize = lists
        .iter()
        .map(|l| l.0.iter().chain(&l.1).map(Vec::len).sum::<usize>())
        .sum();
    s.report(&format!("decide ({buckets} buckets)"), listed);

    let s = Step::start();
    let finish = |i: usize, carry: WalkCarry| {
        let dups: Vec<&[u8]> = lists.iter().map(|l| &l.0[i][..]).collect();
        let opt: Vec<&[u8]> = lists.iter().map(|l| &l.1[i][..]).collect();
        stages_markdup::finish_split(
            &shares[i].slots,
            continued[i].is_some(),
            &dups,
            Some(&opt),
            carry,
        )
        .expect("finish")
    };
    let mut outcomes: Vec<_> = (0..specs.len())
        .map(|i| finish(i, WalkCarry::default()))
        .collect();
    let mut again = 0;
    for i in 1..specs.len() {
        let carry = outcomes[i - 1].carry;
        if carry != WalkCarry::default() {
            outcomes[i] = finish(i, carry);
            again += 1;
        }
    }
    let bits: u64 = outcomes.iter().map(|o| o.duplicate.len().div_ceil(4)).sum();
    s.report(&format!("finish ({again} run again)"), bits as usize);

    let s = Step::start();
    let tasks = stages_markdup::assemble(&inputs, &options, outcomes, totals).expect("assemble");
    s.report("assemble", tasks.decisions.len());
    assert!(tasks.decisions == one.decisions, "the decisions differ");
    assert_eq!(tasks.metrics, one.metrics, "the metrics differ");
    println!("same decision and metrics as the one task");
}
