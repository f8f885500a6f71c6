//! `alnsort markdup`: samtools markdup's command line (parsed by the engine's table, `alnsort_engine::samtools_markdup`), wired to the process: help, exit codes, signals.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::samtools_markdup::{
    markdup_help, parse_markdup, ParsedSamtoolsMarkdup,
};
use alnsort_engine::options::sort::OutFormat;
use alnsort_engine::run::samtools_markdup::run;
use std::ffi::OsString;

/// Exit status of a failed run (samtools markdup exits 1 on errors and on
/// its usage message).
const EXIT_FAILURE: i32 = 1;

/// `alnsort markdup ARGS`: the exit status.
pub fn main(argv0: &str, rest: Vec<OsString>) -> i32 {
    let a = match parse_markdup(argv0, rest) {
        Ok(ParsedSamtoolsMarkdup::Run(a)) => a,
        Ok(ParsedSamtoolsMarkdup::Usage { error }) => {
            if error {
                eprint!("{}", markdup_help());
                return EXIT_FAILURE;
            }
            print!("{}", markdup_help());
            return 0;
        }
        Err(e) => {
            eprintln!("alnsort markdup: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort markdup --help' for the options.");
            }
            return EXIT_FAILURE;
        }
    };
    let debris = Debris::default();
    let cram = alnsort_engine::run::resources::uses_cram(
        a.sort.format == Some(OutFormat::Cram) || a.sort.output.ends_with(".cram"),
        [a.sort.input.as_str()],
    );
    match crate::run_command("markdup", &debris, cram, EXIT_FAILURE, || {
        Ok(run(&a, &debris)?)
    }) {
        Ok(_) => 0,
        Err(status) => status,
    }
}
