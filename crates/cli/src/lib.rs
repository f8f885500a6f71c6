//! The `alnsort` program: argv in, exit code out. It parses the command
//! line (samtools' syntax, `args.rs`; `alnsort merge`'s and the stages'
//! in `merge.rs` and `stages.rs`), prints help, sets up the process
//! (allocator tuning, open-file limit, the signal thread: `signals.rs`) and
//! maps a run's result to an exit status and a message. The runs
//! themselves are the engine's (`alnsort_engine`), which the Python package
//! calls too.

// This crate calls libc (signals, mallopt) and so has `unsafe`: each block
// says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod args;
pub mod fixmate;
pub mod index;
pub mod markdup;
pub mod markduplicates;
pub mod merge;
pub mod signals;
pub mod stages;
pub mod verify;

use crate::signals::SignalGuard;
use alnsort_engine::error::error_text;
use alnsort_engine::io::cleanup::Debris;
use alnsort_engine::options::sort::{sort_help, OutFormat, SORT_USAGE};
use alnsort_engine::report::progress::Screen;
use alnsort_engine::run::resources::uses_cram;
use anyhow::{Context, Result};
use std::io::IsTerminal;

/// glibc's malloc raises its mmap threshold each time a large block is freed
/// (up to 32 MiB), after which the 4 MiB SAM batches and the record buffers
/// come from heap arenas that it keeps mapped: measured peak RSS of a 300 MB
/// SAM sort at `--max-memory 64M` was 84 MiB with the default and 49 MiB with
/// the threshold pinned at its 128 KiB default (same wall time), so large
/// blocks go back to the system when freed. Process-wide allocator tuning,
/// so only the binary's entry point does it ([`run`]), before any thread
/// starts (same as MALLOC_MMAP_THRESHOLD_=131072).
const MMAP_THRESHOLD: libc::c_int = 128 * 1024;

/// The threshold when CRAM is read or written, or a Parquet dataset
/// written, and no `--max-memory` total is set (so memory is samtools' `-m` record buffer with I/O on top): the
/// CRAM codecs allocate fresh buffers of 1 MiB and more per block (the rANS
/// order-1 table of 256 contexts, the block's decoded data), which at
/// 128 KiB are new mappings, page-faulted in and unmapped for every block.
/// At 4 MiB they are reused from the heap: on 500,072 records (-@2, load 5)
/// system time fell from 0.51-0.58 s to 0.21-0.27 s reading CRAM and from
/// 0.54-0.64 s to 0.36-0.44 s writing it (2 MiB left reading at 0.41 s).
/// Parquet's row groups are built in Arrow columns of several MiB and each
/// page compressed with a fresh codec context: writing the benchmark BAM's
/// dataset (zstd 1, -@2) took 483,574 minor faults and 1.05 s of system time
/// at 128 KiB, 161,190 and 0.42 s at 4 MiB.
/// The price is about 19 MB of peak RSS per thread (freed blocks kept in
/// the threads' heaps), so a run with a `--max-memory` total keeps the
/// default threshold and stays within it.
const MMAP_THRESHOLD_CRAM: libc::c_int = 4 << 20;

fn pin_mmap_threshold(cram: bool) {
    let threshold = if cram {
        MMAP_THRESHOLD_CRAM
    } else {
        MMAP_THRESHOLD
    };
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc parameters; called before any
    // other thread of this process allocates.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = threshold;
}

/// The process-wide setup of the `alnsort` program, done by [`run`] before
/// the run starts any thread and never by [`run_sort`]: allocator tuning,
/// the soft open-file limit raised to the hard one (so the sorter's
/// automatic fan-in can merge more runs at once), and the signal thread
/// that removes `debris`, clears `screen`'s live line and exits on
/// SIGINT/SIGTERM/SIGHUP.
/// `cram_heap`: a CRAM run, or one writing Parquet, without a memory total
/// (see [`MMAP_THRESHOLD_CRAM`]).
pub fn setup_process(debris: &Debris, screen: &Screen, cram_heap: bool) -> Result<SignalGuard> {
    pin_mmap_threshold(cram_heap);
    alnsort_sort::raise_open_file_limit();
    SignalGuard::install(debris.clone(), screen.clone()).context("installing signal handlers")
}

/// Runs a subcommand's `run` in the process set up for it
/// ([`setup_process`], no progress screen): its value, or the exit status
/// after a failure (the SIGPIPE exit when standard output was closed, else
/// `failure` after the message `alnsort COMMAND: ...`).
pub(crate) fn run_command<T>(
    command: &str,
    debris: &Debris,
    cram_heap: bool,
    failure: i32,
    run: impl FnOnce() -> Result<T>,
) -> std::result::Result<T, i32> {
    let result = setup_process(debris, &Screen::default(), cram_heap).and_then(|_signals| run());
    result.map_err(|e| {
        signals::yield_to_signal();
        if closed_stdout(&e) {
            signals::exit_by_sigpipe();
        }
        eprintln!("alnsort {command}: {}", failure_text(&e));
        failure
    })
}

/// Exit status of a command line that does not name something to do
/// (`alnsort` alone, an unknown command): the usual usage-error code.
const EXIT_USAGE: i32 = 2;
/// Exit status of every failure of `alnsort sort`, bad options included:
/// samtools sort exits 1 for those too, and a drop-in replacement must not
/// change the status a pipeline tests (the differential tests compare it
/// with samtools').
const EXIT_FAILURE: i32 = 1;

const GENERATE_USAGE: &str = "Usage: alnsort generate man|bash|zsh|fish\n\n\
Prints the man page (roff, section 1) or a completion script for that shell,\n\
generated from the option tables the parsers and --help read. For example:\n\
  alnsort generate man > /usr/local/share/man/man1/alnsort.1\n\
  alnsort generate bash > ~/.local/share/bash-completion/completions/alnsort\n\
  alnsort generate zsh > ~/.zfunc/_alnsort      # a directory in $fpath\n\
  alnsort generate fish > ~/.config/fish/completions/alnsort.fish";

/// `alnsort generate man|bash|zsh|fish`: the document on standard output.
fn generate(args: Vec<std::ffi::OsString>) -> i32 {
    use alnsort_engine::options::generate as g;
    use std::io::Write as _;
    let mut docs = g::engine_commands();
    docs.extend(stages::stage_docs());
    let what: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let text = match what
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["man"] => g::man_page(&docs, env!("CARGO_PKG_VERSION")),
        ["bash"] => g::bash(&docs),
        ["zsh"] => g::zsh(&docs),
        ["fish"] => g::fish(&docs),
        ["--help" | "-h"] => {
            println!("{GENERATE_USAGE}");
            return 0;
        }
        _ => {
            eprintln!("alnsort generate: expected one of man, bash, zsh, fish\n{GENERATE_USAGE}");
            return EXIT_USAGE;
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("alnsort generate: writing to standard output failed: {e}");
            1
        }
    }
}

/// A JVM option as Picard's launcher script passes it to java (`-Xmx4g`,
/// `-XX:+UseG1GC`, `-Djava.io.tmpdir=/tmp`).
fn is_jvm_option(a: &str) -> bool {
    a.starts_with("-X") || a.starts_with("-D")
}

/// The message of a failed run: the engine's error and its causes as
/// [`error_text`] joins them (each cause once), after what the CLI itself
/// was doing.
pub(crate) fn failure_text(e: &anyhow::Error) -> String {
    error_text(e.as_ref())
}

/// The run failed writing to standard output after its reader went away.
pub(crate) fn closed_stdout(e: &anyhow::Error) -> bool {
    e.downcast_ref::<alnsort_engine::error::Error>()
        .is_some_and(alnsort_engine::io::output::is_closed_stdout)
}

/// Entry point used by `main`: argv in, exit code out. This is the
/// program, not a library call: before a sort it changes process state
/// (see `setup_process`), and it may end the process on a signal or a
/// closed standard output. Library callers use [`run_sort`].
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
    let argv0 = argv
        .first()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_else(|| "alnsort".into());
    let mut argv = argv;
    // GATK's launcher takes them as one word before the tool name
    // (`gatk --java-options "-Xms4000m -Dsamjdk.compression_level=5"
    // MarkDuplicates ...`, as GATK's best-practices WDL writes it): the
    // same options, split as the launcher splits them (on whitespace).
    let java_options = match argv.get(1).map(|a| a.to_string_lossy().into_owned()) {
        Some(a) if a == "--java-options" && argv.len() > 2 => {
            Some((2, argv[2].to_string_lossy().into_owned()))
        }
        Some(a) => a
            .strip_prefix("--java-options=")
            .map(|v| (1, v.to_string())),
        None => None,
    };
    if let Some((words, value)) = java_options {
        if argv.get(1 + words).is_some_and(|c| c == "MarkDuplicates") {
            let options = value.split_whitespace().map(std::ffi::OsString::from);
            argv.splice(1..1 + words, options);
        }
    }
    // Picard's launcher script takes the JVM's options before the tool
    // name too (`picard -Xmx4g MarkDuplicates ...`, as nf-core's module
    // writes it): they go to MarkDuplicates, which reads them.
    let jvm = argv
        .iter()
        .skip(1)
        .take_while(|a| is_jvm_option(&a.to_string_lossy()))
        .count();
    if jvm > 0 && argv.get(1 + jvm).is_some_and(|c| c == "MarkDuplicates") {
        let options: Vec<_> = argv.drain(1..1 + jvm).collect();
        argv.splice(2..2, options);
    }
    let mut rest = argv.into_iter().skip(1);
    let command = rest.next();
    match command.as_ref().map(|c| c.to_string_lossy()).as_deref() {
        Some("sort") => {}
        Some(stage) if stages::is_stage_command(stage) => {
            return stages::main(stage, rest.collect());
        }
        Some("merge") => return merge::main(&argv0, rest.collect()),
        Some("fixmate") => return fixmate::main(&argv0, rest.collect()),
        Some("index") => return index::main(rest.collect()),
        Some("MarkDuplicates") => return markduplicates::main(&argv0, rest.collect()),
        Some("markdup") => return markdup::main(&argv0, rest.collect()),
        Some("verify") => return verify::main(rest.collect()),
        Some("generate") => return generate(rest.collect()),
        Some("--version") | Some("-V") | Some("version") => {
            println!("alnsort {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        Some("--help") | Some("-h") | Some("help") => {
            match rest.next().as_ref().map(|c| c.to_string_lossy()).as_deref() {
                None => print!("{}", args::top_help()),
                Some("sort") => print!("{}", sort_help()),
                Some(stage) if stages::is_stage_command(stage) => {
                    print!("{}", stages::stage_help(stage))
                }
                Some("merge") => print!("{}", alnsort_engine::options::merge::merge_help()),
                Some("MarkDuplicates") => print!("{}", alnsort_engine::options::picard::help()),
                Some("markdup") => print!(
                    "{}",
                    alnsort_engine::options::samtools_markdup::markdup_help()
                ),
                Some("fixmate") => print!("{}", alnsort_engine::options::fixmate::fixmate_help()),
                Some("verify") => print!("{}", alnsort_engine::options::verify::verify_help()),
                Some("index") => print!("{}", alnsort_engine::options::index::index_help()),
                Some("generate") => println!("{GENERATE_USAGE}"),
                Some(other) => {
                    eprintln!("alnsort help: unknown command '{other}'; the command is 'sort'");
                    return EXIT_USAGE;
                }
            }
            return 0;
        }
        None => {
            eprintln!("{}", SORT_USAGE);
            eprintln!(
                "Try 'alnsort --help' for the commands, 'alnsort sort --help' for the options."
            );
            return EXIT_USAGE;
        }
        Some(other) => {
            let what = if other.starts_with('-') {
                "option"
            } else {
                "command"
            };
            eprintln!("alnsort: unknown {what} '{other}'; the command is 'alnsort sort'");
            eprintln!("Try 'alnsort --help' for more.");
            return EXIT_USAGE;
        }
    }
    let parsed = match args::parse(&argv0, rest.collect(), std::io::stdin().is_terminal()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("alnsort sort: {e}");
            if e.is_usage() {
                eprintln!("Try 'alnsort sort --help' for the options.");
            }
            return EXIT_FAILURE;
        }
    };
    let a = match parsed {
        args::ParsedSort::Usage => {
            print!("{}", sort_help());
            return 0;
        }
        args::ParsedSort::Version => {
            println!("alnsort {}", env!("CARGO_PKG_VERSION"));
            return 0;
        }
        args::ParsedSort::Run(a) => a,
    };
    let cfg = match alnsort_engine::config::resolve(&a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("alnsort sort: {e}");
            return EXIT_FAILURE;
        }
    };
    let debris = Debris::default();
    let cram = !cfg.explicit_total
        && (cfg.format == OutFormat::Parquet
            || uses_cram(
                cfg.format == OutFormat::Cram,
                std::iter::once(cfg.input.as_str()).chain(cfg.inputs.iter().map(String::as_str)),
            ));
    let result = setup_process(&debris, &cfg.screen, cram).and_then(|_signals| {
        alnsort_engine::run::sort::run_sort_with(cfg, &debris).map_err(anyhow::Error::from)
    });
    if result.is_err() {
        signals::yield_to_signal();
    }
    match result {
        Ok(_) => 0,
        Err(e) if closed_stdout(&e) => {
            // The reader of our standard output went away: end quietly by
            // SIGPIPE, as Unix filters do (the run's files are already gone).
            signals::exit_by_sigpipe()
        }
        Err(e) => {
            eprintln!("alnsort sort: {}", failure_text(&e));
            EXIT_FAILURE
        }
    }
}
