//! The dataset's columns, their Arrow types, and the file metadata keys.

use arrow_schema::{DataType, Field, Fields, Schema};
use std::sync::Arc;

/// The schema version in every file's key-value metadata
/// ([`KEY_SCHEMA_VERSION`]); a reader refuses any other. Version 1 is the
/// column set of [`schema`].
pub const SCHEMA_VERSION: &str = "1";

/// Key-value metadata keys of every file of a dataset.
pub const KEY_SCHEMA_VERSION: &str = "alnsort.schema_version";
/// The SAM header text, every line ended by a newline.
pub const KEY_HEADER: &str = "alnsort.header";
/// The BAM reference list (`name\tlength` lines): it, not the text, gives
/// the reference ids, as in a BAM file.
pub const KEY_REFERENCES: &str = "alnsort.references";
/// The sort order (`@HD SO`: coordinate, queryname, unsorted, ...).
pub const KEY_SORT_ORDER: &str = "alnsort.sort_order";
/// The command line that wrote the dataset.
pub const KEY_COMMAND: &str = "alnsort.command";
/// The file's place in the dataset's record order (0, 1, ...), within its
/// range where [`KEY_RANGE`] is set.
pub const KEY_FILE_INDEX: &str = "alnsort.file_index";
/// The key range (0, 1, ...) of a distributed sort whose task wrote the
/// file; files order by range, then by file index. Absent: range 0.
pub const KEY_RANGE: &str = "alnsort.range";

/// The file at the dataset's root that marks it as written whole by
/// alnsort (tools skip names starting with `_`): the schema version, the
/// number of files and of records.
pub const MARKER_FILE: &str = "_alnsort_dataset";

/// One standard tag kept in a typed column of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StdTag {
    pub tag: [u8; 2],
    /// The column's name, `tag_XX` (a bare `AS` is an SQL keyword).
    pub column: &'static str,
    /// A `Z` string (Utf8 column) or an integer of any width (Int32 column).
    pub kind: TagKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TagKind {
    String,
    Int,
}

const fn std_tag(tag: &[u8; 2], column: &'static str, kind: TagKind) -> StdTag {
    StdTag {
        tag: *tag,
        column,
        kind,
    }
}

/// The standard tags with typed columns (SAM tags spec; `ms` from samtools
/// fixmate, `DT` from Picard MarkDuplicates, the barcode tags of 10x and
/// UMI tools). Always present, null where a record lacks the tag.
pub const STD_TAGS: [StdTag; 13] = [
    std_tag(b"RG", "tag_RG", TagKind::String),
    std_tag(b"NM", "tag_NM", TagKind::Int),
    std_tag(b"MD", "tag_MD", TagKind::String),
    std_tag(b"AS", "tag_AS", TagKind::Int),
    std_tag(b"XS", "tag_XS", TagKind::Int),
    std_tag(b"MC", "tag_MC", TagKind::String),
    std_tag(b"MQ", "tag_MQ", TagKind::Int),
    std_tag(b"ms", "tag_ms", TagKind::Int),
    std_tag(b"DT", "tag_DT", TagKind::String),
    std_tag(b"BX", "tag_BX", TagKind::String),
    std_tag(b"RX", "tag_RX", TagKind::String),
    std_tag(b"CB", "tag_CB", TagKind::String),
    std_tag(b"UB", "tag_UB", TagKind::String),
];

/// The fixed columns, in schema order.
pub mod col {
    pub const QNAME: &str = "qname";
    pub const FLAG: &str = "flag";
    pub const RNAME: &str = "rname";
    pub const POS: &str = "pos";
    pub const END: &str = "end";
    pub const MAPQ: &str = "mapq";
    pub const CIGAR: &str = "cigar";
    pub const RNEXT: &str = "rnext";
    pub const PNEXT: &str = "pnext";
    pub const TLEN: &str = "tlen";
    pub const SEQ: &str = "seq";
    pub const QUAL: &str = "qual";
    pub const BIN: &str = "bin";
    pub const TAGS: &str = "tags";
}

/// The fields of one entry of the `tags` list.
pub fn tag_entry_fields() -> Fields {
    Fields::from(vec![
        Field::new("tag", DataType::Utf8, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The item field of the `tags` list.
pub fn tag_item_field() -> Arc<Field> {
    Arc::new(Field::new(
        "item",
        DataType::Struct(tag_entry_fields()),
        false,
    ))
}

fn dict_utf8() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// The schema of every file (version [`SCHEMA_VERSION`]).
pub fn schema() -> Arc<Schema> {
    let mut fields = vec![
        Field::new(col::QNAME, DataType::Utf8, false),
        Field::new(col::FLAG, DataType::UInt16, false),
        Field::new(col::RNAME, dict_utf8(), true),
        Field::new(col::POS, DataType::Int32, false),
        Field::new(col::END, DataType::Int64, false),
        Field::new(col::MAPQ, DataType::UInt8, false),
        Field::new(col::CIGAR, DataType::Utf8, true),
        Field::new(col::RNEXT, dict_utf8(), true),
        Field::new(col::PNEXT, DataType::Int32, false),
        Field::new(col::TLEN, DataType::Int32, false),
        Field::new(col::SEQ, DataType::Utf8, true),
        Field::new(col::QUAL, DataType::Binary, true),
        Field::new(col::BIN, DataType::UInt16, false),
    ];
    for t in STD_TAGS {
        let ty = match t.kind {
            TagKind::String => DataType::Utf8,
            TagKind::Int => DataType::Int32,
        };
        fields.push(Field::new(t.column, ty, true));
    }
    fields.push(Field::new(
        col::TAGS,
        DataType::List(tag_item_field()),
        false,
    ));
    Arc::new(Schema::new(fields))
}
