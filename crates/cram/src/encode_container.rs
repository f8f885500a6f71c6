//! One slice of BAM records encoded as one CRAM 3.0/3.1 data container
//! (CRAM spec §7-§10): the records' fields split into data series, each
//! series in an external block of its own, compressed with the codec htslib
//! uses for it; the compression header describing them, the slice header
//! (with the MD5 of the reference span), the container header and the CRC32s.
//!
//! What a reader rebuilds, it rebuilds from stored values: mates are stored
//! attached only where htslib and htsjdk both rebuild the stored mate
//! fields and TLEN ([`attach_mates`]), else detached (MF, NS, NP, TS as in
//! the BAM record), the read features come
//! from the CIGAR against the reference, records without bases (SEQ `*`)
//! carry CRAM flag 0x8 and features from the CIGAR only, missing qualities
//! are stored as 0xff bytes, as htslib stores them.
//!
//! [`encode`] takes the slice's extent, then each record into the data
//! series ([`encode_record`]) and its tags into their blocks and the tag
//! dictionary ([`record_tags`]), then compresses the blocks and writes the
//! compression header ([`series_blocks_and_header`]), the slice header and
//! the container.

use crate::error::Unencodable;
use crate::options::{CramOptions, CramVersion};
use crate::wire::{crc32, write_itf8, write_ltf8};
use alnsort_bam::cigar::{self, op};
use alnsort_bam::name_hash::NameHash;
use alnsort_bam::{Aux, RecordRef};
use md5::{Digest, Md5};
use std::collections::HashMap;

/// The data series this encoder writes, in content-id order (content id =
/// index + 1; the core block, empty, is content id 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
enum Ds {
    Bf,
    Cf,
    Ri,
    Rl,
    Ap,
    Rg,
    Rn,
    Mf,
    Ns,
    Np,
    Ts,
    Tl,
    Fn,
    Fc,
    Fp,
    Dl,
    Ba,
    Bs,
    In,
    Rs,
    Pd,
    Hc,
    Sc,
    Mq,
    Qs,
    Bb,
    Nf,
}

/// How a series' values sit in its external block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// ITF8 integers (EXTERNAL encoding).
    Int,
    /// Single bytes (EXTERNAL encoding).
    Byte,
    /// Byte strings ended by a NUL (BYTE_ARRAY_STOP encoding).
    Stop,
    /// Byte strings after their ITF8 length (BYTE_ARRAY_LEN encoding, both
    /// EXTERNAL in the series' block).
    Len,
}

const SERIES: [(Ds, [u8; 2], Kind); 27] = [
    (Ds::Bf, *b"BF", Kind::Int),
    (Ds::Cf, *b"CF", Kind::Int),
    (Ds::Ri, *b"RI", Kind::Int),
    (Ds::Rl, *b"RL", Kind::Int),
    (Ds::Ap, *b"AP", Kind::Int),
    (Ds::Rg, *b"RG", Kind::Int),
    (Ds::Rn, *b"RN", Kind::Stop),
    (Ds::Mf, *b"MF", Kind::Int),
    (Ds::Ns, *b"NS", Kind::Int),
    (Ds::Np, *b"NP", Kind::Int),
    (Ds::Ts, *b"TS", Kind::Int),
    (Ds::Tl, *b"TL", Kind::Int),
    (Ds::Fn, *b"FN", Kind::Int),
    (Ds::Fc, *b"FC", Kind::Byte),
    (Ds::Fp, *b"FP", Kind::Int),
    (Ds::Dl, *b"DL", Kind::Int),
    (Ds::Ba, *b"BA", Kind::Byte),
    (Ds::Bs, *b"BS", Kind::Byte),
    (Ds::In, *b"IN", Kind::Stop),
    (Ds::Rs, *b"RS", Kind::Int),
    (Ds::Pd, *b"PD", Kind::Int),
    (Ds::Hc, *b"HC", Kind::Int),
    (Ds::Sc, *b"SC", Kind::Stop),
    (Ds::Mq, *b"MQ", Kind::Int),
    (Ds::Qs, *b"QS", Kind::Byte),
    (Ds::Bb, *b"BB", Kind::Len),
    (Ds::Nf, *b"NF", Kind::Int),
];

/// The content id of a slice's embedded reference block (after the
/// series' ids, below the tags' three-byte keys).
const EMBEDDED_REFERENCE_ID: u32 = SERIES.len() as u32 + 1;

/// CRAM flags (CF, §10.2).
const CF_QUALITIES: i32 = 0x1;
const CF_DETACHED: i32 = 0x2;
const CF_MATE_DOWNSTREAM: i32 = 0x4;
const CF_NO_SEQ: i32 = 0x8;

/// Block content types (§8.1).
pub(crate) const FILE_HEADER: u8 = 0;
const COMPRESSION_HEADER: u8 = 1;
const SLICE_HEADER: u8 = 2;
const EXTERNAL_DATA: u8 = 4;
const CORE_DATA: u8 = 5;

/// Block compression methods (§8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Gzip(u32),
    /// rANS 4x8 (rANS Nx16 in CRAM 3.1), order 1 when true.
    Rans4x8(bool),
}

/// Each base's place in A, C, G, T, N (the substitution matrix's order).
fn acgtn(b: u8) -> Option<usize> {
    match b {
        b'A' => Some(0),
        b'C' => Some(1),
        b'G' => Some(2),
        b'T' => Some(3),
        b'N' => Some(4),
        _ => None,
    }
}

/// The substitution matrix (preservation map SM, §8.4.1): for each
/// reference base (A, C, G, T, N), the other four in ACGTN order get codes
/// 0 to 3, two bits each, so every byte is 0b00_01_10_11.
const SUBSTITUTION_MATRIX: [u8; 5] = [0x1b; 5];

/// The BS code of `read` against `reference` (both ACGTN, different).
fn substitution_code(reference: usize, read: usize) -> u8 {
    (read - usize::from(read > reference)) as u8
}

/// What one slice's records need from their reference.
pub(crate) struct SliceRefs<'a> {
    /// The upper-case sequence of each reference id the slice's records
    /// use (indexed by id; `None` for ids not used).
    pub sequences: &'a [Option<&'a [u8]>],
}

/// One encoded container and what a `.crai` line says of its slice.
pub(crate) struct Container {
    pub bytes: Vec<u8>,
    pub info: SliceInfo,
}

/// What a `.crai` line says of a slice (§8.5 slice header fields; offsets
/// within the container as written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SliceInfo {
    /// Reference sequence id: -1 unmapped, -2 several references.
    pub reference: i32,
    /// 1-based alignment start and span (0 for unmapped or several).
    pub start: i32,
    pub span: i32,
    /// Offset of the slice from the end of the container header.
    pub landmark: u32,
    /// Bytes of the slice: its header block and its data blocks.
    pub size: u32,
}

/// Why a record cannot be encoded: its index in the slice and what.
pub(crate) type Refusal = (usize, Unencodable);

/// How the encoder stores a record's read group.
pub(crate) trait ReadGroups {
    /// The read-group series value of an `RG:Z` value (without its NUL)
    /// naming an @RG of the header, in header order.
    fn id(&self, name: &[u8]) -> Option<i32>;
}

/// Per-job buffers, reused from slice to slice.
#[derive(Default)]
pub(crate) struct Scratch {
    series: Vec<Vec<u8>>,
    /// Each tag's block (key: tag name and type), in the order first seen,
    /// and where each key's block is.
    tags: Vec<(u32, Vec<u8>)>,
    tag_at: HashMap<u32, usize>,
    /// The previous record's tags and the current one's (key, block), in
    /// record order: a record whose tags are those of the record before
    /// (most are) finds their blocks without a lookup.
    prev_tags: Vec<(u32, usize)>,
    cur_tags: Vec<(u32, usize)>,
    lines: HashMap<Vec<u8>, u32>,
    /// The previous record's tag line and its index, for the same reason
    /// (`None` before the slice's first record).
    prev_line: Vec<u8>,
    prev_tl: Option<u32>,
    line_order: Vec<u8>,
    line: Vec<u8>,
    bases: Vec<u8>,
    cigar: Vec<(u8, u32)>,
    /// The record's CIGAR as BAM words and the MD a reader computes for
    /// it, when it carries MD or NM.
    cigar_words: Vec<u32>,
    md: Vec<u8>,
    /// How each record's mate is stored ([`attach_mates`]).
    downstream: Vec<Link>,
}

/// Encodes the framed BAM records `records` (in output order; `counter`
/// records precede them in the file) into one container of one slice.
pub(crate) fn encode(
    records: &[&[u8]],
    counter: u64,
    refs: &SliceRefs,
    groups: &dyn ReadGroups,
    opts: &CramOptions,
    scratch: &mut Scratch,
) -> Result<Container, Refusal> {
    let views: Vec<RecordRef> = records
        .iter()
        .map(|r| RecordRef::with_block_size(r))
        .collect();
    let first_tid = views.first().map_or(-1, |r| r.ref_id());
    let multi = views.iter().any(|r| r.ref_id() != first_tid);
    let reference = if multi { -2 } else { first_tid };
    let seq_of = |tid: i32| sequence(refs, tid);
    // The slice's span on its reference (htslib: from the first start to
    // the furthest end, ends cut at the reference's end).
    let (mut first_base, mut last_base) = (i64::MAX, 0i64);
    let mut sorted = true;
    let mut prev = i64::MIN;
    for r in &views {
        let apos = r.pos() as i64 + 1;
        sorted &= apos >= prev;
        prev = apos;
        if reference >= 0 {
            let end = if r.flag() & 0x4 != 0 {
                apos
            } else {
                apos + r.reference_length() - 1
            };
            let len = seq_of(reference).map_or(i64::MAX, |s| s.len() as i64);
            first_base = first_base.min(apos);
            last_base = last_base.max(end.min(len));
        }
    }
    let (slice_start, slice_span) = if reference >= 0 && !views.is_empty() {
        (first_base, (last_base - first_base + 1).max(0))
    } else {
        (0, 0)
    };

    let s = scratch;
    s.series.resize_with(SERIES.len(), Vec::new);
    for b in &mut s.series {
        b.clear();
    }
    s.tags.clear();
    s.tag_at.clear();
    s.prev_tags.clear();
    s.prev_line.clear();
    s.prev_tl = None;
    s.lines.clear();
    s.line_order.clear();
    attach_mates(&views, &mut s.downstream);
    let mut bases_total: u64 = 0;
    let mut last_ap = slice_start;
    for (k, r) in views.iter().enumerate() {
        let read_len = encode_record(s, k, r, multi, sorted, &mut last_ap, refs, groups, opts)?;
        bases_total += read_len as u64;
    }

    // Blocks: core (empty), then the series and tags in content-id order.
    let nx16 = opts.version == CramVersion::V3_1;
    let mut externals: Vec<(u32, Vec<u8>)> = Vec::new();
    let ch = series_blocks_and_header(s, sorted, opts, nx16, &mut externals);

    // Slice header (§8.5): the MD5 of the reference bases the slice
    // spans, and with embed_ref those bases in a block of their own.
    let span_bases = match seq_of(reference) {
        Some(seq) if slice_span > 0 => {
            let from = ((slice_start - 1) as usize).min(seq.len());
            let to = (from + slice_span as usize).min(seq.len());
            Some(&seq[from..to])
        }
        _ => None,
    };
    let md5: [u8; 16] = span_bases.map_or([0; 16], |b| Md5::digest(b).into());
    let mut embedded = u32::MAX; // none (-1)
    if let (true, Some(bases)) = (opts.embed_ref, span_bases) {
        embedded = EMBEDDED_REFERENCE_ID;
        externals.push((
            embedded,
            block(
                EXTERNAL_DATA,
                embedded,
                bases,
                Method::Gzip(level(opts)),
                nx16,
            ),
        ));
    }
    let mut sh = Vec::new();
    write_itf8(&mut sh, reference as u32);
    write_itf8(&mut sh, clamp_i32(slice_start) as u32);
    write_itf8(&mut sh, clamp_i32(slice_span) as u32);
    write_itf8(&mut sh, views.len() as u32);
    write_ltf8(&mut sh, counter);
    write_itf8(&mut sh, externals.len() as u32 + 1);
    write_itf8(&mut sh, externals.len() as u32);
    for (id, _) in &externals {
        write_itf8(&mut sh, *id);
    }
    write_itf8(&mut sh, embedded);
    sh.extend_from_slice(&md5);

    let mut body = raw_block(COMPRESSION_HEADER, 0, &ch);
    let landmark = body.len() as u32;
    body.extend_from_slice(&raw_block(SLICE_HEADER, 0, &sh));
    body.extend_from_slice(&raw_block(CORE_DATA, 0, &[]));
    for (_, b) in &externals {
        body.extend_from_slice(b);
    }
    let size = body.len() as u32 - landmark;
    let bytes = container(
        &body,
        reference,
        slice_start,
        slice_span,
        views.len(),
        counter,
        bases_total,
        externals.len() + 3,
        &[landmark],
    );
    Ok(Container {
        bytes,
        info: SliceInfo {
            reference,
            start: clamp_i32(slice_start),
            span: clamp_i32(slice_span),
            landmark,
            size,
        },
    })
}

/// Compresses the slice's data series and tag blocks in `s` into
/// `externals` (content-id order) and returns the compression header
/// (§8.4) that names their encodings: preservation map (RN, AP delta when
/// `sorted`, RR, SM, TD), data series and tag encodings.
fn series_blocks_and_header(
    s: &mut Scratch,
    sorted: bool,
    opts: &CramOptions,
    nx16: bool,
    externals: &mut Vec<(u32, Vec<u8>)>,
) -> Vec<u8> {
    let mut ds_map = Vec::new();
    let mut ds_count = 0u32;
    for (idx, (ds, key, kind)) in SERIES.iter().enumerate() {
        let data = &s.series[idx];
        if data.is_empty() {
            continue;
        }
        let id = idx as u32 + 1;
        ds_count += 1;
        ds_map.extend_from_slice(key);
        match kind {
            Kind::Int | Kind::Byte => external_encoding(&mut ds_map, id),
            Kind::Len => {
                let mut params = Vec::new();
                external_encoding(&mut params, id);
                external_encoding(&mut params, id);
                write_itf8(&mut ds_map, 4);
                write_itf8(&mut ds_map, params.len() as u32);
                ds_map.extend_from_slice(&params);
            }
            Kind::Stop => {
                let mut params = vec![0u8];
                write_itf8(&mut params, id);
                write_itf8(&mut ds_map, 5);
                write_itf8(&mut ds_map, params.len() as u32);
                ds_map.extend_from_slice(&params);
            }
        }
        externals.push((id, block(EXTERNAL_DATA, id, data, method(*ds, opts), nx16)));
    }
    s.tags.sort_unstable_by_key(|&(key, _)| key);
    let mut tag_map = Vec::new();
    write_itf8(&mut tag_map, s.tags.len() as u32);
    for (key, data) in &s.tags {
        let key = *key;
        write_itf8(&mut tag_map, key);
        // BYTE_ARRAY_LEN: the length and the value, both EXTERNAL in the
        // tag's own block.
        let mut params = Vec::new();
        external_encoding(&mut params, key);
        external_encoding(&mut params, key);
        write_itf8(&mut tag_map, 4);
        write_itf8(&mut tag_map, params.len() as u32);
        tag_map.extend_from_slice(&params);
        externals.push((
            key,
            block(EXTERNAL_DATA, key, data, tag_method(key, opts), nx16),
        ));
    }

    // Compression header (§8.4).
    let mut pm = Vec::new();
    write_itf8(&mut pm, 5);
    pm.extend_from_slice(b"RN\x01AP");
    pm.push(u8::from(sorted));
    pm.extend_from_slice(b"RR");
    pm.push(u8::from(!opts.no_ref && !opts.embed_ref));
    pm.extend_from_slice(b"SM");
    pm.extend_from_slice(&SUBSTITUTION_MATRIX);
    pm.extend_from_slice(b"TD");
    write_itf8(&mut pm, s.line_order.len() as u32);
    pm.extend_from_slice(&s.line_order);
    let mut ch = Vec::new();
    write_itf8(&mut ch, pm.len() as u32);
    ch.extend_from_slice(&pm);
    let mut dsm = Vec::new();
    write_itf8(&mut dsm, ds_count);
    dsm.extend_from_slice(&ds_map);
    write_itf8(&mut ch, dsm.len() as u32);
    ch.extend_from_slice(&dsm);
    write_itf8(&mut ch, tag_map.len() as u32);
    ch.extend_from_slice(&tag_map);
    ch
}

/// Encodes record `k` of the slice (`r`) into the data series and tag
/// blocks of `s`; returns its read length. `multi`: the slice holds
/// several references (RI stored); `sorted`: AP is stored as a delta from
/// `last_ap`, the previous record's position.
#[allow(clippy::too_many_arguments)]
#[inline]
fn encode_record(
    s: &mut Scratch,
    k: usize,
    r: &RecordRef<'_>,
    multi: bool,
    sorted: bool,
    last_ap: &mut i64,
    refs: &SliceRefs,
    groups: &dyn ReadGroups,
    opts: &CramOptions,
) -> Result<usize, Refusal> {
    let seq_of = |tid: i32| sequence(refs, tid);
    let flag = r.flag();
    let l_seq = r.l_seq();
    let qual = r.qual();
    s.bases.clear();
    r.push_bases(&mut s.bases);
    let has_seq = l_seq > 0;
    let mapped = flag & 0x4 == 0;
    let apos = r.pos() as i64 + 1;
    if apos < 0 {
        // htslib's `cram_encode_slice_read` fails on a position below
        // 0 (BAM input may hold one; SAM cannot), mapped or not.
        return Err((k, Unencodable::NegativePosition(apos)));
    }

    let ser = &mut s.series;
    int(&mut ser[Ds::Bf as usize], flag as i32);
    let mut cf = CF_QUALITIES
        | match s.downstream[k] {
            Link::Detached => CF_DETACHED,
            Link::To(_) => CF_MATE_DOWNSTREAM,
            Link::Last => 0,
        };
    if !has_seq {
        cf |= CF_NO_SEQ;
    }
    int(&mut ser[Ds::Cf as usize], cf);
    if multi {
        int(&mut ser[Ds::Ri as usize], r.ref_id());
    }
    // RL after the features are known (a record without bases takes
    // its length from the CIGAR); its block is written in record order
    // all the same, so it is pushed when known, before anything else of
    // this record goes into the RL block.
    let ap = if sorted { apos - *last_ap } else { apos };
    *last_ap = apos;
    // Read group and tags.
    // A CIGAR too long for BAM (`kSmN` with the real one in CG:B,I, SAM
    // spec §4.2.2): the real one is encoded and CG left out, as htslib
    // does (it reads the real CIGAR into the record).
    s.cigar.clear();
    let long_cigar = long_cigar(r, &mut s.cigar);
    if !long_cigar {
        s.cigar.extend(r.cigar().ops());
    }
    let (rg, tl) = record_tags(s, k, r, long_cigar, mapped && has_seq, refs, groups, opts)?;

    let ser = &mut s.series;
    int(&mut ser[Ds::Ap as usize], clamp_i32(ap));
    int(&mut ser[Ds::Rg as usize], rg);
    ser[Ds::Rn as usize].extend_from_slice(r.read_name());
    ser[Ds::Rn as usize].push(0);
    match s.downstream[k] {
        // Mates, detached: stored as they are.
        Link::Detached => {
            let mf = i32::from(flag & 0x20 != 0) | (i32::from(flag & 0x8 != 0) << 1);
            int(&mut ser[Ds::Mf as usize], mf);
            int(&mut ser[Ds::Ns as usize], r.next_ref_id());
            // htslib stores a mate position below 0 as 0 (PNEXT 0,
            // unknown): `MAX(bam_mate_pos(b)+1, 0)`.
            int(&mut ser[Ds::Np as usize], (r.next_pos() + 1).max(0));
            int(&mut ser[Ds::Ts as usize], r.tlen());
        }
        // Attached: the records to skip to the mate; a reader takes
        // both records' mate fields and TLEN from each other.
        Link::To(j) => int(&mut ser[Ds::Nf as usize], (j - k - 1) as i32),
        Link::Last => {}
    }
    int(&mut ser[Ds::Tl as usize], tl as i32);

    let read_len;
    if mapped {
        if r.ref_id() < 0 || r.pos() < 0 {
            return Err((k, Unencodable::NoPosition));
        }
        let refseq = seq_of(r.ref_id());
        read_len = features(r, &s.cigar, &s.bases, qual, refseq, opts.no_ref, ser)
            .map_err(|what| (k, what))?;
        int(&mut ser[Ds::Mq as usize], r.mapq() as i32);
    } else {
        read_len = l_seq;
        ser[Ds::Ba as usize].extend_from_slice(&s.bases);
    }
    int(&mut ser[Ds::Rl as usize], read_len as i32);
    if has_seq {
        ser[Ds::Qs as usize].extend_from_slice(qual);
    } else {
        let q = &mut ser[Ds::Qs as usize];
        q.resize(q.len() + read_len, 0xff);
    }
    Ok(read_len)
}

/// Stores record `k`'s tags (`r`'s, CG left out when its CIGAR is the long
/// form in `s.cigar`) in their blocks and its tag line in the tag
/// dictionary, MD/NM left out where a reader computes them back the same;
/// returns its read-group series value (-1: none; an RG not in the header
/// is a tag) and tag line. `placed_bases`: mapped with bases.
#[allow(clippy::too_many_arguments)]
#[inline]
fn record_tags(
    s: &mut Scratch,
    k: usize,
    r: &RecordRef<'_>,
    long_cigar: bool,
    placed_bases: bool,
    refs: &SliceRefs,
    groups: &dyn ReadGroups,
    opts: &CramOptions,
) -> Result<(i32, u32), Refusal> {
    let seq_of = |tid: i32| sequence(refs, tid);
    let mut rg = -1i32;
    s.line.clear();
    let mut rg_seen = false;
    // What a reader computes for MD and NM (md_nm.rs), worked out at
    // the first of them: `Some(None)` when it adds none.
    let mut regenerated: Option<Option<u32>> = None;
    for field in r.aux().fields() {
        let field = field.map_err(|e| (k, Unencodable::MalformedTags(e)))?;
        let (tag, ty, val) = (field.tag, field.ty, field.value);
        if long_cigar && tag == *b"CG" {
            continue;
        }
        if tag == *b"RG" {
            if rg_seen {
                return Err((k, Unencodable::SecondReadGroup));
            }
            rg_seen = true;
            if let Some(id) = field.string().and_then(|v| groups.id(v)) {
                rg = id;
                continue;
            }
        }
        let md = tag == *b"MD" && ty == b'Z' && !opts.store_md;
        let nm = tag == *b"NM" && !opts.store_nm;
        if md || nm {
            // Left out when a reader adds it back the same, as htslib
            // does: a placed record with bases read against its
            // reference, one MD and one NM at most, and no base that
            // makes htslib keep both as given (a read N over a
            // reference N, a base past the reference's end).
            let again = *regenerated.get_or_insert_with(|| {
                let refseq = seq_of(r.ref_id());
                let placed = placed_bases && r.ref_id() >= 0 && r.pos() >= 0;
                match refseq {
                    Some(refseq) if placed && !opts.no_ref && single_md_nm(r.aux()) => {
                        s.cigar_words.clear();
                        s.cigar_words
                            .extend(s.cigar.iter().map(|&(op, l)| l << 4 | u32::from(op)));
                        let pos = r.pos() as usize;
                        if crate::md_nm::kept_as_given(&s.bases, &s.cigar_words, pos, refseq) {
                            // htslib keeps them, in their place.
                            return None;
                        }
                        crate::md_nm::compute(
                            &s.bases,
                            &s.cigar_words,
                            pos,
                            refseq,
                            crate::md_nm::Ends::NONE,
                            &mut s.md,
                        )
                    }
                    _ => None,
                }
            });
            let same = again.is_some_and(|n| {
                if md {
                    // Compared as htslib compares it, ignoring case (a
                    // lower-case MD comes back upper-case, as from samtools).
                    val[..val.len() - 1].eq_ignore_ascii_case(&s.md)
                } else {
                    field.int() == Some(i64::from(n))
                }
            });
            if same {
                continue;
            }
        }
        s.line.extend_from_slice(&[tag[0], tag[1], ty]);
        let key = (tag[0] as u32) << 16 | (tag[1] as u32) << 8 | ty as u32;
        let at = match s.prev_tags.get(s.cur_tags.len()) {
            Some(&(k, at)) if k == key => at,
            _ => *s.tag_at.entry(key).or_insert_with(|| {
                s.tags.push((key, Vec::new()));
                s.tags.len() - 1
            }),
        };
        s.cur_tags.push((key, at));
        let block = &mut s.tags[at].1;
        write_itf8(block, val.len() as u32);
        block.extend_from_slice(val);
    }
    std::mem::swap(&mut s.prev_tags, &mut s.cur_tags);
    s.cur_tags.clear();
    // Looked up by slice, so that only a new tag line is copied.
    let tl = match s.prev_tl {
        Some(tl) if s.line == s.prev_line => tl,
        _ => match s.lines.get(s.line.as_slice()) {
            Some(&tl) => tl,
            None => {
                let tl = s.lines.len() as u32;
                s.lines.insert(s.line.clone(), tl);
                s.line_order.extend_from_slice(&s.line);
                s.line_order.push(0);
                tl
            }
        },
    };
    s.prev_tl = Some(tl);
    std::mem::swap(&mut s.prev_line, &mut s.line);
    Ok((rg, tl))
}

/// The upper-case sequence of reference `tid`, if the slice uses it.
fn sequence<'a>(refs: &SliceRefs<'a>, tid: i32) -> Option<&'a [u8]> {
    usize::try_from(tid)
        .ok()
        .and_then(|t| refs.sequences.get(t).copied().flatten())
}

fn clamp_i32(v: i64) -> i32 {
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32
}

fn int(out: &mut Vec<u8>, v: i32) {
    write_itf8(out, v as u32);
}

/// EXTERNAL encoding (codec 1) of content `id`.
fn external_encoding(out: &mut Vec<u8>, id: u32) {
    let mut params = Vec::new();
    write_itf8(&mut params, id);
    write_itf8(out, 1);
    write_itf8(out, params.len() as u32);
    out.extend_from_slice(&params);
}

/// Whether `r` holds a CIGAR too long for BAM (two operations, `kSmN` with
/// k its length, and a CG:B,I tag); if so its real operations go to `out`.
fn long_cigar(r: &RecordRef, out: &mut Vec<(u8, u32)>) -> bool {
    if r.n_cigar_op() != 2 || r.l_seq() == 0 {
        return false;
    }
    let mut ops = r.cigar().ops();
    let (Some((op::SOFT_CLIP, k)), Some((op::SKIP, _))) = (ops.next(), ops.next()) else {
        return false;
    };
    if k as usize != r.l_seq() {
        return false;
    }
    let Some(cg) = r.aux().find(*b"CG") else {
        return false;
    };
    let Some(words) = cg.int_array().filter(|_| cg.value[0] == b'I') else {
        return false;
    };
    out.extend(words.map(|w| cigar::unpack(w as u32)));
    true
}

/// The read features of a mapped record (§10.6) from its CIGAR against
/// `refseq`, written to their series with FN; returns the read length (the
/// CIGAR's query length when the record has no bases).
#[allow(clippy::too_many_arguments)]
fn features(
    r: &RecordRef,
    cigar: &[(u8, u32)],
    bases: &[u8],
    qual: &[u8],
    refseq: Option<&[u8]>,
    no_ref: bool,
    ser: &mut [Vec<u8>],
) -> Result<usize, Unencodable> {
    let has_seq = !bases.is_empty();
    let mut n = 0i32;
    let mut last = 0usize;
    let mut rp = 0usize;
    let mut ap = r.pos() as usize;
    // FC and FP are written as features are found; FN goes before them in
    // its own block, so it is pushed at the end.
    let mut feature = |ser: &mut [Vec<u8>], code: u8, at: usize| {
        ser[Ds::Fc as usize].push(code);
        int(&mut ser[Ds::Fp as usize], (at + 1 - last) as i32);
        last = at + 1;
        n += 1;
    };
    let query_len = cigar::query_length(cigar.iter().copied()) as usize;
    if has_seq && query_len != bases.len() {
        return Err(Unencodable::CigarLength {
            query_len,
            bases: bases.len(),
        });
    }
    if cigar.is_empty() && has_seq {
        return Err(Unencodable::NoCigar);
    }
    let stretch = |ser: &mut [Vec<u8>], ds: Ds, from: usize, len: usize| {
        let out = &mut ser[ds as usize];
        if has_seq {
            out.extend_from_slice(&bases[from..from + len]);
        } else {
            out.resize(out.len() + len, b'N');
        }
        out.push(0);
    };
    for &(op, len) in cigar {
        let len = len as usize;
        match op {
            op::MATCH | op::SEQ_MATCH | op::SEQ_MISMATCH => {
                if has_seq && no_ref {
                    // No reference: the bases verbatim, as one stretch.
                    feature(ser, b'b', rp);
                    let bb = &mut ser[Ds::Bb as usize];
                    write_itf8(bb, len as u32);
                    bb.extend_from_slice(&bases[rp..rp + len]);
                } else if has_seq {
                    let read = &bases[rp..rp + len];
                    // The reference under these bases (shorter past its end).
                    let under = refseq
                        .and_then(|s| s.get(ap..))
                        .map_or(&[][..], |s| &s[..len.min(s.len())]);
                    let mut i = 0;
                    while i < len {
                        // Runs equal to the reference, 16 bases at a time.
                        if i + 16 <= under.len() && read[i..i + 16] == under[i..i + 16] {
                            i += 16;
                            continue;
                        }
                        let b = read[i];
                        let rb = under.get(i).copied();
                        if rb == Some(b) {
                            i += 1;
                            continue;
                        }
                        let sub = match (rb.and_then(acgtn), acgtn(b)) {
                            (Some(x), Some(y)) if y < 4 || x < 4 => Some((x, y)),
                            _ => None,
                        };
                        match sub {
                            Some((x, y)) => {
                                feature(ser, b'X', rp + i);
                                ser[Ds::Bs as usize].push(substitution_code(x, y));
                            }
                            None => {
                                feature(ser, b'B', rp + i);
                                ser[Ds::Ba as usize].push(b);
                                ser[Ds::Qs as usize].push(qual[rp + i]);
                            }
                        }
                        i += 1;
                    }
                }
                rp += len;
                ap += len;
            }
            op::INSERTION => {
                feature(ser, b'I', rp);
                stretch(ser, Ds::In, rp, len);
                rp += len;
            }
            op::DELETION => {
                feature(ser, b'D', rp);
                int(&mut ser[Ds::Dl as usize], len as i32);
                ap += len;
            }
            op::SKIP => {
                feature(ser, b'N', rp);
                int(&mut ser[Ds::Rs as usize], len as i32);
                ap += len;
            }
            op::SOFT_CLIP => {
                feature(ser, b'S', rp);
                stretch(ser, Ds::Sc, rp, len);
                rp += len;
            }
            op::HARD_CLIP => {
                feature(ser, b'H', rp);
                int(&mut ser[Ds::Hc as usize], len as i32);
            }
            op::PADDING => {
                feature(ser, b'P', rp);
                int(&mut ser[Ds::Pd as usize], len as i32);
            }
            _ => return Err(Unencodable::UnknownCigarOp(op)),
        }
    }
    // FN precedes the features in record order, but lives in its own block.
    int(&mut ser[Ds::Fn as usize], n);
    Ok(rp)
}

/// How a record's mate is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Link {
    /// Its mate fields and TLEN as they are (MF, NS, NP, TS).
    Detached,
    /// Attached to its mate, the record at this index of the slice.
    To(usize),
    /// The mate of an earlier record of the slice, attached to it.
    Last,
}

/// Which records of a slice are stored attached to their mate: the two
/// records of a name that occurs twice in the slice, a primary first and
/// last segment both placed on one reference, whose mate fields are each
/// other's and whose TLENs are what htslib 1.24, htslib 1.16 and htsjdk
/// all compute for an attached pair (htslib from the leftmost start and
/// rightmost end, the two versions breaking a tie of starts differently;
/// htsjdk from the 5' ends); every other record is detached, so each
/// reader gives back the stored fields. samtools attaches most pairs the
/// same way.
fn attach_mates(views: &[RecordRef], out: &mut Vec<Link>) {
    out.clear();
    out.resize(views.len(), Link::Detached);
    let mut names: HashMap<&[u8], (usize, usize, u8), NameHash> =
        HashMap::with_capacity_and_hasher(views.len(), NameHash::default());
    for (i, r) in views.iter().enumerate() {
        let e = names.entry(r.read_name()).or_insert((i, i, 0));
        e.2 = e.2.saturating_add(1);
        e.1 = i;
    }
    for &(a, b, n) in names.values() {
        if n == 2 && attachable(&views[a], &views[b]) {
            out[a] = Link::To(b);
            out[b] = Link::Last;
        }
    }
}

/// Whether records `a` and `b` (`a` first in the slice) read back exactly
/// when attached (see [`attach_mates`]).
fn attachable(a: &RecordRef, b: &RecordRef) -> bool {
    let (fa, fb) = (a.flag(), b.flag());
    // Paired, placed, mates placed, primary; one first and one last segment.
    let plain = |f: u16| f & 0x1 != 0 && f & (0x4 | 0x8 | 0x100 | 0x800) == 0;
    let segments = (fa & 0xc0, fb & 0xc0);
    if !(plain(fa) && plain(fb) && (segments == (0x40, 0x80) || segments == (0x80, 0x40))) {
        return false;
    }
    // Each other's reference, position and strand.
    if a.ref_id() < 0
        || a.ref_id() != b.ref_id()
        || a.next_ref_id() != b.ref_id()
        || b.next_ref_id() != a.ref_id()
        || a.next_pos() != b.pos()
        || b.next_pos() != a.pos()
        || (fa & 0x20 != 0) != (fb & 0x10 != 0)
        || (fb & 0x20 != 0) != (fa & 0x10 != 0)
    {
        return false;
    }
    let (la, lb) = (a.reference_length(), b.reference_length());
    if la < 1 || lb < 1 {
        return false;
    }
    // 1-based starts and ends.
    let (sa, sb) = (i64::from(a.pos()) + 1, i64::from(b.pos()) + 1);
    let (ea, eb) = (sa + la - 1, sb + lb - 1);
    // htslib's reader (`records/mates.rs`, `resolve`): from the leftmost
    // start to the rightmost end, positive for the first record when it
    // starts leftmost (ties: when it does not also end rightmost, or the
    // other does not start there too; then by first segment).
    let (left, left_n) = match sa.cmp(&sb) {
        std::cmp::Ordering::Less => (sa, 1),
        std::cmp::Ordering::Equal => (sa, 2),
        std::cmp::Ordering::Greater => (sb, 1),
    };
    let (right, right_n) = match ea.cmp(&eb) {
        std::cmp::Ordering::Greater => (ea, 1),
        std::cmp::Ordering::Equal => (ea, 2),
        std::cmp::Ordering::Less => (eb, 1),
    };
    let span = right - left + 1;
    let first_positive = if sa == left && (ea < right || left_n <= 1) {
        true
    } else if sa == left && ea == right && left_n > 1 && right_n > 1 {
        fa & 0x40 != 0
    } else {
        false
    };
    let (ta, tb) = if first_positive {
        (span, -span)
    } else {
        (-span, span)
    };
    if i64::from(a.tlen()) != ta || i64::from(b.tlen()) != tb {
        return false;
    }
    // htslib 1.10 to 1.22 (1.16 is still Debian's and Ubuntu's samtools),
    // `cram_decode_slice_xref`: each record on its own, positive when it
    // starts leftmost and is alone there or the first segment, so a pair
    // starting together gets its signs from the segments even when one
    // ends first (htslib commit 4ec8b744, in 1.23, made the rule above).
    let old_rule = |start: i64, flag: u16| {
        if start == left && (left_n == 1 || flag & 0x40 != 0) {
            span
        } else {
            -span
        }
    };
    if old_rule(sa, fa) != ta || old_rule(sb, fb) != tb {
        return false;
    }
    // htsjdk's reader (`CRAMRecord.restoreMateInfo`): from the 5' end of
    // the record stored first to the other's, plus one (minus one when the
    // other's is before); the record stored first, not the first segment,
    // so that two 5' ends at one place give it the positive TLEN.
    let five = |s: i64, e: i64, f: u16| if f & 0x10 != 0 { e } else { s };
    let (p1, p2) = (five(sa, ea, fa), five(sb, eb, fb));
    let t = p2 - p1 + if p2 >= p1 { 1 } else { -1 };
    ta == t && tb == -t
}

/// Whether the tag area `aux` holds at most one MD and at most one NM (a
/// reader adds either back only when the record has none).
fn single_md_nm(aux: Aux<'_>) -> bool {
    let (mut md, mut nm) = (0, 0);
    for f in aux.fields() {
        let Ok(f) = f else { return false };
        md += usize::from(f.tag == *b"MD");
        nm += usize::from(f.tag == *b"NM");
    }
    md <= 1 && nm <= 1
}

/// The codec each series is stored with, one per series so that each
/// block is compressed once. Chosen from which of rANS 4x8 order 1 and
/// gzip gave the smaller block, series by series, on the benchmark's first
/// 500,000 records (docs/cram.md, "CRAM output by alnsort's encoder"):
/// rANS order 1 for the qualities and the integer series of varied values
/// (flags, lengths, mapping qualities, feature counts, mate flags, TLEN),
/// order 0 for single bases and feature codes, gzip for names, base
/// stretches, and the series of positions or of long runs of one value
/// (AP, FP, DL, NP, NS, RI, RG, TS), where gzip's matches win.
/// CRAM 3.1 takes rANS Nx16 where 3.0 takes rANS 4x8.
fn method(ds: Ds, opts: &CramOptions) -> Method {
    match ds {
        Ds::Rn | Ds::In | Ds::Sc | Ds::Bb => Method::Gzip(level(opts)),
        Ds::Ap | Ds::Fp | Ds::Dl | Ds::Np | Ds::Ns | Ds::Ri | Ds::Rg | Ds::Ts => {
            Method::Gzip(level(opts))
        }
        Ds::Ba | Ds::Bs | Ds::Fc => Method::Rans4x8(false),
        _ => Method::Rans4x8(true),
    }
}

/// Tags: numbers and characters rANS order 1 (as the integer series; it
/// gave the smaller block for AS and NM, gzip for XS by 0.02 % of the
/// output), strings and arrays gzip.
fn tag_method(key: u32, opts: &CramOptions) -> Method {
    match key as u8 {
        b'c' | b'C' | b's' | b'S' | b'i' | b'I' | b'A' => Method::Rans4x8(true),
        _ => Method::Gzip(level(opts)),
    }
}

fn level(opts: &CramOptions) -> u32 {
    opts.level.unwrap_or(5).min(12)
}

/// `data` compressed by `m` as an external block of content `id`; raw when
/// compressing would not make it smaller.
/// rANS is rANS Nx16 (method 5) when `nx16` (CRAM 3.1), else rANS 4x8.
fn block(content_type: u8, id: u32, data: &[u8], m: Method, nx16: bool) -> Vec<u8> {
    let rans = |order1| {
        if nx16 {
            (5, crate::rans::encode_nx16(order1, data))
        } else {
            (4, crate::rans::encode(order1, data))
        }
    };
    let packed = match m {
        Method::Gzip(level) => gzip(data, level).map(|d| (1, d)),
        Method::Rans4x8(order1) => Some(rans(order1)),
    };
    match packed {
        Some((method, d)) if d.len() < data.len() => {
            make_block(method, content_type, id, &d, data.len())
        }
        _ => raw_block(content_type, id, data),
    }
}

fn gzip(data: &[u8], level: u32) -> Option<Vec<u8>> {
    thread_local! {
        /// Each thread's compressor and its level (libdeflate's state is
        /// large; made once per thread and level).
        static GZIP: std::cell::RefCell<Option<(u32, libdeflater::Compressor)>> =
            const { std::cell::RefCell::new(None) };
    }
    GZIP.with(|g| {
        let mut g = g.borrow_mut();
        if g.as_ref().is_none_or(|(l, _)| *l != level) {
            let lvl = libdeflater::CompressionLvl::new(level as i32).ok()?;
            *g = Some((level, libdeflater::Compressor::new(lvl)));
        }
        let (_, c) = g.as_mut()?;
        let mut out = vec![0; c.gzip_compress_bound(data.len())];
        let n = c.gzip_compress(data, &mut out).ok()?;
        out.truncate(n);
        Some(out)
    })
}

/// A raw block of `data` (§8.1).
pub(crate) fn raw_block(content_type: u8, id: u32, data: &[u8]) -> Vec<u8> {
    make_block(0, content_type, id, data, data.len())
}

fn make_block(method: u8, content_type: u8, id: u32, data: &[u8], raw_len: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(data.len() + 16);
    b.push(method);
    b.push(content_type);
    write_itf8(&mut b, id);
    write_itf8(&mut b, data.len() as u32);
    write_itf8(&mut b, raw_len as u32);
    b.extend_from_slice(data);
    let c = crc32(&b);
    b.extend_from_slice(&c.to_le_bytes());
    b
}

/// A container (§7): its header, with CRC32, then `body`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn container(
    body: &[u8],
    reference: i32,
    start: i64,
    span: i64,
    records: usize,
    counter: u64,
    bases: u64,
    blocks: usize,
    landmarks: &[u32],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 64);
    out.extend_from_slice(&(body.len() as i32).to_le_bytes());
    write_itf8(&mut out, reference as u32);
    write_itf8(&mut out, clamp_i32(start) as u32);
    write_itf8(&mut out, clamp_i32(span) as u32);
    write_itf8(&mut out, records as u32);
    write_ltf8(&mut out, counter);
    write_ltf8(&mut out, bases);
    write_itf8(&mut out, blocks as u32);
    write_itf8(&mut out, landmarks.len() as u32);
    for &l in landmarks {
        write_itf8(&mut out, l);
    }
    let c = crc32(&out);
    out.extend_from_slice(&c.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The CRAM 3 end-of-file container (§9), as every CRAM 3 writer ends a
/// file with it.
pub(crate) const EOF_CONTAINER: [u8; 38] = [
    0x0f, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x0f, 0xe0, 0x45, 0x4f, 0x46, 0x00, 0x00, 0x00,
    0x00, 0x01, 0x00, 0x05, 0xbd, 0xd9, 0x4f, 0x00, 0x01, 0x00, 0x06, 0x06, 0x01, 0x00, 0x01, 0x00,
    0x01, 0x00, 0xee, 0x63, 0x01, 0x4b,
];

/// The file definition (§6) and the header container (§7.1) holding the
/// SAM header `text`.
pub(crate) fn file_start(minor: u8, text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 64);
    out.extend_from_slice(crate::MAGIC);
    out.extend_from_slice(&[3, minor]);
    out.extend_from_slice(&[0; 20]);
    let mut data = Vec::with_capacity(text.len() + 4);
    data.extend_from_slice(&(text.len() as i32).to_le_bytes());
    data.extend_from_slice(text);
    let body = raw_block(FILE_HEADER, 0, &data);
    out.extend_from_slice(&container(&body, 0, 0, 0, 0, 0, 0, 1, &[0]));
    out
}
