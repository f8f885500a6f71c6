//! `alnsort MarkDuplicates`: Picard's command line (parsed by the engine's
//! table, `alnsort_engine::picard`), run by `alnsort_engine::mark_in_order`.
//! This file only wires them to the process: help, exit codes, signals.

use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::picard;
use alnsort_engine::options::picard::ParsedPicard;
use std::ffi::OsString;

/// Exit status of a failed run (Picard exits 1 on errors too).
const EXIT_FAILURE: i32 = 1;

/// `alnsort MarkDuplicates ARGS...`; `argv0` begins the command line the
/// @PG CL and the metrics name.
pub fn main(argv0: &str, args: Vec<OsString>) -> i32 {
    let command_line = crate::args::stringify(argv0, "MarkDuplicates", &args);
    let run = match picard::parse(command_line, args) {
        Ok(ParsedPicard::Run(r)) => r,
        Ok(ParsedPicard::Help) => {
            print!("{}", picard::help());
            return 0;
        }
        Ok(ParsedPicard::Version) => {
            println!("alnsort {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Err(e) => {
            eprintln!("alnsort MarkDuplicates: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort MarkDuplicates --help' for the options.");
            }
            return EXIT_FAILURE;
        }
    };
    let debris = Debris::default();
    match crate::run_command("MarkDuplicates", &debris, false, EXIT_FAILURE, || {
        Ok(alnsort_engine::run::mark_in_order::run(&run, &debris)?)
    }) {
        Ok(_) => 0,
        Err(status) => status,
    }
}
