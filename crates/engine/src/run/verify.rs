//! `alnsort verify`: whether a SAM/BAM/CRAM file is sorted in the order its `@HD` claims (SO, with SS's sub-sort) or in the order the sort's order options name, read once with the sort's own keys.
//!
//! The records are decoded on the pool as `alnsort sort` reads them
//! (`input::spawn_batches`), each batch's job keys its records with
//! `alnsort_bam::keys::KeyEncoder` (the sort's one encoding, so "sorted"
//! means exactly what `alnsort sort` would keep in place: keys never
//! decrease, equal keys in any order) and finds the first record whose
//! key is below its predecessor's; the reading thread joins the batches at
//! their edges. Nothing is sorted or written.

use crate::error::{Error, Result};
use crate::io::input;
use crate::options::sort::OrderFlag;
use crate::options::verify::VerifyArgs;
use alnsort_bam::header::Header;
use alnsort_bam::keys::{KeyEncoder, SortOrder, TagSecondary};
use alnsort_bam::reader::{RawBatch, ScanOptions, UnknownReference};
use alnsort_bam::RecordRef;
use std::sync::Arc;

/// The order checked, and where it came from.
#[derive(Debug, Clone)]
pub struct Checked {
    pub order: SortOrder,
    /// How the order is named in the messages.
    pub text: String,
}

/// The order given by the options (`None`: none given).
fn order_of_options(a: &VerifyArgs) -> Option<Checked> {
    let name_natural = !a.lexicographic;
    if let Some(tag) = &a.tag {
        let (secondary, then) = match a.order {
            Some(OrderFlag::Name) => (
                TagSecondary::Name {
                    natural: name_natural,
                },
                if name_natural { "-n" } else { "-N" },
            ),
            _ => (TagSecondary::Coordinate, "coordinate"),
        };
        return Some(Checked {
            order: SortOrder::Tag {
                tag: tag.as_bytes().to_vec(),
                secondary,
            },
            text: format!("-t {tag} then {then} order, as given"),
        });
    }
    Some(match a.order? {
        OrderFlag::Coordinate => Checked {
            order: SortOrder::Coordinate,
            text: "coordinate order, as given".into(),
        },
        OrderFlag::Name => Checked {
            order: SortOrder::Name {
                natural: name_natural,
            },
            text: format!(
                "queryname order ({}), as given",
                if name_natural { "-n" } else { "-N" }
            ),
        },
        OrderFlag::TemplateCoordinate => Checked {
            order: SortOrder::TemplateCoordinate,
            text: "template-coordinate order, as given".into(),
        },
        OrderFlag::Minimiser => return None,
    })
}

/// The `@HD` tag `key` of `header`.
fn hd_tag(header: &Header, key: &[u8; 2]) -> Option<String> {
    let hd = header.lines().iter().find(|l| l.starts_with(b"@HD"))?;
    hd.split(|&b| b == b'\t')
        .skip(1)
        .find(|f| f.len() >= 3 && &f[..2] == key && f[2] == b':')
        .map(|f| String::from_utf8_lossy(&f[3..]).into_owned())
}

/// The order `header` claims, as samtools sort writes it (`SO`, `SS`); an
/// error naming what is claimed when it names no order alnsort can check.
pub fn claimed_order(header: &Header) -> std::result::Result<Checked, String> {
    let so = hd_tag(header, b"SO");
    let ss = hd_tag(header, b"SS");
    let claim = match (&so, &ss) {
        (Some(so), Some(ss)) => format!("@HD SO:{so} SS:{ss}"),
        (Some(so), None) => format!("@HD SO:{so}"),
        (None, _) => "no @HD SO".to_string(),
    };
    let checked = |order, what: &str| Checked {
        order,
        text: format!("{what} order, as its {claim} claims"),
    };
    let name = |natural| SortOrder::Name { natural };
    let order = match (so.as_deref(), ss.as_deref()) {
        (Some("coordinate"), None | Some("coordinate")) => {
            checked(SortOrder::Coordinate, "coordinate")
        }
        (Some("queryname"), Some("queryname:natural")) => checked(name(true), "queryname (-n)"),
        (Some("queryname"), Some("queryname:lexicographical")) => {
            checked(name(false), "queryname (-N)")
        }
        (Some("queryname"), None) => {
            return Err(format!(
                "its {claim} does not say which name order (samtools sort writes SS:queryname:natural \
                 for -n and SS:queryname:lexicographical for -N; Picard's queryname order is another): \
                 give -n or -N"
            ))
        }
        (Some("unsorted"), Some("unsorted:template-coordinate")) => {
            checked(SortOrder::TemplateCoordinate, "template-coordinate")
        }
        (Some("unsorted"), Some(ss)) if ss.starts_with("unsorted:") => {
            // samtools sort -t TAG: unsorted:TAG:coordinate or
            // unsorted:TAG:queryname:natural|lexicographical.
            let rest = &ss["unsorted:".len()..];
            let (tag, tail) = rest.split_once(':').unwrap_or((rest, ""));
            let secondary = match tail {
                "coordinate" => TagSecondary::Coordinate,
                "queryname:natural" => TagSecondary::Name { natural: true },
                "queryname:lexicographical" => TagSecondary::Name { natural: false },
                _ => return Err(format!("its {claim} names no order alnsort can check")),
            };
            checked(
                SortOrder::Tag {
                    tag: tag.as_bytes().to_vec(),
                    secondary,
                },
                &format!("-t {tag} then {tail}"),
            )
        }
        (Some("coordinate"), Some(ss)) => {
            return Err(format!(
                "its {claim}: the sub-sort {ss} cannot be checked (minimiser order depends on \
                 the -K, -w, -I, -R and -H it was made with); give --coordinate to check the \
                 placed records' coordinates alone"
            ))
        }
        _ => {
            return Err(format!(
                "it claims no order ({claim}): give the order to check (--coordinate, -n, -N, \
                 -t TAG, --template-coordinate)"
            ))
        }
    };
    Ok(order)
}

/// Where a record is: its number (1-based), name and place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPlace {
    pub record: u64,
    pub name: String,
    pub ref_id: i32,
    pub pos: i32,
}

/// A file's first record out of order, after the record before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsorted {
    pub record: RecordPlace,
    pub previous: RecordPlace,
}

/// What checking one file found.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub file: String,
    pub records: u64,
    pub checked: Checked,
    pub unsorted: Option<Unsorted>,
    /// The header, to name references in messages.
    pub header: Arc<Header>,
}

impl Verdict {
    fn place(&self, p: &RecordPlace) -> String {
        let at = match usize::try_from(p.ref_id)
            .ok()
            .and_then(|t| self.header.refs().get(t))
        {
            Some(r) => format!(
                "{}:{}",
                String::from_utf8_lossy(&r.name),
                i64::from(p.pos) + 1
            ),
            None => "unplaced".to_string(),
        };
        format!("record {} (read {}, {at})", p.record, p.name)
    }

    /// The one line printed for the file.
    pub fn line(&self) -> String {
        match &self.unsorted {
            None => format!(
                "{}: sorted ({}): {} records",
                self.file, self.checked.text, self.records
            ),
            Some(u) => format!(
                "{}: not sorted ({}): {} comes after {}",
                self.file,
                self.checked.text,
                self.place(&u.record),
                self.place(&u.previous)
            ),
        }
    }
}

/// One batch's keys at its edges and its first record out of order.
struct BatchCheck {
    n: u64,
    first: Option<(Vec<u8>, RecordPlace)>,
    last: Option<(Vec<u8>, RecordPlace)>,
    /// (record, previous), numbered within the batch from 0.
    unsorted: Option<(RecordPlace, RecordPlace)>,
}

fn place_of(rec: &[u8], record: u64) -> RecordPlace {
    let r = RecordRef::with_block_size(rec);
    let name = r.read_name();
    RecordPlace {
        record,
        name: String::from_utf8_lossy(name.strip_suffix(b"\0").unwrap_or(name)).into_owned(),
        ref_id: r.ref_id(),
        pos: r.pos(),
    }
}

fn check_batch(decoder: &alnsort_bam::reader::Decoder, raw: &RawBatch) -> Result<BatchCheck> {
    let mut c = BatchCheck {
        n: 0,
        first: None,
        last: None,
        unsorted: None,
    };
    let mut prev_key: Vec<u8> = Vec::with_capacity(64);
    let mut prev_rec: Vec<u8> = Vec::new();
    decoder.decode(
        raw,
        |key, rec| {
            let i = c.n;
            if i == 0 {
                c.first = Some((key.to_vec(), place_of(rec, 0)));
            } else if c.unsorted.is_none() && key < prev_key.as_slice() {
                c.unsorted = Some((place_of(rec, i), place_of(&prev_rec, i - 1)));
            }
            prev_key.clear();
            prev_key.extend_from_slice(key);
            prev_rec.clear();
            prev_rec.extend_from_slice(rec);
            c.n += 1;
            Ok(())
        },
        |_| {},
    )?;
    if c.n > 0 {
        c.last = Some((prev_key, place_of(&prev_rec, c.n - 1)));
    }
    Ok(c)
}

/// Checks one file, reading it once on `pool`.
pub fn verify_file(
    path: &str,
    a: &VerifyArgs,
    pool: &Arc<rayon::ThreadPool>,
    refs: &alnsort_cram::RefSource,
) -> Result<Verdict> {
    let inp = input::open_with_refs(path, Arc::clone(pool), refs)?;
    let header = Arc::new(inp.header.clone());
    let checked = match order_of_options(a) {
        Some(c) => c,
        None => claimed_order(&header).map_err(|why| {
            Error::Refused(format!(
                "{}: cannot tell which order to check: {why}",
                inp.name
            ))
        })?,
    };
    let encoder = Arc::new(
        KeyEncoder::new(checked.order.clone(), header.n_ref(), &header.library_map())
            .with_wide_positions(crate::io::output::has_long_reference(&header)),
    );
    let (file, _, records) = inp.into_records(ScanOptions::default());
    let decoder = alnsort_bam::reader::Decoder {
        file: Arc::clone(&file),
        lookup: Arc::new(header.ref_lookup()),
        header: Arc::clone(&header),
        encoder,
        record_limit: usize::MAX,
        unknown_reference: UnknownReference::Error,
    };
    let depth = 2 * pool.current_num_threads().max(1) + 2;
    let (mut batches, _) =
        input::spawn_batches(&file, records, pool, "verify-read", depth, move |raw| {
            check_batch(&decoder, raw)
        })?;
    let mut seen = 0u64;
    let mut last: Option<(Vec<u8>, RecordPlace)> = None;
    let mut unsorted = None;
    let renumber = |p: RecordPlace, base: u64| RecordPlace {
        record: p.record + base + 1,
        ..p
    };
    while let Some(got) = input::next_batch(&mut batches, &file, seen + 1, |_| &[]) {
        let c = got?;
        if let (Some((lk, lp)), Some((fk, fp))) = (&last, &c.first) {
            if fk < lk {
                unsorted = Some(Unsorted {
                    record: renumber(fp.clone(), seen),
                    previous: lp.clone(),
                });
                break;
            }
        }
        if let Some((rec, prev)) = c.unsorted {
            unsorted = Some(Unsorted {
                record: renumber(rec, seen),
                previous: renumber(prev, seen),
            });
            break;
        }
        if let Some((k, p)) = c.last {
            last = Some((k, renumber(p, seen)));
        }
        seen += c.n;
    }
    Ok(Verdict {
        file: file.to_string(),
        records: seen,
        checked,
        unsorted,
        header,
    })
}

/// Checks every input of `a` in turn, stopping at the first that cannot
/// be read; the verdicts in input order.
pub fn run_verify(a: &VerifyArgs) -> Result<Vec<Verdict>> {
    let pool = crate::run::resources::worker_pool(a.threads, "alnsort-worker")?;
    let refs = alnsort_cram::RefSource::from_env(a.reference.clone());
    a.inputs
        .iter()
        .map(|p| verify_file(p, a, &pool, &refs))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::verify::parse_verify;
    use crate::options::verify::verify_help;
    use crate::options::verify::ParsedVerify;
    use std::ffi::OsString;

    fn header(hd: &str) -> Header {
        alnsort_bam::header::parse_sam_header([hd.as_bytes(), b"@SQ\tSN:c\tLN:10".as_slice()])
            .expect("header")
    }

    #[test]
    fn the_claimed_order_is_read_as_samtools_writes_it() {
        let order = |hd: &str| claimed_order(&header(hd)).map(|c| c.order);
        assert_eq!(
            order("@HD\tVN:1.6\tSO:coordinate"),
            Ok(SortOrder::Coordinate)
        );
        assert_eq!(
            order("@HD\tVN:1.6\tSO:queryname\tSS:queryname:natural"),
            Ok(SortOrder::Name { natural: true })
        );
        assert_eq!(
            order("@HD\tVN:1.6\tSO:queryname\tSS:queryname:lexicographical"),
            Ok(SortOrder::Name { natural: false })
        );
        assert_eq!(
            order("@HD\tVN:1.6\tSO:unsorted\tGO:query\tSS:unsorted:template-coordinate"),
            Ok(SortOrder::TemplateCoordinate)
        );
        assert_eq!(
            order("@HD\tVN:1.6\tSO:unsorted\tSS:unsorted:RG:queryname:natural"),
            Ok(SortOrder::Tag {
                tag: b"RG".to_vec(),
                secondary: TagSecondary::Name { natural: true }
            })
        );
        for refused in [
            "@HD\tVN:1.6\tSO:unsorted",
            "@HD\tVN:1.6",
            "@HD\tVN:1.6\tSO:queryname",
            "@HD\tVN:1.6\tSO:coordinate\tSS:coordinate:minhash",
        ] {
            assert!(order(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn options_name_their_order_and_the_last_flag_wins() {
        let parsed = |args: &[&str]| match parse_verify(args.iter().map(OsString::from).collect()) {
            Ok(ParsedVerify::Run(a)) => a,
            other => panic!("{other:?}"),
        };
        let a = parsed(&["-n", "--coordinate", "x.bam"]);
        assert_eq!(
            order_of_options(&a).map(|c| c.order),
            Some(SortOrder::Coordinate)
        );
        let a = parsed(&["-N", "-t", "RG", "x.bam"]);
        assert_eq!(
            order_of_options(&a).map(|c| c.order),
            Some(SortOrder::Tag {
                tag: b"RG".to_vec(),
                secondary: TagSecondary::Name { natural: false }
            })
        );
        assert!(order_of_options(&parsed(&["x.bam"])).is_none());
        assert!(matches!(
            parse_verify(vec!["--help".into()]),
            Ok(ParsedVerify::Usage)
        ));
        assert!(parse_verify(vec!["-x".into(), "a".into()]).is_err());
        assert!(verify_help().contains("--template-coordinate"));
    }
}
