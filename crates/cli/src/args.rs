//! `alnsort sort`'s command line, read the way samtools 1.24 reads it
//! (getopt string `l:m:nNo:O:T:@:t:MI:K:uRw:H` plus the global long options),
//! so a pipeline switches by replacing `samtools sort` with `alnsort sort`.
//!
//! The parser is the engine's ([`alnsort_engine::sort_args`], which the
//! Ray driver's command line goes through too): it accepts exactly the
//! options of the one table ([`alnsort_engine::options::sort::OPTIONS`]) and
//! applies each with `SortOptions::apply`; help is rendered from the same
//! table. This module keeps the top-level help.

pub use alnsort_engine::options::sort_args::{parse, stringify, ParsedSort};

/// `alnsort --help`: what the tool is, its commands, examples, where the
/// documentation is.
pub fn top_help() -> String {
    format!(
        "\
alnsort {version}: sorts and merges SAM, BAM and CRAM files, a drop-in for
'samtools sort' and 'samtools merge' (same options, records identical to
samtools 1.24's), and marks duplicates with Picard MarkDuplicates' flags and
metrics in the same pass (sort --markdup), within one memory budget, in
parallel; also a Python package and a Ray driver.

Usage: alnsort <command> [options]
       alnsort sort [options] [in.bam|in.sam|in.cram|-] [in2 ...]

Commands:
  sort      Sort by coordinate, read name, tag or template coordinate;
            --markdup marks duplicates as Picard MarkDuplicates does
  split, sample, splitters, map, reduce, assemble
            The distributed sort's stages, for a workflow manager
            ('alnsort help map': the options of one)
  markdup-collect, markdup-join, markdup-decide, markdup-finish,
  markdup-assemble
            Duplicate marking cut into the same kind of tasks (with
            --markdup among the sort options of map and reduce)
  merge     Merge sorted SAM, BAM or CRAM inputs as samtools merge does
  markdup   samtools markdup's command line and answer (flags, do/dt/dc
            tags, statistics) on coordinate-sorted, fixmate'd input
  fixmate   Fill in mate fields, TLEN and the MQ/MC/ms tags of name-grouped
            input as samtools fixmate does
  index     Index BAM (BAI, CSI) and CRAM (.crai) files as samtools index
            does, the same index bytes
  MarkDuplicates
            Picard MarkDuplicates' command line (I=in.bam O=out.bam
            M=metrics.txt, or --INPUT ...): its flags and metrics, the
            input's order kept, no sort
  verify    Say whether a SAM, BAM or CRAM file is sorted in the order its
            header claims (or the one -n, -N, -t, --template-coordinate
            name), naming the first record out of order
  generate  Print the man page or a shell completion (man, bash, zsh, fish)
  help      Print this help ('alnsort help sort': the options of sort);
            also --help, -h
  version   Print the version; also --version, -V

Examples:
  # coordinate order, BAM with a CSI index, 8 threads
  alnsort sort -@ 8 --write-index -o out.bam in.sam
  # read-name order (natural, as samtools -n), 4 GiB for the whole process
  alnsort sort -n --max-memory 4G -o byname.bam in.bam
  # from a pipe, SAM on standard input
  bwa mem ref.fa r1.fq r2.fq | alnsort sort -@ 8 -o out.bam -

The options of sort, and how they differ from samtools': alnsort sort --help
Documentation: README.md, docs/switching-from-samtools.md, docs/usage.md and
ARCHITECTURE.md in the alnsort source tree.
",
        version = env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use alnsort_engine::error::ArgError;
    use alnsort_engine::options::sort::{
        sort_help, OptId, OrderFlag, OutFormat, SortOptions, UnknownReference, OPTIONS,
    };
    use alnsort_engine::options::table::{OptionName, HELP_WIDTH};
    use std::collections::BTreeSet;
    use std::ffi::OsString;
    use std::path::PathBuf;

    fn parse_args(args: &[&str]) -> Result<ParsedSort, ArgError> {
        parse("alnsort", args.iter().map(OsString::from).collect(), false)
    }

    fn run(args: &[&str]) -> Result<SortOptions, ArgError> {
        match parse_args(args)? {
            ParsedSort::Run(a) => Ok(*a),
            other => panic!("expected Run, got {other:?}"),
        }
    }

    /// A value each value name accepts; a new value name must be added here.
    fn sample(value_name: &str) -> &'static str {
        match value_name {
            "TAG" => "RG",
            "FILE" => "x.out",
            "FMT[,OPT=VAL]..." => "bam,level=1",
            "OPT=VAL" => "level=1",
            "INT" => "1",
            "INT[K|M|G]" => "2M",
            "PREFIX" => "tmp",
            "SIZE" => "1G",
            "SECS" => "1",
            "error|unmapped" => "unmapped",
            "N" => "2500",
            "STRATEGY" => "sum-of-base-qualities",
            "POLICY" => "none",
            "REGEX" => "([0-9]+):([0-9]+):([0-9]+)",
            "default|json|tsv" => "json",
            "[=picard|samtools]" => "samtools",
            "t|s" => "s",
            "ORDER" => "txy",
            "CHAR" => "_",
            "DIR" => "resume.d",
            other => panic!("no sample value for the value name {other}: add one"),
        }
    }

    /// The option names help lists in its left column (`-@`, `--threads`).
    fn listed_in_help(help: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for line in help
            .lines()
            .filter(|l| l.starts_with("  -") || l.starts_with("      --"))
        {
            let synopsis = line.trim_start().split("  ").next().unwrap();
            for word in synopsis.split([',', ' ']) {
                if word.starts_with('-') {
                    // `--markdup[=picard|samtools]`: an optional value.
                    let name = word.split('[').next().unwrap_or(word);
                    names.insert(name.to_string());
                }
            }
        }
        names
    }

    /// Whether the parser knows `option` (refusing it as unsupported counts:
    /// it is known, and help must list it).
    fn accepted(option: &str) -> bool {
        // A value after the option, in case it takes one; flags then see it
        // as the input file. Values the option rejects still mean it is known.
        !matches!(
            parse_args(&[option, "1"]),
            Err(ArgError::UnknownOption(_)) | Err(ArgError::Ambiguous { .. })
        )
    }

    #[test]
    fn every_table_entry_parses_as_its_group_says() {
        for spec in OPTIONS {
            let mut forms: Vec<Vec<String>> = Vec::new();
            let value = spec.value.map(sample);
            if let Some(c) = spec.short {
                let mut f = vec![format!("-{c}")];
                f.extend(value.map(String::from));
                forms.push(f.clone());
                if let Some(v) = value {
                    forms.push(vec![format!("-{c}{v}")]); // attached: -m2G
                }
            }
            if let Some(l) = spec.long {
                let mut f = vec![format!("--{l}")];
                // An optional value is taken only after `=`.
                if !spec.optional_value() {
                    f.extend(value.map(String::from));
                }
                forms.push(f);
                if let Some(v) = value {
                    forms.push(vec![format!("--{l}={v}")]);
                }
            }
            for form in forms {
                let args: Vec<&str> = form.iter().map(String::as_str).collect();
                let got = parse_args(&args);
                match (spec.id, &got) {
                    (OptId::Unsupported(_), Err(ArgError::Unsupported { option, .. })) => {
                        assert_eq!(option, &spec.name(), "{form:?}")
                    }
                    (OptId::Help, Ok(ParsedSort::Usage)) => {}
                    (OptId::Version, Ok(ParsedSort::Version)) => {}
                    (OptId::Unsupported(_) | OptId::Help | OptId::Version, _) => {
                        panic!("{form:?}: got {got:?}")
                    }
                    (_, Ok(ParsedSort::Run(a))) => {
                        assert_eq!(a.input, "-", "{form:?} took no value")
                    }
                    (_, _) => panic!("{form:?} must be accepted, got {got:?}"),
                }
            }
        }
    }

    #[test]
    fn options_accepted_are_exactly_those_help_lists() {
        let help = sort_help();
        let listed = listed_in_help(&help);
        let mut probed: BTreeSet<String> = BTreeSet::new();
        for c in (33u8..127).map(char::from).filter(|&c| c != '-') {
            probed.insert(format!("-{c}"));
        }
        for spec in OPTIONS {
            if let Some(l) = spec.long {
                probed.insert(format!("--{l}"));
            }
        }
        // Junk, and names that only start like a table name (a unique prefix
        // of one is an abbreviation, see the test below).
        for l in ["--bogus", "--sort", "--outputs", "--helper", "--threads2"] {
            probed.insert(l.to_string());
        }
        let accepted: BTreeSet<String> = probed.iter().filter(|o| accepted(o)).cloned().collect();
        assert_eq!(
            accepted, listed,
            "accepted options (left) vs options help lists (right)"
        );
        // samtools sort's own getopt letters are all known (used or refused).
        for c in "lmnNoOT@tMIKuRwH".chars() {
            assert!(
                accepted.contains(&format!("-{c}")),
                "samtools' -{c} unknown to the parser"
            );
        }
        assert!(help.contains("Not supported yet"));
    }

    #[test]
    fn help_fits_80_columns() {
        for (what, text) in [("sort --help", sort_help()), ("--help", top_help())] {
            for line in text.lines() {
                assert!(
                    line.chars().count() <= HELP_WIDTH,
                    "{what}: line longer than {HELP_WIDTH} columns: {line:?}"
                );
            }
        }
        assert!(top_help().contains("alnsort sort --help"));
        // The first lines say the whole story: formats, merge, duplicates.
        let intro: String = top_help().lines().take(5).collect::<Vec<_>>().join(" ");
        for needle in [
            "CRAM",
            "samtools sort",
            "samtools merge",
            "Picard",
            "--markdup",
        ] {
            assert!(
                intro.contains(needle),
                "--help's first lines lack {needle:?}"
            );
        }
    }

    #[test]
    fn unsupported_options_are_refused_by_name() {
        for (args, name) in [(
            &["--input-fmt-option", "filter=mapq>1"][..],
            "--input-fmt-option",
        )] {
            match parse_args(args) {
                Err(e @ ArgError::Unsupported { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.starts_with(name) && msg.contains("not supported yet"),
                        "{msg}"
                    );
                    assert!(!e.is_usage());
                }
                other => panic!("{args:?}: expected a refusal, got {other:?}"),
            }
        }
    }

    #[test]
    fn reference_and_cram_options_are_taken() {
        let a = run(&["--reference", "r.fa", "x.bam"]).unwrap();
        assert_eq!(a.reference, Some(PathBuf::from("r.fa")));
        let a = run(&["-O", "cram,version=3.1,reference=s.fa,no_ref=0", "x.bam"]).unwrap();
        assert_eq!(a.format, Some(OutFormat::Cram));
        assert_eq!(a.reference, Some(PathBuf::from("s.fa")));
        assert_eq!(
            a.cram_options,
            vec![
                ("version".to_string(), "3.1".to_string()),
                ("no_ref".to_string(), "0".to_string())
            ]
        );
        assert!(run(&["-O", "cram,seqs_per_slice=5"]).is_err());
    }

    #[test]
    fn minimiser_options_follow_samtools() {
        let a = run(&["-n", "-M", "-K", "40", "-R", "-H", "-w", "7"]).unwrap();
        assert_eq!(a.order, OrderFlag::Minimiser);
        assert_eq!(
            (a.kmer, a.window, a.no_reverse, a.squash),
            (31, 7, true, true)
        );
        assert_eq!(run(&["-K", "-3"]).unwrap().kmer, 1);
        assert_eq!(run(&["-M", "-n"]).unwrap().order, OrderFlag::Name);
        let a = run(&["-I", "a.fa", "-I", "b.fa"]).unwrap();
        assert_eq!(a.order, OrderFlag::Minimiser);
        assert_eq!(a.minimiser_ref, Some(PathBuf::from("b.fa")));
        for bad in [
            &["-K", "abc"][..],
            &["-K", "10x"],
            &["-w", "1.5"],
            &["-w", "3000000000"],
        ] {
            assert!(matches!(run(bad), Err(ArgError::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn long_options_may_be_abbreviated_as_getopt_long_allows() {
        let a = run(&["--thr", "3", "--no-P", "--templ", "--write-i"]).unwrap();
        assert_eq!(a.threads, 3);
        assert!(a.no_pg && a.write_index);
        assert_eq!(a.order, OrderFlag::TemplateCoordinate);
        match run(&["--no", "x"]) {
            Err(e @ ArgError::Ambiguous { .. }) => {
                assert!(
                    e.to_string().contains("--no-PG") && e.to_string().contains("--no-progress")
                )
            }
            other => panic!("expected ambiguity, got {other:?}"),
        }
        assert!(matches!(run(&["--bogus"]), Err(ArgError::UnknownOption(o)) if o == "--bogus"));
        assert!(matches!(run(&["-X"]), Err(ArgError::UnknownOption(o)) if o == "-X"));
    }

    #[test]
    fn samtools_style_clusters_and_attached_values() {
        let a = run(&["-@4", "-m1G", "-nu", "-oout.bam", "in.bam"]).unwrap();
        assert_eq!(a.threads, 4);
        assert_eq!(a.mem_per_thread, Some(1 << 30));
        assert_eq!(a.order, OrderFlag::Name);
        assert!(a.uncompressed);
        assert_eq!(a.output, "out.bam");
        assert_eq!(a.input, "in.bam");
        assert_eq!(a.command_line, "alnsort sort -@4 -m1G -nu -oout.bam in.bam");
        let a = run(&["-l1", "--threads=2", "-nuo", "o.bam"]).unwrap();
        assert_eq!(
            (a.level, a.threads, a.output.as_str()),
            (Some(1), 2, "o.bam")
        );
        assert!(a.uncompressed);
        assert!(matches!(run(&["--no-PG=1"]), Err(ArgError::Syntax(_))));
        assert!(matches!(run(&["-o"]), Err(ArgError::Syntax(_))));
    }

    #[test]
    fn last_order_wins_and_n_uppercase_sticks() {
        let a = run(&["-N", "--template-coordinate", "-n"]).unwrap();
        assert_eq!(a.order, OrderFlag::Name);
        assert!(a.lexicographic);
        let a = run(&["-n", "--template-coordinate"]).unwrap();
        assert_eq!(a.order, OrderFlag::TemplateCoordinate);
    }

    #[test]
    fn output_format_and_options() {
        let a = run(&["-O", "SAM,level=3", "x.bam"]).unwrap();
        assert_eq!(a.format, Some(OutFormat::Sam));
        assert_eq!(a.format_level, Some(3));
        assert!(run(&["-O", "vcf"]).is_err());
        let a = run(&["--output-fmt-option", "level=1"]).unwrap();
        assert_eq!(a.format_level, Some(1));
        let a = run(&["-l", "12"]).unwrap();
        assert_eq!(a.level, Some(9));
    }

    #[test]
    fn positional_rules() {
        assert_eq!(run(&["a", "b", "c"]).unwrap().inputs, ["a", "b", "c"]);
        assert!(run(&["a", "-"]).is_err());
        assert_eq!(run(&[]).unwrap().input, "-");
        assert!(matches!(
            parse("alnsort", vec![], true).unwrap(),
            ParsedSort::Usage
        ));
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(matches!(run(&["-m", "1.5G"]), Err(ArgError::Invalid(_))));
        assert!(matches!(run(&["-@", "two"]), Err(ArgError::Invalid(_))));
        assert!(run(&["-@", "two"]).unwrap_err().is_usage());
    }

    #[test]
    fn unknown_reference_defaults_to_error_and_takes_two_values() {
        assert_eq!(run(&[]).unwrap().unknown_reference, UnknownReference::Error);
        for (given, want) in [
            (
                &["--unknown-reference=unmapped"][..],
                UnknownReference::Unmapped,
            ),
            (
                &["--unknown-reference", "error"][..],
                UnknownReference::Error,
            ),
            (
                &["--unknown-reference=unmapped", "--unknown-reference=error"][..],
                UnknownReference::Error,
            ),
        ] {
            assert_eq!(run(given).unwrap().unknown_reference, want, "{given:?}");
        }
        for bad in ["drop", "", "Unmapped"] {
            let e = run(&[&format!("--unknown-reference={bad}")]).unwrap_err();
            assert!(
                matches!(&e, ArgError::Invalid(m) if m.contains("'error'") && m.contains("'unmapped'")),
                "{bad}: {e}"
            );
        }
    }
}
