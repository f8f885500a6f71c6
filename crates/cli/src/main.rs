//! `alnsort`: maps argv to `alnsort::run` and its result to an exit code.
//! Everything else lives in the library so it can be tested and reused.

fn main() {
    let code = alnsort::run(std::env::args_os().collect());
    std::process::exit(code);
}
