//! The one pairing step of a record's read ends ([`record_ends`]) and where
//! its ends go and its mate waits ([`Pairing`]).

use crate::ends::{pair_end, End};
#[cfg(doc)]
use crate::{batch, ends::MatedFrags, MarkDuplicates};
use crate::{flags, MarkdupError, ReadInfo};

/// Where a record's read ends go and where its mate waits for its other
/// half: the marker's own state ([`MarkDuplicates`]), or one template's on
/// a read job ([`batch::BatchTemplates`]), both fed by [`record_ends`].
pub(crate) trait Pairing {
    fn add_end(&mut self, e: End) -> Result<(), MarkdupError>;
    /// A fragment end whose mate is mapped ([`MatedFrags`]).
    fn add_mated(&mut self, e: &End) -> Result<(), MarkdupError>;
    /// Takes the mate waiting under `(ref_id, rg, name)`, if any.
    fn take_waiting(&mut self, ref_id: i32, rg: i16, name: &[u8]) -> Option<End>;
    /// Makes `end` wait under `(ref_id, rg, name)`.
    fn wait(&mut self, ref_id: i32, rg: i16, name: &[u8], end: End) -> Result<(), MarkdupError>;
    /// A mate named `name` stopped waiting (it was taken and paired).
    fn paired(&mut self, name: &[u8]);
}

/// The read ends of the mapped primary record `r` whose fragment end is
/// `frag`: that end alone when its mate is unmapped (or it is unpaired);
/// else its key ([`MatedFrags`]), and the pair end with the mate waiting
/// under Picard's key, or `frag` waits for its mate. The one pairing step
/// of the reading thread and of the read jobs' whole templates.
pub(crate) fn record_ends<P: Pairing>(
    p: &mut P,
    r: &ReadInfo<'_>,
    frag: End,
) -> Result<(), MarkdupError> {
    if frag.r2_ref == -1 {
        return p.add_end(frag);
    }
    p.add_mated(&frag)?;
    let Some(first) = p.take_waiting(r.ref_id, r.rg.ordinal, r.name) else {
        return p.wait(r.mate_ref_id, r.rg.ordinal, r.name, frag);
    };
    p.paired(r.name);
    let read1 = r.flag & flags::READ1 != 0;
    p.add_end(pair_end(first, &frag, read1, r.barcodes))
}
