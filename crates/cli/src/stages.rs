//! The stage subcommands (`alnsort split|sample|reach|splitters|map|reduce|
//! assemble` and the duplicate-marking tasks `alnsort markdup-collect|join|
//! decide|finish|assemble`): their command lines are read by the engine
//! ([`parse_stage_args`], from the option table `STAGE_OPTIONS`), run by
//! it ([`run_stage_command`]); this module prints the JSON or the error
//! and gives the exit status.

use alnsort_engine::options::stage::parse_stage_args;
pub use alnsort_engine::options::stage::{is_stage_command, stage_docs, stage_help};
use alnsort_engine::stages::commands::run_stage_command;
use std::ffi::OsString;

/// `alnsort <stage> ARGS`: the exit code (0, 1 on failure with the
/// message on stderr, 2 for a usage mistake).
pub fn main(command: &str, argv: Vec<OsString>) -> i32 {
    let a = match parse_stage_args(command, argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("alnsort {command}: {e}");
            eprintln!("Try 'alnsort {command} --help' for the options.");
            return 2;
        }
    };
    if a.help {
        print!("{}", stage_help(command));
        return 0;
    }
    match run_stage_command(command, &a) {
        Ok(json) => {
            println!("{json}");
            0
        }
        Err(e) => {
            eprintln!(
                "alnsort {command}: {}",
                alnsort_engine::error::error_text(&e)
            );
            1
        }
    }
}
