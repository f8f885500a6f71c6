//! htsjdk's rules on SAM data that Picard's answers depend on: its header merge of several inputs (`header_merge`) and where it puts a new tag (`tags`).

pub mod header_merge;
pub mod tags;
