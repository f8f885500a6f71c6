//! `alnsort fixmate`: samtools fixmate's command line (parsed by the engine's table, `alnsort_engine::fixmate`), run by the engine; this file only wires them to the process: help, exit codes, signals.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::fixmate::{fixmate_help, parse_fixmate, ParsedFixmate};
use alnsort_engine::options::sort::OutFormat;
use alnsort_engine::run::fixmate::run_fixmate;
use std::ffi::OsString;

/// Exit status of a failed run (samtools fixmate exits 1).
const EXIT_FAILURE: i32 = 1;

/// `alnsort fixmate ARGS`: the exit status.
pub fn main(argv0: &str, rest: Vec<OsString>) -> i32 {
    let f = match parse_fixmate(argv0, rest) {
        Ok(ParsedFixmate::Run(f)) => f,
        Ok(ParsedFixmate::Usage) => {
            print!("{}", fixmate_help());
            return 0;
        }
        Err(e) => {
            eprintln!("alnsort fixmate: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort fixmate --help' for the options.");
            }
            return EXIT_FAILURE;
        }
    };
    let debris = Debris::default();
    let cram = alnsort_engine::run::resources::uses_cram(
        f.sort.format == Some(OutFormat::Cram) || f.sort.output.ends_with(".cram"),
        std::iter::once(f.sort.input.as_str()),
    );
    match crate::run_command("fixmate", &debris, cram, EXIT_FAILURE, || {
        Ok(run_fixmate(&f, &debris)?)
    }) {
        Ok(_) => 0,
        Err(status) => status,
    }
}
