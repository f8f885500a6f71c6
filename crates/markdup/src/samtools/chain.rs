//! Duplicate chains (`-t`, `-d`): `do` tags pointed at the final original, and duplicates of duplicates found optical (samtools' `find_duplicate_chains`).

use super::coords::{NameCoords, NameFailure};
use super::{calc_score, has_mate, mate_score, name_of, tags, text, Error, SamtoolsMarker};
use alnsort_bam::record::flags;
use alnsort_bam::RecordRef;

/// One duplicate of a chain (samtools' `check_t`).
#[derive(Debug, Clone)]
struct Check {
    id: u64,
    score: i64,
    mate_score: i64,
    x: i64,
    y: i64,
    opt: bool,
    beg: usize,
    len: usize,
}

impl SamtoolsMarker {
    /// Checks the chain of the record `id` belongs to, from its original.
    pub(super) fn find_duplicate_chains(&mut self, id: u64) -> Result<(), Error> {
        let mut root = id;
        let mut steps = 0usize;
        while let Some(o) = self.follow(self.get(root).and_then(|e| e.original)) {
            if steps > self.window.len() {
                break;
            }
            root = o;
            steps += 1;
        }
        let group = self.get(root).map_or(0, |e| e.read_group);
        let (list, coord_fail) = self.check_against_original(root, group)?;
        if coord_fail {
            return Ok(());
        }
        if self.opts.optical_distance != 0 && !list.is_empty() {
            self.check_duplicate_chain(list, group)?;
        }
        Ok(())
    }

    /// samtools' `check_chain_against_original`: `do` tags updated to the
    /// original's name, duplicates near the original retagged optical, and
    /// the values the pairwise check needs. `true` with the list: the
    /// original's name gave no coordinates (no pairwise check).
    fn check_against_original(
        &mut self,
        root: u64,
        group: usize,
    ) -> Result<(Vec<Check>, bool), Error> {
        let ori_name = name_of(self.rec(root)).to_vec();
        let mut ori_coords: Option<NameCoords> = None;
        let mut coord_fail = false;
        if self.opts.optical_distance != 0 {
            match self.name_coords(&ori_name) {
                Ok(c) => ori_coords = Some(c),
                Err(NameFailure::NoMatch) => {
                    return Err(Error::CoordsNoMatch {
                        name: text(&ori_name),
                    })
                }
                Err(NameFailure::Warn(_)) => coord_fail = true,
            }
        }
        let mut list = Vec::new();
        let mut current = self.follow(self.get(root).and_then(|e| e.duplicate));
        let mut steps = 0usize;
        while let Some(cur) = current {
            if steps > self.window.len() {
                break;
            }
            steps += 1;
            let mut c = Check {
                id: cur,
                score: 0,
                mate_score: 0,
                x: -1,
                y: -1,
                opt: false,
                beg: 0,
                len: 0,
            };
            self.at(cur).dup_checked = true;
            if self.opts.tag_original {
                let r = RecordRef::with_block_size(self.rec(cur));
                if let Some(f) = r.aux().find(*b"do") {
                    match f.text() {
                        Some(old) => {
                            if old != ori_name.as_slice() {
                                tags::update_str(&mut self.at(cur).rec, *b"do", &ori_name);
                            }
                        }
                        None => {
                            return Err(Error::OriginalTagType {
                                name: text(r.read_name()),
                            })
                        }
                    }
                }
            }
            if let Some(oc) = ori_coords {
                let r = RecordRef::with_block_size(self.rec(cur));
                c.opt = r
                    .aux()
                    .find(*b"dt")
                    .and_then(|f| f.text())
                    .is_some_and(|t| t == b"SQ");
                let paired = has_mate(self.rec(cur));
                let dup_name = name_of(self.rec(cur)).to_vec();
                let mut is_opt = false;
                let slot = list.len();
                if let Ok(dc) = self.name_coords(&dup_name) {
                    is_opt = self.close(&ori_name, &oc, &dup_name, &dc);
                    c.x = dc.x;
                    c.y = dc.y;
                    c.beg = dc.t_beg;
                    c.len = dc.t_end - dc.t_beg;
                    if self.stale_tiles.len() <= slot {
                        self.stale_tiles.resize(slot + 1, (0, 0));
                    }
                    self.stale_tiles[slot] = (c.beg, c.len);
                } else {
                    // samtools leaves this slot's tile fields as an earlier
                    // chain check set them (its list array is reused).
                    (c.beg, c.len) = self.stale_tiles.get(slot).copied().unwrap_or((0, 0));
                }
                if !c.opt && is_opt {
                    self.optical_retag(cur, paired, group)?;
                    c.opt = true;
                }
                c.score = calc_score(self.rec(cur));
                if paired {
                    c.mate_score = mate_score(self.rec(cur))?;
                }
            }
            current = self.follow(self.get(cur).and_then(|e| e.duplicate));
            list.push(c);
        }
        if let Some(e) = self.window.get_mut((root - self.base) as usize) {
            e.dup_checked = true;
        }
        Ok((list, coord_fail))
    }

    /// The tile part of a checked duplicate's name, as samtools' `memcmp`
    /// reads it from the name's start in htslib's in-memory record: a
    /// slot's stale fields (a name that gave no coordinates) may reach past
    /// the name, into its NUL padding to 4 bytes (`l_extranul`) and the
    /// CIGAR, sequence, ... after it, which it then reads, as here; past
    /// the record's end it reads other memory, here nothing.
    fn tile(&self, c: &Check) -> std::borrow::Cow<'_, [u8]> {
        let r = RecordRef::with_block_size(self.rec(c.id));
        let data = &r.bytes()[alnsort_bam::record::FIXED_LEN..];
        let l_name = r.l_read_name();
        let end = c.beg + c.len;
        if end <= l_name {
            return std::borrow::Cow::Borrowed(&data[c.beg..end]);
        }
        let extra = (4 - l_name % 4) % 4;
        let mut mem = Vec::with_capacity(data.len() + extra);
        mem.extend_from_slice(&data[..l_name]);
        mem.resize(l_name + extra, 0);
        mem.extend_from_slice(&data[l_name..]);
        let end = end.min(mem.len());
        let beg = c.beg.min(end);
        std::borrow::Cow::Owned(mem[beg..end].to_vec())
    }

    /// samtools' `check_duplicate_chain`: the duplicates sorted by (tile
    /// length, tile, x) and compared pairwise; of two within the optical
    /// distance the lesser (single before pair, QC fail, lower score, then
    /// the larger name) becomes optical.
    fn check_duplicate_chain(&mut self, mut list: Vec<Check>, group: usize) -> Result<(), Error> {
        // glibc's qsort (a merge sort when memory allows) keeps equal
        // elements in order, as this stable sort does.
        list.sort_by(|a, b| {
            a.len
                .cmp(&b.len)
                .then_with(|| self.tile(a).cmp(&self.tile(b)))
                .then_with(|| a.x.cmp(&b.x))
        });
        let dist = self.opts.optical_distance;
        let n = list.len();
        let mut curr = 0usize;
        while curr + 1 < n {
            let mut end = curr;
            loop {
                end += 1;
                if end >= n {
                    break;
                }
                if list[curr].len == list[end].len
                    && self.tile(&list[curr]) != self.tile(&list[end])
                {
                    break;
                }
            }
            while curr < end {
                let current_paired = has_mate(self.rec(list[curr].id));
                let mut count = curr;
                loop {
                    count += 1;
                    if count >= end || list[count].x - list[curr].x > dist {
                        break;
                    }
                    if list[curr].opt && list[count].opt {
                        continue;
                    }
                    if (list[curr].y - list[count].y).abs() > dist {
                        continue;
                    }
                    let chk_paired = has_mate(self.rec(list[count].id));
                    let chk_dup = if current_paired != chk_paired {
                        !chk_paired
                    } else {
                        let qc = |id: u64| flag_of_id(self, id) & flags::QC_FAIL;
                        let (cur_q, chk_q) = (qc(list[curr].id), qc(list[count].id));
                        let (cur_score, mut chk_score) = if cur_q != chk_q {
                            if cur_q != 0 {
                                (0, 1)
                            } else {
                                (1, 0)
                            }
                        } else if current_paired {
                            (
                                list[curr].score + list[curr].mate_score,
                                list[count].score + list[count].mate_score,
                            )
                        } else {
                            (list[curr].score, list[count].score)
                        };
                        if cur_score == chk_score {
                            if name_of(self.rec(list[count].id)) < name_of(self.rec(list[curr].id))
                            {
                                chk_score += 1;
                            } else {
                                chk_score -= 1;
                            }
                        }
                        cur_score > chk_score
                    };
                    if chk_dup {
                        if !list[count].opt {
                            self.optical_retag(list[count].id, chk_paired, group)?;
                            list[count].opt = true;
                        }
                    } else if !list[curr].opt {
                        self.optical_retag(list[curr].id, current_paired, group)?;
                        list[curr].opt = true;
                    }
                }
                curr += 1;
            }
        }
        Ok(())
    }
}

fn flag_of_id(m: &SamtoolsMarker, id: u64) -> u16 {
    super::flag_of(m.rec(id))
}
