//! Finding each @SQ's reference sequence as htslib does, with the MD5 check.
//!
//! Order of the search for a sequence named SN with header M5:
//! 1. the FASTA given by `--reference` (by name, through its `.fai` when
//!    there is one, else read whole once);
//! 2. when the @SQ has an M5: each entry of `REF_CACHE`, then of `REF_PATH`
//!    (entries separated by `:`; `%s` is the rest of the M5, `%Ns` its next N
//!    characters, and an entry without `%s` gets `/%s` appended), each a file
//!    holding the bare sequence. URL entries (`http:`, `https:`, `ftp:`) are
//!    not fetched: alnsort does no network access, and the error says so;
//! 3. the @SQ's UR when it names a local file (`file://` or a path).
//!
//! A sequence found is upper-cased (htslib does the same) and, when the
//! @SQ has an M5, its MD5 must equal it.

use crate::error::ReferenceError;
use md5::{Digest, Md5};
use noodles_fasta as fasta;
use noodles_sam as sam;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where references are looked for.
#[derive(Debug, Clone, Default)]
pub struct RefSource {
    /// `--reference FILE` (or `-O cram,reference=FILE`).
    pub fasta: Option<PathBuf>,
    /// `REF_PATH` as found in the environment.
    pub ref_path: Option<String>,
    /// `REF_CACHE` as found in the environment.
    pub ref_cache: Option<String>,
}

impl RefSource {
    /// `fasta` and the process environment's `REF_PATH` and `REF_CACHE`.
    pub fn from_env(fasta: Option<PathBuf>) -> RefSource {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        RefSource {
            fasta,
            ref_path: var("REF_PATH"),
            ref_cache: var("REF_CACHE"),
        }
    }

    /// A noodles repository that resolves the header's references on
    /// demand (only the references that records use are looked for, as
    /// htslib does), checking each against its @SQ M5.
    pub(crate) fn repository(&self, header: &sam::Header) -> fasta::Repository {
        let mut sq = HashMap::new();
        for (name, rs) in header.reference_sequences() {
            let other = rs.other_fields();
            let get = |tag: [u8; 2]| {
                other
                    .get(&tag)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            };
            sq.insert(
                name.to_vec(),
                SqInfo {
                    m5: get(*b"M5").map(|m| m.to_ascii_lowercase()),
                    ur: get(*b"UR"),
                },
            );
        }
        fasta::Repository::new(Resolver {
            src: self.clone(),
            sq,
            fasta: Mutex::new(self.fasta.as_ref().map(|p| FastaFile::new(p.clone()))),
        })
    }
}

#[derive(Debug, Clone)]
struct SqInfo {
    m5: Option<String>,
    ur: Option<String>,
}

struct Resolver {
    src: RefSource,
    sq: HashMap<Vec<u8>, SqInfo>,
    fasta: Mutex<Option<FastaFile>>,
}

/// Lower-case hex MD5 of `seq`.
pub(crate) fn md5_hex(seq: &[u8]) -> String {
    let digest = Md5::digest(seq);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// htslib's cache path expansion: `%s` is the rest of the M5, `%Ns` its
/// next N characters; an entry with no `%s` gets `/%s` appended.
pub(crate) fn expand_path(pattern: &str, m5: &str) -> String {
    let pattern = if pattern.contains("%s") || has_width_s(pattern) {
        pattern.to_string()
    } else if pattern.is_empty() {
        "%s".to_string()
    } else {
        format!("{}/%s", pattern.trim_end_matches('/'))
    };
    let mut out = String::new();
    let mut rest = m5;
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j < b.len() && b[j] == b's' {
                let n = pattern[i + 1..j].parse::<usize>().ok();
                let take = n.unwrap_or(rest.len()).min(rest.len());
                out.push_str(&rest[..take]);
                rest = &rest[take..];
                i = j + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

fn has_width_s(p: &str) -> bool {
    let b = p.as_bytes();
    (0..b.len()).any(|i| {
        b[i] == b'%' && {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            j > i + 1 && j < b.len() && b[j] == b's'
        }
    })
}

/// Splits a `REF_PATH`-style list at `:`, keeping `http://…`, `https://…`
/// and `ftp://…` entries whole (htslib's rule).
pub(crate) fn split_path_list(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let parts: Vec<&str> = list.split(':').collect();
    let mut i = 0;
    while i < parts.len() {
        let p = parts[i];
        if matches!(p, "http" | "https" | "ftp") && i + 1 < parts.len() {
            cur = format!("{p}:{}", parts[i + 1]);
            i += 2;
            // A URL's port or later colons would follow; htslib keeps "::"
            // as a literal colon. Keep it simple: a URL entry ends here.
            out.push(std::mem::take(&mut cur));
            continue;
        }
        if !p.is_empty() {
            out.push(p.to_string());
        }
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_url(p: &str) -> bool {
    p.starts_with("http:") || p.starts_with("https:") || p.starts_with("ftp:")
}

/// Upper-cases the bases and drops anything that is not a printable
/// character (line ends, spaces), as htslib does when loading a reference.
fn clean(mut seq: Vec<u8>) -> Vec<u8> {
    seq.retain(|&c| c > b' ');
    seq.make_ascii_uppercase();
    seq
}

impl Resolver {
    fn find(&self, name: &[u8]) -> Result<Vec<u8>, ReferenceError> {
        let sn = String::from_utf8_lossy(name).into_owned();
        let info = self
            .sq
            .get(name)
            .cloned()
            .unwrap_or(SqInfo { m5: None, ur: None });
        let m5_shown = info.m5.clone().unwrap_or_else(|| "absent".into());
        let mut looked: Vec<String> = Vec::new();
        let check = |seq: Vec<u8>, place: String| -> Result<Vec<u8>, ReferenceError> {
            if let Some(m5) = &info.m5 {
                let found = md5_hex(&seq);
                if &found != m5 {
                    return Err(ReferenceError::Mismatch {
                        sn: sn.clone(),
                        m5: m5.clone(),
                        found,
                        place,
                    });
                }
            }
            Ok(seq)
        };
        if let Some(path) = &self.src.fasta {
            let mut guard = self.fasta.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = guard.as_mut() {
                match f.get(name) {
                    Ok(Some(seq)) => {
                        return check(clean(seq), format!("--reference {}", path.display()))
                    }
                    Ok(None) => looked.push(format!(
                        "--reference {} (no sequence named {sn})",
                        path.display()
                    )),
                    Err(source) => {
                        return Err(ReferenceError::Read {
                            sn,
                            place: format!("--reference {}", path.display()),
                            source,
                        })
                    }
                }
            }
        } else {
            looked.push("no --reference given".into());
        }
        if let Some(m5) = &info.m5 {
            for (var, list) in [
                ("REF_CACHE", &self.src.ref_cache),
                ("REF_PATH", &self.src.ref_path),
            ] {
                let Some(list) = list else {
                    looked.push(format!("{var} not set"));
                    continue;
                };
                for entry in split_path_list(list) {
                    let p = expand_path(&entry, m5);
                    if is_url(&p) {
                        looked.push(format!(
                            "{var} URL {p} (not fetched: alnsort does no network access)"
                        ));
                        continue;
                    }
                    match std::fs::read(&p) {
                        Ok(seq) => return check(clean(seq), format!("{var} file {p}")),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            looked.push(format!("{var} file {p} (absent)"))
                        }
                        Err(source) => {
                            return Err(ReferenceError::Read {
                                sn,
                                place: format!("{var} file {p}"),
                                source,
                            })
                        }
                    }
                }
            }
        } else {
            looked.push("REF_PATH/REF_CACHE not searched (the @SQ has no M5)".into());
        }
        if let Some(ur) = &info.ur {
            let local = ur.strip_prefix("file://").unwrap_or(ur);
            if !is_url(local) && Path::new(local).is_file() {
                let mut f = FastaFile::new(PathBuf::from(local));
                match f.get(name) {
                    Ok(Some(seq)) => return check(clean(seq), format!("@SQ UR {ur}")),
                    Ok(None) => looked.push(format!("@SQ UR {ur} (no sequence named {sn})")),
                    Err(source) => {
                        return Err(ReferenceError::Read {
                            sn,
                            place: format!("@SQ UR {ur}"),
                            source,
                        })
                    }
                }
            } else {
                looked.push(format!("@SQ UR {ur} (not a local file)"));
            }
        }
        Err(ReferenceError::NotFound {
            sn,
            m5: m5_shown,
            looked: looked.join("; "),
        })
    }
}

impl fasta::repository::Adapter for Resolver {
    fn get(&mut self, name: &[u8]) -> Option<io::Result<fasta::Record>> {
        // Always Some: noodles' encoder treats None as a bug (it panics),
        // and the error says where we looked.
        Some(
            self.find(name)
                .map(|seq| {
                    fasta::Record::new(
                        fasta::record::Definition::new(name.to_vec(), None),
                        fasta::record::Sequence::from(seq),
                    )
                })
                .map_err(io::Error::other),
        )
    }
}

/// One `.fai` line: where a sequence's bases are.
#[derive(Debug, Clone, Copy)]
struct FaiEntry {
    len: u64,
    offset: u64,
    line_bases: u64,
    line_width: u64,
}

/// A FASTA file read by name: through its `.fai` when it has one, else read
/// whole on first use and kept.
struct FastaFile {
    path: PathBuf,
    fai: Option<HashMap<Vec<u8>, FaiEntry>>,
    all: Option<HashMap<Vec<u8>, Vec<u8>>>,
    tried_fai: bool,
}

impl FastaFile {
    fn new(path: PathBuf) -> FastaFile {
        FastaFile {
            path,
            fai: None,
            all: None,
            tried_fai: false,
        }
    }

    fn load_fai(&mut self) -> io::Result<()> {
        self.tried_fai = true;
        let mut fai_path = self.path.clone().into_os_string();
        fai_path.push(".fai");
        let text = match std::fs::read_to_string(&fai_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut map = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |k: usize| -> io::Result<u64> {
                f.get(k).and_then(|v| v.parse().ok()).ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: line {} is not a .fai line",
                            Path::new(&fai_path).display(),
                            i + 1
                        ),
                    )
                })
            };
            let e = FaiEntry {
                len: num(1)?,
                offset: num(2)?,
                line_bases: num(3)?,
                line_width: num(4)?,
            };
            map.insert(f[0].as_bytes().to_vec(), e);
        }
        self.fai = Some(map);
        Ok(())
    }

    fn get(&mut self, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
        if !self.tried_fai {
            self.load_fai()?;
        }
        if let Some(fai) = &self.fai {
            let Some(e) = fai.get(name).copied() else {
                return Ok(None);
            };
            let mut f = File::open(&self.path)?;
            f.seek(SeekFrom::Start(e.offset))?;
            let lb = e.line_bases.max(1);
            let span = (e.len / lb) * e.line_width + e.len % lb;
            let mut buf = Vec::with_capacity(span as usize);
            f.take(span).read_to_end(&mut buf)?;
            let seq = clean(buf);
            if seq.len() as u64 != e.len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{}: {} bases read for {}, its .fai says {}",
                        self.path.display(),
                        seq.len(),
                        String::from_utf8_lossy(name),
                        e.len
                    ),
                ));
            }
            return Ok(Some(seq));
        }
        if self.all.is_none() {
            let mut all = HashMap::new();
            let r = BufReader::new(File::open(&self.path)?);
            let mut cur: Option<(Vec<u8>, Vec<u8>)> = None;
            for line in r.split(b'\n') {
                let line = line?;
                if let Some(def) = line.strip_prefix(b">") {
                    if let Some((n, s)) = cur.take() {
                        all.entry(n).or_insert(s);
                    }
                    let n = def
                        .split(|c| c.is_ascii_whitespace())
                        .next()
                        .unwrap_or(b"")
                        .to_vec();
                    cur = Some((n, Vec::new()));
                } else if let Some((_, s)) = cur.as_mut() {
                    s.extend_from_slice(&line);
                }
            }
            if let Some((n, s)) = cur.take() {
                all.entry(n).or_insert(s);
            }
            self.all = Some(all);
        }
        Ok(self.all.as_ref().and_then(|a| a.get(name).cloned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_expand_as_htslib_does() {
        let m5 = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            expand_path("/c/%2s/%2s/%s", m5),
            "/c/01/23/456789abcdef0123456789abcdef"
        );
        assert_eq!(expand_path("/c", m5), format!("/c/{m5}"));
        assert_eq!(expand_path("/c/%s.fa", m5), format!("/c/{m5}.fa"));
    }

    #[test]
    fn path_lists_keep_urls_whole() {
        assert_eq!(
            split_path_list("/a/%s:https://x.org/md5/%s:/b"),
            vec!["/a/%s", "https://x.org/md5/%s", "/b"]
        );
    }

    #[test]
    fn md5_of_a_known_sequence() {
        // `printf ACGT | md5sum`
        assert_eq!(md5_hex(b"ACGT"), "f1f8f4bf413b16ad135722aa4591043e");
    }

    fn header(sq: &str) -> sam::Header {
        format!("@HD\tVN:1.6\n{sq}\n").parse().expect("header")
    }

    #[test]
    fn fasta_without_fai_is_read_whole_and_md5_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">chrA desc\nacgt\nAC\n>chrB\nTTTT\n").expect("write");
        let m5 = md5_hex(b"ACGTAC");
        let h = header(&format!(
            "@SQ\tSN:chrA\tLN:6\tM5:{m5}\n@SQ\tSN:chrB\tLN:4\tM5:{}",
            "0".repeat(32)
        ));
        let repo = RefSource {
            fasta: Some(fa.clone()),
            ..Default::default()
        }
        .repository(&h);
        let a = repo.get(b"chrA").expect("some").expect("found");
        assert_eq!(AsRef::<[u8]>::as_ref(&*a), b"ACGTAC");
        let e = repo.get(b"chrB").expect("some").unwrap_err().to_string();
        assert!(
            e.contains("chrB") && e.contains(&"0".repeat(32)) && e.contains("r.fa"),
            "{e}"
        );
        let e = repo.get(b"chrC").expect("some").unwrap_err().to_string();
        assert!(
            e.contains("not found") && e.contains("no sequence named chrC"),
            "{e}"
        );
    }

    #[test]
    fn ref_path_pattern_finds_the_sequence_by_m5() {
        let dir = tempfile::tempdir().expect("tmp");
        let m5 = md5_hex(b"GATTACA");
        let sub = dir.path().join(&m5[..2]).join(&m5[2..4]);
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join(&m5[4..]), b"GATTACA").expect("write");
        let h = header(&format!("@SQ\tSN:c1\tLN:7\tM5:{m5}"));
        let src = RefSource {
            fasta: None,
            ref_path: Some(format!("/nonexistent:{}/%2s/%2s/%s", dir.path().display())),
            ref_cache: None,
        };
        let repo = src.repository(&h);
        let c1 = repo.get(b"c1").expect("some").expect("ok");
        assert_eq!(AsRef::<[u8]>::as_ref(&*c1), b"GATTACA");
        // Missing: the message names each place looked at.
        let h = header(&format!("@SQ\tSN:c2\tLN:7\tM5:{}", "ab".repeat(16)));
        let e = src
            .repository(&h)
            .get(b"c2")
            .expect("some")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/abab") && e.contains("REF_CACHE not set"),
            "{e}"
        );
    }

    #[test]
    fn fai_is_used_when_present() {
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">x\nACG\nTA\n>y\nGG\n").expect("write");
        std::fs::write(
            dir.path().join("r.fa.fai"),
            "x\t5\t3\t3\t4\ny\t2\t13\t2\t3\n",
        )
        .expect("fai");
        let mut f = FastaFile::new(fa);
        assert_eq!(f.get(b"x").expect("ok").expect("x"), b"ACGTA");
        assert_eq!(f.get(b"y").expect("ok").expect("y"), b"GG");
        assert!(f.fai.is_some());
    }
}
