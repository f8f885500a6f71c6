//! htsjdk's order of a record's tags: where `setAttribute` puts a new one.

use crate::aux::Aux;

/// htsjdk's order key of a tag (Picard's records keep their tags in an
/// htsjdk list ordered by it as far as the input order allows).
pub fn tag_key(tag: [u8; 2]) -> u16 {
    (tag[1] as u16) << 8 | tag[0] as u16
}

/// Where htsjdk's `setAttribute(tag, ..)` puts a new tag (as Picard's
/// `setAttribute("DT", ..)` does): before the first field whose htsjdk key
/// is larger, as an offset in the aux area. Exact for tags already in
/// htsjdk's order; Picard reorders other inputs' tags, alnsort does not.
pub fn insert_at(aux: Aux<'_>, tag: [u8; 2]) -> usize {
    let key = tag_key(tag);
    aux.fields()
        .map_while(std::result::Result::ok)
        .find(|f| key < tag_key(f.tag))
        .map_or(aux.len(), |f| f.offset)
}
