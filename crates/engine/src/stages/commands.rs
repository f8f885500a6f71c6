//! The stage subcommands run: each reads its files, calls its stage
//! ([`crate::stages`], [`crate::stages::markdup`]), writes what it makes
//! under the names below and returns the JSON the program prints. Their
//! command lines are [`crate::options::stage`]'.
//!
//! Duplicate marking from the command line (one input; the maps and
//! reduces are the sort's, with `--markdup` among the sort options):
//! `markdup-collect` per split writes, in `--out-dir`,
//! `markdup-split-S.ends-B` (fragment ends of end bucket B),
//! `markdup-split-S.halves-J` (mate halves of name bucket J),
//! `markdup-split-S.slots` and `markdup-split-S.boundary`;
//! `markdup-join` per name bucket `markdup-join-J.ends-B`;
//! `markdup-decide` per end bucket `markdup-decide-B.split-S.dup` and
//! `.opt` (the indexes it lists in split S) and `markdup-decide-B.counts`;
//! `markdup-finish` per split `markdup-finish-S.outcome` (and with
//! `--partitions R`, from the map's `markdup-split-S.ranges`, one slice
//! per reduce, `markdup-finish-S.slice-R`, which `reduce --finished`
//! takes); `markdup-assemble` the metrics file, and with `--decisions` the
//! whole decision `reduce --marks` applies. Each later task finds the files of the earlier ones
//! in the JSON they printed (`--collected`, `--joined`, `--decided`,
//! `--finished`), as `map` finds the splitters in `--splitters`.

use std::path::{Path, PathBuf};

use crate::error::{bail, Context, Error, Result};
use crate::io::cleanup::Debris;
use crate::options::stage::{split_arg, StageArgs};
use crate::stages::markdup::{self as smd, dist};
use crate::stages::plan::{reach, sample, split, splitters, write_atomic, SplitSpec};
use crate::stages::sort::{assemble, map, reduce_marked};

/// JSON string literal of `s`.
fn json_str(s: &str) -> String {
    let mut out = String::new();
    crate::report::stats::json_string(s, &mut out);
    out
}

fn json_path(p: &Path) -> String {
    json_str(&p.display().to_string())
}

fn json_paths(ps: &[PathBuf]) -> String {
    let list: Vec<String> = ps.iter().map(|p| json_path(p)).collect();
    format!("[{}]", list.join(", "))
}

fn json_opt(v: Option<u64>) -> String {
    v.map_or("null".into(), |v| v.to_string())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// A JSON string literal at the start of `text` (after blanks): its
/// value and the text after it.
fn json_literal(text: &str) -> Option<(String, &str)> {
    let mut chars = text.trim_start().char_indices();
    let start = text.len() - text.trim_start().len();
    if chars.next()?.1 != '"' {
        return None;
    }
    let mut out = String::new();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &text[start + i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                'r' => out.push('\r'),
                't' => out.push('\t'),
                'b' => out.push('\u{8}'),
                'f' => out.push('\u{c}'),
                'u' => {
                    let code: String = (0..4).filter_map(|_| chars.next().map(|c| c.1)).collect();
                    out.push(char::from_u32(u32::from_str_radix(&code, 16).ok()?)?);
                }
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
    None
}

/// The strings of the JSON field `field` of `text` (the output of a stage
/// subcommand): a list of strings, or one string.
fn json_strings(text: &str, field: &str) -> Option<Vec<String>> {
    let key = format!("\"{field}\"");
    let at = text.find(&key)? + key.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let Some(mut rest) = rest.strip_prefix('[') else {
        return json_literal(rest).map(|(s, _)| vec![s]);
    };
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix(']') {
            let _ = r;
            return Some(out);
        }
        let (s, after) = json_literal(rest)?;
        out.push(s);
        rest = after.trim_start();
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// The number in the JSON field `field` of `text`.
fn json_number(text: &str, field: &str) -> Option<u64> {
    let key = format!("\"{field}\"");
    let at = text.find(&key)? + key.len();
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    rest[..digits].parse().ok()
}

/// The file `path` as text, for one of its JSON fields.
fn read_json(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))
}

/// The strings of field `field` in the JSON file `path`, which `command`
/// printed.
fn json_field(path: &Path, text: &str, field: &str, command: &str) -> Result<Vec<String>> {
    json_strings(text, field).ok_or_else(|| {
        Error::input(
            path.display(),
            format!("no \"{field}\" (the JSON 'alnsort {command}' prints)"),
        )
    })
}

/// The one path in field `field` of the JSON file `path`, which
/// `command` printed.
fn json_one_path(path: &Path, text: &str, field: &str, command: &str) -> Result<PathBuf> {
    match json_field(path, text, field, command)?.as_slice() {
        [one] => Ok(PathBuf::from(one)),
        _ => Err(Error::input(
            path.display(),
            format!("\"{field}\" is not one file name (the JSON 'alnsort {command}' prints)"),
        )),
    }
}

/// The hex strings of the JSON list under `"field"` in `file` (the output
/// of `alnsort sample` or `alnsort splitters`).
fn hex_list(text: &str, field: &str, file: &Path) -> Result<Vec<Vec<u8>>> {
    json_field(file, text, field, field)?
        .iter()
        .map(|s| unhex(s).ok_or_else(|| Error::input(file.display(), format!("'{s}' is not hex"))))
        .collect()
}

fn need<'a, T>(v: &'a Option<T>, command: &str, name: &str) -> Result<&'a T> {
    v.as_ref()
        .ok_or_else(|| Error::Refused(format!("alnsort {command} needs --{name}")))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))
}

/// Runs one stage subcommand with its arguments; returns the JSON it
/// prints.
pub fn run_stage_command(command: &str, a: &StageArgs) -> Result<String> {
    match command {
        "split" => {
            // Split reads no sort option, but checks them as every stage
            // does (one stage's refusal is every stage's).
            if !a.sort_options.is_empty() {
                a.sort_options()?;
            }
            let splits = split(&a.positional, a.parts.unwrap_or(1), a.threads.unwrap_or(1))?;
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
            let s = need(&a.split, command, "split")?;
            let got = sample(&a.positional, s, a.count.unwrap_or(100), &a.sort_options()?)?;
            let list: Vec<String> = got.iter().map(|k| json_str(&hex(k))).collect();
            Ok(format!("{{\"samples\": [{}]}}", list.join(", ")))
        }
        "reach" => {
            let s = need(&a.split, command, "split")?;
            let got = reach(&a.positional, s, a.threads.unwrap_or(1))?;
            Ok(format!("{{\"reach\": {}}}", json_opt(got)))
        }
        "splitters" => {
            let mut samples = Vec::new();
            for f in a.samples.iter().chain(&a.positional) {
                samples.extend(hex_list(&read_json(f)?, "samples", f)?);
            }
            let cuts = splitters(&samples, a.partitions.unwrap_or(1))?;
            let list: Vec<String> = cuts.iter().map(|k| json_str(&hex(k))).collect();
            Ok(format!("{{\"splitters\": [{}]}}", list.join(", ")))
        }
        "map" => {
            let s = need(&a.split, command, "split")?;
            let cuts = match &a.splitters {
                Some(f) => hex_list(&read_json(f)?, "splitters", f)?,
                None => Vec::new(),
            };
            let dir = need(&a.out_dir, command, "out-dir")?;
            // With --end-buckets or --name-buckets (and --markdup) the map
            // also writes its split's duplicate-marking share, as
            // markdup-collect does: its JSON then serves as --collected.
            let collect = (a.end_buckets.is_some() || a.name_buckets.is_some())
                .then(|| (a.end_buckets.unwrap_or(1), a.name_buckets.unwrap_or(1)));
            let (out, share) = match collect {
                Some((ends_n, names_n)) => {
                    let (out, share) = crate::stages::sort::map_collecting_after(
                        &a.positional,
                        s,
                        &cuts,
                        &a.sort_options()?,
                        a.prior,
                        (ends_n, names_n),
                        // One map per process: nothing to recycle.
                        &crate::stages::sort::BlockBuffers::new(),
                    )?;
                    (out, Some(share))
                }
                None => (
                    map(
                        &a.positional,
                        s,
                        &cuts,
                        &a.sort_options()?,
                        a.prior,
                        &crate::stages::sort::BlockBuffers::new(),
                    )?,
                    None,
                ),
            };
            let debris = Debris::default();
            let mut files = Vec::new();
            for (r, block) in out.blocks.iter().enumerate() {
                let path = dir.join(format!("split-{}.range-{r}.alnblk", s.ordinal));
                write_atomic(&path, block, &debris)?;
                files.push(path);
            }
            let shared = match &share {
                Some(share) => format!(
                    ", \"split\": {}, \"input\": {}, \"start\": {}, {}",
                    s.ordinal,
                    s.input,
                    s.start,
                    write_share(dir, s, share)?
                ),
                None => String::new(),
            };
            Ok(format!(
                "{{\"blocks\": {}, \"records\": {}, \"end\": {}, \"reach\": {}{shared}}}",
                json_paths(&files),
                out.records,
                json_opt(out.end),
                json_opt(out.reach)
            ))
        }
        "reduce" => reduce_command(a),
        "assemble" => {
            let output = need(&a.output, command, "output")?;
            let done = assemble(
                &a.positional,
                &a.part_files,
                output,
                &a.sort_options()?,
                a.write_index,
                a.sharded,
                None,
            )?;
            Ok(format!(
                "{{\"bytes\": {}, \"index\": {}, \"files\": {}}}",
                done.bytes,
                done.index.as_deref().map_or("null".into(), json_path),
                json_paths(&done.files)
            ))
        }
        "markdup-collect" => markdup_collect(a),
        "markdup-join" => markdup_join(a),
        "markdup-decide" => markdup_decide(a),
        "markdup-finish" => markdup_finish(a),
        "markdup-assemble" => markdup_assemble(a),
        other => bail!(Refused, "unknown stage '{other}'"),
    }
}

fn reduce_command(a: &StageArgs) -> Result<String> {
    let command = "reduce";
    let blocks = a
        .blocks
        .iter()
        .map(|f| read(f))
        .collect::<Result<Vec<_>>>()?;
    let part = need(&a.part_files.last().cloned(), command, "part")?.clone();
    let range = *need(&a.range, command, "range")?;
    let options = a.sort_options()?;
    let range_slices = if a.finished.is_empty() {
        None
    } else {
        if a.marks.is_some() {
            bail!(
                Refused,
                "--marks (the whole decision) and --finished (this range's slices) are two ways to give the \
                 duplicate decision: give one"
            );
        }
        // This range's slice of every split, from each finish's "slices".
        let mut bytes = Vec::with_capacity(a.finished.len());
        for f in &a.finished {
            let list = json_field(f, &read_json(f)?, "slices", "markdup-finish")?;
            let Some(p) = list.get(range) else {
                bail!(
                    Refused,
                    "{}: {} slices, none for range {range} (finish every split with --partitions as many as \
                     the ranges)",
                    f.display(),
                    list.len()
                );
            };
            bytes.push(read(Path::new(p))?);
        }
        Some(bytes)
    };
    let marks = match &a.marks {
        None if !a.records.is_empty() => bail!(Refused, "--records goes with --marks"),
        None => match &range_slices {
            Some(b) => {
                let b: Vec<&[u8]> = b.iter().map(Vec::as_slice).collect();
                Some(smd::Marks::sliced(&b, &options)?)
            }
            None => None,
        },
        Some(f) => {
            let bytes = read(f)?;
            let d = crate::markdup::decisions::Decisions::from_bytes(
                &bytes,
                &smd::marks_config(&options)?,
            )
            .with_context(|| format!("--marks {}", f.display()))?;
            // Every split's records counted in split order, which is input
            // order with several inputs too: the bases are running sums,
            // checked against the decision's total.
            let split_inputs = vec![0; a.records.len()];
            let bases = smd::split_bases(&a.records, &split_inputs, &[d.records()])
                .context("--records: the maps' record counts")?;
            Some(smd::Marks::new(&bytes, bases, &options)?)
        }
    };
    let blocks: Vec<&[u8]> = blocks.iter().map(Vec::as_slice).collect();
    let r = reduce_marked(
        &a.positional,
        &blocks,
        &part,
        range,
        a.partitions.unwrap_or(1),
        &options,
        a.index,
        marks.as_ref(),
        None,
    )?;
    Ok(format!(
        "{{\"records\": {}, \"bytes\": {}, \"marked\": {}}}",
        r.records, r.bytes, r.marked
    ))
}

/// The one input of a duplicate-marking task.
/// The inputs of a duplicate-marking task (several: those the decision
/// can be cut into tasks for, `crate::stages::markdup::tasks_refusal`).
fn task_inputs<'a>(a: &'a StageArgs, command: &str) -> Result<&'a [PathBuf]> {
    if a.positional.is_empty() {
        bail!(Refused, "alnsort {command} needs its input files");
    }
    Ok(&a.positional)
}

/// The splits' collect outputs (`--collected`, in split order): each
/// one's JSON text.
fn collected(a: &StageArgs, command: &str) -> Result<Vec<(PathBuf, String)>> {
    if a.collected.is_empty() {
        bail!(
            Refused,
            "alnsort {command} needs --collected (every split's, in split order)"
        );
    }
    a.collected
        .iter()
        .map(|f| Ok((f.clone(), read_json(f)?)))
        .collect()
}

/// The paths of field `field` of each JSON output in `outputs`.
fn paths_of(
    outputs: &[(PathBuf, String)],
    field: &str,
    command: &str,
) -> Result<Vec<Vec<PathBuf>>> {
    outputs
        .iter()
        .map(|(f, text)| {
            Ok(json_field(f, text, field, command)?
                .into_iter()
                .map(PathBuf::from)
                .collect())
        })
        .collect()
}

/// The splits' boundaries, which templates continue from the split
/// before, and the template fix-ups of the join and the decision.
fn boundaries(collected: &[(PathBuf, String)]) -> Result<(Vec<Option<i64>>, dist::Fixups)> {
    let mut bounds = Vec::new();
    for (path, text) in collected {
        let f = json_one_path(path, text, "boundary", "markdup-collect")?;
        let b = dist::Boundary::from_bytes(&read(&f)?).with_context(|| f.display().to_string())?;
        bounds.push(b);
    }
    let continued = dist::continued_templates(&bounds);
    let fixups = dist::Fixups::new(&bounds, &continued);
    Ok((continued, fixups))
}

/// The `i`-th path of every output's list, or an error naming the output
/// without one.
fn nth_of(
    lists: &[Vec<PathBuf>],
    outputs: &[PathBuf],
    i: usize,
    what: &str,
) -> Result<Vec<PathBuf>> {
    lists
        .iter()
        .zip(outputs)
        .map(|(l, f)| {
            l.get(i).cloned().ok_or_else(|| {
                Error::input(
                    f.display(),
                    format!("{} {what} listed, no bucket {i}", l.len()),
                )
            })
        })
        .collect()
}

fn markdup_collect(a: &StageArgs) -> Result<String> {
    let command = "markdup-collect";
    let inputs = task_inputs(a, command)?;
    let s = need(&a.split, command, "split")?;
    let dir = need(&a.out_dir, command, "out-dir")?;
    let (ends_n, names_n) = (a.end_buckets.unwrap_or(1), a.name_buckets.unwrap_or(1));
    let share = smd::collect(inputs, s, &a.sort_options()?, ends_n, names_n)?;
    Ok(format!(
        "{{\"split\": {}, \"input\": {}, \"start\": {}, \"records\": {}, {}}}",
        s.ordinal,
        s.input,
        s.start,
        share.records,
        write_share(dir, s, &share)?
    ))
}

/// Writes split `s`'s duplicate-marking share into `dir` (the files of
/// `markdup-collect`); returns the JSON fields that name them (`ends`,
/// `halves`, `slots`, `boundary`), which the later tasks read through
/// `--collected`.
fn write_share(dir: &Path, s: &SplitSpec, share: &smd::SplitShare) -> Result<String> {
    let debris = Debris::default();
    let name = |what: String| dir.join(format!("markdup-split-{}.{what}", s.ordinal));
    let write = |path: PathBuf, bytes: &[u8]| -> Result<PathBuf> {
        write_atomic(&path, bytes, &debris)?;
        Ok(path)
    };
    let ends = (share.ends.iter().enumerate())
        .map(|(b, e)| write(name(format!("ends-{b}")), e))
        .collect::<Result<Vec<_>>>()?;
    let halves = (share.halves.iter().enumerate())
        .map(|(j, h)| write(name(format!("halves-{j}")), h))
        .collect::<Result<Vec<_>>>()?;
    let slots = write(name("slots".into()), &share.slots)?;
    let boundary = write(name("boundary".into()), &share.boundary.to_bytes())?;
    // A map's share: each record's range, for markdup-finish --partitions.
    let ranges = if share.ranges.is_empty() {
        String::new()
    } else {
        let path = write(name("ranges".into()), &share.ranges)?;
        format!(", \"ranges\": {}", json_path(&path))
    };
    Ok(format!(
        "\"ends\": {}, \"halves\": {}, \"slots\": {}, \"boundary\": {}{ranges}",
        json_paths(&ends),
        json_paths(&halves),
        json_path(&slots),
        json_path(&boundary)
    ))
}

/// How the tasks' messages name each split ([`smd::split_file`]), from
/// the collect outputs' `split`, `input` and `start` and the inputs
/// (`split S` where they do not say).
fn split_names(inputs: &[PathBuf], collected: &[(PathBuf, String)]) -> Vec<String> {
    (collected.iter().enumerate())
        .map(|(k, (_, text))| {
            let ordinal = json_number(text, "split").unwrap_or(k as u64);
            let spec = SplitSpec {
                input: json_number(text, "input").unwrap_or(0) as usize,
                start: json_number(text, "start").unwrap_or(0),
                end: None,
                ordinal: ordinal as u32,
            };
            match json_number(text, "start") {
                Some(_) => {
                    smd::split_file(inputs, &spec).unwrap_or_else(|_| format!("split {ordinal}"))
                }
                None => format!("split {ordinal}"),
            }
        })
        .collect()
}

fn markdup_join(a: &StageArgs) -> Result<String> {
    let command = "markdup-join";
    let collected = collected(a, command)?;
    let bucket = *need(&a.bucket, command, "bucket")?;
    let dir = need(&a.out_dir, command, "out-dir")?;
    let (_, fixups) = boundaries(&collected)?;
    let files: Vec<PathBuf> = collected.iter().map(|c| c.0.clone()).collect();
    let halves = nth_of(
        &paths_of(&collected, "halves", "markdup-collect")?,
        &files,
        bucket,
        "name buckets",
    )?;
    let end_buckets = paths_of(&collected, "ends", "markdup-collect")?[0].len();
    let out: Vec<PathBuf> = (0..end_buckets)
        .map(|b| dir.join(format!("markdup-join-{bucket}.ends-{b}")))
        .collect();
    let options = a.sort_options()?;
    // The inputs name the splits in a refusal: those given, else the sort
    // options' (every stage of one sort takes the same).
    let inputs: Vec<PathBuf> = if a.positional.is_empty() {
        options.inputs.iter().map(PathBuf::from).collect()
    } else {
        a.positional.clone()
    };
    let names = split_names(&inputs, &collected);
    let got = smd::join_files(&halves, &fixups, &options, &out, &names)?;
    Ok(format!(
        "{{\"bucket\": {bucket}, \"ends\": {}, \"pairs\": {}, \"runs\": {}}}",
        json_paths(&out),
        got.pairs,
        got.runs
    ))
}

fn markdup_decide(a: &StageArgs) -> Result<String> {
    let command = "markdup-decide";
    let inputs = task_inputs(a, command)?;
    let collected = collected(a, command)?;
    let bucket = *need(&a.bucket, command, "bucket")?;
    let dir = need(&a.out_dir, command, "out-dir")?;
    let (_, fixups) = boundaries(&collected)?;
    let files: Vec<PathBuf> = collected.iter().map(|c| c.0.clone()).collect();
    let mut ends = nth_of(
        &paths_of(&collected, "ends", "markdup-collect")?,
        &files,
        bucket,
        "end buckets",
    )?;
    let joined = a
        .joined
        .iter()
        .map(|f| Ok((f.clone(), read_json(f)?)))
        .collect::<Result<Vec<_>>>()?;
    let joined_files: Vec<PathBuf> = joined.iter().map(|j| j.0.clone()).collect();
    let name_buckets = paths_of(&collected, "halves", "markdup-collect")?[0].len();
    if joined.len() != name_buckets {
        bail!(
            Refused,
            "the splits' mate halves are in {name_buckets} name buckets, but {} --joined were given \
             (every markdup-join's output)",
            joined.len()
        );
    }
    ends.extend(nth_of(
        &paths_of(&joined, "ends", "markdup-join")?,
        &joined_files,
        bucket,
        "end buckets",
    )?);
    let (d, runs) = smd::decide_bucket_files(inputs, &ends, &fixups, &a.sort_options()?)?;
    let splits = collected.len();
    let (dups, optical) = d.by_split(splits).map_err(Error::from)?;
    let debris = Debris::default();
    let write = |path: PathBuf, bytes: &[u8]| -> Result<PathBuf> {
        write_atomic(&path, bytes, &debris)?;
        Ok(path)
    };
    let name = |what: String| dir.join(format!("markdup-decide-{bucket}.{what}"));
    let dup_files = (dups.iter().enumerate())
        .map(|(s, l)| write(name(format!("split-{s}.dup")), l))
        .collect::<Result<Vec<_>>>()?;
    let opt_files = (optical.iter().enumerate())
        .map(|(s, l)| write(name(format!("split-{s}.opt")), l))
        .collect::<Result<Vec<_>>>()?;
    let counts = write(name("counts".into()), &d.counts_to_bytes())?;
    Ok(format!(
        "{{\"bucket\": {bucket}, \"duplicates\": {}, \"optical\": {}, \"counts\": {}, \"runs\": {runs}}}",
        json_paths(&dup_files),
        json_paths(&opt_files),
        json_path(&counts)
    ))
}

/// The outcome file a finish's JSON output names.
fn outcome_of(f: &Path) -> Result<(PathBuf, dist::SplitOutcome, smd::WalkCarry)> {
    let text = read_json(f)?;
    let path = json_one_path(f, &text, "outcome", "markdup-finish")?;
    let (o, carry_in) = dist::SplitOutcome::from_bytes(&read(&path)?)
        .with_context(|| path.display().to_string())?;
    Ok((path, o, carry_in))
}

fn markdup_finish(a: &StageArgs) -> Result<String> {
    let command = "markdup-finish";
    let collected = collected(a, command)?;
    let s = *need(&a.ordinal, command, "ordinal")?;
    let dir = need(&a.out_dir, command, "out-dir")?;
    if s >= collected.len() {
        bail!(
            Refused,
            "--ordinal {s}: not one of the {} splits --collected names",
            collected.len()
        );
    }
    let (continued, _) = boundaries(&collected)?;
    let end_buckets = paths_of(&collected, "ends", "markdup-collect")?[0].len();
    if a.decided.len() != end_buckets {
        bail!(
            Refused,
            "the splits' read ends are in {end_buckets} end buckets, but {} --decided were given \
             (every markdup-decide's output)",
            a.decided.len()
        );
    }
    let slots_file = json_one_path(&collected[s].0, &collected[s].1, "slots", "markdup-collect")?;
    let slots = read(&slots_file)?;
    let (mut dups, mut optical) = (Vec::new(), Vec::new());
    for f in &a.decided {
        let text = read_json(f)?;
        let pick = |field: &str| -> Result<PathBuf> {
            let list = json_field(f, &text, field, "markdup-decide")?;
            list.get(s).map(PathBuf::from).ok_or_else(|| {
                Error::input(f.display(), format!("no \"{field}\" list of split {s}"))
            })
        };
        dups.push(read(&pick("duplicates")?)?);
        optical.push(read(&pick("optical")?)?);
    }
    // The split's input (several inputs: each input's walk starts afresh);
    // 0 from a collect output that does not say.
    let input = json_number(&collected[s].1, "input").unwrap_or(0);
    let carry = match &a.after {
        None => smd::WalkCarry::default(),
        Some(f) => {
            if json_number(&read_json(f)?, "input").unwrap_or(0) != input {
                bail!(
                    Refused,
                    "--after {}: a split of another input than split {s}'s; each input's walk starts \
                     afresh (finish split {s} without --after)",
                    f.display()
                );
            }
            outcome_of(f)?.1.carry
        }
    };
    let dups: Vec<&[u8]> = dups.iter().map(Vec::as_slice).collect();
    let optical: Vec<&[u8]> = optical.iter().map(Vec::as_slice).collect();
    let o = smd::finish_split(&slots, continued[s].is_some(), &dups, Some(&optical), carry)?;
    let path = dir.join(format!("markdup-finish-{s}.outcome"));
    write_atomic(&path, &o.to_bytes(carry), &Debris::default())?;
    // With --partitions: the outcome cut into one slice per reduce, by the
    // range each record went to (the map's "ranges").
    let mut slices = Vec::new();
    if let Some(partitions) = a.partitions {
        let (file, text) = &collected[s];
        let Some(ranges) = json_strings(text, "ranges") else {
            bail!(
                Refused,
                "--partitions {partitions}: {} names no \"ranges\" (each record's range of the output, which a map \
                 writes: give the JSON of 'alnsort map --end-buckets ...' as --collected, not markdup-collect's)",
                file.display()
            );
        };
        let [ranges] = ranges.as_slice() else {
            return Err(Error::input(
                file.display(),
                "\"ranges\" is not one file name (the JSON 'alnsort map' prints)",
            ));
        };
        let cut = smd::range_slices(&o, &read(Path::new(ranges))?, partitions)
            .with_context(|| format!("{ranges}: the ranges of split {s}"))?;
        for (r, bytes) in cut.iter().enumerate() {
            let p = dir.join(format!("markdup-finish-{s}.slice-{r}"));
            write_atomic(&p, bytes, &Debris::default())?;
            slices.push(p);
        }
    }
    let next = (o.carry != smd::WalkCarry::default()).then(|| {
        json_str(&format!(
            "{}:{}:{}:{}",
            o.carry.stale,
            o.carry.dup_template as u8,
            o.carry.optical_stale,
            o.carry.optical_dup_template as u8
        ))
    });
    Ok(format!(
        "{{\"ordinal\": {s}, \"input\": {input}, \"splits\": {}, \"end_buckets\": {end_buckets}, \"outcome\": {}, \"slices\": {}, \"records\": {}, \"repeated\": {}, \"carry\": {}}}",
        collected.len(),
        json_path(&path),
        json_paths(&slices),
        o.duplicate.len(),
        o.repeated,
        next.unwrap_or_else(|| "null".into())
    ))
}

fn markdup_assemble(a: &StageArgs) -> Result<String> {
    let command = "markdup-assemble";
    let inputs = task_inputs(a, command)?;
    if a.finished.is_empty() {
        bail!(
            Refused,
            "alnsort {command} needs --finished (every split's, in split order)"
        );
    }
    let first = read_json(&a.finished[0])?;
    let (Some(splits), Some(end_buckets)) = (
        json_number(&first, "splits"),
        json_number(&first, "end_buckets"),
    ) else {
        return Err(Error::input(
            a.finished[0].display(),
            "no \"splits\" and \"end_buckets\" (the JSON 'alnsort markdup-finish' prints)",
        ));
    };
    if a.finished.len() as u64 != splits || a.decided.len() as u64 != end_buckets {
        bail!(
            Refused,
            "{splits} splits and {end_buckets} end buckets, but {} --finished and {} --decided \
             were given (every split's markdup-finish output, in split order, and every \
             markdup-decide's)",
            a.finished.len(),
            a.decided.len()
        );
    }
    let mut outcomes = Vec::new();
    let mut split_inputs = Vec::new();
    let mut before = smd::WalkCarry::default();
    for (s, f) in a.finished.iter().enumerate() {
        let (path, o, carry_in) = outcome_of(f)?;
        // Several inputs: each input's walk starts afresh.
        let input = json_number(&read_json(f)?, "input").unwrap_or(0) as usize;
        if split_inputs.last().is_some_and(|&last| last != input) {
            before = smd::WalkCarry::default();
        }
        split_inputs.push(input);
        if carry_in != before {
            bail!(
                Refused,
                "{}: split {s} was finished from another place than split {} ended at: run \
                 'alnsort markdup-finish --ordinal {s} --after' with split {}'s output again",
                path.display(),
                s.saturating_sub(1),
                s.saturating_sub(1)
            );
        }
        before = o.carry;
        outcomes.push(o);
    }
    let mut totals = dist::SetsDecided::default();
    for f in &a.decided {
        let text = read_json(f)?;
        let path = json_one_path(f, &text, "counts", "markdup-decide")?;
        let counts = dist::SetsDecided::counts_from_bytes(&read(&path)?)
            .with_context(|| path.display().to_string())?;
        totals.add_counts(counts);
    }
    if inputs.len() > 1 {
        let walked: Vec<_> = (outcomes.iter().zip(&split_inputs))
            .map(|(o, &i)| (i, &o.counts, o.repeated))
            .collect();
        if let Some(why) = smd::walk_refusal(inputs, &walked)? {
            bail!(
                Refused,
                "the decision of these inputs cut into tasks is not Picard's: {why}; decide them with one \
                 task (alnsort.ray with --decision-buckets 0) or on one node (alnsort sort --markdup)"
            );
        }
    }
    let options = a.sort_options()?;
    let records: u64 = outcomes.iter().map(|o| o.duplicate.len()).sum();
    // With --decisions the whole decision for 'reduce --marks'; without,
    // the reduces take their ranges' slices (--finished) and only the
    // metrics are made.
    let report = match &a.decisions {
        Some(out) => {
            let d = smd::assemble(inputs, &options, outcomes, totals)?;
            write_atomic(out, &d.decisions, &Debris::default())?;
            d.metrics
        }
        None => {
            let counts: Vec<_> = outcomes.iter().map(|o| &o.counts).collect();
            smd::assemble_metrics(inputs, &options, &counts, totals)?
        }
    };
    let metrics = match &options.markdup.metrics {
        None => None,
        Some(m) => {
            let given: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
            let output = a.output.as_deref().filter(|o| *o != Path::new("-"));
            smd::write_metrics(&report, m, &given, output, &options.command_line)?;
            Some(m.clone())
        }
    };
    Ok(format!(
        "{{\"decisions\": {}, \"records\": {records}, \"metrics\": {}}}",
        a.decisions.as_deref().map_or("null".into(), json_path),
        metrics.as_deref().map_or("null".into(), json_path)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_and_hex_round_trip() {
        let k = vec![0u8, 255, 17];
        assert_eq!(unhex(&hex(&k)).unwrap(), k);
        let text = format!("{{\"samples\": [\"{}\", \"ab\"]}}", hex(&k));
        let got = hex_list(&text, "samples", Path::new("x")).unwrap();
        assert_eq!(got, vec![k, vec![0xab]]);
        assert!(hex_list(&text, "splitters", Path::new("x")).is_err());
        let odd = "a \"q\" \\ b\n,]";
        let text = format!(
            "{{\"ends\": [{}, {}], \"slots\": {}, \"n\": 3}}",
            json_str(odd),
            json_str("p"),
            json_str("s,1")
        );
        assert_eq!(
            json_strings(&text, "ends").unwrap(),
            vec![odd.to_string(), "p".to_string()]
        );
        assert_eq!(
            json_strings(&text, "slots").unwrap(),
            vec!["s,1".to_string()]
        );
        assert_eq!(
            json_strings("{\"ends\": []}", "ends").unwrap(),
            Vec::<String>::new()
        );
        assert!(json_strings(&text, "halves").is_none());
        assert_eq!(json_number(&text, "n"), Some(3));
        assert_eq!(json_number(&text, "ends"), None);
    }
}
