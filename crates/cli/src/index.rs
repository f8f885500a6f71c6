//! `alnsort index`: samtools index's command line (parsed by the engine's
//! table, `alnsort_engine::index`), run by the engine. This file only wires
//! them to the process: help, warnings, exit codes, signals.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::index::{index_help, parse_index, ParsedIndex};
use alnsort_engine::run::index::run_index;
use std::ffi::OsString;

/// Exit status of a failed run (samtools index exits 1 too).
const EXIT_FAILURE: i32 = 1;

/// `alnsort index ARGS...`.
pub fn main(args: Vec<OsString>) -> i32 {
    let run = match parse_index(args) {
        Ok(ParsedIndex::Run(r)) => r,
        Ok(ParsedIndex::Usage) => {
            print!("{}", index_help());
            return 0;
        }
        Err(e) => {
            eprintln!("alnsort index: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort index --help' for the options.");
            }
            return EXIT_FAILURE;
        }
    };
    let debris = Debris::default();
    match crate::run_command("index", &debris, false, EXIT_FAILURE, || {
        Ok(run_index(&run, &debris)?)
    }) {
        Ok(reports) => {
            for r in reports {
                if let Some(w) = r.warning {
                    eprintln!("alnsort index: warning: {w}");
                }
            }
            0
        }
        Err(status) => status,
    }
}
