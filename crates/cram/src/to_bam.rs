//! One decoded CRAM record to BAM record bytes, directly.
//!
//! noodles-cram hands out its records through the `sam::alignment::Record`
//! trait; going through noodles-bam's writer walks the CIGAR three times,
//! the bases and qualities one boxed item at a time, and the MD/NM pass
//! then copied every record again. Here each field is read from the trait
//! once into reused buffers and the record is laid out as noodles-bam lays
//! it out (same bin, same long-CIGAR form), with what htslib's decoder adds
//! written in place: MD/NM before an RG from the read-group series, MAPQ 0
//! for an unmapped record.

use crate::md_nm;
use alnsort_bam::record::reg2bin;
use noodles_bam::record::codec::encoder::data::field::{ty, write_value};
use noodles_sam::{
    self as sam,
    alignment::record::{cigar::op::Kind, data::field::Tag},
};
use std::io;

/// Reused buffers of the conversion (one per decoding job).
#[derive(Default)]
pub(crate) struct ToBam {
    cigar: Vec<u32>,
    bases: Vec<u8>,
    md: Vec<u8>,
    rg: Vec<u8>,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

fn op_code(kind: Kind) -> u32 {
    match kind {
        Kind::Match => 0,
        Kind::Insertion => 1,
        Kind::Deletion => 2,
        Kind::Skip => 3,
        Kind::SoftClip => 4,
        Kind::HardClip => 5,
        Kind::Pad => 6,
        Kind::SequenceMatch => 7,
        Kind::SequenceMismatch => 8,
    }
}

/// The largest base quality BAM stores (SAM spec §4.2.3), as noodles-bam
/// checks it.
const MAX_SCORE: u8 = 93;

impl ToBam {
    /// Appends `r` to `out` as a framed BAM record. `reference` gives the
    /// whole sequence of a reference id, asked only when the record needs
    /// MD or NM computed.
    pub(crate) fn append<R, F>(
        &mut self,
        header: &sam::Header,
        r: &R,
        mut reference: F,
        out: &mut Vec<u8>,
    ) -> io::Result<()>
    where
        R: sam::alignment::Record + ?Sized,
        F: FnMut(usize) -> io::Result<std::sync::Arc<noodles_fasta::record::Sequence>>,
    {
        let start = out.len();
        let flag = r.flags()?.bits();
        let unmapped = flag & 0x4 != 0;
        let n_ref = header.reference_sequences().len();
        let ref_index = |id: Option<io::Result<usize>>| -> io::Result<i32> {
            match id.transpose()? {
                None => Ok(-1),
                Some(id) if id < n_ref => i32::try_from(id)
                    .map_err(|_| invalid(format!("reference sequence id {id} is out of range"))),
                Some(id) => Err(invalid(format!(
                    "reference sequence id {id} is not in the header ({n_ref} references)"
                ))),
            }
        };
        let position = |p: Option<usize>| -> io::Result<i32> {
            match p {
                None => Ok(-1),
                Some(p) => i32::try_from(p - 1)
                    .map_err(|_| invalid(format!("position {p} is out of range"))),
            }
        };
        let ref_id = ref_index(r.reference_sequence_id(header))?;
        let alignment_start = r.alignment_start().transpose()?;
        let pos = position(alignment_start.map(usize::from))?;
        let mapq = if unmapped {
            // CRAM stores no MAPQ for an unmapped record: htslib gives it
            // 0, noodles 255 (missing).
            0
        } else {
            r.mapping_quality().transpose()?.map_or(255, u8::from)
        };
        let bin = match (alignment_start, r.alignment_end().transpose()?) {
            (Some(s), Some(e)) => reg2bin(usize::from(s) as i64 - 1, usize::from(e) as i64),
            _ => 4680,
        };
        self.cigar.clear();
        if !unmapped {
            for op in r.cigar().iter() {
                let op = op?;
                let len = u32::try_from(op.len())
                    .ok()
                    .filter(|&n| n < 1 << 28)
                    .ok_or_else(|| invalid(format!("CIGAR operation length {}", op.len())))?;
                self.cigar.push(len << 4 | op_code(op.kind()));
            }
        }
        self.bases.clear();
        self.bases.extend(r.sequence().iter());
        let l_seq = self.bases.len();
        let query_len: usize = self
            .cigar
            .iter()
            .filter(|&&c| matches!(c & 0xf, 0 | 1 | 4 | 7 | 8))
            .map(|&c| (c >> 4) as usize)
            .sum();
        if query_len > 0 && l_seq > 0 && query_len != l_seq {
            return Err(invalid(format!(
                "read length-sequence length mismatch: CIGAR {query_len}, sequence {l_seq}"
            )));
        }
        let name = r.name();
        let name: &[u8] = name.map_or(b"*", |n| n.as_ref());
        let l_name = u8::try_from(name.len() + 1)
            .map_err(|_| invalid(format!("read name of {} bytes", name.len())))?;
        let long_cigar = self.cigar.len() > 0xffff;

        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&ref_id.to_le_bytes());
        out.extend_from_slice(&pos.to_le_bytes());
        out.push(l_name);
        out.push(mapq);
        out.extend_from_slice(&bin.to_le_bytes());
        let n_cigar: u16 = if long_cigar {
            2
        } else {
            self.cigar.len() as u16
        };
        out.extend_from_slice(&n_cigar.to_le_bytes());
        out.extend_from_slice(&flag.to_le_bytes());
        out.extend_from_slice(&(l_seq as u32).to_le_bytes());
        out.extend_from_slice(&ref_index(r.mate_reference_sequence_id(header))?.to_le_bytes());
        out.extend_from_slice(
            &position(r.mate_alignment_start().transpose()?.map(usize::from))?.to_le_bytes(),
        );
        out.extend_from_slice(&r.template_length()?.to_le_bytes());
        out.extend_from_slice(name);
        out.push(0);
        if long_cigar {
            // noodles-bam's form: <l_seq>S<ref_len>N, the CIGAR in CG:B:I.
            let span = r.alignment_span().transpose()?.unwrap_or(0) as u32;
            out.extend_from_slice(&((l_seq as u32) << 4 | 4).to_le_bytes());
            out.extend_from_slice(&(span << 4 | 3).to_le_bytes());
        } else {
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        out.extend(
            self.bases
                .chunks(2)
                .map(|p| md_nm::nt16(p[0]) << 4 | p.get(1).map_or(0, |&b| md_nm::nt16(b))),
        );
        let quals = r.quality_scores();
        let n_qual = quals.len();
        if n_qual == l_seq {
            let at = out.len();
            for q in quals.iter() {
                out.push(q?);
            }
            if out[at..].iter().any(|&q| q > MAX_SCORE) {
                return Err(invalid("a base quality above 93".into()));
            }
        } else if n_qual == 0 {
            out.resize(out.len() + l_seq, 0xff);
        } else {
            return Err(invalid(format!(
                "sequence-quality scores length mismatch: expected {l_seq}, got {n_qual}"
            )));
        }

        // Tags, then MD/NM where htslib puts them: before an RG from the
        // read-group series (noodles gives it last, and `get` finds only
        // that one), after every stored tag.
        let data = r.data();
        let series_rg = data.get(&Tag::READ_GROUP).is_some();
        let (mut has_md, mut has_nm) = (false, false);
        let mut last = out.len();
        for field in data.iter() {
            let (tag, value) = field?;
            has_md |= tag == Tag::MISMATCHED_POSITIONS;
            has_nm |= tag == Tag::EDIT_DISTANCE;
            last = out.len();
            out.extend_from_slice(tag.as_ref());
            out.push(ty::encode(value.ty()));
            write_value(out, &value)?;
        }
        if !unmapped && ref_id >= 0 && pos >= 0 && l_seq > 0 && !(has_md && has_nm) {
            let seq = reference(ref_id as usize)?;
            let computed = md_nm::compute(
                &self.bases,
                &self.cigar,
                pos as usize,
                seq.as_ref().as_ref(),
                &mut self.md,
            );
            if let Some(nm) = computed {
                // Before the series' RG (the last field), after the rest.
                self.rg.clear();
                if series_rg {
                    self.rg.extend_from_slice(&out[last..]);
                    out.truncate(last);
                }
                md_nm::push(
                    out,
                    (!has_md).then_some(&self.md[..]),
                    (!has_nm).then_some(nm),
                );
                out.extend_from_slice(&self.rg);
            }
        }
        if long_cigar {
            out.extend_from_slice(b"CGBI");
            out.extend_from_slice(&(self.cigar.len() as u32).to_le_bytes());
            for c in &self.cigar {
                out.extend_from_slice(&c.to_le_bytes());
            }
        }
        let block_size = u32::try_from(out.len() - start - 4)
            .map_err(|_| invalid("a record of more than 4 GiB".into()))?;
        out[start..start + 4].copy_from_slice(&block_size.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use noodles_bam as bam;
    use noodles_core::Position;
    use noodles_sam::alignment::{
        io::Write as _,
        record::{cigar::Op, data::field::Tag, Flags, MappingQuality},
        record_buf::{data::field::Value as BufValue, RecordBuf},
    };
    use noodles_sam::header::record::value::{map::ReferenceSequence, Map};
    use std::num::NonZero;
    use std::sync::Arc;

    fn header() -> sam::Header {
        sam::Header::builder()
            .add_reference_sequence(
                "sq0",
                Map::<ReferenceSequence>::new(NonZero::new(1 << 20).unwrap()),
            )
            .build()
    }

    fn record(
        flags: u16,
        start: Option<usize>,
        cigar: &[(Kind, usize)],
        seq: &[u8],
        quals: &[u8],
        data: Vec<(Tag, BufValue)>,
    ) -> RecordBuf {
        let mut b = RecordBuf::builder()
            .set_name("r1")
            .set_flags(Flags::from(flags))
            .set_cigar(cigar.iter().map(|&(k, n)| Op::new(k, n)).collect())
            .set_sequence(seq.into())
            .set_quality_scores(quals.to_vec().into())
            .set_mate_reference_sequence_id(0)
            .set_mate_alignment_start(Position::new(77).unwrap())
            .set_template_length(-50)
            .set_data(data.into_iter().collect());
        if let Some(s) = start {
            b = b
                .set_reference_sequence_id(0)
                .set_alignment_start(Position::new(s).unwrap())
                .set_mapping_quality(MappingQuality::new(37).unwrap());
        }
        b.build()
    }

    fn noodles_bytes(header: &sam::Header, r: &RecordBuf) -> Vec<u8> {
        let mut w = bam::io::Writer::from(Vec::new());
        w.write_alignment_record(header, r).unwrap();
        w.into_inner()
    }

    fn ours(header: &sam::Header, r: &RecordBuf, reference: &[u8]) -> Vec<u8> {
        let seq = Arc::new(noodles_fasta::record::Sequence::from(reference.to_vec()));
        let mut out = Vec::new();
        ToBam::default()
            .append(header, r, |_| Ok(Arc::clone(&seq)), &mut out)
            .unwrap();
        out
    }

    #[test]
    fn records_needing_nothing_added_are_noodles_bam_bytes() {
        let header = header();
        let tags = vec![
            (Tag::EDIT_DISTANCE, BufValue::UInt8(1)),
            (Tag::MISMATCHED_POSITIONS, BufValue::from("3T1")),
            (Tag::from([b'X', b'B']), BufValue::from(vec![1i16, -2, 3])),
            (Tag::from([b'X', b'F']), BufValue::Float(1.5)),
        ];
        // Mapped with MD and NM, odd length, lower-case and odd letters,
        // soft clip, insertion, deletion, skip.
        let cigar = [
            (Kind::SoftClip, 1),
            (Kind::Match, 2),
            (Kind::Insertion, 1),
            (Kind::Deletion, 2),
            (Kind::Skip, 100),
            (Kind::Match, 1),
        ];
        let mapped = record(
            0x1 | 0x2,
            Some(1000),
            &cigar,
            b"AcUN.",
            &[30, 0, 93, 7, 12],
            tags,
        );
        assert_eq!(ours(&header, &mapped, b""), noodles_bytes(&header, &mapped));
        // Without qualities.
        let no_qual = record(
            0,
            Some(5),
            &[(Kind::Match, 4)],
            b"ACGT",
            &[],
            vec![
                (Tag::EDIT_DISTANCE, BufValue::UInt8(0)),
                (Tag::MISMATCHED_POSITIONS, BufValue::from("4")),
            ],
        );
        assert_eq!(
            ours(&header, &no_qual, b""),
            noodles_bytes(&header, &no_qual)
        );
        // A CIGAR of more than 65535 operations: <l_seq>S<span>N and CG.
        let long: Vec<_> = (0..40_000)
            .flat_map(|_| [(Kind::Match, 1), (Kind::Deletion, 1)])
            .collect();
        let seq = vec![b'A'; 40_000];
        let quals = vec![20; 40_000];
        let tags = vec![
            (Tag::EDIT_DISTANCE, BufValue::UInt16(40_000)),
            (Tag::MISMATCHED_POSITIONS, BufValue::from("x")),
        ];
        let long = record(0, Some(1), &long, &seq, &quals, tags);
        assert_eq!(ours(&header, &long, b""), noodles_bytes(&header, &long));
    }

    #[test]
    fn unmapped_records_get_mapq_0_and_noodles_bin() {
        let header = header();
        let mut unplaced = record(0x4, None, &[], b"ACGTA", &[1, 2, 3, 4, 5], vec![]);
        let mut want = noodles_bytes(&header, &unplaced);
        want[4 + 9] = 0;
        assert_eq!(ours(&header, &unplaced, b""), want);
        // Placed unmapped: noodles' bin spans the read length; MAPQ 0.
        *unplaced.reference_sequence_id_mut() = Some(0);
        *unplaced.alignment_start_mut() = Position::new(16_380);
        *unplaced.mapping_quality_mut() = MappingQuality::new(40);
        want = noodles_bytes(&header, &unplaced);
        want[4 + 9] = 0;
        assert_eq!(ours(&header, &unplaced, b""), want);
    }

    #[test]
    fn md_and_nm_go_before_a_last_read_group_and_after_other_tags() {
        let header = header();
        let tags = vec![
            (Tag::from([b'X', b'A']), BufValue::from("v")),
            (Tag::READ_GROUP, BufValue::from("g1")),
        ];
        let r = record(0, Some(2), &[(Kind::Match, 4)], b"ACGA", &[9; 4], tags);
        let out = ours(&header, &r, b"TACGT");
        let rec = alnsort_bam::RecordRef::with_block_size(&out);
        assert_eq!(rec.aux(), b"XAZv\0MDZ3T0\0NMC\x01RGZg1\0");
        assert_eq!(
            u32::from_le_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
        // Only the missing one is added; without a read group, at the end.
        let tags = vec![(Tag::EDIT_DISTANCE, BufValue::UInt8(1))];
        let r = record(0, Some(2), &[(Kind::Match, 4)], b"ACGA", &[9; 4], tags);
        let out = ours(&header, &r, b"TACGT");
        let rec = alnsort_bam::RecordRef::with_block_size(&out);
        assert_eq!(rec.aux(), b"NMC\x01MDZ3T0\0");
    }
}
