//! The distributed sort's stage subcommands (`alnsort split|sample|reach|
//! splitters|map|reduce|assemble`): their options, help and JSON output.
//! The stages themselves are [`alnsort_engine::stages`]; the sort options
//! after `--` are parsed as `alnsort sort`'s.

use crate::args::Parsed;
use alnsort_engine::cleanup::Debris;
use alnsort_engine::config::IndexKind;
use alnsort_engine::options::{self, SortOptions};
use alnsort_engine::stages::*;
use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

// ---- the subcommands: `alnsort split|sample|splitters|map|reduce|assemble` ----

/// One option of a stage subcommand; help is rendered from [`STAGE_OPTIONS`].
#[derive(Debug)]
pub struct StageOpt {
    /// The long name (`--parts`).
    pub long: &'static str,
    /// The value's name in the help; `None` for a flag.
    pub value: Option<&'static str>,
    /// The subcommands that take it.
    pub commands: &'static [&'static str],
    pub help: &'static str,
}

/// The stage subcommands, with what each does.
pub const STAGE_COMMANDS: [(&str, &str, &str); 7] = [
    ("split", "IN.bam...", "Cut BAM inputs into splits (record-start virtual offsets); prints them as JSON."),
    ("sample", "IN.bam...", "Sort keys with their tie-break, from a few stretches spread over one split; prints them (hex) as JSON."),
    ("reach", "IN.bam...", "Several inputs: the largest coordinate merge key of one split's records (null for one input or an empty split); map takes the largest of the earlier splits of the same input as --prior."),
    ("splitters", "SAMPLES.json...", "Range splitters (hex, JSON) from the output of 'alnsort sample' for every split."),
    ("map", "IN.bam...", "Sort one split and cut it into one framed block file per range; prints the files, the record count and the proven end."),
    ("reduce", "IN.bam...", "Merge one range's block files (in split order) into a headerless, EOF-less part (and its part index)."),
    ("assemble", "IN.bam...", "Write the output: header, parts in range order, EOF block, merged index; or a directory of shards."),
];

/// Every option of the stage subcommands.
pub const STAGE_OPTIONS: &[StageOpt] = &[
    StageOpt { long: "parts", value: Some("N"), commands: &["split"], help: "About this many splits in all (default 1)." },
    StageOpt { long: "threads", value: Some("N"), commands: &["split", "reach"], help: "Threads (default 1; the other stages take -@ among the sort options)." },
    StageOpt { long: "split", value: Some("I:START:END:ORD"), commands: &["sample", "reach", "map"], help: "The split: input index, start and end virtual offsets (END '-' for the end of the input) and ordinal, as the 'arg' field 'alnsort split' prints." },
    StageOpt { long: "count", value: Some("N"), commands: &["sample"], help: "Most keys to draw (default 100)." },
    StageOpt { long: "samples", value: Some("FILE"), commands: &["splitters"], help: "A file holding the JSON 'alnsort sample' printed; repeat for every split (or give them as arguments)." },
    StageOpt { long: "partitions", value: Some("R"), commands: &["splitters", "reduce"], help: "Ranges (the splitters cut R ranges; reduce: how many there are)." },
    StageOpt { long: "splitters", value: Some("FILE"), commands: &["map"], help: "The JSON 'alnsort splitters' printed (default: none, one range)." },
    StageOpt { long: "prior", value: Some("N"), commands: &["map"], help: "Several inputs: the largest 'reach' of the earlier splits of this split's input (default: none, for its first split)." },
    StageOpt { long: "out-dir", value: Some("DIR"), commands: &["map"], help: "Directory for the block files (split-ORD.range-R.alnblk)." },
    StageOpt { long: "range", value: Some("I"), commands: &["reduce"], help: "The range this reduce merges (0-based)." },
    StageOpt { long: "block", value: Some("FILE"), commands: &["reduce"], help: "A block file of this range; repeat in split order." },
    StageOpt { long: "part", value: Some("FILE"), commands: &["reduce", "assemble"], help: "reduce: the part to write; assemble: a part, repeated in range order." },
    StageOpt { long: "index", value: None, commands: &["reduce"], help: "Also write the part index FILE.idx (for an indexed output)." },
    StageOpt { long: "output", value: Some("FILE"), commands: &["assemble"], help: "The output (a new directory with --sharded)." },
    StageOpt { long: "write-index", value: Some("bai|csi"), commands: &["assemble"], help: "Merge the parts' indexes into FILE.bai or FILE.csi." },
    StageOpt { long: "sharded", value: None, commands: &["assemble"], help: "Write a directory of complete, individually indexed files, one per part." },
];

/// The stage subcommands for the man page and completions
/// (`alnsort generate`), from [`STAGE_COMMANDS`] and [`STAGE_OPTIONS`].
pub fn stage_docs() -> Vec<alnsort_engine::generate::CommandDoc> {
    use alnsort_engine::generate::{CommandDoc, OptDoc};
    STAGE_COMMANDS
        .iter()
        .map(|&(name, args, what)| CommandDoc {
            name,
            summary: what,
            usage: format!("alnsort {name} [options] {args}"),
            options: STAGE_OPTIONS
                .iter()
                .filter(|o| o.commands.contains(&name))
                .map(|o| OptDoc {
                    short: None,
                    long: Some(o.long),
                    value: o.value,
                    help: o.help,
                    supported: true,
                })
                .collect(),
        })
        .collect()
}

/// `alnsort help <stage>` and `alnsort <stage> --help`.
pub fn stage_help(command: &str) -> String {
    let (_, args_text, what) = STAGE_COMMANDS
        .iter()
        .find(|c| c.0 == command)
        .copied()
        .unwrap_or(("", "", ""));
    let mut out = format!("Usage: alnsort {command} [options] {args_text} [-- SORT OPTIONS]\n\n");
    let about = format!(
        "{what} SORT OPTIONS are those of 'alnsort sort' (order, -l, -O, -@, --max-memory, \
         -T, --no-PG, ...); give every stage of one sort the same ones. Prints JSON on \
         standard output."
    );
    for line in options::wrap(&about, options::HELP_WIDTH) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str("\nOptions:\n");
    const INDENT: usize = 26;
    for o in STAGE_OPTIONS
        .iter()
        .filter(|o| o.commands.contains(&command))
    {
        let left = match o.value {
            Some(v) => format!("  --{} {v}", o.long),
            None => format!("  --{}", o.long),
        };
        let text = options::wrap(o.help, options::HELP_WIDTH - INDENT);
        let mut rest = text.iter();
        if left.chars().count() < INDENT - 1 {
            let first = rest.next().map(String::as_str).unwrap_or("");
            out.push_str(&format!("{left:<INDENT$}{first}\n"));
        } else {
            out.push_str(&left);
            out.push('\n');
        }
        for line in rest {
            out.push_str(&format!("{:INDENT$}{line}\n", ""));
        }
    }
    out
}

/// JSON string literal of `s`.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_opt(v: Option<u64>) -> String {
    v.map_or("null".into(), |v| v.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        bail!("'{s}' is not hex");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|_| anyhow!("'{s}' is not hex")))
        .collect()
}

/// The hex strings of the JSON array under `"field"` in `text` (the
/// output of `alnsort sample` or `alnsort splitters`).
fn hex_list(text: &str, field: &str, file: &Path) -> Result<Vec<Vec<u8>>> {
    let key = format!("\"{field}\"");
    let bad = || {
        anyhow!(
            "{}: no \"{field}\" list (the JSON 'alnsort {field}' prints)",
            file.display()
        )
    };
    let at = text.find(&key).ok_or_else(bad)? + key.len();
    let open = at + text[at..].find('[').ok_or_else(bad)?;
    let close = open + text[open..].find(']').ok_or_else(bad)?;
    text[open + 1..close]
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| unhex(s.trim_matches('"')).with_context(|| file.display().to_string()))
        .collect()
}

fn split_arg(s: &SplitSpec) -> String {
    format!(
        "{}:{}:{}:{}",
        s.input,
        s.start,
        s.end.map_or("-".into(), |e| e.to_string()),
        s.ordinal
    )
}

fn parse_split(text: &str) -> Result<SplitSpec> {
    let f: Vec<&str> = text.split(':').collect();
    let bad = || anyhow!("--split {text}: expected INPUT:START:END:ORDINAL (END '-' for none)");
    if f.len() != 4 {
        return Err(bad());
    }
    Ok(SplitSpec {
        input: f[0].parse().map_err(|_| bad())?,
        start: f[1].parse().map_err(|_| bad())?,
        end: if f[2] == "-" {
            None
        } else {
            Some(f[2].parse().map_err(|_| bad())?)
        },
        ordinal: f[3].parse().map_err(|_| bad())?,
    })
}

/// What a stage command line holds.
#[derive(Default)]
struct StageArgs {
    values: Vec<(&'static str, String)>,
    flags: Vec<&'static str>,
    positional: Vec<PathBuf>,
    sort_options: Vec<OsString>,
    help: bool,
}

impl StageArgs {
    fn one(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<PathBuf> {
        self.values
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| PathBuf::from(v))
            .collect()
    }

    fn need(&self, command: &str, name: &str) -> Result<&str> {
        self.one(name)
            .ok_or_else(|| anyhow!("alnsort {command} needs --{name}"))
    }

    fn number<T: std::str::FromStr>(&self, name: &str, default: T) -> Result<T> {
        match self.one(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| anyhow!("--{name} {v}: not a number")),
        }
    }
}

fn parse_stage_args(command: &str, argv: Vec<OsString>) -> Result<StageArgs> {
    let mut out = StageArgs::default();
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let text = arg.to_string_lossy().into_owned();
        if text == "--" {
            out.sort_options = it.by_ref().collect();
            break;
        }
        if text == "--help" || text == "-h" {
            out.help = true;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let spec = STAGE_OPTIONS
                .iter()
                .find(|o| o.long == name && o.commands.contains(&command))
                .ok_or_else(|| {
                    anyhow!(
                        "unknown option '--{name}' for alnsort {command} (sort options go after --)"
                    )
                })?;
            match spec.value {
                Some(_) => {
                    let v = match inline {
                        Some(v) => v,
                        None => it
                            .next()
                            .ok_or_else(|| anyhow!("--{name} needs a value"))?
                            .to_string_lossy()
                            .into_owned(),
                    };
                    out.values.push((spec.long, v));
                }
                None if inline.is_some() => bail!("--{name} takes no value"),
                None => out.flags.push(spec.long),
            }
        } else if text.starts_with('-') && text != "-" {
            bail!("unknown option '{text}' for alnsort {command} (sort options go after --)");
        } else {
            out.positional.push(PathBuf::from(arg));
        }
    }
    Ok(out)
}

/// The sort options given after `--`, as `alnsort sort` reads them; the
/// command line the stages record is `alnsort sort` with them.
fn sort_options(a: &StageArgs) -> Result<SortOptions> {
    match crate::args::parse("alnsort", a.sort_options.clone(), false)? {
        Parsed::Run(o) => Ok(*o),
        Parsed::Usage | Parsed::Version => {
            bail!("the options ask for the help or the version, not for a sort")
        }
    }
}

/// Runs one stage subcommand; prints its JSON result. Errors carry the
/// context the library gives them.
fn run_stage_command(command: &str, a: &StageArgs) -> Result<String> {
    match command {
        "split" => {
            let splits = split(
                &a.positional,
                a.number("parts", 1)?,
                a.number("threads", 1)?,
            )?;
            let rows: Vec<String> = splits
                .iter()
                .map(|s| {
                    format!(
                        "{{\"input\": {}, \"start\": {}, \"end\": {}, \"ordinal\": {}, \"arg\": {}}}",
                        s.input,
                        s.start,
                        json_opt(s.end),
                        s.ordinal,
                        json_str(&split_arg(s))
                    )
                })
                .collect();
            Ok(format!("[{}]", rows.join(", ")))
        }
        "sample" => {
            let s = parse_split(a.need(command, "split")?)?;
            let got = sample(
                &a.positional,
                &s,
                a.number("count", 100)?,
                &sort_options(a)?,
            )?;
            let list: Vec<String> = got.iter().map(|k| json_str(&hex(k))).collect();
            Ok(format!("{{\"samples\": [{}]}}", list.join(", ")))
        }
        "reach" => {
            let s = parse_split(a.need(command, "split")?)?;
            let got = reach(&a.positional, &s, a.number("threads", 1)?)?;
            Ok(format!("{{\"reach\": {}}}", json_opt(got)))
        }
        "splitters" => {
            let mut files = a.all("samples");
            files.extend(a.positional.iter().cloned());
            let mut samples = Vec::new();
            for f in &files {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("{}: cannot read", f.display()))?;
                samples.extend(hex_list(&text, "samples", f)?);
            }
            let cuts = splitters(&samples, a.number("partitions", 1)?)?;
            let list: Vec<String> = cuts.iter().map(|k| json_str(&hex(k))).collect();
            Ok(format!("{{\"splitters\": [{}]}}", list.join(", ")))
        }
        "map" => {
            let s = parse_split(a.need(command, "split")?)?;
            let cuts = match a.one("splitters") {
                Some(f) => {
                    let f = Path::new(f);
                    let text = std::fs::read_to_string(f)
                        .with_context(|| format!("{}: cannot read", f.display()))?;
                    hex_list(&text, "splitters", f)?
                }
                None => Vec::new(),
            };
            let dir = PathBuf::from(a.need(command, "out-dir")?);
            let prior = match a.one("prior") {
                None | Some("-") => None,
                Some(_) => Some(a.number("prior", 0u64)?),
            };
            let out = map(&a.positional, &s, &cuts, &sort_options(a)?, prior)?;
            let debris = Debris::default();
            let mut files = Vec::new();
            for (r, block) in out.blocks.iter().enumerate() {
                let path = dir.join(format!("split-{}.range-{r}.alnblk", s.ordinal));
                write_atomic(&path, block, &debris)?;
                files.push(json_str(&path.display().to_string()));
            }
            Ok(format!(
                "{{\"blocks\": [{}], \"records\": {}, \"end\": {}, \"reach\": {}}}",
                files.join(", "),
                out.records,
                json_opt(out.end),
                json_opt(out.reach)
            ))
        }
        "reduce" => {
            let blocks = a
                .all("block")
                .iter()
                .map(|f| std::fs::read(f).with_context(|| format!("{}: cannot read", f.display())))
                .collect::<Result<Vec<_>>>()?;
            let part = PathBuf::from(a.need(command, "part")?);
            let range: usize = a
                .need(command, "range")?
                .parse()
                .map_err(|_| anyhow!("--range: not a number"))?;
            let blocks: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
            let r = reduce(
                &a.positional,
                &blocks,
                &part,
                range,
                a.number("partitions", 1)?,
                &sort_options(a)?,
                a.flags.contains(&"index"),
            )?;
            Ok(format!(
                "{{\"records\": {}, \"bytes\": {}}}",
                r.records, r.bytes
            ))
        }
        "assemble" => {
            let output = PathBuf::from(a.need(command, "output")?);
            let index = match a.one("write-index") {
                None => None,
                Some("bai") => Some(IndexKind::Bai),
                Some("csi") => Some(IndexKind::Csi),
                Some(other) => bail!("--write-index {other}: expected bai or csi"),
            };
            let done = assemble(
                &a.positional,
                &a.all("part"),
                &output,
                &sort_options(a)?,
                index,
                a.flags.contains(&"sharded"),
                None,
            )?;
            let files: Vec<String> = done
                .files
                .iter()
                .map(|f| json_str(&f.display().to_string()))
                .collect();
            Ok(format!(
                "{{\"bytes\": {}, \"index\": {}, \"files\": [{}]}}",
                done.bytes,
                done.index
                    .map_or("null".into(), |p| json_str(&p.display().to_string())),
                files.join(", ")
            ))
        }
        other => bail!("unknown stage '{other}'"),
    }
}

/// Whether `command` is a stage subcommand.
pub fn is_stage_command(command: &str) -> bool {
    STAGE_COMMANDS.iter().any(|c| c.0 == command)
}

/// `alnsort <stage> ARGS`: the exit code (0, 1 on failure with the
/// message on stderr, 2 for a usage mistake).
pub fn main(command: &str, argv: Vec<OsString>) -> i32 {
    let a = match parse_stage_args(command, argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("alnsort {command}: {e:#}");
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
            eprintln!("alnsort {command}: {}", crate::failure_text(&e));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_help_lists_each_option_within_80_columns() {
        for (command, _, _) in STAGE_COMMANDS {
            let text = stage_help(command);
            for line in text.lines() {
                assert!(
                    line.chars().count() <= options::HELP_WIDTH,
                    "{command}: {line:?}"
                );
            }
            for o in STAGE_OPTIONS
                .iter()
                .filter(|o| o.commands.contains(&command))
            {
                assert!(
                    text.contains(&format!("--{}", o.long)),
                    "{command}: --{}",
                    o.long
                );
            }
        }
    }

    #[test]
    fn split_args_and_hex_round_trip() {
        let s = SplitSpec {
            input: 1,
            start: 123 << 16,
            end: None,
            ordinal: 4,
        };
        assert_eq!(parse_split(&split_arg(&s)).unwrap(), s);
        assert!(parse_split("1:2:3").is_err());
        let k = vec![0u8, 255, 17];
        assert_eq!(unhex(&hex(&k)).unwrap(), k);
        let text = format!("{{\"samples\": [\"{}\", \"ab\"]}}", hex(&k));
        let got = hex_list(&text, "samples", Path::new("x")).unwrap();
        assert_eq!(got, vec![k, vec![0xab]]);
        assert!(hex_list(&text, "splitters", Path::new("x")).is_err());
    }

    #[test]
    fn unknown_options_are_refused_and_sort_options_pass_after_the_separator() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(parse_stage_args("map", os(&["--parts", "3"])).is_err());
        assert!(parse_stage_args("map", os(&["-n"])).is_err());
        let a = parse_stage_args(
            "map",
            os(&["--split=0:1:-:0", "in.bam", "--", "-n", "-l", "1"]),
        )
        .unwrap();
        assert_eq!(a.one("split"), Some("0:1:-:0"));
        assert_eq!(a.positional, vec![PathBuf::from("in.bam")]);
        assert_eq!(a.sort_options, os(&["-n", "-l", "1"]));
    }
}
