//! Step 3, join: the halves of one name bucket paired as the one-pass
//! marker pairs them ([`join_mates`], [`MateJoin`]), spilled in sorted runs
//! beyond a limit.

use super::bucket::end_bucket_of;
use super::fixups::Fixups;
use super::half::{encode_half, half_at, half_fields, half_name_len, HalfFields, HALF_BYTES};
use super::merge_order::{self, MergeKey, MergeOrder};
#[cfg(doc)]
use super::SplitShare;
use crate::ends::{pair_end, End};
use crate::hash::hash_bytes;
use crate::spill::{encode_end, io_error, END_BYTES};
#[cfg(doc)]
use crate::MarkDuplicates;
use crate::MarkdupError;

/// Pairs the halves of one name bucket (blocks from every split, any
/// order) as [`MarkDuplicates`] pairs them over the whole input; returns
/// the pair ends by end bucket ([`MateJoin`] without a memory limit).
pub fn join_mates(
    blocks: &[&[u8]],
    fixups: &Fixups,
    end_buckets: usize,
) -> Result<Vec<Vec<u8>>, MarkdupError> {
    let mut join = MateJoin::for_fixups(fixups);
    for b in blocks {
        join.add_block(b)?;
    }
    let mut out = vec![Vec::new(); end_buckets.max(1)];
    join.finish(fixups, end_buckets, &mut |bucket, end| {
        out[bucket].extend_from_slice(end);
        Ok(())
    })?;
    Ok(out)
}

/// Where [`MateJoin::finish`] hands each pair end: its end bucket and its
/// 63 bytes.
pub type PairEndSink<'a> = dyn FnMut(usize, &[u8]) -> Result<(), MarkdupError> + 'a;

/// A half held in memory by the join: its fields, its [`join_key`], and
/// where its name is in the join's name bytes.
pub(crate) struct Held {
    pub(crate) h: HalfFields,
    pub(crate) key: u64,
    pub(crate) name_at: usize,
    pub(crate) name_len: u32,
    /// The bytes of its record's running maximum ([`MergeKey::encode`]),
    /// after its name: 0 unless the join keeps the merge order.
    pub(crate) merge_len: u32,
}

/// The join's order of halves: by [`join_key`], read group and name (a
/// name's halves together; which name comes first does not matter, the
/// hash spares most comparisons of whole names), then input order.
pub(crate) fn join_key(rg: i16, name: &[u8]) -> u64 {
    hash_bytes(name, rg as u16 as u64)
}

/// A half as the join compares it: its [`join_key`], fields and name;
/// then the bytes of its record's running maximum (empty unless the join
/// keeps the merge order).
pub(crate) type HalfView<'a> = (u64, &'a HalfFields, &'a [u8], &'a [u8]);

/// A held half as the join compares it; `names`: the join's name bytes.
pub(crate) fn held_view<'a>(h: &'a Held, names: &'a [u8]) -> HalfView<'a> {
    let name_end = h.name_at + h.name_len as usize;
    (
        h.key,
        &h.h,
        &names[h.name_at..name_end],
        &names[name_end..name_end + h.merge_len as usize],
    )
}

/// [`join_key`]'s order of two halves.
pub(crate) fn join_cmp(a: HalfView<'_>, b: HalfView<'_>) -> std::cmp::Ordering {
    a.0.cmp(&b.0)
        .then_with(|| a.1.rg.cmp(&b.1.rg))
        .then_with(|| a.2.cmp(b.2))
        .then_with(|| a.1.seq.cmp(&b.1.seq))
}

/// The join of one name bucket: its halves added block by block (from
/// every split, any order), held in memory up to a limit and beyond it
/// sorted into run files ([`MateJoin::set_spill`]), then read back in
/// order (runs and memory merged) and paired as [`MarkDuplicates`] pairs
/// them over the whole input. The halves' names are held in one buffer.
#[derive(Default)]
pub struct MateJoin {
    pub(crate) held: Vec<Held>,
    /// The held halves' names, one after the other.
    pub(crate) names: Vec<u8>,
    pub(crate) spill: Option<(std::path::PathBuf, usize)>,
    pub(crate) runs: Vec<HalfRun>,
    pub(crate) files: u64,
    pub(crate) runs_written: u64,
    /// Keeping Picard's merge order of several inputs: the halves carry
    /// their records' running maxima, and the pair ends their first
    /// mate's.
    pub(crate) merge: Option<MergeOrder>,
}

impl MateJoin {
    /// A join of the splits whose `fixups` these are: when they keep
    /// Picard's merge order ([`Fixups::merge_order`]) the halves carry
    /// their records' running maxima and the pair ends their first mate's,
    /// for [`MarkDuplicates::decide_merged`].
    pub fn for_fixups(fixups: &Fixups) -> MateJoin {
        MateJoin {
            merge: fixups.merge.clone(),
            ..MateJoin::default()
        }
    }

    /// Halves beyond `limit` bytes go to sorted run files in `dir`
    /// (removed as they are read back; on failure the caller removes
    /// `dir`).
    pub fn set_spill(&mut self, dir: &std::path::Path, limit: usize) {
        self.spill = Some((dir.to_path_buf(), limit));
    }

    /// Run files written so far (merges of runs included).
    pub fn runs_written(&self) -> u64 {
        self.runs_written
    }

    /// Bytes the halves in memory take (each one's fields, name and
    /// running maximum).
    pub(crate) fn bytes(&self) -> usize {
        self.held.len() * std::mem::size_of::<Held>() + self.names.len()
    }

    /// Adds a block of halves ([`SplitShare::halves`]).
    pub fn add_block(&mut self, block: &[u8]) -> Result<(), MarkdupError> {
        let mut at = 0;
        while at < block.len() {
            let (h, name, mut next) = half_at(block, at)?;
            let merge = if self.merge.is_some() {
                let end = MergeKey::decode(block, next)?.1;
                let key = &block[next..end];
                next = end;
                key
            } else {
                &[]
            };
            at = next;
            self.held.push(Held {
                h,
                key: join_key(h.rg, name),
                name_at: self.names.len(),
                name_len: name.len() as u32,
                merge_len: merge.len() as u32,
            });
            self.names.extend_from_slice(name);
            self.names.extend_from_slice(merge);
            if self.spill.as_ref().is_some_and(|s| self.bytes() > s.1) {
                self.spill_run()?;
            }
        }
        Ok(())
    }

    pub(crate) fn next_path(&mut self) -> std::path::PathBuf {
        self.files += 1;
        let dir = &self.spill.as_ref().expect("spill configured").0;
        dir.join(format!(
            "markdup-halves-{}-{}",
            std::process::id(),
            self.files
        ))
    }

    /// The halves in memory in the join's order, as (key, place in
    /// `held`): 16 bytes moved per step of the sort, not the half.
    pub(crate) fn sorted(&self) -> Vec<(u64, usize)> {
        let mut order: Vec<(u64, usize)> = self
            .held
            .iter()
            .enumerate()
            .map(|(i, h)| (h.key, i))
            .collect();
        let names = &self.names;
        let half = |i: usize| held_view(&self.held[i], names);
        order.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| join_cmp(half(a.1), half(b.1))));
        order
    }

    /// The halves in memory sorted into a run file (the runs merged into
    /// one first when there are [`crate::spill::MAX_RUNS`]).
    pub(crate) fn spill_run(&mut self) -> Result<(), MarkdupError> {
        if self.runs.len() >= crate::spill::MAX_RUNS {
            let old = std::mem::take(&mut self.runs);
            let path = self.next_path();
            let keyed = self.merge.is_some();
            let mut stream = HalfStream::new(old, &[], &[], &[], keyed)?;
            let mut w = HalfWriter::create(path)?;
            while let Some((_, h, name, merge)) = stream.next_half()? {
                w.put(h, name, merge)?;
            }
            self.runs_written += 1;
            self.runs.push(w.finish()?);
        }
        let order = self.sorted();
        let path = self.next_path();
        let mut w = HalfWriter::create(path)?;
        for &(_, i) in &order {
            let (_, h, name, merge) = held_view(&self.held[i], &self.names);
            w.put(h, name, merge)?;
        }
        self.runs_written += 1;
        self.runs.push(w.finish()?);
        self.held.clear();
        self.names.clear();
        Ok(())
    }

    /// The pair ends, each handed to `out` with its end bucket (of
    /// `end_buckets`) as its 63 bytes.
    pub fn finish(
        mut self,
        fixups: &Fixups,
        end_buckets: usize,
        out: &mut PairEndSink<'_>,
    ) -> Result<(), MarkdupError> {
        // A name's halves in input order; the marker's waiting mates are
        // keyed by (reference, read group, name), so names do not meet.
        let order = self.sorted();
        let runs = std::mem::take(&mut self.runs);
        let merge = self.merge.take();
        let mut stream = HalfStream::new(runs, &self.held, &order, &self.names, merge.is_some())?;
        // The name's waiting mates by the reference they wait under (a
        // name has few: a list, searched), with their running maxima.
        let mut waiting: Vec<(i32, End, Vec<u8>)> = Vec::new();
        let mut entry: Vec<u8> = Vec::new();
        let mut last: Option<(u64, i16)> = None;
        let mut last_name: Vec<u8> = Vec::new();
        // Name-grouped input: the name's current template (its first
        // record's ordinal) and whether it held a first and a second of
        // pair.
        let mut template: Option<(i64, bool, bool)> = None;
        let mut buf = [0u8; END_BYTES];
        while let Some((key, h, name, running)) = stream.next_half()? {
            if last != Some((key, h.rg)) || last_name != name {
                waiting.clear();
                template = None;
                last = Some((key, h.rg));
                last_name.clear();
                last_name.extend_from_slice(name);
            }
            let mut frag = h.end;
            fixups.apply_end(&mut frag);
            if fixups.grouped {
                template = Some(scatter_step(template, frag.r1_index, h.read1, name)?);
            }
            match waiting.iter().position(|w| w.0 == frag.r1_ref) {
                Some(i) => {
                    let (_, p, p_running) = waiting.swap_remove(i);
                    let e = pair_end(p, &frag, h.read1, h.barcodes);
                    encode_end(&e, &mut buf);
                    let bucket = end_bucket_of(&e, end_buckets.max(1));
                    match &merge {
                        None => out(bucket, &buf)?,
                        Some(m) => {
                            // Mates in two inputs: Picard meets them in its
                            // merged stream, whose order of the two the
                            // pairing would need.
                            if m.input_of(p.r1_index)? != m.input_of(frag.r1_index)? {
                                return Err(MarkdupError::MatesInTwoInputs {
                                    name: name.to_vec(),
                                });
                            }
                            entry.clear();
                            entry.extend_from_slice(&buf);
                            let first = if e.r1_index == p.r1_index {
                                &p_running[..]
                            } else {
                                running
                            };
                            entry.extend_from_slice(first);
                            out(bucket, &entry)?;
                        }
                    }
                }
                // A later half waiting under the same reference replaces
                // the earlier one.
                None => match waiting.iter_mut().find(|w| w.0 == frag.r2_ref) {
                    Some(w) => {
                        w.1 = frag;
                        w.2.clear();
                        w.2.extend_from_slice(running);
                    }
                    None => waiting.push((frag.r2_ref, frag, running.to_vec())),
                },
            }
        }
        Ok(())
    }
}

/// The grouping check across splits, one half of a name at a time (in
/// input order): a template of the name that begins after an earlier one
/// of the name without both primary mates among its halves is scattered
/// (one node's [`crate::grouping::GroupCheck`] remembers that earlier
/// template as incomplete and refuses the later one at its first record,
/// the template's index). Halves are the mapped primary records whose
/// mate is mapped, so a template scattered over two splits is found when
/// both its parts hold one (the split's own check finds it within a
/// split). Returns the name's current template.
pub(crate) fn scatter_step(
    template: Option<(i64, bool, bool)>,
    index: i64,
    read1: bool,
    name: &[u8],
) -> Result<(i64, bool, bool), MarkdupError> {
    let (r1, r2) = (read1, !read1);
    match template {
        Some((t, a, b)) if t == index => Ok((t, a || r1, b || r2)),
        Some((t, a, b)) if !(a && b) => Err(MarkdupError::ScatteredTemplate {
            name: name.to_vec(),
            ordinal: index,
            earlier: t,
        }),
        _ => Ok((index, r1, r2)),
    }
}

/// One sorted run of halves on disk.
pub(crate) struct HalfRun {
    pub(crate) path: std::path::PathBuf,
    pub(crate) halves: u64,
}

/// Writes a run of halves (given in the join's order).
pub(crate) struct HalfWriter {
    pub(crate) w: std::io::BufWriter<std::fs::File>,
    pub(crate) path: std::path::PathBuf,
    pub(crate) buf: Vec<u8>,
    pub(crate) halves: u64,
}

impl HalfWriter {
    pub(crate) fn create(path: std::path::PathBuf) -> Result<HalfWriter, MarkdupError> {
        let file =
            std::fs::File::create(&path).map_err(io_error(&path, "creating a spill file"))?;
        Ok(HalfWriter {
            w: std::io::BufWriter::with_capacity(1 << 16, file),
            path,
            buf: Vec::new(),
            halves: 0,
        })
    }

    pub(crate) fn put(
        &mut self,
        h: &HalfFields,
        name: &[u8],
        merge: &[u8],
    ) -> Result<(), MarkdupError> {
        use std::io::Write as _;
        self.buf.clear();
        encode_half(h, name, &mut self.buf);
        self.buf.extend_from_slice(merge);
        self.w
            .write_all(&self.buf)
            .map_err(io_error(&self.path, "writing a spill file"))?;
        self.halves += 1;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<HalfRun, MarkdupError> {
        use std::io::Write as _;
        self.w
            .flush()
            .map_err(io_error(&self.path, "writing a spill file"))?;
        Ok(HalfRun {
            path: self.path,
            halves: self.halves,
        })
    }
}

/// Reads a run of halves back, removing its file when dropped; holds the
/// half read last (its fields, key and name).
pub(crate) struct HalfReader {
    pub(crate) r: std::io::BufReader<std::fs::File>,
    pub(crate) left: u64,
    pub(crate) path: std::path::PathBuf,
    pub(crate) head: Option<(u64, HalfFields)>,
    pub(crate) name: Vec<u8>,
    /// Whether each half is followed by its record's running maximum, and
    /// the head's.
    pub(crate) keyed: bool,
    pub(crate) merge: Vec<u8>,
}

impl HalfReader {
    pub(crate) fn open(run: HalfRun, keyed: bool) -> Result<HalfReader, MarkdupError> {
        let file =
            std::fs::File::open(&run.path).map_err(io_error(&run.path, "opening a spill file"))?;
        Ok(HalfReader {
            r: std::io::BufReader::with_capacity(1 << 16, file),
            left: run.halves,
            path: run.path,
            head: None,
            name: Vec::new(),
            keyed,
            merge: Vec::new(),
        })
    }

    /// Reads the next half into the head (`None` at the run's end).
    pub(crate) fn advance(&mut self) -> Result<(), MarkdupError> {
        use std::io::Read as _;
        if self.left == 0 {
            self.head = None;
            return Ok(());
        }
        let mut fixed = [0u8; HALF_BYTES];
        self.r
            .read_exact(&mut fixed)
            .map_err(io_error(&self.path, "reading a spill file"))?;
        self.name.resize(half_name_len(&fixed), 0);
        self.r
            .read_exact(&mut self.name)
            .map_err(io_error(&self.path, "reading a spill file"))?;
        if self.keyed {
            let mut fixed = [0u8; merge_order::KEY_FIXED];
            self.r
                .read_exact(&mut fixed)
                .map_err(io_error(&self.path, "reading a spill file"))?;
            self.merge.clear();
            self.merge.extend_from_slice(&fixed);
            self.merge
                .resize(fixed.len() + merge_order::key_name_len(&fixed), 0);
            self.r
                .read_exact(&mut self.merge[fixed.len()..])
                .map_err(io_error(&self.path, "reading a spill file"))?;
        }
        self.left -= 1;
        let h = half_fields(&fixed);
        self.head = Some((join_key(h.rg, &self.name), h));
        Ok(())
    }
}

impl Drop for HalfReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The halves in the join's order: the runs on disk and the sorted halves
/// in memory, merged (equal keys cannot occur: a half's place is its own).
pub(crate) struct HalfStream<'a> {
    pub(crate) runs: Vec<HalfReader>,
    pub(crate) held: &'a [Held],
    /// `held` in the join's order.
    pub(crate) order: &'a [(u64, usize)],
    pub(crate) names: &'a [u8],
    /// The next half in memory (in `order`).
    pub(crate) at: usize,
    /// The source of the half given last, advanced at the next call (the
    /// runs by number, the memory last).
    pub(crate) given: Option<usize>,
}

impl<'a> HalfStream<'a> {
    pub(crate) fn new(
        runs: Vec<HalfRun>,
        held: &'a [Held],
        order: &'a [(u64, usize)],
        names: &'a [u8],
        keyed: bool,
    ) -> Result<HalfStream<'a>, MarkdupError> {
        let mut runs = runs
            .into_iter()
            .map(|r| HalfReader::open(r, keyed))
            .collect::<Result<Vec<_>, _>>()?;
        for r in &mut runs {
            r.advance()?;
        }
        Ok(HalfStream {
            runs,
            held,
            order,
            names,
            at: 0,
            given: None,
        })
    }

    pub(crate) fn memory_head(&self) -> Option<HalfView<'a>> {
        Some(held_view(
            &self.held[self.order.get(self.at)?.1],
            self.names,
        ))
    }

    /// The next half in the join's order (its [`join_key`], fields and
    /// name).
    pub(crate) fn next_half(&mut self) -> Result<Option<HalfView<'_>>, MarkdupError> {
        match self.given.take() {
            Some(r) if r < self.runs.len() => self.runs[r].advance()?,
            Some(_) => self.at += 1,
            None => {}
        }
        // Few runs (at most MAX_RUNS + 1 sources): a scan for the least.
        let mut best = self.memory_head().map(|m| (self.runs.len(), m));
        for (i, r) in self.runs.iter().enumerate() {
            if let Some((key, h)) = &r.head {
                let cand = (*key, h, r.name.as_slice(), r.merge.as_slice());
                if best.is_none_or(|(_, b)| join_cmp(cand, b).is_lt()) {
                    best = Some((i, cand));
                }
            }
        }
        let Some((source, half)) = best else {
            return Ok(None);
        };
        self.given = Some(source);
        Ok(Some(half))
    }
}
