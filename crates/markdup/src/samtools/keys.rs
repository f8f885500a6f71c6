//! The keys of samtools markdup's read maps: `make_single_key`, `make_pair_key` (modes t and s) and the barcode hash.

use super::{coords, flags, text, Barcode, Error, Key, Mode, RecordRef, SamtoolsMarker};
use super::{O_FF, O_FR, O_RF, O_RR, R_LE, R_RI, WARNING_MAX};

impl SamtoolsMarker {
    fn warn_barcode(&mut self, msg: String) {
        self.bc_warnings += 1;
        if self.bc_warnings <= WARNING_MAX {
            self.warnings.push(msg);
        }
    }

    /// The barcode hash of a read (0 without one), with samtools' warnings.
    fn barcode(&mut self, rec: &[u8]) -> i32 {
        let before = self.bc_warnings;
        let r = RecordRef::with_block_size(rec);
        let mut code = 0i32;
        match &self.opts.barcode {
            Barcode::None => {}
            Barcode::Tag(tag) => {
                if let Some(f) = r.aux().find(*tag) {
                    match f.text() {
                        Some(t) => code = coords::one_at_a_time(t) as i32,
                        None => {
                            let t = text(tag);
                            self.warn_barcode(format!(
                                "warning, {t} tag wrong type. Aux tag needs to be a string type."
                            ))
                        }
                    }
                }
            }
            Barcode::Regex(rx) => {
                let name = r.read_name();
                match rx.captures(name) {
                    Some(c) => match c.get(1) {
                        Some(m) => code = coords::one_at_a_time(m.as_bytes()) as i32,
                        None => self.warn_barcode(format!(
                            "warning, barcode regex unable to match substring on {}.",
                            text(name)
                        )),
                    },
                    None => self.warn_barcode(format!(
                        "warning, barcode regex match error \"No match\" on {}.",
                        text(name)
                    )),
                }
            }
        }
        if self.bc_warnings == WARNING_MAX && before != self.bc_warnings {
            self.warnings.push(format!(
                "warning, {} barcode read warnings.  New warnings will not be reported.",
                self.bc_warnings
            ));
        }
        code
    }

    /// samtools' `make_single_key`.
    pub(super) fn single_key(&mut self, id: u64, read_group: usize) -> Key {
        let rec = std::mem::take(&mut self.at(id).rec);
        let r = RecordRef::with_block_size(&rec);
        let (this_coord, orientation) = if r.flag() & flags::REVERSE != 0 {
            (coords::unclipped_end(r), O_RR)
        } else {
            (coords::unclipped_start(r), O_FF)
        };
        let key = Key {
            this_ref: r.ref_id() + 1,
            this_coord,
            other_ref: 0,
            other_coord: 0,
            leftmost: 0,
            orientation,
            barcode: self.barcode(&rec),
            read_group,
        };
        self.at(id).rec = rec;
        key
    }

    /// samtools' `make_pair_key`.
    pub(super) fn pair_key(
        &mut self,
        id: u64,
        record: u64,
        read_group: usize,
    ) -> Result<Key, Error> {
        let rec = std::mem::take(&mut self.at(id).rec);
        let key = self.pair_key_of(&rec, record, read_group);
        self.at(id).rec = rec;
        key
    }

    fn pair_key_of(&mut self, rec: &[u8], record: u64, read_group: usize) -> Result<Key, Error> {
        let r = RecordRef::with_block_size(rec);
        let this_ref = r.ref_id() + 1;
        let other_ref = r.next_ref_id() + 1;
        let mut this_coord = coords::unclipped_start(r);
        let this_end = coords::unclipped_end(r);
        let mc = match r.aux().find(*b"MC") {
            Some(f) => f.text().ok_or_else(|| Error::MateCigarType {
                record,
                name: text(r.read_name()),
            })?,
            None => {
                return Err(Error::NoMateCigar {
                    record,
                    name: text(r.read_name()),
                })
            }
        };
        let mpos = r.next_pos() as i64;
        let other_end = coords::mate_unclipped_end(mpos, mc);
        let mut other_coord = coords::mate_unclipped_start(mpos, mc);
        let rev = r.flag() & flags::REVERSE != 0;
        let mrev = r.flag() & flags::MATE_REVERSE != 0;
        let read1 = r.flag() & flags::READ1 != 0;
        let leftmost;
        let orientation;
        match self.opts.mode {
            Mode::Template => {
                leftmost = if this_ref != other_ref {
                    this_ref < other_ref
                } else if rev == mrev {
                    if !rev {
                        this_coord <= other_coord
                    } else {
                        this_end <= other_end
                    }
                } else if rev {
                    this_end <= other_coord
                } else {
                    this_coord <= other_end
                };
                if leftmost {
                    if rev == mrev {
                        other_coord = other_end;
                        orientation = if rev != read1 { O_FF } else { O_RR };
                    } else if !rev {
                        orientation = O_FR;
                        other_coord = other_end;
                    } else {
                        orientation = O_RF;
                        this_coord = this_end;
                    }
                } else if rev == mrev {
                    this_coord = this_end;
                    orientation = if rev != read1 { O_RR } else { O_FF };
                } else if !rev {
                    orientation = O_RF;
                    other_coord = other_end;
                } else {
                    orientation = O_FR;
                    this_coord = this_end;
                }
            }
            Mode::Sequence => {
                let diff = if this_ref != other_ref {
                    (this_ref - other_ref) as i64
                } else if rev == mrev {
                    if !rev {
                        this_coord - other_coord
                    } else {
                        this_end - other_end
                    }
                } else if rev {
                    this_end - other_coord
                } else {
                    this_coord - other_end
                };
                leftmost = match diff.cmp(&0) {
                    std::cmp::Ordering::Less => true,
                    std::cmp::Ordering::Greater => false,
                    std::cmp::Ordering::Equal => {
                        let (pos, mp) = (r.pos(), r.next_pos());
                        if pos == mp {
                            read1
                        } else {
                            pos < mp
                        }
                    }
                };
                orientation = match (leftmost, rev == mrev, rev) {
                    (true, true, false) => O_FF,
                    (true, true, true) => O_RR,
                    (true, false, false) => O_FR,
                    (true, false, true) => O_RF,
                    (false, true, false) => O_RR,
                    (false, true, true) => O_FF,
                    (false, false, false) => O_RF,
                    (false, false, true) => O_FR,
                };
                this_coord = if !rev {
                    coords::unclipped_start(r)
                } else {
                    coords::unclipped_end(r)
                };
                other_coord = if !mrev {
                    coords::mate_unclipped_start(mpos, mc)
                } else {
                    coords::mate_unclipped_end(mpos, mc)
                };
            }
        }
        Ok(Key {
            this_ref,
            this_coord,
            other_ref,
            other_coord,
            leftmost: if leftmost { R_LE } else { R_RI },
            orientation,
            barcode: self.barcode(rec),
            read_group,
        })
    }
}
