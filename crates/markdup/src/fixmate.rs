//! samtools 1.24 `fixmate` on raw BAM records: the sanitizer, mate fields, flags, `MQ`/`MC`/`ms`/`ct` and TLEN of each template of name-grouped input, edited in place.
//!
//! A template is a run of consecutive records with the same QNAME
//! ([`TemplateCutter`] cuts a stream into them). [`Fixmate::fix_template`] does
//! to one what samtools 1.24's `bam_mating_core` does (bam_mate.c, checked
//! against pysam 0.24.1's samtools 1.24; see
//! `shared/reference/samtools-markdup.md` §1):
//! * every record is sanitized first ([`Sanitize`], `-z`);
//! * the first primary record (neither 0x100 nor 0x800) is paired with each
//!   later one: both get 0x1, an unmapped one takes its mapped mate's
//!   RNAME/POS, RNEXT/PNEXT, 0x20 and 0x8 (set only) come from the mate,
//!   `MQ` (mate mapped) and `MC` (either mapped) are re-appended, TLEN is
//!   measured 5' to 5' when both are mapped on one reference, 0x2 is
//!   cleared unless the pair is plausibly FR (`-p`: never), `ct` (`-c`) and
//!   `ms` (`-m`) are re-appended; tag order MQ, MC, ct, ms;
//! * a lone primary (an orphan) gets RNEXT `*`, PNEXT 0, TLEN 0 and loses
//!   0x20 and 0x2 (0x1 stays);
//! * a supplementary record with 0x1 takes RNEXT/PNEXT, 0x20, 0x8 (set
//!   only), `MQ` and `MC` from the primary of the other segment (1.24
//!   does this; the develop code read does not);
//! * secondary records are left as the sanitizer leaves them;
//! * `-r` leaves out secondary and unmapped records.
//!
//! `-M` (base modification tags trimmed to hard clips) is refused
//! ([`FixmateError::BaseModsUnsupported`]).

use alnsort_bam::cigar::{self, op};
use alnsort_bam::record::{flags, RecordMut, RecordRef};
use alnsort_bam::sam_format::push_int;

/// Base qualities from this value count toward `ms` (bam_mate.c
/// `MD_MIN_QUALITY`).
pub const MIN_QUALITY: u8 = 15;

/// What fixmate cannot do, or refuses.
#[derive(Debug, thiserror::Error)]
pub enum FixmateError {
    #[error(
        "-M (base modification tags MM/ML/MN trimmed to match hard clips) cannot be honoured: \
         alnsort fixmate does not implement it"
    )]
    BaseModsUnsupported,
    #[error(
        "-z: unrecognised keyword '{0}' (known: all, *, none, off, on, pos, mqual, unmap, \
         cigar, cigdup, cigarx, aux)"
    )]
    SanitizeKeyword(String),
    #[error(
        "the header says SO:coordinate; fixmate needs the records of each read name together \
         (collate or name-sort the input first), as samtools fixmate does"
    )]
    CoordinateSorted,
}

/// The sanitizer's fixes (`-z`, samtools' `FIX_*` bits of samtools.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sanitize(u8);

impl Sanitize {
    /// `pos`: RNAME `*` means POS 0; a POS past the reference end unplaces.
    pub const POS: u8 = 2;
    /// `mqual`: unmapped reads get MAPQ 0.
    pub const MQUAL: u8 = 4;
    /// `unmap`: unplaced reads get 0x4.
    pub const UNMAP: u8 = 8;
    /// `cigar`: unmapped reads lose their CIGAR; alignments past the end
    /// are soft-clipped.
    pub const CIGAR: u8 = 16;
    /// `aux`: unmapped reads lose NM, MD, CG and SM.
    pub const AUX: u8 = 32;
    /// `cigdup`: adjacent identical CIGAR operations are merged.
    pub const CIGDUP: u8 = 64;
    /// `cigarx`: `=` and `X` become `M` (and are merged).
    pub const CIGARX: u8 = 128;
    /// samtools' `FIX_ALL` (127): every fix but `cigarx`; fixmate's default.
    pub const ALL: Sanitize = Sanitize(127);
    /// No fix (`-z none`).
    pub const NONE: Sanitize = Sanitize(0);

    /// The bits.
    pub fn bits(self) -> u8 {
        self.0
    }

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// Parses `-z`'s comma-separated keywords as samtools'
    /// `bam_sanitize_options`: each keyword is matched as a prefix of the
    /// word; `all`/`*` sets every fix, `none`/`off` clears them, `on` sets
    /// mqual, unmap, cigar and aux; the others add their fix.
    pub fn parse(text: &str) -> Result<Sanitize, FixmateError> {
        let mut bits = 0u8;
        for word in text.split(',').filter(|w| !w.is_empty()) {
            let is = |k: &str| word.starts_with(k);
            if is("all") || is("*") {
                bits = Self::ALL.0;
            } else if is("none") || is("off") {
                bits = 0;
            } else if is("on") {
                bits = Self::MQUAL | Self::UNMAP | Self::CIGAR | Self::AUX;
            } else if is("pos") {
                bits |= Self::POS;
            } else if is("mqual") {
                bits |= Self::MQUAL;
            } else if is("unmap") {
                bits |= Self::UNMAP;
            } else if is("cigdup") {
                bits |= Self::CIGDUP;
            } else if is("cigarx") {
                bits |= Self::CIGARX | Self::CIGDUP;
            } else if is("cigar") {
                bits |= Self::CIGAR;
            } else if is("aux") {
                bits |= Self::AUX;
            } else {
                return Err(FixmateError::SanitizeKeyword(word.to_string()));
            }
        }
        Ok(Sanitize(bits))
    }
}

/// samtools fixmate's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// `-r`: leave out secondary and unmapped records.
    pub remove: bool,
    /// Clear 0x2 of pairs that are not plausibly FR (`-p` turns it off).
    pub proper_pair_check: bool,
    /// `-c`: the template CIGAR tag `ct`.
    pub template_cigar: bool,
    /// `-m`: the mate score tag `ms`.
    pub mate_score: bool,
    /// `-z`.
    pub sanitize: Sanitize,
    /// `-M`: refused by [`Fixmate::new`].
    pub base_mods: bool,
}

impl Default for Options {
    /// samtools fixmate without options.
    fn default() -> Self {
        Options {
            remove: false,
            proper_pair_check: true,
            template_cigar: false,
            mate_score: false,
            sanitize: Sanitize::ALL,
            base_mods: false,
        }
    }
}

/// Refuses a header whose `@HD SO` (`so`) is `coordinate`, as samtools
/// fixmate does (unknown, unsorted, queryname and none are accepted).
pub fn check_sort_order(so: Option<&[u8]>) -> Result<(), FixmateError> {
    match so {
        Some(b"coordinate") => Err(FixmateError::CoordinateSorted),
        _ => Ok(()),
    }
}

/// samtools fixmate's edits, for a header's reference lengths.
#[derive(Debug, Clone)]
pub struct Fixmate {
    opts: Options,
    ref_lens: Vec<i64>,
}

fn view(rec: &[u8]) -> RecordRef<'_> {
    RecordRef::with_block_size(rec)
}

/// Two distinct records of a template, both editable.
fn two(recs: &mut [Vec<u8>], a: usize, b: usize) -> (&mut Vec<u8>, &mut Vec<u8>) {
    debug_assert_ne!(a, b);
    if a < b {
        let (lo, hi) = recs.split_at_mut(b);
        (&mut lo[a], &mut hi[0])
    } else {
        let (lo, hi) = recs.split_at_mut(a);
        (&mut hi[0], &mut lo[b])
    }
}

fn set_flag(rec: &mut Vec<u8>, flag: u16) {
    RecordMut::new(rec).set_flag(flag);
}

/// Tag edits to one record, gathered while its template is fixed and made
/// by one walk of its fields ([`RecordMut::edit_fields`]): fixmate's
/// `bam_aux_del` of a tag's first field and `bam_aux_append`, in its
/// order (no tag is removed after it was appended).
#[derive(Default)]
struct TagEdits {
    removed: Vec<[u8; 2]>,
    appended: Vec<u8>,
}

impl TagEdits {
    /// `bam_aux_del` of the first `tag` field.
    fn remove(&mut self, tag: [u8; 2]) {
        self.removed.push(tag);
    }

    /// `bam_aux_append` of `tag`, `ty`, the value `fill` writes (its bytes
    /// as stored).
    fn append(&mut self, tag: [u8; 2], ty: u8, fill: impl FnOnce(&mut Vec<u8>)) {
        self.appended.extend_from_slice(&[tag[0], tag[1], ty]);
        fill(&mut self.appended);
    }

    /// `bam_aux_del` of the first `tag` field, then `bam_aux_append`.
    fn replace(&mut self, tag: [u8; 2], ty: u8, fill: impl FnOnce(&mut Vec<u8>)) {
        self.remove(tag);
        self.append(tag, ty, fill);
    }

    /// Makes the edits gathered in `rec`, and forgets them.
    fn apply(&mut self, rec: &mut Vec<u8>) {
        if !self.removed.is_empty() || !self.appended.is_empty() {
            RecordMut::new(rec).edit_fields(&self.removed, &self.appended);
            self.removed.clear();
            self.appended.clear();
        }
    }
}

/// `sync_unmapped_pos_inner`: an unmapped `dest` takes mapped `src`'s
/// RNAME and POS.
fn sync_unmapped_pos(src: &[u8], dest: &mut Vec<u8>) {
    let s = view(src);
    let d = view(dest);
    if d.flag() & flags::UNMAPPED != 0 && s.flag() & flags::UNMAPPED == 0 {
        let (tid, pos) = (s.ref_id(), s.pos());
        let mut m = RecordMut::new(dest);
        m.set_ref_id(tid);
        m.set_pos(pos);
    }
}

/// `sync_mate_inner`: `dest`'s mate fields from `src`; 0x20 mirrors
/// `src`'s 0x10, 0x8 is set (never cleared) when `src` is unmapped.
fn sync_mate_fields(src: &[u8], dest: &mut Vec<u8>) {
    let s = view(src);
    let mut flag = view(dest).flag();
    if s.flag() & flags::REVERSE != 0 {
        flag |= flags::MATE_REVERSE;
    } else {
        flag &= !flags::MATE_REVERSE;
    }
    if s.flag() & flags::UNMAPPED != 0 {
        flag |= flags::MATE_UNMAPPED;
    }
    let (tid, pos) = (s.ref_id(), s.pos());
    let mut m = RecordMut::new(dest);
    m.set_next_ref_id(tid);
    m.set_next_pos(pos);
    m.set_flag(flag);
}

/// `sync_mq_mc`: `MQ:i` when `src` is mapped, `MC:Z` when either is
/// (`dest_mapped`), as edits to the destination.
fn sync_mq_mc(src: RecordRef<'_>, dest_mapped: bool, dest: &mut TagEdits) {
    let src_mapped = src.flag() & flags::UNMAPPED == 0;
    if src_mapped {
        dest.replace(*b"MQ", b'i', |v| {
            v.extend_from_slice(&u32::from(src.mapq()).to_le_bytes())
        });
    }
    if src_mapped || dest_mapped {
        dest.replace(*b"MC", b'Z', |v| {
            src.cigar().push_text(v);
            v.push(0);
        });
    }
}

fn mapped(rec: &[u8]) -> bool {
    view(rec).flag() & flags::UNMAPPED == 0
}

/// `sync_mate`: both ways, the tag edits gathered in `ea` and `eb`.
fn sync_mate(a: &mut Vec<u8>, b: &mut Vec<u8>, ea: &mut TagEdits, eb: &mut TagEdits) {
    sync_unmapped_pos(a, b);
    sync_unmapped_pos(b, a);
    sync_mate_fields(a, b);
    sync_mate_fields(b, a);
    sync_mq_mc(view(a), mapped(b), eb);
    sync_mq_mc(view(b), mapped(a), ea);
}

/// `calc_mate_score`: the sum of the qualities of at least
/// [`MIN_QUALITY`] (a missing QUAL is 0xff bytes: 255 each).
pub fn mate_score(r: RecordRef<'_>) -> u32 {
    r.qual()
        .iter()
        .filter(|&&q| q >= MIN_QUALITY)
        .map(|&q| u32::from(q))
        .fold(0u32, u32::wrapping_add)
}

/// `plausibly_properly_paired`: both mapped on one reference, and the read
/// with the lower 5' end (the first on a tie) forward, the other reverse.
fn plausibly_proper(a: RecordRef<'_>, b: RecordRef<'_>) -> bool {
    if (a.flag() | b.flag()) & flags::UNMAPPED != 0 || a.ref_id() != b.ref_id() {
        return false;
    }
    let five = |r: RecordRef<'_>| {
        if r.flag() & flags::REVERSE != 0 {
            r.end_pos()
        } else {
            i64::from(r.pos())
        }
    };
    let (first, second) = if five(a) > five(b) { (b, a) } else { (a, b) };
    first.flag() & flags::REVERSE == 0 && second.flag() & flags::REVERSE != 0
}

/// `bam_template_cigar`: `ct:Z` on the read with the lower POS (`a` on a
/// tie), each old `ct` removed, when both are mapped on one reference.
fn template_cigar(a: &[u8], b: &[u8], ea: &mut TagEdits, eb: &mut TagEdits) {
    let (ra, rb) = (view(a), view(b));
    if ra.ref_id() != rb.ref_id()
        || ra.ref_id() < 0
        || ra.pos() < 0
        || rb.pos() < 0
        || (ra.flag() | rb.flag()) & flags::UNMAPPED != 0
    {
        return;
    }
    let (first, second) = if ra.pos() > rb.pos() {
        (rb, ra)
    } else {
        (ra, rb)
    };
    // Each segment's CIGAR without `*` for an empty one.
    let segment = |r: RecordRef<'_>, ct: &mut Vec<u8>| {
        ct.push(if r.flag() & flags::READ1 != 0 {
            b'1'
        } else {
            b'2'
        });
        ct.push(if r.flag() & flags::REVERSE != 0 {
            b'R'
        } else {
            b'F'
        });
        for (o, len) in r.cigar().ops() {
            push_int(ct, i64::from(len));
            ct.push(*cigar::OP_LETTERS.get(o as usize).unwrap_or(&b'?'));
        }
    };
    ea.remove(*b"ct");
    eb.remove(*b"ct");
    let target = if ra.pos() <= rb.pos() { ea } else { eb };
    target.append(*b"ct", b'Z', |ct| {
        segment(first, ct);
        let gap = i64::from(second.pos()) - first.end_pos();
        push_int(ct, i64::from(gap as i32));
        ct.push(b'T');
        segment(second, ct);
        ct.push(0);
    });
}

fn pack(o: u8, len: i64) -> u32 {
    cigar::pack(o, len as u32)
}

impl Fixmate {
    /// Fixmate with `opts` for a header whose references have the lengths
    /// `ref_lens` (by reference id). Refuses `-M`.
    pub fn new(opts: Options, ref_lens: Vec<i64>) -> Result<Fixmate, FixmateError> {
        if opts.base_mods {
            return Err(FixmateError::BaseModsUnsupported);
        }
        Ok(Fixmate { opts, ref_lens })
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// `sam_hdr_tid2len`: 0 for an id without a reference.
    fn ref_len(&self, tid: i32) -> i64 {
        usize::try_from(tid)
            .ok()
            .and_then(|t| self.ref_lens.get(t))
            .copied()
            .unwrap_or(0)
    }

    /// samtools' `bam_sanitize` on one record (with its `block_size`).
    pub fn sanitize(&self, rec: &mut Vec<u8>) {
        let z = self.opts.sanitize;
        let r = view(rec);
        let mut flag = r.flag();
        let mut tid = r.ref_id();
        let mut pos = r.pos();
        let mut cigar: Vec<u32> = r.cigar().words().collect();
        if z.has(Sanitize::POS) && tid < 0 {
            pos = -1;
            if z.has(Sanitize::UNMAP) {
                flag |= flags::UNMAPPED;
            }
        }
        if z.has(Sanitize::CIGAR) && flag & flags::UNMAPPED == 0 {
            if pos < 0 && z.has(Sanitize::UNMAP) {
                flag |= flags::UNMAPPED;
            } else {
                let rlen = self.ref_len(tid);
                let span = cigar::reference_length(cigar.iter().map(|&w| cigar::unpack(w)));
                if i64::from(pos) >= rlen && z.has(Sanitize::UNMAP) {
                    flag |= flags::UNMAPPED;
                    if z.has(Sanitize::POS) {
                        tid = -1;
                        pos = -1;
                    }
                } else if i64::from(pos) + span.max(1) > rlen {
                    trim(&mut cigar, &mut flag, i64::from(pos), rlen);
                }
            }
        }
        let unmapped = flag & flags::UNMAPPED != 0;
        if unmapped && z.has(Sanitize::CIGAR) {
            cigar.clear();
        }
        if !unmapped && z.has(Sanitize::CIGARX) {
            for w in cigar.iter_mut() {
                let (o, len) = cigar::unpack(*w);
                if o == op::SEQ_MATCH || o == op::SEQ_MISMATCH {
                    *w = cigar::pack(op::MATCH, len);
                }
            }
        }
        if !unmapped && z.has(Sanitize::CIGDUP) {
            merge_duplicate_ops(&mut cigar);
        }
        let cigar_changed = !cigar.iter().copied().eq(r.cigar().words());
        let mapq_zero = unmapped && z.has(Sanitize::MQUAL) && r.mapq() != 0;
        let mut m = RecordMut::new(rec);
        m.set_flag(flag);
        m.set_ref_id(tid);
        m.set_pos(pos);
        if cigar_changed {
            m.set_cigar(&cigar);
        }
        if mapq_zero {
            m.set_mapq(0);
        }
        if unmapped && z.has(Sanitize::AUX) {
            for tag in [*b"NM", *b"MD", *b"CG", *b"SM"] {
                while m.remove_tag(tag) {}
            }
        }
    }

    /// Applies fixmate's edits to one template (the consecutive records of
    /// one QNAME, each with its `block_size`), in place; with `-r` the
    /// secondary and unmapped records are taken out. The order stays.
    pub fn fix_template(&self, recs: &mut Vec<Vec<u8>>) {
        for rec in recs.iter_mut() {
            self.sanitize(rec);
        }
        let o = &self.opts;
        let mut pre: Option<usize> = None;
        let mut cur: Option<usize> = None;
        let mut by_segment: [Option<usize>; 2] = [None, None];
        let mut pre_end = 0i64;
        let (mut ea, mut eb) = (TagEdits::default(), TagEdits::default());
        for n in 0..recs.len() {
            let r = view(&recs[n]);
            let flag = r.flag();
            if flag & (flags::SECONDARY | flags::SUPPLEMENTARY) != 0 {
                continue;
            }
            let is_r2 = usize::from(flag & flags::READ2 != 0);
            let mapped_end = if flag & flags::UNMAPPED == 0 {
                r.end_pos()
            } else {
                0
            };
            by_segment[is_r2] = Some(n);
            let Some(p) = pre else {
                pre = Some(n);
                pre_end = mapped_end;
                continue;
            };
            cur = Some(n);
            let cur_end = mapped_end;
            let (a, b) = two(recs, p, n);
            set_flag(a, view(a).flag() | flags::PAIRED);
            set_flag(b, view(b).flag() | flags::PAIRED);
            sync_mate(a, b, &mut ea, &mut eb);
            let (ra, rb) = (view(a), view(b));
            let gone = flags::UNMAPPED | flags::MATE_UNMAPPED;
            let (pre_tlen, cur_tlen) =
                if ra.ref_id() == rb.ref_id() && (ra.flag() | rb.flag()) & gone == 0 {
                    let five = |r: RecordRef<'_>, end: i64| {
                        if r.flag() & flags::REVERSE != 0 {
                            end
                        } else {
                            i64::from(r.pos())
                        }
                    };
                    let (p5, c5) = (five(ra, pre_end), five(rb, cur_end));
                    ((c5 - p5) as i32, (p5 - c5) as i32)
                } else {
                    (0, 0)
                };
            RecordMut::new(a).set_tlen(pre_tlen);
            RecordMut::new(b).set_tlen(cur_tlen);
            if o.template_cigar {
                template_cigar(a, b, &mut ea, &mut eb);
            }
            if o.proper_pair_check && !plausibly_proper(view(a), view(b)) {
                set_flag(a, view(a).flag() & !flags::PROPER_PAIR);
                set_flag(b, view(b).flag() & !flags::PROPER_PAIR);
            }
            if o.mate_score {
                let (sa, sb) = (mate_score(view(a)), mate_score(view(b)));
                eb.replace(*b"ms", b'i', |v| v.extend_from_slice(&sa.to_le_bytes()));
                ea.replace(*b"ms", b'i', |v| v.extend_from_slice(&sb.to_le_bytes()));
            }
            if o.remove {
                let lose = flags::MATE_REVERSE | flags::PROPER_PAIR;
                if view(a).flag() & flags::UNMAPPED != 0 {
                    set_flag(b, view(b).flag() & !lose);
                }
                if view(b).flag() & flags::UNMAPPED != 0 {
                    set_flag(a, view(a).flag() & !lose);
                }
            }
            // The pair's tag edits, by one walk of each record's fields
            // (nothing above reads the tags edited).
            ea.apply(a);
            eb.apply(b);
        }
        if let (Some(p), None) = (pre, cur) {
            let rec = &mut recs[p];
            let flag = view(rec).flag() & !(flags::MATE_REVERSE | flags::PROPER_PAIR);
            let mut m = RecordMut::new(rec);
            m.set_next_ref_id(-1);
            m.set_next_pos(-1);
            m.set_tlen(0);
            m.set_flag(flag);
        }
        for n in 0..recs.len() {
            let flag = view(&recs[n]).flag();
            if flag & flags::SUPPLEMENTARY == 0 || flag & flags::PAIRED == 0 {
                continue;
            }
            let other = usize::from(flag & flags::READ2 == 0);
            if let Some(p) = by_segment[other] {
                let (primary, supp) = two(recs, p, n);
                sync_mate_fields(primary, supp);
                sync_mq_mc(view(primary), mapped(supp), &mut ea);
                ea.apply(supp);
            }
        }
        if o.remove {
            recs.retain(|r| view(r).flag() & (flags::SECONDARY | flags::UNMAPPED) == 0);
        }
    }
}

/// `bam_trim`: cuts the CIGAR at reference position `end` (the reference
/// length), the rest becoming a soft clip (hard clips after it stay). An
/// alignment whose cut falls where an operation starts becomes unmapped
/// (0x4 set, 0x2 cleared; its CIGAR is then cleared by the sanitizer).
fn trim(cigar: &mut Vec<u32>, flag: &mut u16, start: i64, end: i64) {
    let mut pos = start;
    let mut at = None;
    let (mut o, mut len) = (0u8, 0i64);
    for (i, &w) in cigar.iter().enumerate() {
        let (op_, l) = cigar::unpack(w);
        (o, len) = (op_, i64::from(l));
        if !cigar::consumes_ref(o) {
            continue;
        }
        pos += len;
        if pos > end {
            at = Some(i);
            break;
        }
    }
    let Some(i) = at else { return };
    let mut kept = i;
    let mut tail: Vec<u32> = Vec::new();
    if pos - len < end {
        cigar[i] = pack(o, end - (pos - len));
        kept += 1;
        tail.push(pack(op::SOFT_CLIP, pos - end));
    } else {
        // The op starts at the end (pos > end always holds here): samtools
        // unmaps the read, and its clip bookkeeping is moot.
        *flag |= flags::UNMAPPED;
        *flag &= !flags::PROPER_PAIR;
    }
    for &w in &cigar[i + 1..] {
        let (o, l) = cigar::unpack(w);
        if o == op::HARD_CLIP {
            tail.push(w);
        } else if let Some(last) = tail.last_mut() {
            let (_, have) = cigar::unpack(*last);
            *last = cigar::pack(op::SOFT_CLIP, have + l);
        }
    }
    cigar.truncate(kept);
    cigar.extend(tail);
}

/// The sanitizer's `cigdup`: adjacent operations of one kind merged (a sum
/// of 2^28 or more split as samtools splits it), zero-length operations
/// dropped unless they follow one of their kind.
fn merge_duplicate_ops(cigar: &mut Vec<u32>) {
    const MAX: u32 = (1 << 28) - 1;
    let mut out: Vec<u32> = Vec::with_capacity(cigar.len());
    let mut last: Option<(u8, u32)> = None;
    for &w in cigar.iter() {
        let (o, mut len) = cigar::unpack(w);
        if last.is_some_and(|(lo, _)| lo == o) {
            let (_, last_len) = last.expect("checked");
            if u64::from(last_len) + u64::from(len) >= 1 << 28 {
                *out.last_mut().expect("a previous op") = cigar::pack(o, MAX);
                len = len.wrapping_sub(MAX);
                out.push(cigar::pack(o, len));
            } else {
                len += last_len;
                *out.last_mut().expect("a previous op") = cigar::pack(o, len);
            }
        } else if len > 0 {
            out.push(w);
        }
        if len > 0 {
            last = Some((o, len));
        }
    }
    *cigar = out;
}

/// Whether two records (each with its `block_size`) have the same QNAME,
/// compared as samtools' `strcmp` (up to the NUL): one template if they
/// are adjacent.
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    view(a).read_name() == view(b).read_name()
}

/// The templates of `recs` (records in order, each with its
/// `block_size`): the ranges of consecutive records with the same QNAME.
pub fn template_runs(recs: &[&[u8]]) -> Vec<std::ops::Range<usize>> {
    let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, r) in recs.iter().enumerate() {
        match runs.last_mut() {
            Some(last) if same_name(recs[last.start], r) => last.end = i + 1,
            _ => runs.push(i..i + 1),
        }
    }
    runs
}

/// Cuts a stream of records into templates: consecutive records with the
/// same QNAME ([`same_name`]).
#[derive(Debug, Default)]
pub struct TemplateCutter {
    current: Vec<Vec<u8>>,
    spare: Vec<Vec<u8>>,
}

impl TemplateCutter {
    pub fn new() -> TemplateCutter {
        TemplateCutter::default()
    }

    /// Whether `rec` (with its `block_size`) starts a new template.
    pub fn starts_new(&self, rec: &[u8]) -> bool {
        self.current.first().is_some_and(|f| !same_name(f, rec))
    }

    /// The template being gathered.
    pub fn current(&mut self) -> &mut Vec<Vec<u8>> {
        &mut self.current
    }

    /// Adds `rec` to the template being gathered (call [`Self::take`]
    /// first when [`Self::starts_new`] says so).
    pub fn push(&mut self, rec: &[u8]) {
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(rec);
        self.current.push(buf);
    }

    /// Hands the gathered template to `f` (which may edit and shorten it),
    /// then starts an empty one, reusing the buffers.
    pub fn take<E>(&mut self, f: impl FnOnce(&mut Vec<Vec<u8>>) -> Result<(), E>) -> Result<(), E> {
        if self.current.is_empty() {
            return Ok(());
        }
        let r = f(&mut self.current);
        self.spare.append(&mut self.current);
        r
    }
}

#[cfg(test)]
mod tests;
