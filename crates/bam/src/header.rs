//! The SAM/BAM header as samtools sort sees it: parsed from BAM bytes or SAM
//! `@` lines, validated the way htslib validates it, edited (`@HD` sort order,
//! `@PG`) exactly as samtools 1.24 edits it, and written back out.
//!
//! htslib never writes the input header text back verbatim once it has been
//! edited: it parses the text into records (`sam_hrecs_t`) and rebuilds it.
//! We keep the text of every line (which the rebuild reproduces byte for
//! byte) and replay the few structural changes the rebuild makes:
//! * the first `@HD` line moves to the top;
//! * in a BAM file the binary reference list wins: `@SQ` lines whose `LN`
//!   disagrees get the binary length, and references without an `@SQ` line
//!   get a stub `@SQ\tSN:..\tLN:..` after the last `@SQ` line (at the end of
//!   the header when there is none); `@SQ` lines naming references missing
//!   from the binary list are appended to it;
//! * a missing trailing newline is added.
//!
//! Everything here was checked against pysam 0.24.1 (samtools/htslib 1.24);
//! the tests quote the outputs that were observed.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read};

/// BAM magic (SAM spec §4.2).
const BAM_MAGIC: [u8; 4] = *b"BAM\x01";
/// `SAM_FORMAT_VERSION` in htslib's `sam.h`, used for a newly added `@HD`.
const SAM_FORMAT_VERSION: &str = "1.6";
/// htslib's `sam_hdr_pg_id` formats `"%.1000s.%d"`: the base is cut here.
const PG_ID_BASE_MAX: usize = 1000;

/// One reference sequence (an `@SQ` line / an entry of the binary list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub name: Vec<u8>,
    /// Length; may exceed `u32` for SAM input (written as `u32::MAX` in BAM,
    /// as htslib does).
    pub len: u64,
}

/// Errors reading or validating a header. Offsets are byte offsets in the
/// uncompressed BAM stream; line numbers are 1-based header lines.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("not a BAM file: bytes 0..4 are {found:02x?}, expected \"BAM\\1\"")]
    BadMagic { found: Vec<u8> },
    #[error("truncated BAM header: {what} at uncompressed offset {offset}")]
    Truncated { offset: u64, what: &'static str },
    #[error("I/O error reading the BAM header at uncompressed offset {offset}: {source}")]
    Io { offset: u64, source: io::Error },
    #[error("invalid BAM header: n_ref is {n_ref} at uncompressed offset {offset}")]
    BadRefCount { offset: u64, n_ref: i32 },
    #[error(
        "invalid BAM header: reference {index} has l_name {l_name} at uncompressed offset {offset}"
    )]
    BadRefNameLength {
        offset: u64,
        index: usize,
        l_name: i32,
    },
    #[error("invalid BAM header: reference {index} ({name:?}) has length 0 at uncompressed offset {offset}")]
    ZeroRefLength {
        offset: u64,
        index: usize,
        name: String,
    },
    #[error("duplicate reference name {name:?} (reference {index}) in the BAM reference list")]
    DuplicateBinaryRef { index: usize, name: String },
    #[error("malformed header line {line}: {reason}: {text:?}")]
    Malformed {
        line: usize,
        reason: &'static str,
        text: String,
    },
    #[error("header line {line}: @SQ line with no SN tag")]
    SqWithoutName { line: usize },
    #[error("header line {line}: @SQ line {name:?} has an invalid or no LN tag")]
    SqBadLength { line: usize, name: String },
    #[error("header line {line}: @SQ line {name:?} has several LN tags with different values")]
    SqConflictingLength { line: usize, name: String },
    #[error("header line {line}: duplicate @SQ entry {name:?}")]
    DuplicateSq { line: usize, name: String },
    #[error("header line {line}: @{kind} line with no ID tag")]
    MissingId { line: usize, kind: &'static str },
}

/// A parsed header: its lines (without `\n`, in output order) and the
/// reference list, whose order defines the record `refID`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    lines: Vec<Vec<u8>>,
    refs: Vec<Reference>,
}

/// Name -> reference index, as htslib's `bam_name2id`: every `SN` plus the
/// `AN` alternative names of the `@SQ` lines.
#[derive(Clone, Debug, Default)]
pub struct RefLookup {
    map: HashMap<Vec<u8>, i32>,
}

impl RefLookup {
    /// The reference index of `name`, if the header knows it.
    pub fn get(&self, name: &[u8]) -> Option<i32> {
        self.map.get(name).copied()
    }
}

/// Which reader the lines came from: SAM accepts only the five standard
/// record types, BAM text any two-letter type (htslib does the same).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Sam,
    Bam,
}

/// Reads a BAM header from the *uncompressed* BAM stream (SAM spec §4.2):
/// magic, `l_text`, text, `n_ref`, then `l_name`, name, `l_ref` per reference.
pub fn read_bam_header<R: Read>(r: &mut R) -> Result<Header, HeaderError> {
    let mut rd = Counting {
        inner: r,
        offset: 0,
    };
    let magic = rd.exact::<4>("BAM magic")?;
    if magic != BAM_MAGIC {
        return Err(HeaderError::BadMagic {
            found: magic.to_vec(),
        });
    }
    // htslib reads l_text as an unsigned 32-bit value.
    let l_text = u32::from_le_bytes(rd.exact::<4>("l_text")?) as u64;
    let text = rd.bytes(l_text, "header text")?;
    let n_ref_at = rd.offset;
    let n_ref = i32::from_le_bytes(rd.exact::<4>("n_ref")?);
    if n_ref < 0 {
        return Err(HeaderError::BadRefCount {
            offset: n_ref_at,
            n_ref,
        });
    }
    // Do not trust n_ref for the allocation: a truncated file fails first.
    let mut refs = Vec::with_capacity((n_ref as usize).min(1 << 16));
    for index in 0..n_ref as usize {
        let at = rd.offset;
        let l_name = i32::from_le_bytes(rd.exact::<4>("reference l_name")?);
        if l_name <= 0 {
            return Err(HeaderError::BadRefNameLength {
                offset: at,
                index,
                l_name,
            });
        }
        let raw = rd.bytes(l_name as u64, "reference name")?;
        // htslib tolerates a missing NUL and reads names as C strings.
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let len_at = rd.offset;
        let len = u32::from_le_bytes(rd.exact::<4>("reference l_ref")?) as u64;
        // samtools refuses a zero-length reference, which would be written
        // as an @SQ LN:0 no reader accepts (fuzz/regressions/header/binary-ref-length-zero).
        if len == 0 {
            return Err(HeaderError::ZeroRefLength {
                offset: len_at,
                index,
                name: lossy(&raw[..end]),
            });
        }
        refs.push(Reference {
            name: raw[..end].to_vec(),
            len,
        });
    }
    Header::from_bam_parts(&text, refs)
}

/// Parses the `@` lines of a SAM file (each without its `\n`; a trailing
/// `\r` is dropped as htslib's line reader does).
pub fn parse_sam_header<'a, I>(lines: I) -> Result<Header, HeaderError>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut parsed = Vec::new();
    for (i, line) in lines.into_iter().enumerate() {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // sam_hdr_build_from_sam_file lets a bare `@CO` through as an empty
        // comment, `@CO\t` (a BAM header's text gets no such allowance).
        let line: &[u8] = if line == b"@CO" { b"@CO\t" } else { line };
        check_line(line, i + 1, Flavour::Sam)?;
        parsed.push(line.to_vec());
    }
    let mut header = Header {
        lines: parsed,
        refs: Vec::new(),
    };
    header.index_lines(Vec::new())?;
    Ok(header)
}

impl Header {
    /// A header with no lines and no references.
    pub fn empty() -> Self {
        Header {
            lines: Vec::new(),
            refs: Vec::new(),
        }
    }

    fn from_bam_parts(text: &[u8], binary: Vec<Reference>) -> Result<Header, HeaderError> {
        // sam_hdr_sanitise: text ends at the first NUL, every line must start
        // with '@' (an empty line is an error), a final newline is implied.
        let text = &text[..text.iter().position(|&b| b == 0).unwrap_or(text.len())];
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let mut lines = Vec::new();
        if !text.is_empty() {
            for (i, line) in text.split(|&b| b == b'\n').enumerate() {
                check_line(line, i + 1, Flavour::Bam)?;
                lines.push(line.to_vec());
            }
        }
        let mut seen = HashSet::new();
        for (index, r) in binary.iter().enumerate() {
            if !seen.insert(r.name.as_slice()) {
                let name = lossy(&r.name);
                return Err(HeaderError::DuplicateBinaryRef { index, name });
            }
        }
        let mut header = Header {
            lines,
            refs: Vec::new(),
        };
        header.index_lines(binary)?;
        Ok(header)
    }

    /// Validates the records the way `sam_hrecs_update_hashes` does and
    /// builds the reference list; `binary` is the BAM reference list (empty
    /// for SAM), which takes precedence over the text.
    fn index_lines(&mut self, binary: Vec<Reference>) -> Result<(), HeaderError> {
        // The first @HD goes to the top (sam_hrecs_global_list_add).
        if let Some(i) = self.lines.iter().position(|l| line_type(l) == *b"HD") {
            let hd = self.lines.remove(i);
            self.lines.insert(0, hd);
        }
        let n_binary = binary.len();
        let mut refs = binary;
        let mut attached = vec![false; n_binary];
        let mut by_name: HashMap<Vec<u8>, usize> = refs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i))
            .collect();
        for idx in 0..self.lines.len() {
            let line_no = idx + 1;
            match &line_type(&self.lines[idx]) {
                b"SQ" => {
                    let (name, len) = sq_fields(&self.lines[idx], line_no)?;
                    match by_name.get(&name).copied() {
                        Some(t) if t < n_binary && !attached[t] => {
                            attached[t] = true;
                            if len != refs[t].len {
                                let v = refs[t].len.to_string();
                                set_tag(&mut self.lines[idx], b"LN", v.as_bytes());
                            }
                        }
                        // An SN seen before (an AN alias is not in by_name).
                        Some(_) => {
                            let name = lossy(&name);
                            return Err(HeaderError::DuplicateSq {
                                line: line_no,
                                name,
                            });
                        }
                        None => {
                            by_name.insert(name.clone(), refs.len());
                            refs.push(Reference { name, len });
                        }
                    }
                }
                b"RG" if first_tag(&self.lines[idx], b"ID").is_none() => {
                    return Err(HeaderError::MissingId {
                        line: line_no,
                        kind: "RG",
                    });
                }
                b"PG" if first_tag(&self.lines[idx], b"ID").is_none() => {
                    return Err(HeaderError::MissingId {
                        line: line_no,
                        kind: "PG",
                    });
                }
                _ => {}
            }
        }
        // Stub @SQ lines for binary references the text does not describe.
        let mut insert_at = self
            .lines
            .iter()
            .rposition(|l| line_type(l) == *b"SQ")
            .map(|i| i + 1);
        for (t, r) in refs.iter().enumerate().take(n_binary) {
            if attached[t] {
                continue;
            }
            let mut line = b"@SQ\tSN:".to_vec();
            line.extend_from_slice(&r.name);
            line.extend_from_slice(format!("\tLN:{}", r.len).as_bytes());
            match insert_at {
                Some(at) => {
                    self.lines.insert(at, line);
                    insert_at = Some(at + 1);
                }
                None => self.lines.push(line),
            }
        }
        self.refs = refs;
        Ok(())
    }

    /// The header lines in output order, without newlines.
    pub fn lines(&self) -> &[Vec<u8>] {
        &self.lines
    }

    /// The reference list; a record's `refID` indexes it.
    pub fn refs(&self) -> &[Reference] {
        &self.refs
    }

    /// Number of references (valid `refID`s are `-1..n_ref`).
    pub fn n_ref(&self) -> usize {
        self.refs.len()
    }

    /// The name -> index map the SAM parser resolves RNAME/RNEXT with.
    pub fn ref_lookup(&self) -> RefLookup {
        let mut map: HashMap<Vec<u8>, i32> = self
            .refs
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.clone(), i as i32))
            .collect();
        for line in self.lines.iter().filter(|l| line_type(l) == *b"SQ") {
            let (Some(sn), Some(an)) = (last_tag(line, b"SN"), first_tag(line, b"AN")) else {
                continue;
            };
            let Some(&tid) = map.get(sn) else { continue };
            for alt in an.split(|&b| b == b',').filter(|a| !a.is_empty()) {
                map.entry(alt.to_vec()).or_insert(tid);
            }
        }
        RefLookup { map }
    }

    /// The header as SAM text: every line followed by `\n`.
    pub fn to_sam_text(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.lines.iter().map(|l| l.len() + 1).sum());
        for line in &self.lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out
    }

    /// The uncompressed BAM header block (SAM spec §4.2). Reference lengths
    /// that do not fit in 32 bits are written as `u32::MAX`, as htslib does.
    pub fn to_bam_bytes(&self) -> Vec<u8> {
        let text = self.to_sam_text();
        let mut out = Vec::with_capacity(12 + text.len() + self.refs.len() * 16);
        out.extend_from_slice(&BAM_MAGIC);
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(&text);
        out.extend_from_slice(&(self.refs.len() as i32).to_le_bytes());
        for r in &self.refs {
            out.extend_from_slice(&(r.name.len() as i32 + 1).to_le_bytes());
            out.extend_from_slice(&r.name);
            out.push(0);
            out.extend_from_slice(&(r.len.min(u32::MAX as u64) as u32).to_le_bytes());
        }
        out
    }

    /// Sets the sort order as samtools sort's `set_sort_order` does: the
    /// existing `@HD` keeps its tags and their order (SO, GO, SS values are
    /// replaced in place, missing ones appended in that order, GO/SS removed
    /// when `None`); without `@HD` a line `@HD VN:1.6 SO [GO] [SS]` is put first.
    pub fn set_sort_order(&mut self, so: &str, go: Option<&str>, ss: Option<&str>) {
        let wanted = [(b"SO", Some(so)), (b"GO", go), (b"SS", ss)];
        match self.lines.iter().position(|l| line_type(l) == *b"HD") {
            Some(i) => {
                let line = &mut self.lines[i];
                for (key, value) in wanted {
                    match value {
                        Some(v) => set_tag(line, key, v.as_bytes()),
                        None => remove_tag(line, key),
                    }
                }
            }
            None => {
                let mut line = format!("@HD\tVN:{SAM_FORMAT_VERSION}").into_bytes();
                for (key, value) in wanted {
                    if let Some(v) = value {
                        push_tag(&mut line, key, v.as_bytes());
                    }
                }
                self.lines.insert(0, line);
            }
        }
    }

    /// Adds `@PG` lines as htslib's `sam_hdr_add_pg` does for
    /// `sam_hdr_add_pg(h, id_base, "VN", version, "CL", command_line)` with
    /// `PN` = `program_name`: one line per end of a `PP` chain (a `@PG` with a
    /// resolvable `PP` that no other `PP` points at; failing that, the last
    /// `@PG` nobody points at; with no `@PG` lines, none), tags
    /// `ID PN PP VN CL`, IDs made unique as `id_base`, `id_base.1`, ... The
    /// lines go right after the last `@PG` line, or at the end.
    pub fn add_pg(&mut self, id_base: &str, program_name: &str, version: &str, command_line: &str) {
        let pg_idx: Vec<usize> = (0..self.lines.len())
            .filter(|&i| line_type(&self.lines[i]) == *b"PG")
            .collect();
        let ends = pg_chain_ends(&self.lines, &pg_idx);
        let mut ids: HashSet<Vec<u8>> = pg_idx
            .iter()
            .filter_map(|&i| first_tag(&self.lines[i], b"ID"))
            .map(<[u8]>::to_vec)
            .collect();
        let mut counter = 1u64;
        let first_at = pg_idx.last().map_or(self.lines.len(), |&i| i + 1);
        let pps: Vec<Option<Vec<u8>>> = if ends.is_empty() {
            vec![None]
        } else {
            ends.iter()
                .map(|&e| first_tag(&self.lines[e], b"ID").map(<[u8]>::to_vec))
                .collect()
        };
        for (at, pp) in (first_at..).zip(pps) {
            let id = unique_pg_id(id_base, &ids, &mut counter);
            let mut line = b"@PG".to_vec();
            for (key, value) in [(b"ID", id.as_slice()), (b"PN", program_name.as_bytes())] {
                if !value.is_empty() {
                    push_tag(&mut line, key, value);
                }
            }
            if let Some(pp) = pp.filter(|p| !p.is_empty()) {
                push_tag(&mut line, b"PP", &pp);
            }
            push_tag(&mut line, b"VN", version.as_bytes());
            push_tag(&mut line, b"CL", command_line.as_bytes());
            ids.insert(id);
            self.lines.insert(at, line);
        }
    }

    /// Adds one `@PG` line with `fields` in the order given, after the last
    /// `@PG` line, or before the first `@CO` line, or at the end (where
    /// htsjdk's header order puts it). `alnsort MarkDuplicates` writes
    /// Picard's lines this way; `sort` uses [`Header::add_pg`].
    pub fn push_program(&mut self, fields: &[([u8; 2], Vec<u8>)]) {
        let mut line = b"@PG".to_vec();
        for (key, value) in fields {
            push_tag(&mut line, key, value);
        }
        let at = match self.lines.iter().rposition(|l| line_type(l) == *b"PG") {
            Some(i) => i + 1,
            None => self
                .lines
                .iter()
                .position(|l| line_type(l) == *b"CO")
                .unwrap_or(self.lines.len()),
        };
        self.lines.insert(at, line);
    }

    /// Appends an `@CO` line with `text` (tabs and newlines made spaces).
    pub fn push_comment(&mut self, text: &[u8]) {
        let mut line = b"@CO\t".to_vec();
        line.extend(
            text.iter()
                .map(|&b| if b == b'\t' || b == b'\n' { b' ' } else { b }),
        );
        self.lines.push(line);
    }

    /// Sets `key` on the `@SQ` lines of the references named in `values`
    /// (`(SN, value)` pairs; the line whose last `SN` is the name, as htslib
    /// indexes them) as htslib's `sam_hdr_update_line` does: the first such
    /// tag's value replaced in place, else the tag appended to the line.
    /// Names without an `@SQ` line are passed over.
    pub fn set_sq_tags<'v>(
        &mut self,
        key: &[u8; 2],
        values: impl IntoIterator<Item = (&'v [u8], &'v [u8])>,
    ) {
        let mut lines: HashMap<Vec<u8>, usize> = HashMap::new();
        for (i, line) in self.lines.iter().enumerate() {
            if line_type(line) == *b"SQ" {
                if let Some(sn) = last_tag(line, b"SN") {
                    lines.entry(sn.to_vec()).or_insert(i);
                }
            }
        }
        for (name, value) in values {
            if let Some(&i) = lines.get(name) {
                set_tag(&mut self.lines[i], key, value);
            }
        }
    }

    /// `@RG` ID -> LB pairs, as samtools' `lookup_libraries`: RG lines in
    /// order, lines without LB skipped, the first line for an ID wins.
    pub fn library_map(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        for line in self.lines.iter().filter(|l| line_type(l) == *b"RG") {
            let (Some(id), Some(lb)) = (first_tag(line, b"ID"), first_tag(line, b"LB")) else {
                continue;
            };
            if !out.iter().any(|(known, _)| known == id) {
                out.push((id.to_vec(), lb.to_vec()));
            }
        }
        out
    }
}

/// Ends of `PP` chains, as `sam_hdr_link_pg` finds them (see `add_pg`).
/// `pg_idx` are the line indices of the @PG lines in order.
fn pg_chain_ends(lines: &[Vec<u8>], pg_idx: &[usize]) -> Vec<usize> {
    let n = pg_idx.len();
    // The ID hash keeps the last @PG with a given ID.
    let mut by_id: HashMap<&[u8], usize> = HashMap::new();
    for (k, &i) in pg_idx.iter().enumerate() {
        if let Some(id) = first_tag(&lines[i], b"ID") {
            by_id.insert(id, k);
        }
    }
    let mut referenced = vec![false; n];
    let mut chain = vec![0usize; n];
    for (k, &i) in pg_idx.iter().enumerate() {
        let Some(pp) = first_tag(&lines[i], b"PP") else {
            continue;
        };
        match by_id.get(pp) {
            Some(&p) if p != k => {
                referenced[p] = true;
                chain[k] = chain[p] + 1;
            }
            _ => {}
        }
    }
    let ends: Vec<usize> = (0..n)
        .filter(|&k| !referenced[k] && chain[k] > 0)
        .map(|k| pg_idx[k])
        .collect();
    if !ends.is_empty() {
        return ends;
    }
    (0..n)
        .rev()
        .find(|&k| !referenced[k])
        .map(|k| vec![pg_idx[k]])
        .unwrap_or_default()
}

/// `sam_hdr_pg_id`: the base if free, else `base.N` with N counting from 1
/// across calls (htslib's `ID_cnt`).
fn unique_pg_id(base: &str, taken: &HashSet<Vec<u8>>, counter: &mut u64) -> Vec<u8> {
    if !taken.contains(base.as_bytes()) {
        return base.as_bytes().to_vec();
    }
    let cut = &base.as_bytes()[..base.len().min(PG_ID_BASE_MAX)];
    loop {
        let mut id = cut.to_vec();
        id.extend_from_slice(format!(".{counter}").as_bytes());
        *counter += 1;
        if !taken.contains(&id) {
            return id;
        }
    }
}

/// Checks one header line's shape as htslib's line parser does.
fn check_line(line: &[u8], line_no: usize, flavour: Flavour) -> Result<(), HeaderError> {
    let bad = |reason| HeaderError::Malformed {
        line: line_no,
        reason,
        text: lossy(line),
    };
    if line.first() != Some(&b'@') {
        return Err(bad("header line does not start with '@'"));
    }
    if line.len() < 3 || !line[1].is_ascii_alphabetic() || !line[2].is_ascii_alphabetic() {
        return Err(bad("header line does not have a two character key"));
    }
    // A NUL would end the text when written to BAM (samtools refuses these
    // lines; fuzz/regressions/header/nul-in-sam-sq-line).
    if flavour == Flavour::Sam && line.contains(&0) {
        return Err(bad("header line contains a NUL byte"));
    }
    let kind = [line[1], line[2]];
    if flavour == Flavour::Sam && !matches!(&kind, b"HD" | b"SQ" | b"RG" | b"PG" | b"CO") {
        return Err(bad("header line must start with @HD/@SQ/@RG/@PG/@CO"));
    }
    let rest = &line[3..];
    if rest.first() != Some(&b'\t') {
        return Err(bad("missing tab"));
    }
    if kind == *b"CO" {
        return Ok(());
    }
    for field in rest[1..].split(|&b| b == b'\t') {
        if field.len() < 3 || field[2] != b':' {
            return Err(bad("malformed key:value pair"));
        }
    }
    Ok(())
}

/// SN (the last one, as htslib reads it) and LN of an @SQ line.
fn sq_fields(line: &[u8], line_no: usize) -> Result<(Vec<u8>, u64), HeaderError> {
    let Some(name) = last_tag(line, b"SN") else {
        return Err(HeaderError::SqWithoutName { line: line_no });
    };
    let mut len: Option<i64> = None;
    for v in tags(line)
        .filter(|t| t.starts_with(b"LN:"))
        .map(|t| &t[3..])
    {
        let this = strtoll(v);
        if len.is_some_and(|l| l != this) {
            let name = lossy(name);
            return Err(HeaderError::SqConflictingLength {
                line: line_no,
                name,
            });
        }
        len = Some(this);
    }
    match len {
        Some(l) if l > 0 => Ok((name.to_vec(), l as u64)),
        _ => Err(HeaderError::SqBadLength {
            line: line_no,
            name: lossy(name),
        }),
    }
}

/// C `strtoll(s, NULL, 10)`: leading white space, a sign, the longest digit
/// prefix; 0 when there is none; saturates on overflow.
fn strtoll(s: &[u8]) -> i64 {
    let mut i = s
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t'..=b'\r'))
        .count();
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut v: i128 = 0;
    for &b in s[i..].iter().take_while(|b| b.is_ascii_digit()) {
        v = (v * 10 + (b - b'0') as i128).min(i64::MAX as i128 + 1);
    }
    let v = if neg { -v } else { v };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

pub(crate) fn line_type(line: &[u8]) -> [u8; 2] {
    match line {
        [b'@', a, b, ..] => [*a, *b],
        _ => [0, 0],
    }
}

/// The `KEY:value` fields of a non-comment line.
fn tags(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.get(4..)
        .unwrap_or_default()
        .split(|&b| b == b'\t')
        .filter(|t| !t.is_empty())
}

pub(crate) fn first_tag<'a>(line: &'a [u8], key: &[u8; 2]) -> Option<&'a [u8]> {
    tags(line)
        .find(|t| t.len() >= 3 && t[..2] == key[..])
        .map(|t| &t[3..])
}

fn last_tag<'a>(line: &'a [u8], key: &[u8; 2]) -> Option<&'a [u8]> {
    tags(line)
        .filter(|t| t.len() >= 3 && t[..2] == key[..])
        .last()
        .map(|t| &t[3..])
}

/// Byte range of the value of the first `key` tag in `line`.
fn tag_span(line: &[u8], key: &[u8; 2]) -> Option<(usize, usize)> {
    let mut start = 3;
    while start < line.len() {
        let end = line[start + 1..]
            .iter()
            .position(|&b| b == b'\t')
            .map_or(line.len(), |p| start + 1 + p);
        let field = &line[start + 1..end];
        if field.len() >= 3 && field[..2] == key[..] {
            return Some((start, end));
        }
        start = end;
    }
    None
}

/// Replaces the value of the first `key` tag, or appends the tag.
pub(crate) fn set_tag(line: &mut Vec<u8>, key: &[u8; 2], value: &[u8]) {
    match tag_span(line, key) {
        Some((start, end)) => {
            line.splice(start + 4..end, value.iter().copied());
        }
        None => push_tag(line, key, value),
    }
}

/// Removes the first `key` tag (with its leading tab), if any.
pub(crate) fn remove_tag(line: &mut Vec<u8>, key: &[u8; 2]) {
    if let Some((start, end)) = tag_span(line, key) {
        line.drain(start..end);
    }
}

fn push_tag(line: &mut Vec<u8>, key: &[u8; 2], value: &[u8]) {
    line.push(b'\t');
    line.extend_from_slice(key);
    line.push(b':');
    line.extend_from_slice(value);
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A reader that knows its offset, for error messages.
struct Counting<'a, R> {
    inner: &'a mut R,
    offset: u64,
}

impl<R: Read> Counting<'_, R> {
    fn exact<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], HeaderError> {
        let v = self.bytes(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&v);
        Ok(out)
    }

    /// Reads exactly `n` bytes, growing the buffer as data arrives so a bogus
    /// length in a truncated file does not allocate up front.
    fn bytes(&mut self, n: u64, what: &'static str) -> Result<Vec<u8>, HeaderError> {
        let at = self.offset;
        let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
        let got = self
            .inner
            .take(n)
            .read_to_end(&mut v)
            .map_err(|source| HeaderError::Io { offset: at, source })?;
        self.offset += got as u64;
        if (got as u64) < n {
            return Err(HeaderError::Truncated {
                offset: self.offset,
                what,
            });
        }
        Ok(v)
    }
}

#[cfg(test)]
#[path = "header_tests.rs"]
mod tests;
