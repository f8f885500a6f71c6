//! `alnsort verify`: its command line is read by the engine
//! ([`parse_verify`], from the `VERIFY_OPTIONS` table), the check is
//! [`run_verify`]; this module prints the verdicts and gives the exit
//! status: 0 every file sorted, 1 a file not sorted, 2 could not tell.

use alnsort_engine::options::verify::{parse_verify, verify_help, ParsedVerify};
use alnsort_engine::run::verify::run_verify;
use std::ffi::OsString;

/// A file is not sorted.
const EXIT_UNSORTED: i32 = 1;
/// Bad options, no order to check, an unreadable or malformed file.
const EXIT_UNKNOWN: i32 = 2;

/// `alnsort verify ARGS`: the exit status.
pub fn main(rest: Vec<OsString>) -> i32 {
    let a = match parse_verify(rest) {
        Ok(ParsedVerify::Run(a)) => a,
        Ok(ParsedVerify::Usage) => {
            print!("{}", verify_help());
            return 0;
        }
        Err(e) => {
            eprintln!("alnsort verify: {e}");
            eprintln!("Try 'alnsort verify --help' for the options.");
            return EXIT_UNKNOWN;
        }
    };
    match run_verify(&a) {
        Ok(verdicts) => {
            let mut status = 0;
            for v in &verdicts {
                if v.unsorted.is_some() {
                    eprintln!("alnsort verify: {}", v.line());
                    status = EXIT_UNSORTED;
                } else {
                    println!("{}", v.line());
                }
            }
            status
        }
        Err(e) => {
            eprintln!(
                "alnsort verify: {}",
                crate::failure_text(&anyhow::Error::from(e))
            );
            EXIT_UNKNOWN
        }
    }
}
