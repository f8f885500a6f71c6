//! A slice's records decoded one by one: the slice's embedded or external
//! reference checked, then each record's data series read in CRAM's order
//! (flags and position, read group, name, mate, tags, bases and qualities),
//! its name generated when not stored and its BAM bytes written
//! ([`bam_record`](super::bam_record)); at the slice's end its mates' fields
//! ([`mates`]).

use super::compression_header::{CompressionHeader, Ds};
use super::mates::{self, ChainHeads, Mate};
use super::streams::Streams;
use super::{out_of_range, Fault};
use super::{CF_DETACHED, CF_EXPLICIT_TLEN, CF_MATE_DOWNSTREAM, CF_NO_SEQ, CF_QUAL_ARRAY};
use crate::container::{SliceBlocks, SliceHeader};
use crate::error::DecodeError;
use crate::reference::Lease;
use std::io;
use std::sync::Arc;

/// What the records need of the file: its name (for generated read
/// names), reference lengths, read group names in header order.
pub(crate) struct FileInfo {
    /// htslib's prefix of generated names: the file's base name.
    pub prefix: Vec<u8>,
    pub ref_lengths: Vec<u64>,
    pub read_groups: Vec<Vec<u8>>,
}

/// The reference a slice's mapped records are read against.
enum SliceRef {
    /// Not loaded yet (or a multi-reference slice: per record).
    None,
    /// A whole sequence by id.
    Whole(i32, Arc<noodles_fasta::record::Sequence>),
}

/// Reused buffers of one decoding job.
#[derive(Default)]
pub(crate) struct SliceDecoder {
    pub(super) name: Vec<u8>,
    pub(super) tags: Vec<u8>,
    pub(super) seq: Vec<u8>,
    pub(super) qual: Vec<u8>,
    pub(super) cigar: Vec<u32>,
    /// Where the record's deletions of length 0 (a `D` feature with DL 0,
    /// as old htsjdk wrote them) stand in `cigar`: each index is that of
    /// the operation it precedes. They are not in the CIGAR, but htslib's
    /// MD has them (`^` with no bases).
    pub(super) zero_dels: Vec<usize>,
    /// `cigar` with the zero-length deletions put in, for MD.
    pub(super) md_cigar: Vec<u32>,
    pub(super) md: Vec<u8>,
    /// The 0-based reference position of the record's first feature that
    /// gives a base past the reference's end (`X`, `B`, `b`), where htslib
    /// ends its MD (see [`md_nm::compute`](crate::md_nm::compute));
    /// `usize::MAX` when none.
    pub(super) md_end: usize,
    pub(super) array: Vec<u8>,
    pub(super) mates: Vec<Mate>,
    /// Per record line: the first record of the attached chain that
    /// points at it.
    heads: ChainHeads,
}

/// A record's fields read before its mate and tags (BF, CF, RI, RL, AP,
/// RG, RN).
pub(super) struct Core<'f> {
    /// The BAM flags (the mate bits of a detached record added).
    pub(super) flag: u16,
    /// The CRAM flags.
    pub(super) cf: i32,
    pub(super) ref_id: i32,
    /// The read length.
    pub(super) rl: usize,
    /// The 1-based alignment position.
    pub(super) apos: i64,
    /// The read group's name, when the RG series gives one to output.
    pub(super) rg: Option<&'f [u8]>,
    /// Whether `name` holds a stored name.
    has_name: bool,
}

/// What a record's bases give it: MAPQ, how many bases it writes, its
/// reference span and the reference it was read against (its bases and
/// the 0-based position of the first).
pub(super) struct Bases<'r> {
    pub(super) mapq: u8,
    pub(super) l_seq: usize,
    pub(super) span: i64,
    pub(super) refseq: Option<(&'r [u8], i64)>,
}

impl SliceDecoder {
    /// Decodes the records of one slice and appends them to `out`, framed.
    /// `first_record`: the 0-based number in the file of the slice's first
    /// record (for error messages).
    pub(crate) fn decode(
        &mut self,
        ch: &CompressionHeader,
        slice: &SliceBlocks,
        file: &FileInfo,
        lease: &mut Lease,
        first_record: u64,
        out: &mut Vec<u8>,
    ) -> io::Result<usize> {
        let h = &slice.header;
        let mut st = Streams::of_slice(ch, slice);
        let embedded: Option<&[u8]> = match h.embedded_reference {
            Some(id) => {
                let b = slice
                    .external
                    .iter()
                    .find(|e| e.0 == id)
                    .ok_or(Fault::EmbeddedReferenceMissing { content_id: id })?;
                if (b.1.len() as i64) < h.alignment_span as i64 {
                    return Err(Fault::EmbeddedReferenceShort {
                        len: b.1.len(),
                        span: h.alignment_span.into(),
                    }
                    .into());
                }
                Some(&b.1)
            }
            None => None,
        };
        // htslib checks every slice of one reference whose records were
        // written against it (RR true), against the reference given or
        // the slice's embedded one.
        if let (true, Ok(id)) = (ch.reference_required, usize::try_from(h.reference_id)) {
            lease.check_slice(
                id,
                h.alignment_start as i64 - 1,
                h.alignment_span as i64,
                &h.reference_md5,
                embedded,
            )?;
        }
        self.mates.clear();
        self.heads.clear();
        let mut slice_ref = SliceRef::None;
        let mut last_apos = h.alignment_start as i64;
        for rec in 0..h.record_count {
            let number = first_record + rec as u64 + 1;
            self.record(
                ch,
                h,
                &mut st,
                file,
                lease,
                embedded,
                &mut slice_ref,
                &mut last_apos,
                rec,
                out,
            )
            .map_err(|e| match crate::error::take_reference_error(e) {
                Ok(r) => io::Error::other(r),
                Err(error) => DecodeError::InRecord { number, error }.io(),
            })?;
        }
        mates::resolve(&mut self.mates, out).map_err(|error| {
            DecodeError::InMates {
                first: first_record + 1,
                last: first_record + h.record_count as u64,
                error,
            }
            .io()
        })?;
        Ok(h.record_count)
    }

    /// Decodes record `rec` of the slice and appends it to `out`, framed
    /// (its mate fields zero until the slice's mates are resolved).
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        ch: &CompressionHeader,
        h: &SliceHeader,
        st: &mut Streams<'_>,
        file: &FileInfo,
        lease: &mut Lease,
        embedded: Option<&[u8]>,
        slice_ref: &mut SliceRef,
        last_apos: &mut i64,
        rec: usize,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut core = self.core(ch, h, st, file, last_apos)?;
        let mut m = self.mate(ch, h, st, file, &mut core, rec, out.len())?;
        let (has_md, has_nm) = self.tags(ch, st)?;
        self.seq.clear();
        self.qual.clear();
        self.cigar.clear();
        let bases = if core.flag & 0x4 != 0 {
            self.unmapped_bases(ch, st, &core)?
        } else {
            if core.apos <= 0 {
                return Err(out_of_range(
                    "mapped record's alignment position",
                    core.apos,
                ));
            }
            let refseq = reference(ch, h, lease, embedded, slice_ref, core.ref_id)?;
            let bases = self.mapped_bases(ch, st, file, &core, refseq)?;
            m.aend = core.apos.max(core.apos + bases.span - 1);
            bases
        };
        m.flag = core.flag;
        if !core.has_name || self.name.is_empty() {
            self.generate_name(file, h, rec, m.line);
        }
        if self.name.is_empty() {
            self.name.push(b'*');
        }
        self.write_bam(file, &core, &bases, has_md, has_nm, out)?;
        self.mates.push(m);
        Ok(())
    }

    /// Reads BF, CF, RI, RL, AP, RG and (when names are stored with the
    /// records) RN. `last_apos`: the previous record's position, for AP
    /// stored as a delta.
    #[inline]
    fn core<'f>(
        &mut self,
        ch: &CompressionHeader,
        h: &SliceHeader,
        st: &mut Streams<'_>,
        file: &'f FileInfo,
        last_apos: &mut i64,
    ) -> io::Result<Core<'f>> {
        let ds = |d: Ds| &ch.series[d as usize];
        let bf = st.int(ds(Ds::BF))?;
        if !(0..=0xffff).contains(&bf) {
            return Err(out_of_range("BAM flags", bf));
        }
        let cf = st.int(ds(Ds::CF))?;
        let ref_id = if h.reference_id == -2 {
            st.int(ds(Ds::RI))?
        } else {
            h.reference_id
        };
        if ref_id < -1 || ref_id as i64 >= file.ref_lengths.len() as i64 {
            return Err(Fault::NotIn {
                what: "reference id",
                value: ref_id.into(),
                place: "the header",
            }
            .into());
        }
        let rl = st.int(ds(Ds::RL))?;
        let rl = usize::try_from(rl)
            .ok()
            .filter(|&n| n < 1 << 28)
            .ok_or_else(|| out_of_range("read length", rl))?;
        let mut apos = st.int(ds(Ds::AP))? as i64;
        if ch.ap_delta {
            apos += *last_apos;
            *last_apos = apos;
        }
        let rg = st.int(ds(Ds::RG))?;
        let rg = if rg == -1 {
            None
        } else {
            let name = usize::try_from(rg)
                .ok()
                .and_then(|i| file.read_groups.get(i))
                .ok_or(Fault::NotIn {
                    what: "read group",
                    value: rg.into(),
                    place: "the header",
                })?;
            (name != b"UNKNOWN" || rg as usize + 1 != file.read_groups.len()).then_some(&name[..])
        };
        self.name.clear();
        let mut has_name = false;
        if ch.read_names {
            st.array(ds(Ds::RN), &mut self.name, 1)?;
            has_name = true;
        }
        Ok(Core {
            flag: bf as u16,
            cf,
            ref_id,
            rl,
            apos,
            rg,
            has_name,
        })
    }

    /// Reads record `rec`'s mate series: a detached record's own mate
    /// fields (and its name, when names are not stored with the records),
    /// an attached one's link to the next record of its template, the TLEN
    /// either may store. `at`: where the record goes in the output.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn mate(
        &mut self,
        ch: &CompressionHeader,
        h: &SliceHeader,
        st: &mut Streams<'_>,
        file: &FileInfo,
        core: &mut Core<'_>,
        rec: usize,
        at: usize,
    ) -> io::Result<Mate> {
        let ds = |d: Ds| &ch.series[d as usize];
        let mut m = Mate {
            at,
            flag: 0,
            ref_id: core.ref_id,
            apos: core.apos,
            aend: core.apos,
            line: -1,
            tlen: None,
            explicit_tlen: None,
            mate_ref: -1,
            mate_pos: 0,
        };
        let cf = core.cf;
        if cf & CF_DETACHED != 0 {
            let mf = st.int(ds(Ds::MF))?;
            if !ch.read_names {
                st.array(ds(Ds::RN), &mut self.name, 1)?;
                core.has_name = true;
            }
            m.mate_ref = st.int(ds(Ds::NS))?;
            if m.mate_ref < -1 || m.mate_ref as i64 >= file.ref_lengths.len() as i64 {
                return Err(Fault::NotIn {
                    what: "mate reference id",
                    value: m.mate_ref.into(),
                    place: "the header",
                }
                .into());
            }
            m.mate_pos = st.int(ds(Ds::NP))? as i64;
            m.tlen = Some(st.int(ds(Ds::TS))? as i64);
            if mf & 1 != 0 {
                core.flag |= 0x1 | 0x20;
            }
            if mf & 2 != 0 {
                core.flag |= 0x8;
            }
            if core.flag & 0x1 == 0 {
                m.mate_ref = -1;
            }
        } else if cf & CF_MATE_DOWNSTREAM != 0 {
            let nf = st.int(ds(Ds::NF))? as i64;
            m.line = rec as i64 + nf + 1;
            if nf < 0 || m.line >= h.record_count as i64 {
                return Err(Fault::NotIn {
                    what: "mate line",
                    value: m.line,
                    place: "the slice",
                }
                .into());
            }
            self.heads.link(rec, m.line as usize);
            if cf & CF_EXPLICIT_TLEN != 0 {
                m.explicit_tlen = Some(st.int(ds(Ds::TS))? as i64);
            }
        } else if cf & CF_EXPLICIT_TLEN != 0 {
            m.explicit_tlen = Some(st.int(ds(Ds::TS))? as i64);
        }
        Ok(m)
    }

    /// Reads the record's tags (its tag line's, TL) into `self.tags` as BAM
    /// bytes; returns whether it has MD and NM, or its writer's cF tag says
    /// they are not to be generated.
    #[inline]
    fn tags(&mut self, ch: &CompressionHeader, st: &mut Streams<'_>) -> io::Result<(bool, bool)> {
        self.tags.clear();
        let tl = st.int(&ch.series[Ds::TL as usize])?;
        let line = usize::try_from(tl)
            .ok()
            .and_then(|i| ch.tag_lines.get(i))
            .ok_or(Fault::NotIn {
                what: "tag line",
                value: tl.into(),
                place: "the tag dictionary",
            })?;
        let (mut has_md, mut has_nm) = (false, false);
        for t in line {
            has_md |= t[..2] == *b"MD";
            has_nm |= t[..2] == *b"NM";
            let key = (t[0] as u32) << 16 | (t[1] as u32) << 8 | t[2] as u32;
            let codec = ch.tag_codec(key).ok_or(Fault::TagEncoding {
                tag: [t[0], t[1]],
                ty: t[2],
            })?;
            let at = self.tags.len();
            self.tags.extend_from_slice(t);
            let fixed = match t[2] {
                b's' | b'S' => 2,
                b'i' | b'I' | b'f' => 4,
                _ => 1,
            };
            st.array(codec, &mut self.tags, fixed)?;
            // htslib's `cram_decode_aux`: a one-byte cF:C is the writer's
            // CRAM flags for the record, never output; bit 1 says its MD,
            // bit 2 its NM, is not to be generated.
            if *t == *b"cFC" && self.tags.len() == at + 4 {
                let cf_tag = self.tags[at + 3];
                self.tags.truncate(at);
                has_md |= cf_tag & 1 != 0;
                has_nm |= cf_tag & 2 != 0;
            }
        }
        Ok((has_md, has_nm))
    }

    /// An unmapped record's bases (BA) and qualities (QS, or none).
    #[inline]
    fn unmapped_bases(
        &mut self,
        ch: &CompressionHeader,
        st: &mut Streams<'_>,
        core: &Core<'_>,
    ) -> io::Result<Bases<'static>> {
        let ds = |d: Ds| &ch.series[d as usize];
        let rl = core.rl;
        if rl > 0 {
            st.bytes_n(ds(Ds::BA), rl, &mut self.seq)?;
        }
        if core.cf & CF_QUAL_ARRAY != 0 {
            st.bytes_n(ds(Ds::QS), rl, &mut self.qual)?;
        } else {
            self.qual.resize(rl, 0xff);
        }
        Ok(Bases {
            mapq: 0,
            l_seq: rl,
            span: 0,
            refseq: None,
        })
    }

    /// A mapped record's bases, qualities and CIGAR from its read features
    /// against `refseq`, then its MAPQ (MQ) and stored qualities (QS); its
    /// position is checked (above 0) by the caller.
    #[inline]
    fn mapped_bases<'r>(
        &mut self,
        ch: &CompressionHeader,
        st: &mut Streams<'_>,
        file: &FileInfo,
        core: &Core<'_>,
        refseq: Option<(&'r [u8], i64)>,
    ) -> io::Result<Bases<'r>> {
        let ds = |d: Ds| &ch.series[d as usize];
        let (rl, cf, apos, ref_id) = (core.rl, core.cf, core.apos, core.ref_id);
        if refseq.is_none() {
            self.seq.resize(rl, b'=');
        } else {
            self.seq.resize(rl, b'N');
        }
        self.qual.resize(rl, 0xff);
        let ref_len = if ref_id >= 0 {
            file.ref_lengths[ref_id as usize] as i64
        } else {
            0
        };
        let span = self.features(ch, st, cf, rl, apos, ref_len, refseq)?;
        let mapq = st.int(ds(Ds::MQ))? as u8;
        if cf & CF_QUAL_ARRAY != 0 {
            self.qual.clear();
            st.bytes_n(ds(Ds::QS), rl, &mut self.qual)?;
        }
        Ok(Bases {
            mapq,
            l_seq: if cf & CF_NO_SEQ != 0 { 0 } else { rl },
            span,
            refseq,
        })
    }

    /// Writes the name htslib generates for record `rec` (whose mate link
    /// is `line`) into `self.name`: the file's prefix and the number of the
    /// first record of its attached chain (its own when it starts one).
    #[inline]
    fn generate_name(&mut self, file: &FileInfo, h: &SliceHeader, rec: usize, line: i64) {
        self.name.clear();
        self.name.extend_from_slice(&file.prefix);
        self.name.push(b':');
        let head = self.heads.of(rec);
        let k = if head >= 0 && line < 0 {
            head
        } else {
            rec as i64
        };
        let n = h.record_counter.wrapping_add(k + 1);
        self.name.extend_from_slice(n.to_string().as_bytes());
    }
}

/// The reference a mapped record on `ref_id` is read against: the slice's
/// embedded one (for records on the slice's reference), or the whole
/// sequence when the records were written against one (RR), loaded and
/// vouched for once per slice and reference; with the 0-based position of
/// its first base.
#[inline]
fn reference<'r>(
    ch: &CompressionHeader,
    h: &SliceHeader,
    lease: &mut Lease,
    embedded: Option<&'r [u8]>,
    slice_ref: &'r mut SliceRef,
    ref_id: i32,
) -> io::Result<Option<(&'r [u8], i64)>> {
    if ref_id < 0 {
        return Ok(None);
    }
    if let Some(e) = embedded {
        return Ok((h.reference_id == ref_id).then(|| (e, h.alignment_start as i64 - 1)));
    }
    if !ch.reference_required {
        return Ok(None);
    }
    let fresh = !matches!(slice_ref, SliceRef::Whole(id, _) if *id == ref_id);
    if fresh {
        let seq = lease.sequence(ref_id as usize)?;
        // Bases no slice MD5 vouches for (checked in `decode` when the
        // slice has one).
        if h.reference_id != ref_id || h.reference_md5 == [0; 16] {
            let span = (h.reference_id == ref_id).then(|| {
                let first = h.alignment_start as i64;
                (first, first + h.alignment_span as i64 - 1)
            });
            lease.refuse_unchecked(ref_id as usize, span)?;
        }
        *slice_ref = SliceRef::Whole(ref_id, seq);
    }
    let slice_ref: &'r SliceRef = slice_ref;
    Ok(match slice_ref {
        SliceRef::Whole(_, seq) => {
            let seq: &'r noodles_fasta::record::Sequence = seq;
            Some((seq.as_ref(), 0))
        }
        SliceRef::None => None,
    })
}
