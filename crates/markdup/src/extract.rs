//! The record-to-ends extraction of Picard's duplicate marking, as a read job runs it on a batch of BAM records: each record's read-end fields (`BatchEnds`), what to take (`EndsSpec`: the score, barcode tags, the read name's flow-cell location), and the templates that lie whole in the batch paired.

use crate::{base_quality_score, five_prime_coordinate, reference_length_score, ReadInfo};
use alnsort_bam::RecordRef;
use std::sync::Arc;

/// What the read jobs take out of each record: the score, the barcode
/// tags (`--barcode-tag`, `--read-one-barcode-tag`, `--read-two-barcode-tag`)
/// and the flow-cell location of the read name (`--read-name-regex`).
#[derive(Debug, Clone, Default)]
pub struct EndsSpec {
    pub scoring: Scoring,
    pub barcode_tags: BarcodeTags,
    pub name_parser: Arc<crate::optical::NameParser>,
    /// Also the fields of htsjdk's coordinate comparator that the others
    /// leave out (a split of coordinate-sorted inputs sharing a library:
    /// `SplitCollector::keeping_merge_order`).
    pub merge_order: bool,
    /// Pair the templates that lie whole in a batch
    /// ([`crate::batch::BatchTemplates`]): the one marker of one
    /// name-grouped input.
    pub pair_templates: bool,
}

/// Picard's BARCODE_TAG, READ_ONE_BARCODE_TAG and READ_TWO_BARCODE_TAG.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BarcodeTags {
    pub umi: Option<[u8; 2]>,
    pub read_one: Option<[u8; 2]>,
    pub read_two: Option<[u8; 2]>,
}

impl BarcodeTags {
    pub fn any(&self) -> bool {
        self.umi.is_some() || self.read_one.is_some() || self.read_two.is_some()
    }
}

/// How the kept duplicate is chosen (`--duplicate-scoring`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Scoring {
    /// Picard's SUM_OF_BASE_QUALITIES (the default).
    #[default]
    SumOfBaseQualities,
    /// Picard's TOTAL_MAPPED_REFERENCE_LENGTH.
    TotalMappedReferenceLength,
}

/// Picard's duplicate-type tag.
pub const DT: [u8; 2] = *b"DT";

/// Flags of records that make no read end (their location is not parsed).
const NO_END: u16 = crate::flags::UNMAPPED | crate::flags::SECONDARY | crate::flags::SUPPLEMENTARY;

/// The read-end fields of one record, taken out by a read job.
#[derive(Debug, Clone, Copy)]
pub struct Extracted {
    pub flag: u16,
    pub score: i16,
    pub ref_id: i32,
    pub pos: i32,
    pub mate_ref_id: i32,
    pub five_prime: i32,
    /// Range of the name in `BatchEnds::bytes`.
    pub name: (u32, u32),
    /// Range of the `RG:Z` value, if any.
    pub rg: Option<(u32, u32)>,
    /// Whether the `RG:Z` value (or its absence) is the previous record's
    /// in the batch, which then has the same read group.
    pub same_rg: bool,
    /// Whether the name is the previous record's in the batch (`None` for
    /// the batch's first record): compared here, on the pool, for the
    /// marker's template and grouping checks on the reading thread.
    pub same_name: Option<bool>,
    /// The name's flow-cell location without the read group
    /// (`NameParser::parse`; only for mapped primary records, which make
    /// read ends).
    pub loc: crate::optical::Location,
    pub barcodes: crate::Barcodes,
    /// A barcode tag Picard cannot read (it stops there).
    pub bad_barcode: Option<BadBarcode>,
}

/// Why a record's barcode tag stops Picard.
#[derive(Debug, Clone, Copy)]
pub enum BadBarcode {
    /// Not a `Z` string (htsjdk's getStringAttribute fails).
    NotString([u8; 2], u8),
    /// A UMI with characters other than `ATCGNatcgn-`.
    UmiCharacters([u8; 2]),
}

/// The read-end fields of one batch of records, in input order.
#[derive(Debug, Default)]
pub struct BatchEnds {
    pub recs: Vec<Extracted>,
    pub bytes: Vec<u8>,
    pub cigar: Vec<(u8, u32)>,
    /// With [`EndsSpec::merge_order`]: each record's mapping quality, mate
    /// position and insert size (the rest of its `MergeKey` is in `recs`).
    pub merge: Vec<(u8, i32, i32)>,
    pub spec: EndsSpec,
    /// Whether a record of the batch carries a `DT` tag (Picard drops
    /// every input `DT` tag, so such records change length when written).
    pub any_dt: bool,
    /// With [`EndsSpec::pair_templates`]: the templates whose records all
    /// lie in the batch (not its first, which may have begun in the batch
    /// before, nor its last), paired.
    pub templates: crate::batch::BatchTemplates,
    /// Where the batch's last run of one name starts.
    pub run_start: usize,
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
    fn barcodes(&self, rec: &RecordRef<'_>) -> Result<crate::Barcodes, BadBarcode> {
        use crate::Barcodes;
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
    /// engine appends the record's input ordinal to what enters the sorter.
    pub fn add_fields(&mut self, framed: &[u8]) {
        let rec = RecordRef::with_block_size(framed);
        if self.spec.merge_order {
            self.merge.push((rec.mapq(), rec.next_pos(), rec.tlen()));
        }
        let flag = rec.flag();
        let reverse = flag & crate::flags::REVERSE != 0;
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
            crate::optical::Location::NONE
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
                rg: crate::batch::PLACEHOLDER,
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
