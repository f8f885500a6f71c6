//! `alnsort merge`: its command line is read by the engine
//! ([`parse_merge`], samtools merge's options from the engine's
//! `MERGE_OPTIONS` table), the merge is [`run_merge`]; this module wires
//! them to the process and gives the exit status.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::merge::{merge_help, parse_merge, ParsedMerge};
use alnsort_engine::options::sort::OutFormat;
use alnsort_engine::run::merge::run_merge;
use std::ffi::OsString;

/// `alnsort merge ARGS`: the exit status.
pub fn main(argv0: &str, rest: Vec<OsString>) -> i32 {
    // samtools merge seeds the renamed IDs' suffixes with the time.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let parsed = match parse_merge(argv0, rest, seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("alnsort merge: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort merge --help' for the options.");
            }
            return 1;
        }
    };
    let m = match parsed {
        ParsedMerge::Usage => {
            print!("{}", merge_help());
            return 0;
        }
        ParsedMerge::Run(m) => m,
    };
    let debris = Debris::default();
    // CRAM's and Parquet's codecs allocate large blocks (crate::MMAP_THRESHOLD_CRAM).
    let cram = m.sort.format == Some(OutFormat::Parquet)
        || alnsort_engine::run::resources::uses_cram(
            m.sort.format == Some(OutFormat::Cram) || m.sort.output.ends_with(".cram"),
            m.inputs.iter().map(String::as_str),
        );
    let result = crate::run_command("merge", &debris, cram, 1, || {
        let r = run_merge(&m, &debris);
        if r.is_err() {
            debris.remove_all();
        }
        Ok(r?)
    });
    match result {
        Ok(()) => 0,
        Err(status) => status,
    }
}
