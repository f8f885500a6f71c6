//! The manifest of `--resume DIR`: what the kept runs were made from (version, options, input), how far into the input they reach, and the runs with their checksums; a line-based text file checked whole by its last line.
//!
//! ```text
//! alnsort-resume 1
//! version<TAB>0.1.0
//! option<TAB>NAME<TAB>VALUE          (the options that decide the output)
//! input<TAB>FIELD<TAB>VALUE          (path, size, mtime, head, tail)
//! records<TAB>N                      (input records the runs hold)
//! restart<TAB>VOFFSET|-<TAB>RECORD   (where a BAM input is read again)
//! complete<TAB>0|1                   (every input record is in a run)
//! run<TAB>NAME<TAB>RECORDS<TAB>BYTES<TAB>CRC32
//! output<TAB>BLOCKS<TAB>BYTES<TAB>CRC32<TAB>HEADER-CRC32  (the kept output's durable start)
//! end<TAB>CRC32                      (of every byte before this line)
//! ```
//!
//! Values are escaped (`%`, TAB, CR and LF as `%25`, `%09`, `%0D`, `%0A`),
//! so any path fits on its line.

/// First line of a manifest: the format and its version.
pub const MAGIC: &str = "alnsort-resume 1";

/// A run kept in DIR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptRun {
    /// File name inside DIR.
    pub name: String,
    pub records: u64,
    pub bytes: u64,
    /// CRC-32 of the file's bytes.
    pub crc: u32,
}

/// Where reading starts again: the virtual offset of a BAM batch's first
/// record and that record's number (`None`: read from the start).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restart {
    pub voffset: Option<u64>,
    pub record: u64,
}

/// How much of the output is on disk in DIR (`output.partial`): its
/// first `blocks` BGZF blocks, `bytes` long with CRC-32 `crc`, fsync'd,
/// written for a header whose bytes have CRC-32 `header_crc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptOutput {
    pub blocks: u64,
    pub bytes: u64,
    pub crc: u32,
    pub header_crc: u32,
}

/// What a manifest says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub version: String,
    /// (name, value) of each option that decides the output, in order.
    pub options: Vec<(String, String)>,
    /// (field, value) of the input's fingerprint, in order.
    pub input: Vec<(String, String)>,
    /// Input records the runs hold (the first ones).
    pub records: u64,
    pub restart: Restart,
    pub complete: bool,
    pub runs: Vec<KeptRun>,
    /// The output's kept start, once the final merge has written some.
    pub output: Option<KeptOutput>,
}

/// Why a manifest's text cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("not an alnsort resume manifest (first line is not \"{MAGIC}\")")]
    Magic,
    #[error("the manifest is cut short or altered: its last line does not check out")]
    Checksum,
    #[error("line {line}: {what}")]
    Line { line: usize, what: String },
}

fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '%' => out.push_str("%25"),
            '\t' => out.push_str("%09"),
            '\r' => out.push_str("%0D"),
            '\n' => out.push_str("%0A"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(v: &str) -> String {
    v.replace("%09", "\t")
        .replace("%0D", "\r")
        .replace("%0A", "\n")
        .replace("%25", "%")
}

impl Manifest {
    /// The manifest's text, its check line included.
    pub fn to_text(&self) -> String {
        let mut t = format!("{MAGIC}\nversion\t{}\n", escape(&self.version));
        for (k, v) in &self.options {
            t += &format!("option\t{}\t{}\n", escape(k), escape(v));
        }
        for (k, v) in &self.input {
            t += &format!("input\t{}\t{}\n", escape(k), escape(v));
        }
        t += &format!("records\t{}\n", self.records);
        let voffset = self
            .restart
            .voffset
            .map_or("-".to_string(), |v| v.to_string());
        t += &format!("restart\t{voffset}\t{}\n", self.restart.record);
        t += &format!("complete\t{}\n", u8::from(self.complete));
        for r in &self.runs {
            t += &format!(
                "run\t{}\t{}\t{}\t{:08x}\n",
                escape(&r.name),
                r.records,
                r.bytes,
                r.crc
            );
        }
        if let Some(o) = &self.output {
            t += &format!(
                "output\t{}\t{}\t{:08x}\t{:08x}\n",
                o.blocks, o.bytes, o.crc, o.header_crc
            );
        }
        let crc = alnsort_sort::durable::crc32(t.as_bytes());
        t += &format!("end\t{crc:08x}\n");
        t
    }

    /// Reads a manifest's text: the check line first (a torn or edited
    /// manifest is refused whole), then each line.
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        if !text.starts_with(&format!("{MAGIC}\n")) {
            return Err(ManifestError::Magic);
        }
        let body_end = text
            .trim_end_matches('\n')
            .rfind('\n')
            .map(|i| i + 1)
            .ok_or(ManifestError::Checksum)?;
        let (body, last) = text.split_at(body_end);
        let crc = last
            .strip_prefix("end\t")
            .and_then(|c| u32::from_str_radix(c.trim_end_matches('\n'), 16).ok())
            .ok_or(ManifestError::Checksum)?;
        if !text.ends_with('\n') || crc != alnsort_sort::durable::crc32(body.as_bytes()) {
            return Err(ManifestError::Checksum);
        }
        let mut m = Manifest::default();
        for (i, line) in body.lines().enumerate().skip(1) {
            let bad = |what: &str| ManifestError::Line {
                line: i + 1,
                what: what.to_string(),
            };
            let f: Vec<&str> = line.split('\t').collect();
            let num = |s: &str| s.parse::<u64>().map_err(|_| bad("not a number"));
            match f.as_slice() {
                ["version", v] => m.version = unescape(v),
                ["option", k, v] => m.options.push((unescape(k), unescape(v))),
                ["input", k, v] => m.input.push((unescape(k), unescape(v))),
                ["records", n] => m.records = num(n)?,
                ["restart", v, r] => {
                    m.restart = Restart {
                        voffset: if *v == "-" { None } else { Some(num(v)?) },
                        record: num(r)?,
                    }
                }
                ["complete", c] => m.complete = *c == "1",
                ["run", name, records, bytes, crc] => m.runs.push(KeptRun {
                    name: unescape(name),
                    records: num(records)?,
                    bytes: num(bytes)?,
                    crc: u32::from_str_radix(crc, 16).map_err(|_| bad("bad checksum"))?,
                }),
                ["output", blocks, bytes, crc, header_crc] => {
                    let hex = |v: &str| u32::from_str_radix(v, 16).map_err(|_| bad("bad checksum"));
                    m.output = Some(KeptOutput {
                        blocks: num(blocks)?,
                        bytes: num(bytes)?,
                        crc: hex(crc)?,
                        header_crc: hex(header_crc)?,
                    })
                }
                _ => return Err(bad("unknown line")),
            }
        }
        let held: u64 = m.runs.iter().map(|r| r.records).sum();
        if held != m.records {
            return Err(ManifestError::Line {
                line: 0,
                what: format!(
                    "the runs hold {held} records but the manifest says {}",
                    m.records
                ),
            });
        }
        Ok(m)
    }

    /// What differs between the run this manifest was written by and the
    /// run now (`self` is the kept one), one phrase each; empty when they
    /// match. Standard input has no fingerprint to compare.
    pub fn differences(&self, now: &Manifest) -> Vec<String> {
        let mut out = Vec::new();
        if self.version != now.version {
            out.push(format!(
                "the alnsort version (kept runs: {}, now: {})",
                self.version, now.version
            ));
        }
        let pairs = |what: &str, kept: &[(String, String)], now: &[(String, String)]| {
            let mut d = Vec::new();
            let names: Vec<&String> =
                kept.iter()
                    .chain(now)
                    .map(|(k, _)| k)
                    .fold(Vec::new(), |mut v, k| {
                        if !v.contains(&k) {
                            v.push(k);
                        }
                        v
                    });
            for name in names {
                let get = |l: &[(String, String)]| {
                    l.iter()
                        .find(|(k, _)| k == name)
                        .map_or("(none)".to_string(), |(_, v)| v.clone())
                };
                let (a, b) = (get(kept), get(now));
                if a != b {
                    d.push(format!("{what} {name} (kept runs: {a}, now: {b})"));
                }
            }
            d
        };
        out.extend(pairs("option", &self.options, &now.options));
        out.extend(pairs("input", &self.input, &now.input));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            version: "0.1.0".into(),
            options: vec![
                ("order".into(), "Coordinate".into()),
                ("level".into(), "6".into()),
            ],
            input: vec![
                ("path".into(), "/data/a\tb%c.bam".into()),
                ("size".into(), "1234".into()),
            ],
            records: 30,
            restart: Restart {
                voffset: Some(7 << 16 | 3),
                record: 25,
            },
            complete: false,
            runs: vec![
                KeptRun {
                    name: "kept-000001.alnrun".into(),
                    records: 10,
                    bytes: 100,
                    crc: 0xdeadbeef,
                },
                KeptRun {
                    name: "kept-000002.alnrun".into(),
                    records: 20,
                    bytes: 200,
                    crc: 7,
                },
            ],
            output: Some(KeptOutput {
                blocks: 12,
                bytes: 345_678,
                crc: 0xfeed_f00d,
                header_crc: 0x0123_abcd,
            }),
        }
    }

    #[test]
    fn round_trips_with_escaped_values() {
        let m = sample();
        let text = m.to_text();
        assert_eq!(Manifest::parse(&text), Ok(m));
        let none = Manifest {
            restart: Restart::default(),
            runs: Vec::new(),
            records: 0,
            output: None,
            ..sample()
        };
        assert_eq!(Manifest::parse(&none.to_text()), Ok(none));
    }

    #[test]
    fn torn_or_edited_text_is_refused() {
        let text = sample().to_text();
        for cut in [text.len() - 1, text.len() - 12, text.len() / 2, 20] {
            assert_eq!(
                Manifest::parse(&text[..cut]),
                Err(ManifestError::Checksum),
                "cut at {cut}"
            );
        }
        let edited = text.replace("records\t30", "records\t31");
        assert_eq!(Manifest::parse(&edited), Err(ManifestError::Checksum));
        assert_eq!(Manifest::parse("hello\n"), Err(ManifestError::Magic));
    }

    #[test]
    fn run_records_must_add_up() {
        let mut m = sample();
        m.records = 29;
        assert!(matches!(
            Manifest::parse(&m.to_text()),
            Err(ManifestError::Line { .. })
        ));
    }

    #[test]
    fn differences_name_what_differs() {
        let kept = sample();
        assert!(kept.differences(&kept.clone()).is_empty());
        let mut now = sample();
        now.version = "0.2.0".into();
        now.options[1].1 = "1".into();
        now.input[1].1 = "999".into();
        now.options.push(("format".into(), "Cram".into()));
        let d = kept.differences(&now);
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(d[0].contains("version (kept runs: 0.1.0, now: 0.2.0)"));
        assert!(d[1].contains("option level (kept runs: 6, now: 1)"));
        assert!(d[2].contains("option format (kept runs: (none), now: Cram)"));
        assert!(d[3].contains("input size (kept runs: 1234, now: 999)"));
    }
}
