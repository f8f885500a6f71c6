//! Minimiser order (`samtools sort -M`, with `-K`, `-R`, `-H`, `-I`, `-w`),
//! as samtools 1.24's `bam_sort.c` computes it (`worker_minhash`, `minhash`,
//! `minhash_with_idx[_squash]`, `build_minhash_index`,
//! `bam1_cmp_by_minhash`; §1.6 of `shared/reference/samtools-sort.md`).
//!
//! Only records with `tid == -1` get a minimiser; every other record keeps
//! its coordinate key, and any comparison involving one is by coordinate, so
//! unplaced reads stay last. For an unplaced read samtools computes a 64-bit
//! value `mh` and a position `p`, stores `mh` in `pos`/`mpos` (62 bits) and
//! `p` in `isize`, and compares `mh` ascending, `p` descending, then the
//! strand bit (of the record as written: a read whose best k-mer is on the
//! reverse strand is reverse-complemented first), then input order. On
//! output such a record has `pos = mpos = -1`, `isize = 0`.
//!
//! The key of an unplaced read is therefore `0x01`, `mh & (2^62-1)` (u64),
//! `u32::MAX - p` (u32), the written strand bit (u8); a placed read's is
//! `0x00` and its 8-byte coordinate key. The record edits (reverse
//! complement, cleared fields) are made when the record is written
//! ([`super::KeyEncoder::finish_record`]), from the key: the strand bit in
//! the key against the record's own flag says whether it was turned.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::BufRead;
use std::sync::Arc;

use crate::record::{flags, RecordRef};

/// samtools' default k-mer size (`-K`).
pub const DEFAULT_KMER: u32 = 20;
/// samtools' default index window (`-w`).
pub const DEFAULT_WINDOW: i64 = 100;

/// "Punt homopolymers somewhere central in the hash space" (samtools `XOR`).
const XOR: u64 = 0xdead_7878_beef_7878;
/// Index values with this bit set are k-mers seen more than once.
const DUP_BIT: u64 = 1 << 60;
const POS_MASK: u64 = DUP_BIT - 1;
/// What survives samtools' split of `mh` over `pos` and `mpos`.
pub(crate) const KEY_MASK: u64 = (1 << 62) - 1;

/// Key class bytes: placed records first, then unplaced ones.
pub(crate) const CLASS_PLACED: u8 = 0;
pub(crate) const CLASS_UNPLACED: u8 = 1;
/// Length of an unplaced read's key.
pub(crate) const UNPLACED_KEY_LEN: usize = 14;

/// 2-bit forward code of each 4-bit BAM base (`=ACMGRSVTWYHKDBN`): A C G T
/// are 0..3, anything else counts as A.
const FWD: [u64; 16] = [0, 0, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0];
/// 2-bit code of the complement, for the reverse strand (others count as T).
const REV: [u64; 16] = [0, 3, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// The complement samtools' `reverse_complement` writes for each 4-bit
/// base: through letters and its table, so `=` becomes `N` and `Y` stays
/// `Y` (its table has no entry turning Y into R).
const COMPLEMENT: [u8; 16] = [15, 8, 4, 12, 2, 10, 6, 14, 1, 9, 10, 13, 3, 11, 7, 15];

/// htslib's `seq_nt16_table`: the 4-bit code of a sequence letter.
fn nt16(c: u8) -> u8 {
    match c.to_ascii_uppercase() {
        b'=' => 0,
        b'A' => 1,
        b'C' => 2,
        b'M' => 3,
        b'G' => 4,
        b'R' => 5,
        b'S' => 6,
        b'V' => 7,
        b'T' | b'U' => 8,
        b'W' => 9,
        b'Y' => 10,
        b'H' => 11,
        b'K' => 12,
        b'D' => 13,
        b'B' => 14,
        _ => 15,
    }
}

/// The minimiser options of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Minimiser {
    /// k-mer size, 1..=31 (samtools clamps `-K` to that range).
    pub kmer: u32,
    /// Try the reverse strand too (`-R` turns it off).
    pub reverse: bool,
    /// Skip a base equal to the one before (`-H`).
    pub squash: bool,
    /// `-I FILE`: k-mers of a reference, to order reads by where theirs occur.
    pub index: Option<Arc<MinimiserIndex>>,
}

impl Minimiser {
    /// Options with samtools' defaults (`-M` alone).
    pub fn new(kmer: u32) -> Self {
        Minimiser {
            kmer: kmer.clamp(1, 31),
            reverse: true,
            squash: false,
            index: None,
        }
    }

    /// What samtools stashes in an unplaced read (`tid == -1`): the
    /// minimiser value `mh` (of which 62 bits are compared), the position
    /// compared in descending order, and whether the read is turned to the
    /// reverse strand.
    pub(crate) fn stash(&self, rec: RecordRef<'_>) -> (u64, i64, bool) {
        let seq = Packed {
            bytes: rec.seq_bytes(),
            len: rec.l_seq(),
        };
        match &self.index {
            None => {
                let m = minhash(
                    &seq,
                    self.kmer,
                    seq.len as i64,
                    0,
                    true,
                    self.reverse,
                    self.squash,
                );
                let p = 65535 - m.start;
                (m.hash.wrapping_add(1 << 30), p.max(0), m.rev)
            }
            Some(index) => {
                let (hash, at, rev) =
                    minhash_indexed(&seq, self.kmer, index, self.reverse, self.squash);
                (hash.wrapping_sub(at as u64), 0, rev)
            }
        }
    }

    /// Writes the key of an unplaced read (`tid == -1`).
    pub(crate) fn put_unplaced_key(&self, rec: RecordRef<'_>, out: &mut Vec<u8>) {
        let (mh, p, turned) = self.stash(rec);
        let rev = (rec.flag() & flags::REVERSE != 0) != turned;
        out.push(CLASS_UNPLACED);
        out.extend_from_slice(&(mh & KEY_MASK).to_be_bytes());
        // p is in 0..=65535+30: descending order as an ascending u32.
        out.extend_from_slice(&(u32::MAX - p as u32).to_be_bytes());
        out.push(u8::from(rev));
    }
}

/// Rewrites an unplaced read as samtools writes it in minimiser order:
/// `pos`, `mpos` -1 and `isize` 0, and reverse-complemented (SEQ
/// complemented and reversed, QUAL reversed, flag 0x10 toggled) when its key
/// says the written strand differs from the record's. `framed` includes the
/// 4-byte block size; `key` is the record's minimiser key.
pub(crate) fn rewrite_unplaced(key: &[u8], framed: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(framed);
    let r = RecordRef::with_block_size(framed);
    let f = &mut out[4..];
    f[4..8].copy_from_slice(&(-1i32).to_le_bytes());
    f[24..28].copy_from_slice(&(-1i32).to_le_bytes());
    f[28..32].copy_from_slice(&0i32.to_le_bytes());
    let written_rev = key[UNPLACED_KEY_LEN - 1] != 0;
    if written_rev == (r.flag() & flags::REVERSE != 0) {
        return;
    }
    let flag = r.flag() ^ flags::REVERSE;
    f[14..16].copy_from_slice(&flag.to_le_bytes());
    let len = r.l_seq();
    let seq_at = 32 + r.l_read_name() + 4 * r.n_cigar_op();
    let qual_at = seq_at + len.div_ceil(2);
    let old = Packed {
        bytes: r.seq_bytes(),
        len,
    };
    let seq = &mut f[seq_at..qual_at];
    for i in 0..len {
        let c = COMPLEMENT[old.at(len - 1 - i)];
        let b = &mut seq[i >> 1];
        *b = if i & 1 == 0 {
            (*b & 0x0f) | c << 4
        } else {
            (*b & 0xf0) | c
        };
    }
    f[qual_at..qual_at + len].reverse();
}

/// A read's bases, 4-bit codes one at a time.
trait Bases {
    fn len(&self) -> usize;
    fn at(&self, i: usize) -> usize;
}

/// BAM's packed SEQ: two bases a byte, high nibble first.
struct Packed<'a> {
    bytes: &'a [u8],
    len: usize,
}

impl Bases for Packed<'_> {
    fn len(&self) -> usize {
        self.len
    }
    #[inline]
    fn at(&self, i: usize) -> usize {
        let b = self.bytes[i >> 1];
        (if i & 1 == 0 { b >> 4 } else { b & 0x0f }) as usize
    }
}

/// One 4-bit code a byte (reference sequences for the index).
impl Bases for [u8] {
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    #[inline]
    fn at(&self, i: usize) -> usize {
        self[i] as usize
    }
}

/// What samtools' `minhash` returns: the smallest hash, where the window
/// should restart (`*curr_pos`), whether it reached the end, and whether the
/// reverse strand won.
struct MinHash {
    hash: u64,
    start: i64,
    end: bool,
    rev: bool,
}

fn mask_of(k: u32) -> u64 {
    (1u64 << (2 * k)) - 1
}

/// samtools `minhash` over `[start, min(start + window, len))`. Indices are
/// i64 so that a zero or negative window (which samtools accepts) behaves
/// as it does there.
fn minhash<B: Bases + ?Sized>(
    seq: &B,
    k: u32,
    window: i64,
    start: i64,
    try_fwd: bool,
    try_rev: bool,
    squash: bool,
) -> MinHash {
    let len = seq.len() as i64;
    let k1 = (k - 1) as i64;
    let mask = mask_of(k);
    let xor = XOR & mask;
    let end = (start + window).min(len);
    let mut min_f = u64::MAX;
    let mut at_f = start;
    let mut rev = false;
    if try_fwd {
        let mut h = 0u64;
        let mut last = usize::MAX;
        let (mut i, mut j) = (start, 0);
        while j < k1 && i < end {
            let b = seq.at(i as usize);
            if !squash || last != b {
                last = b;
                h = h << 2 | FWD[b];
                j += 1;
            }
            i += 1;
        }
        while i < end {
            let b = seq.at(i as usize);
            if !squash || last != b {
                last = b;
                h = h << 2 | FWD[b];
                let x = (h ^ XOR) & mask;
                if min_f > x {
                    min_f = x;
                    at_f = i;
                }
            }
            i += 1;
        }
    }
    if try_rev {
        let shift = 2 * (k - 1);
        let mut h = 0u64;
        let mut min_r = u64::MAX;
        let mut at_r = start;
        let mut last = usize::MAX;
        let (mut i, mut j) = (start, 0);
        // samtools primes the reverse hash up to the read's end, not the window's.
        while j < k1 && i < len {
            let b = seq.at(i as usize);
            if !squash || last != b {
                last = b;
                h = h >> 2 | REV[b] << shift;
                j += 1;
            }
            i += 1;
        }
        while i < end {
            let b = seq.at(i as usize);
            if !squash || last != b {
                last = b;
                h = h >> 2 | REV[b] << shift;
                if min_r > h ^ xor {
                    min_r = h ^ xor;
                    at_r = len - i + k1 - 1;
                }
            }
            i += 1;
        }
        if min_r < min_f {
            min_f = min_r;
            at_f = at_r;
            rev = true;
        }
    }
    MinHash {
        hash: min_f,
        start: at_f - k1,
        end: end == len,
        rev,
    }
}

/// The best k-mer of one strand against the index: unique in the index
/// first, then present more than once, then absent (smallest hash among
/// absent ones). Returns (hash, position, found bits: 2 unique, 1 dup).
fn best_indexed<B: Bases + ?Sized>(
    seq: &B,
    k: u32,
    index: &MinimiserIndex,
    squash: bool,
    reverse: bool,
) -> (u64, i64, u8) {
    let len = seq.len() as i64;
    let k1 = (k - 1) as i64;
    let mask = mask_of(k);
    let xor = XOR & mask;
    let shift = 2 * (k - 1);
    let step = |h: u64, b: usize| {
        if reverse {
            h >> 2 | REV[b] << shift
        } else {
            (h << 2 | FWD[b]) & mask
        }
    };
    let (mut min, mut min_u, mut min_d) = (u64::MAX, u64::MAX, u64::MAX);
    let (mut at, mut at_u, mut at_d) = (0i64, 0i64, 0i64);
    let mut h = 0u64;
    let mut last = usize::MAX;
    let (mut i, mut j) = (0i64, 0i64);
    while j < k1 && i < len {
        let b = seq.at(i as usize);
        i += 1;
        if squash && b == last {
            continue;
        }
        last = b;
        j += 1;
        h = if reverse {
            h >> 2 | REV[b] << shift
        } else {
            h << 2 | FWD[b]
        };
    }
    let mut found = 0u8;
    while i < len {
        let b = seq.at(i as usize);
        if squash && b == last {
            i += 1;
            continue;
        }
        last = b;
        h = step(h, b);
        let x = h ^ xor;
        let mut class = 0u8;
        // As samtools: looked up only while it could still win, and a hit
        // replaces the best of its class even when larger.
        if min_u > x || (found < 2 && min_d > x) {
            if let Some(v) = index.map.get(&x) {
                class = if v & DUP_BIT == 0 { 2 } else { 1 };
            }
        }
        found |= class;
        match class {
            2 => (min_u, at_u) = (x, i),
            1 => (min_d, at_d) = (x, i),
            _ => {
                if min > x {
                    (min, at) = (x, i);
                }
            }
        }
        i += 1;
    }
    if min_u != u64::MAX {
        (min, at) = (min_u, at_u);
    } else if min_d != u64::MAX {
        (min, at) = (min_d, at_d);
    }
    (min, at, found)
}

/// samtools `minhash_with_idx` / `minhash_with_idx_squash`: returns the
/// k-mer's reference position (or its hash when absent; 0 when the read has
/// no k-mer and the index has no entry for that), the position in the read,
/// and whether the reverse strand won.
fn minhash_indexed<B: Bases + ?Sized>(
    seq: &B,
    k: u32,
    index: &MinimiserIndex,
    try_rev: bool,
    squash: bool,
) -> (u64, i64, bool) {
    let (mut min, mut at, found_f) = best_indexed(seq, k, index, squash, false);
    let mut rev = false;
    if try_rev {
        let (min_r, at_r, found_r) = best_indexed(seq, k, index, squash, true);
        if (min > min_r || (found_f == 0 && found_r != 0)) && (found_f == 0 || found_r != 0) {
            min = min_r;
            at = seq.len() as i64 - at_r + k as i64 - 2;
            rev = true;
        }
    }
    // The index may hold u64::MAX itself (a window with no k-mer).
    if let Some(v) = index.map.get(&min) {
        min = v & POS_MASK;
    }
    (if min != u64::MAX { min } else { 0 }, at, rev)
}

/// A fast hasher for the u64 k-mer keys (the index is built once and read
/// for every k-mer of every unplaced read).
#[derive(Default)]
pub struct KmerHasher(u64);

impl Hasher for KmerHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        let h = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 29);
    }
}

/// The `-I` index: k-mer hash -> position in the concatenated reference
/// (the sequences not shorter than the window), with [`DUP_BIT`] set when
/// the k-mer was seen more than once (the last position then stays).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MinimiserIndex {
    map: HashMap<u64, u64, BuildHasherDefault<KmerHasher>>,
}

/// Why a `-I` FASTA file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FastaError {
    #[error("reading the FASTA file at byte {offset}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("the file is empty; a FASTA file is needed")]
    Empty,
    #[error("line 1 does not start with '>': not a FASTA file")]
    NotFasta,
}

impl MinimiserIndex {
    /// Number of distinct k-mers.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Adds one reference sequence (4-bit codes) as samtools
    /// `build_minhash_index` does; `offset` is the running total of the
    /// lengths of the sequences indexed before.
    fn add(&mut self, seq: &[u8], offset: &mut u64, k: u32, window: i64, squash: bool) {
        if (seq.len() as i64) < window {
            return;
        }
        let mut pos = 0i64;
        loop {
            let last = pos;
            let m = minhash(seq, k, window, pos, true, false, squash);
            let v = offset.wrapping_add(m.start as u64);
            match self.map.entry(m.hash) {
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    e.insert(v.wrapping_add(DUP_BIT));
                }
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
            pos = (last + k as i64).max(m.start + 1);
            if m.end {
                break;
            }
        }
        *offset = offset.wrapping_add(seq.len() as u64);
    }

    /// Builds the index from FASTA text as htslib reads it: a record per
    /// `>` line, its sequence the following lines joined (a `\r` before a
    /// line's `\n` dropped), each letter mapped as `seq_nt16_table` does.
    pub fn from_fasta<R: BufRead>(
        mut input: R,
        kmer: u32,
        window: i64,
        squash: bool,
    ) -> Result<Self, FastaError> {
        let k = kmer.clamp(1, 31);
        let mut index = MinimiserIndex::default();
        let mut line = Vec::new();
        let mut seq: Vec<u8> = Vec::new();
        let mut offset = 0u64;
        let mut read = 0u64;
        let mut first = true;
        loop {
            line.clear();
            let n = input
                .read_until(b'\n', &mut line)
                .map_err(|source| FastaError::Io {
                    offset: read,
                    source,
                })?;
            read += n as u64;
            if n == 0 {
                break;
            }
            if line.last() == Some(&b'\n') {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
            }
            if first {
                if line.first() != Some(&b'>') {
                    return Err(FastaError::NotFasta);
                }
                first = false;
                continue;
            }
            if line.first() == Some(&b'>') {
                index.add(&seq, &mut offset, k, window, squash);
                seq.clear();
            } else {
                seq.extend(line.iter().map(|&c| nt16(c)));
            }
        }
        if first {
            return Err(FastaError::Empty);
        }
        index.add(&seq, &mut offset, k, window, squash);
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(s: &str) -> Vec<u8> {
        s.bytes().map(nt16).collect()
    }

    /// The 2-bit value of a k-mer read forward (A0 C1 G2 T3).
    fn kmer_value(s: &str) -> u64 {
        s.bytes().fold(0, |h, c| h << 2 | FWD[nt16(c) as usize])
    }

    #[test]
    fn forward_minimum_is_the_smallest_xored_kmer() {
        let seq = codes("ACGTTGCAAC");
        let k = 4;
        let mask = mask_of(k);
        let want = (0..=seq.len() - 4)
            .map(|i| (kmer_value(&"ACGTTGCAAC"[i..i + 4]) ^ XOR) & mask)
            .min()
            .unwrap();
        let m = minhash(seq.as_slice(), k, seq.len() as i64, 0, true, false, false);
        assert_eq!(m.hash, want);
        assert!(!m.rev);
    }

    #[test]
    fn reverse_strand_wins_for_the_reverse_complement_of_a_forward_winner() {
        // A read and its reverse complement have the same canonical minimum.
        let fwd = codes("GATTACAGGCATTTCG");
        let rc = codes("CGAAATGCCTGTAATC");
        let a = minhash(fwd.as_slice(), 5, 16, 0, true, true, false);
        let b = minhash(rc.as_slice(), 5, 16, 0, true, true, false);
        assert_eq!(a.hash, b.hash);
        assert_ne!(a.rev, b.rev);
        // Without the reverse strand the two differ.
        let a1 = minhash(fwd.as_slice(), 5, 16, 0, true, false, false);
        let b1 = minhash(rc.as_slice(), 5, 16, 0, true, false, false);
        assert_ne!(a1.hash, b1.hash);
    }

    #[test]
    fn short_read_has_no_kmer() {
        let seq = codes("ACG");
        let m = minhash(seq.as_slice(), 5, 3, 0, true, true, false);
        assert_eq!(m.hash, u64::MAX);
        assert_eq!(m.start, -4);
    }

    #[test]
    fn squash_ignores_homopolymer_lengths() {
        let a = codes("AAACCGTTTTA");
        let b = codes("ACGTA");
        let ma = minhash(a.as_slice(), 3, 11, 0, true, true, true);
        let mb = minhash(b.as_slice(), 3, 5, 0, true, true, true);
        assert_eq!(ma.hash, mb.hash);
        let plain = minhash(a.as_slice(), 3, 11, 0, true, true, false);
        assert_ne!(plain.hash, ma.hash);
    }

    #[test]
    fn index_marks_repeated_kmers_and_skips_short_sequences() {
        let fa = b">one\nACGTACGTAC\nGTACGTAC\r\n>short\nACG\n>two\nTTTTGGGGCCCCAAAA\n";
        let idx = MinimiserIndex::from_fasta(&fa[..], 4, 8, false).unwrap();
        assert!(!idx.is_empty());
        // `one` is periodic: its windows all find the same minimum.
        assert!(idx.map.values().any(|v| v & DUP_BIT != 0));
        // `short` is not indexed, so `two`'s positions start at 18.
        assert!(idx.map.values().any(|v| v & POS_MASK >= 18));
        assert!(idx.map.values().all(|v| v & POS_MASK < 18 + 16));
    }

    #[test]
    fn fasta_must_start_with_a_header() {
        assert!(matches!(
            MinimiserIndex::from_fasta(&b"ACGT\n"[..], 4, 8, false),
            Err(FastaError::NotFasta)
        ));
        assert!(matches!(
            MinimiserIndex::from_fasta(&b""[..], 4, 8, false),
            Err(FastaError::Empty)
        ));
    }

    #[test]
    fn complement_table_matches_samtools_letters() {
        let letters = b"=ACMGRSVTWYHKDBN";
        let comp = b"NTGKCYSBAWYDMHVN";
        for (i, &c) in comp.iter().enumerate() {
            assert_eq!(
                COMPLEMENT[i],
                nt16(c),
                "complement of {}",
                letters[i] as char
            );
        }
    }
}
