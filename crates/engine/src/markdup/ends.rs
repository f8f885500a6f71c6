//! What a read job takes out of each record for duplicate marking (`BatchEnds`), and the input ordinal appended to the record bytes the sorter carries.

use crate::error::Result;
use crate::options::markdup::{EndsSpec, Scoring};
use alnsort_bam::RecordRef;
use alnsort_markdup::{
    base_quality_score, five_prime_coordinate, reference_length_score, ReadInfo,
};

/// Picard's duplicate-type tag.
pub(crate) const DT: [u8; 2] = *b"DT";

/// Bytes appended to each record while it is in the sorter.
pub const ORDINAL_BYTES: usize = 8;

/// The bytes appended to the record of input ordinal `ordinal`.
pub fn ordinal_suffix(ordinal: u64) -> [u8; ORDINAL_BYTES] {
    ordinal.to_le_bytes()
}

/// Flags of records that make no read end (their location is not parsed).
const NO_END: u16 = alnsort_markdup::flags::UNMAPPED
    | alnsort_markdup::flags::SECONDARY
    | alnsort_markdup::flags::SUPPLEMENTARY;

/// The read-end fields of one record, taken out by a read job.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Extracted {
    pub(crate) flag: u16,
    pub(crate) score: i16,
    pub(crate) ref_id: i32,
    pub(crate) pos: i32,
    pub(crate) mate_ref_id: i32,
    pub(crate) five_prime: i32,
    /// Range of the name in `BatchEnds::bytes`.
    pub(crate) name: (u32, u32),
    /// Range of the `RG:Z` value, if any.
    pub(crate) rg: Option<(u32, u32)>,
    /// Whether the `RG:Z` value (or its absence) is the previous record's
    /// in the batch, which then has the same read group.
    pub(crate) same_rg: bool,
    /// Whether the name is the previous record's in the batch (`None` for
    /// the batch's first record): compared here, on the pool, for the
    /// marker's template and grouping checks on the reading thread.
    pub(crate) same_name: Option<bool>,
    /// The name's flow-cell location without the read group
    /// (`NameParser::parse`; only for mapped primary records, which make
    /// read ends).
    pub(crate) loc: alnsort_markdup::optical::Location,
    pub(crate) barcodes: alnsort_markdup::Barcodes,
    /// A barcode tag Picard cannot read (it stops there).
    pub(crate) bad_barcode: Option<BadBarcode>,
}

/// Why a record's barcode tag stops Picard.
#[derive(Debug, Clone, Copy)]
pub(crate) enum BadBarcode {
    /// Not a `Z` string (htsjdk's getStringAttribute fails).
    NotString([u8; 2], u8),
    /// A UMI with characters other than `ATCGNatcgn-`.
    UmiCharacters([u8; 2]),
}

/// The read-end fields of one batch of records, in input order.
#[derive(Debug, Default)]
pub struct BatchEnds {
    pub(crate) recs: Vec<Extracted>,
    pub(crate) bytes: Vec<u8>,
    pub(crate) cigar: Vec<(u8, u32)>,
    /// With [`EndsSpec::merge_order`]: each record's mapping quality, mate
    /// position and insert size (the rest of its `MergeKey` is in `recs`).
    pub(crate) merge: Vec<(u8, i32, i32)>,
    pub(crate) spec: EndsSpec,
    /// Whether a record of the batch carries a `DT` tag (Picard drops
    /// every input `DT` tag, so such records change length when written).
    pub(crate) any_dt: bool,
    /// With [`EndsSpec::pair_templates`]: the templates whose records all
    /// lie in the batch (not its first, which may have begun in the batch
    /// before, nor its last), paired.
    pub(crate) templates: alnsort_markdup::batch::BatchTemplates,
    /// Where the batch's last run of one name starts.
    pub(crate) run_start: usize,
}

/// The `RG:Z` value of a record (without its NUL), and whether the
/// record has a `DT` tag (one walk over its tags).
fn record_rg_dt<'a>(rec: &RecordRef<'a>) -> (Option<&'a [u8]>, bool) {
    let [rg, dt] = rec.aux().find_each([*b"RG", DT]);
    (rg.and_then(|f| f.string()), dt.is_some())
}

impl BatchEnds {
    pub fn new(spec: EndsSpec) -> Self {
        BatchEnds {
            spec,
            ..Default::default()
        }
    }

    /// The record's barcode values, as Picard reads its tags.
    fn barcodes(&self, rec: &RecordRef<'_>) -> Result<alnsort_markdup::Barcodes, BadBarcode> {
        use alnsort_markdup::Barcodes;
        let tags = &self.spec.barcode_tags;
        if !tags.any() {
            return Ok(Barcodes::default());
        }
        let string = |tag: Option<[u8; 2]>| -> Result<Option<&[u8]>, BadBarcode> {
            let Some(tag) = tag else { return Ok(None) };
            match rec.aux().find(tag) {
                None => Ok(None),
                Some(f) => f.string().map(Some).ok_or(BadBarcode::NotString(tag, f.ty)),
            }
        };
        let umi = string(tags.umi)?;
        if let (Some(u), Some(tag)) = (umi, tags.umi) {
            if !u.iter().all(|c| b"ATCGNatcgn-".contains(c)) {
                return Err(BadBarcode::UmiCharacters(tag));
            }
        }
        Ok(Barcodes {
            umi: Barcodes::umi_value(umi),
            read_one: Barcodes::read_value(string(tags.read_one)?),
            read_two: Barcodes::read_value(string(tags.read_two)?),
        })
    }

    /// Takes the fields of `framed` (a BAM record with its block_size); the
    /// record enters the sorter followed by [`ordinal_suffix`].
    pub fn add_fields(&mut self, framed: &[u8]) {
        let rec = RecordRef::with_block_size(framed);
        if self.spec.merge_order {
            self.merge.push((rec.mapq(), rec.next_pos(), rec.tlen()));
        }
        let flag = rec.flag();
        let reverse = flag & alnsort_markdup::flags::REVERSE != 0;
        self.cigar.clear();
        self.cigar.extend(rec.cigar().ops());
        let at = |b: &Vec<u8>| b.len() as u32;
        let n0 = at(&self.bytes);
        self.bytes.extend_from_slice(rec.read_name());
        let name = (n0, at(&self.bytes));
        let (rg, dt) = record_rg_dt(&rec);
        self.any_dt |= dt;
        let rg = rg.map(|v| {
            let r0 = at(&self.bytes);
            self.bytes.extend_from_slice(v);
            (r0, at(&self.bytes))
        });
        let same_rg = self.recs.last().is_some_and(|prev| {
            let value = |r: Option<(u32, u32)>| r.map(|(a, b)| &self.bytes[a as usize..b as usize]);
            value(prev.rg) == value(rg)
        });
        let same_name = self.recs.last().map(|prev| {
            self.bytes[prev.name.0 as usize..prev.name.1 as usize]
                == self.bytes[name.0 as usize..name.1 as usize]
        });
        if same_name != Some(true) {
            // The run before this record is a whole template.
            if self.spec.pair_templates && self.run_start > 0 {
                self.pair_template(self.run_start..self.recs.len());
            }
            self.run_start = self.recs.len();
        }
        // Mates have one name: parsed once per template in a batch.
        let loc = if flag & NO_END != 0 {
            alnsort_markdup::optical::Location::NONE
        } else {
            match self.recs.last() {
                Some(prev) if prev.flag & NO_END == 0 && same_name == Some(true) => prev.loc,
                _ => self
                    .spec
                    .name_parser
                    .parse(&self.bytes[name.0 as usize..name.1 as usize]),
            }
        };
        let (barcodes, bad_barcode) = match self.barcodes(&rec) {
            Ok(b) => (b, None),
            Err(e) => (Default::default(), Some(e)),
        };
        self.recs.push(Extracted {
            flag,
            barcodes,
            bad_barcode,
            score: match self.spec.scoring {
                Scoring::SumOfBaseQualities => base_quality_score(rec.qual(), flag),
                Scoring::TotalMappedReferenceLength => {
                    reference_length_score(rec.reference_length(), flag)
                }
            },
            ref_id: rec.ref_id(),
            pos: rec.pos(),
            mate_ref_id: rec.next_ref_id(),
            five_prime: five_prime_coordinate(
                rec.pos(),
                rec.reference_length(),
                &self.cigar,
                reverse,
            ),
            name,
            rg,
            same_rg,
            same_name,
            loc,
        });
    }

    /// Pairs the whole template of records `run` (one name), unless its
    /// records have several `RG` values or a barcode Picard refuses (the
    /// reading thread's per-record push then takes them).
    fn pair_template(&mut self, run: std::ops::Range<usize>) {
        let recs = &self.recs[run.clone()];
        if recs[1..].iter().any(|e| !e.same_rg) || recs.iter().any(|e| e.bad_barcode.is_some()) {
            return;
        }
        let bytes = &self.bytes;
        let infos = recs.iter().map(|e| {
            let info = ReadInfo {
                name: &bytes[e.name.0 as usize..e.name.1 as usize],
                flag: e.flag,
                ref_id: e.ref_id,
                mate_ref_id: e.mate_ref_id,
                five_prime: e.five_prime,
                score: e.score,
                // Resolved by the thread ([`MarkDuplicates::push_template`]).
                rg: alnsort_markdup::batch::PLACEHOLDER,
                barcodes: e.barcodes,
            };
            (info, e.loc)
        });
        self.templates.add(run.start as u32, infos);
    }

    pub fn len(&self) -> usize {
        self.recs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }
}
