//! The header's read groups and their libraries, and a record's read group
//! as Picard sees it ([`RgInfo`]).

use std::collections::HashMap;

/// Picard's name for records whose read group has no `LB`.
pub const UNKNOWN_LIBRARY: &str = "Unknown Library";

/// A record's read group as Picard sees it, resolved against the header by
/// [`ReadGroups::resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RgInfo {
    /// Index into [`ReadGroups`]' library names.
    pub library: u32,
    /// The read group's position among the header's `@RG` lines (Picard's
    /// `readGroup` for optical duplicates): 0 when the record has no `RG`,
    /// the number of `@RG` lines when its `RG` is not in the header.
    pub ordinal: i16,
}

/// The header's read groups and their libraries.
#[derive(Clone, Debug, Default)]
pub struct ReadGroups {
    pub(crate) ids: Vec<Vec<u8>>,
    /// First header position of each ID.
    pub(crate) by_id: HashMap<Vec<u8>, usize>,
    /// Library of each header read group, as an index into `libraries`.
    pub(crate) rg_library: Vec<u32>,
    pub(crate) libraries: Vec<String>,
    pub(crate) unknown: Option<u32>,
}

impl ReadGroups {
    /// From the header's `@RG` lines in order: `(ID, LB)`.
    pub fn new<I: IntoIterator<Item = (Vec<u8>, Option<String>)>>(rgs: I) -> Self {
        let mut g = ReadGroups::default();
        for (id, lb) in rgs {
            let name = lb.unwrap_or_else(|| UNKNOWN_LIBRARY.to_string());
            let lib = g.library_index(&name);
            g.by_id.entry(id.clone()).or_insert(g.ids.len());
            g.ids.push(id);
            g.rg_library.push(lib);
        }
        g
    }

    pub(crate) fn library_index(&mut self, name: &str) -> u32 {
        if let Some(i) = self.libraries.iter().position(|l| l == name) {
            return i as u32;
        }
        self.libraries.push(name.to_string());
        if name == UNKNOWN_LIBRARY {
            self.unknown = Some(self.libraries.len() as u32 - 1);
        }
        self.libraries.len() as u32 - 1
    }

    /// The ID of the read group of ordinal `ordinal` ([`RgInfo::ordinal`]),
    /// for messages.
    pub fn id_name(&self, ordinal: i16) -> String {
        match self.ids.get(ordinal as usize) {
            Some(id) => String::from_utf8_lossy(id).into_owned(),
            None => "(none in the header)".to_string(),
        }
    }

    /// Resolves a record's `RG` value (`None` when it has none).
    pub fn resolve(&mut self, rg: Option<&[u8]>) -> RgInfo {
        let pos = rg.map(|id| self.by_id.get(id).copied());
        let library = match pos {
            Some(Some(i)) => self.rg_library[i],
            _ => match self.unknown {
                Some(u) => u,
                None => self.library_index(UNKNOWN_LIBRARY),
            },
        };
        let ordinal = match pos {
            None => 0,
            Some(Some(i)) => i as i16,
            Some(None) => self.ids.len() as i16,
        };
        RgInfo { library, ordinal }
    }

    /// Makes the header read group `id` one read group with `same_as`
    /// (its ordinal and library): several inputs whose headers have the
    /// same `@RG` line are one read group to Picard (htsjdk's header
    /// merge keeps one line), where samtools' merge renames the later one.
    /// Does nothing unless both are header read groups.
    pub fn alias(&mut self, id: &[u8], same_as: &[u8]) {
        if let (Some(_), Some(&to)) = (self.by_id.get(id), self.by_id.get(same_as)) {
            self.by_id.insert(id.to_vec(), to);
        }
    }

    /// The library names, by library index.
    pub fn libraries(&self) -> &[String] {
        &self.libraries
    }

    pub fn library_name(&self, i: u32) -> &str {
        &self.libraries[i as usize]
    }
}
