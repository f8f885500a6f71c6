//! The crate's errors: each names the file, and where known the container's
//! byte offset and the records it holds, or the reference (SN, M5) and the
//! places looked at.

use std::io;

/// A reference sequence that cannot be used: not found anywhere, with an
/// MD5 other than the header's M5 (writing), or with such an MD5 for a
/// slice that carries no MD5 of its own (reading).
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("reference {sn} (M5 {m5}) not found; looked in: {looked}")]
    NotFound {
        sn: String,
        m5: String,
        looked: String,
    },
    #[error("reference {sn}: its MD5 is {found} in {place}, but the header's @SQ M5 is {m5}")]
    Mismatch {
        sn: String,
        m5: String,
        found: String,
        place: String,
    },
    #[error(
        "reference {sn}: its MD5 is {found} in {place}, but the header's @SQ M5 is {m5}, \
         and {slice} carries no reference MD5 to check its bases by: refused rather than \
         decoded against bases that may not be the ones it was written with (samtools \
         decodes it unchecked); give the reference the file was written with"
    )]
    Unchecked {
        sn: String,
        m5: String,
        found: String,
        place: String,
        slice: String,
    },
    /// htslib's `cram_decode_slice` message, then the two MD5s it logs.
    #[error(
        "MD5 checksum reference mismatch at {sn}:{first}-{last}: the slice was written against \
         bases of MD5 {want}, but {} {sn}:{first}-{last} has MD5 {found} (@SQ M5: {m5}); \
         check that the reference given is the one the file was written with",
        if *embedded { "the slice's embedded reference" } else { "the reference's" }
    )]
    SliceMismatch {
        sn: String,
        first: u64,
        last: u64,
        found: String,
        want: String,
        m5: String,
        embedded: bool,
    },
    #[error("reference {sn}: cannot read {place}: {source}")]
    Read {
        sn: String,
        place: String,
        #[source]
        source: io::Error,
    },
    /// A slice or record names a reference id the header has no @SQ for.
    #[error("reference id {id} is not in the header")]
    UnknownId { id: usize },
    /// The reference repository has no sequence for this @SQ.
    #[error("reference {sn} is not available")]
    Unavailable { sn: String },
}

/// A FASTA file's `.fai` index that does not describe it: a line that is
/// not an index line, or a sequence whose bases are not as many as its
/// line says. It travels inside an `io::Error` of kind `InvalidData` (the
/// source of [`ReferenceError::Read`]).
#[derive(Debug, thiserror::Error)]
pub enum FaiError {
    /// A line with fewer than five columns.
    #[error("{}: line {line} is not a .fai line: it has no column {column}", path.display())]
    MissingColumn {
        path: std::path::PathBuf,
        line: usize,
        column: usize,
    },
    /// A column (2 to 5) that is not a number.
    #[error(
        "{}: line {line} is not a .fai line: column {column} ({text:?}) is not a number: {source}",
        path.display()
    )]
    NotANumber {
        path: std::path::PathBuf,
        line: usize,
        column: usize,
        text: String,
        #[source]
        source: std::num::ParseIntError,
    },
    /// A sequence whose bases, read where the index says, are not as many
    /// as its length column.
    #[error("{}: {read} bases read for {sn}, its .fai says {len}", path.display())]
    Length {
        path: std::path::PathBuf,
        sn: String,
        read: u64,
        len: u64,
    },
}

/// What is malformed in a CRAM file being decoded, named by the layer of
/// the format that found it. The decoder's functions return `io::Result`,
/// so it travels inside an `io::Error` of kind `InvalidData`
/// ([`DecodeError::io`]; [`DecodeError::CodecPanicked`] as `Unsupported`) whose text is this one's; [`DecodeError::of`]
/// finds it again.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// An ITF8 or LTF8 integer (`wire.rs`) that the data ends inside:
    /// `kind` is `"ITF8"` or `"LTF8"`.
    #[error("{kind} integer cut short")]
    Wire { kind: &'static str },
    /// The file definition, a container, slice or block header
    /// (`container.rs`, `decode.rs`): what is wrong, with what was read.
    #[error(transparent)]
    Container(ContainerFault),
    /// A block's compression method and sizes (`codecs/mod.rs`).
    #[error(transparent)]
    Block(BlockFault),
    /// A rANS 4x8 stream (`codecs/rans4x8.rs`).
    #[error(transparent)]
    Rans4x8(Rans4x8Fault),
    /// A rANS Nx16 stream (`codecs/rans_nx16.rs`).
    #[error(transparent)]
    RansNx16(RansNx16Fault),
    /// A tok3 name-tokeniser stream (`codecs/tok3.rs`).
    #[error(transparent)]
    Tok3(Tok3Fault),
    /// A container's compression header or the data series of a
    /// slice's records (`records.rs`, `records/`).
    #[error(transparent)]
    Record(RecordFault),
    /// A gzip block that does not inflate (libdeflate's error).
    #[error("gzip: {0}")]
    Gzip(#[source] libdeflater::DecompressionError),
    /// An arithmetic-coder or fqzcomp stream too long to wrap as the one
    /// block of a container for noodles-cram (`codecs/via_noodles.rs`).
    #[error("a stream of {len} bytes is too large for the noodles-cram decoder (at most {max})")]
    StreamTooLarge { len: usize, max: usize },
    /// noodles-cram read the container wrapping a stream but found no
    /// slice in it.
    #[error("the noodles-cram decoder found no slice in the container wrapping the stream")]
    NoSlice,
    /// noodles-cram panicked decoding a stream: its panic message. This
    /// one travels as an `io::Error` of kind `Unsupported` (the file may
    /// be sound; the decoder cannot read it).
    #[error(
        "a block of this slice uses a codec stream that the CRAM decoder (noodles-cram) \
         cannot decode ({message}); convert the file with `samtools view -O cram,version=3.0` \
         or to BAM and sort that"
    )]
    CodecPanicked { message: String },
    /// A record of a slice that did not decode: the error found in it,
    /// kept whole (its text is part of this one's, so it is not the
    /// `source`).
    #[error("record {number}: {error}")]
    InRecord { number: u64, error: io::Error },
    /// A slice's mates that do not link up (records `first..last`): the
    /// error, kept whole as in `InRecord`.
    #[error("records {first}..{last}: {error}")]
    InMates {
        first: u64,
        last: u64,
        error: io::Error,
    },
    /// A block whose stream did not decode: the codec's error, kept whole
    /// (its text is part of this one's, so it is not the `source`).
    #[error("{error} (block of content id {content_id}, {method})")]
    InBlock {
        content_id: i32,
        method: String,
        error: io::Error,
    },
}

/// What is wrong in the framing of a CRAM file (CRAM 3.1 §6-§8: file
/// definition, containers, slices, blocks), with the values read and the
/// values they had to match; the file and the container's place are named
/// by the [`CramError`] around it.
#[derive(Debug, thiserror::Error)]
pub enum ContainerFault {
    /// The data ends inside a field (`what`: "32-bit integer", "block").
    #[error("{what} cut short")]
    CutShort { what: &'static str },
    /// The data ends before a field of `what` (its `field`).
    #[error("{what} cut short before its {field}")]
    CutShortBefore {
        what: &'static str,
        field: &'static str,
    },
    /// Fewer bytes than `what` says it holds.
    #[error("{what} cut short: {found} of {expected} bytes")]
    Bytes {
        what: &'static str,
        found: u64,
        expected: u64,
    },
    /// A block whose data runs past the slice or container holding it.
    #[error("block of content id {content_id} cut short: {size} bytes stored, {left} left")]
    BlockBytes {
        content_id: i32,
        size: usize,
        left: usize,
    },
    /// A count or size that is negative.
    #[error("{what} is negative ({value})")]
    Negative { what: &'static str, value: i64 },
    /// A container header whose stored CRC32 is not its bytes'.
    #[error("container header CRC32 mismatch: stored {stored:08x}, computed {computed:08x}")]
    HeaderCrc32 { stored: u32, computed: u32 },
    /// A block whose stored CRC32 is not its bytes'.
    #[error("block of content id {content_id}: CRC32 mismatch: stored {stored:08x}, computed {computed:08x}")]
    BlockCrc32 {
        content_id: i32,
        stored: u32,
        computed: u32,
    },
    /// More landmarks than a container can hold (at most `max`).
    #[error("container header with {count} landmarks")]
    Landmarks { count: usize, max: usize },
    /// A landmark (a slice's offset) outside the container's body.
    #[error("container landmark {landmark} outside its body of {body} bytes")]
    LandmarkOutside { landmark: i32, body: usize },
    /// A slice that starts after the next one.
    #[error("container landmarks out of order ({start} then {end})")]
    LandmarksOutOfOrder { start: usize, end: usize },
    /// A container header's record count that is not a count.
    #[error("container header counts {count} records")]
    RecordCount { count: i32 },
    /// A container whose slices hold other than its header's records.
    #[error("the container header counts {header} records, its slices hold {slices}")]
    RecordsInSlices { header: u64, slices: u64 },
    /// A slice header listing more block ids than its bytes can hold.
    #[error("slice header lists {count} block ids in {bytes} bytes")]
    BlockIds { count: usize, bytes: usize },
    /// A slice whose first block is not its header.
    #[error("slice starts with a block of content type {content_type}, not a slice header")]
    SliceStart { content_type: u8 },
    /// A slice block of another content type than core or external data.
    #[error("slice block of content id {content_id} has content type {content_type}, not core or external data")]
    SliceBlockType { content_id: i32, content_type: u8 },
    /// A slice with a second core data block.
    #[error("slice with two core data blocks")]
    TwoCoreBlocks,
    /// A slice without a core data block.
    #[error("slice without a core data block")]
    NoCoreBlock,
    /// No CRAM magic number at the start.
    #[error("not a CRAM file: no CRAM magic number")]
    NotCram,
    /// The file ends before its header container.
    #[error("the file ends before its header container")]
    NoHeaderContainer,
    /// A header container without blocks.
    #[error("the header container has no blocks")]
    EmptyHeaderContainer,
    /// A header container whose first block is not the file header.
    #[error(
        "the header container's first block has content type {content_type}, not the file header"
    )]
    HeaderBlockType { content_type: u8 },
    /// A header block whose text length is more than it holds.
    #[error("the header block gives its text {length} bytes and holds {held}")]
    HeaderTextLength { length: i32, held: usize },
}

/// What is wrong with a block's compression method or sizes, before or
/// after its codec ran (`codecs/mod.rs`); a codec's own error is
/// [`DecodeError::InBlock`].
#[derive(Debug, thiserror::Error)]
pub enum BlockFault {
    /// A raw size beyond what this decoder allocates for a block (`max`).
    #[error("block of content id {content_id} claims {raw} bytes uncompressed (more than {max})")]
    RawTooLarge {
        content_id: i32,
        raw: usize,
        max: usize,
    },
    /// A gzip block whose raw size is more than deflate expands its
    /// compressed bytes to.
    #[error(
        "gzip block of content id {content_id} claims {raw} bytes uncompressed from {compressed} \
         compressed (more than deflate can expand to)"
    )]
    GzipExpansion {
        content_id: i32,
        raw: usize,
        compressed: usize,
    },
    /// A compression method CRAM does not define.
    #[error("unknown block compression method {method}")]
    UnknownMethod { method: u8 },
    /// A block that decoded to other than its raw size.
    #[error("block of content id {content_id} ({method}) decoded to {decoded} bytes, its header says {raw}")]
    RawSize {
        content_id: i32,
        method: String,
        decoded: usize,
        raw: usize,
    },
    /// A bzip2 or xz stream that decodes to more than the block's raw size.
    #[error("the stream decodes to more than the {raw} bytes the block claims")]
    StreamLonger { raw: usize },
}

/// What is wrong in a rANS 4x8 stream (CRAMcodecs §2), with the values
/// read; the block holding it is named by [`DecodeError::InBlock`].
#[derive(Debug, thiserror::Error)]
pub enum Rans4x8Fault {
    /// No byte at all: not even the order.
    #[error("empty rANS 4x8 stream")]
    Empty,
    /// An order other than 0 and 1.
    #[error("rANS 4x8 order {order} (only 0 and 1 exist)")]
    Order { order: u8 },
    /// The output length the stream gives is not the block's raw size.
    #[error("rANS 4x8 stream of {found} bytes where {expected} were expected")]
    OutputLength { found: usize, expected: usize },
    /// The input length the stream gives is more than the bytes after it.
    #[error("rANS 4x8 stream says {said} bytes follow, {left} do")]
    InputLength { said: usize, left: usize },
    /// The frequency table ends inside a value.
    #[error("rANS 4x8 frequency table cut short")]
    TableCutShort,
    /// The states or the renormalisation bytes end early.
    #[error("rANS 4x8 stream cut short")]
    CutShort,
    /// A frequency above the table's total (`max`).
    #[error("rANS 4x8 frequency {found} above {max}")]
    Frequency { found: u32, max: usize },
    /// Frequencies that add up to more than the table's total (`max`).
    #[error("rANS 4x8 frequencies add up to more than {max}")]
    FrequencySum { max: usize },
    /// A frequency table that goes on past the last symbol.
    #[error("rANS 4x8 frequency table runs past symbol 255")]
    PastSymbol255,
    /// An order-1 table that goes on past the last context.
    #[error("rANS 4x8 order-1 table runs past context 255")]
    PastContext255,
}

/// What is wrong in a rANS Nx16 stream (CRAMcodecs §3: the order-0 and
/// order-1 codes and the stripe, run-length and bit-packing transforms),
/// with the values read; the block holding it is named by
/// [`DecodeError::InBlock`].
#[derive(Debug, thiserror::Error)]
pub enum RansNx16Fault {
    /// The stream ends inside a byte field (flags, counts, symbols).
    #[error("rANS Nx16: stream cut short")]
    CutShort,
    /// A 7-bit integer whose value does not fit a `usize`.
    #[error("rANS Nx16: length too large ({value})")]
    LengthTooLarge { value: u64 },
    /// A 7-bit integer that goes on past its fifth byte.
    #[error("rANS Nx16: 7-bit integer of more than 5 bytes")]
    Uint7TooLong,
    /// A part of the stream (a stripe, a cat or packed run, the
    /// run-length metadata) longer than the bytes left.
    #[error("rANS Nx16: {needed} bytes needed, {left} left")]
    Bytes { needed: usize, left: usize },
    /// A length beyond what this decoder allocates for a block (`max`).
    #[error("rANS Nx16: {len} bytes claimed (more than {max})")]
    Claimed { len: usize, max: usize },
    /// The output length the stream gives is not the block's raw size.
    #[error("rANS Nx16: stream of {found} bytes where {expected} were expected")]
    OutputLength { found: usize, expected: usize },
    /// A stripe of a striped stream that is itself striped.
    #[error("rANS Nx16: a striped stream inside a striped stream")]
    NestedStripe,
    /// A striped stream of no stripe.
    #[error("rANS Nx16: striped into 0 streams")]
    NoStripes,
    /// A stripe that decoded to other than its share of the output.
    #[error("rANS Nx16: stripe {stripe} decoded to {found} bytes, not {expected}")]
    StripeLength {
        stripe: usize,
        found: usize,
        expected: usize,
    },
    /// A bit-packing map of other than 1 to 16 symbols.
    #[error("rANS Nx16: bit packing of {symbols} symbols")]
    PackSymbols { symbols: usize },
    /// Packed data of fewer bytes than its values need.
    #[error("rANS Nx16: packed data shorter than declared ({found} bytes, {needed} needed)")]
    PackedShort { found: usize, needed: usize },
    /// Runs that expand past the length the stream declares.
    #[error("rANS Nx16: runs longer than the {declared} bytes declared")]
    RunsLonger { declared: usize },
    /// Runs that expand to fewer bytes than the stream declares.
    #[error("rANS Nx16: runs give {found} bytes, not {declared}")]
    RunsLength { found: usize, declared: usize },
    /// An alphabet that goes on past the last symbol.
    #[error("rANS Nx16: alphabet runs past symbol 255")]
    PastSymbol255,
    /// A frequency that does not fit 32 bits.
    #[error("rANS Nx16: frequency too large ({value})")]
    FrequencyTooLarge { value: usize },
    /// Frequencies whose sum does not double up to the table's total.
    #[error("rANS Nx16: frequencies add up to {sum}, not a power of 2 up to {total}")]
    FrequencySum { sum: u64, total: u64 },
    /// An order-1 table of frequencies of other than 10 or 12 bits.
    #[error("rANS Nx16: order-1 frequencies of {bits} bits")]
    Order1Bits { bits: u32 },
    /// The initial states end early.
    #[error("rANS Nx16: states cut short")]
    StatesCutShort,
    /// The renormalisation bytes of order-`order` data end early.
    #[error("rANS Nx16: order-{order} data cut short")]
    DataCutShort { order: u8 },
}

/// What is wrong in a tok3 name-tokeniser stream (CRAMcodecs §5), with
/// the values read: token positions, token types (a number `ty`, shown as
/// its name: 0 TYPE, 1 STRING, ... 12 END) and name numbers within the
/// block; the block holding it is named by [`DecodeError::InBlock`].
#[derive(Debug, thiserror::Error)]
pub enum Tok3Fault {
    /// Fewer bytes than the 9 of the header (lengths and entropy coder).
    #[error("name tokeniser stream shorter than its header ({len} bytes)")]
    HeaderCutShort { len: usize },
    /// An entropy coder other than rANS Nx16 and the arithmetic coder.
    #[error("name tokeniser: entropy coder {coder} (0 rANS Nx16, 1 arithmetic)")]
    EntropyCoder { coder: u8 },
    /// The output length the stream gives is not the block's raw size.
    #[error("name tokeniser stream of {found} bytes where {expected} were expected")]
    OutputLength { found: usize, expected: usize },
    /// More names than bytes to hold them (each ends with a NUL).
    #[error("name tokeniser: {names} names in {bytes} bytes")]
    TooManyNames { names: usize, bytes: usize },
    /// A stream's length (a 7-bit integer) that the data ends inside.
    #[error("name tokeniser: stream length cut short")]
    LengthCutShort,
    /// A stream's length that does not fit a `usize`.
    #[error("name tokeniser: stream length too large ({value})")]
    LengthTooLarge { value: u64 },
    /// A stream's length that goes on past its fifth byte.
    #[error("name tokeniser: stream length of more than 5 bytes")]
    LengthTooLong,
    /// A stream longer than the bytes left.
    #[error("name tokeniser: stream of {len} bytes, {left} left")]
    StreamBytes { len: usize, left: usize },
    /// A stream's type byte naming no token type.
    #[error("name tokeniser: token type {ty}")]
    TokenType { ty: u8 },
    /// More token positions than a stream may declare (`max`).
    #[error("name tokeniser: more than {max} token positions")]
    TooManyPositions { max: usize },
    /// A stream given before any token position was opened.
    #[error("name tokeniser: a stream before the first token position")]
    StreamBeforePosition,
    /// A stream copy whose two bytes (position, type) are cut short.
    #[error("name tokeniser: stream copy cut short")]
    CopyCutShort,
    /// A copy of a stream the block has not given (yet).
    #[error(
        "name tokeniser: copy of the {} stream of token {position}, which does not exist",
        crate::codecs::tok3::type_name(*ty)
    )]
    CopyOfMissing { position: u8, ty: u8 },
    /// A token's stream read past its end.
    #[error(
        "name tokeniser: the {} stream of token {position} runs out",
        crate::codecs::tok3::type_name(*ty)
    )]
    StreamExhausted { position: usize, ty: u8 },
    /// A token whose type needs a stream the block does not have.
    #[error(
        "name tokeniser: token {position} needs a {} stream the block does not have",
        crate::codecs::tok3::type_name(*ty)
    )]
    MissingStream { position: usize, ty: u8 },
    /// A name whose first token is neither DUP nor DIFF.
    #[error(
        "name tokeniser: name {name} starts with {} (DUP or DIFF expected)",
        crate::codecs::tok3::type_name(*ty)
    )]
    NameStart { name: usize, ty: u8 },
    /// A DUP of a name that is not an earlier one.
    #[error("name tokeniser: name {name} duplicates name -{distance}")]
    DupDistance { name: usize, distance: usize },
    /// A DIFF against a name before the first.
    #[error("name tokeniser: name {name} differs from name -{distance}")]
    DiffDistance { name: usize, distance: usize },
    /// A MATCH or DELTA in a name that has no earlier name to refer to.
    #[error("name tokeniser: name {name} refers to an earlier name's token {token} but has none")]
    NoEarlierName { name: usize, token: usize },
    /// A MATCH or DELTA of a token the earlier name does not have.
    #[error(
        "name tokeniser: name {name} refers to token {token} of name {earlier}, which has {tokens}"
    )]
    NoEarlierToken {
        name: usize,
        token: usize,
        earlier: usize,
        tokens: u32,
    },
    /// A DELTA or DELTA0 of an earlier token that is not a number.
    #[error(
        "name tokeniser: name {name} token {token} is a {} of a token that is not a number",
        crate::codecs::tok3::type_name(*ty)
    )]
    DeltaOfNonNumber { name: usize, token: usize, ty: u8 },
    /// A token of a type a name cannot hold (TYPE, DZLEN, DUP, DIFF).
    #[error(
        "name tokeniser: name {name} token {token} has type {}",
        crate::codecs::tok3::type_name(*ty)
    )]
    TokenTypeInName { name: usize, token: usize, ty: u8 },
    /// A name whose tokens run past the last token position.
    #[error("name tokeniser: name {name} has no END")]
    NoEnd { name: usize },
    /// Names that run past the length the stream declares.
    #[error("name tokeniser: names longer than the {declared} bytes the stream declares")]
    NamesLonger { declared: usize },
    /// Names of fewer bytes than the stream declares.
    #[error("name tokeniser: {found} bytes of names where the stream declares {declared}")]
    NamesLength { found: usize, declared: usize },
}

/// What is wrong in a container's compression header (CRAM 3 §8.4, the
/// encodings of §13) or in the data series of a slice's records (§10),
/// grouped by kind, with the values read; the record is named by
/// [`DecodeError::InRecord`] (or the slice's records by
/// [`DecodeError::InMates`]) around it.
#[derive(Debug, thiserror::Error)]
pub enum RecordFault {
    /// A container whose first block is not its compression header.
    #[error(
        "the container starts with a block of content type {content_type}, not a compression header"
    )]
    NotCompressionHeader { content_type: u8 },
    /// The compression header or one of its encodings (`what`) ends
    /// inside a field.
    #[error("truncated {what}")]
    Truncated { what: &'static str },
    /// A compression header without what CRAM requires of it (`what`: a
    /// substitution matrix, tag dictionary lines of whole tags).
    #[error("{what}")]
    CompressionHeader { what: &'static str },
    /// A preservation map key CRAM does not define.
    #[error("unknown preservation map key {:?}", String::from_utf8_lossy(key))]
    PreservationKey { key: [u8; 2] },
    /// An encoding id CRAM does not define or this decoder does not read.
    #[error("encoding {id} is not supported")]
    UnsupportedEncoding { id: i32 },
    /// An encoding that cannot give what the records ask of it (`what`):
    /// a Huffman code that is not one, an integer read through a
    /// byte-array encoding, a data series the records need without one.
    #[error("{what}")]
    Encoding { what: &'static str },
    /// A tag of the tag dictionary without an encoding.
    #[error("tag {}:{} has no encoding", String::from_utf8_lossy(tag), *ty as char)]
    TagEncoding { tag: [u8; 2], ty: u8 },
    /// An encoding naming an external block the slice does not have.
    #[error("an encoding names an external block the slice lacks (content id {content_id})")]
    MissingBlock { content_id: i32 },
    /// A data series read past the end of the core data block.
    #[error("core data block exhausted")]
    CoreExhausted,
    /// A data series read past the end of its external block (bytes, or
    /// a byte array without its stop byte).
    #[error("the external block of content id {content_id} is exhausted")]
    ExternalExhausted { content_id: i32 },
    /// A value outside what its field can hold: `field` names it (a
    /// record field, a size or an encoding's parameter), `value` is as
    /// read.
    #[error("{field} {value} out of range")]
    OutOfRange { field: &'static str, value: i64 },
    /// A number naming something that is not there: `what` it is (a
    /// reference id, read group, tag line, mate line) and `place`, where
    /// it is not (the header, the tag dictionary, the slice).
    #[error("{what} {value} is not in {place}")]
    NotIn {
        what: &'static str,
        value: i64,
        place: &'static str,
    },
    /// A read feature code CRAM does not define.
    #[error("unknown read feature code {:?}", *code as char)]
    UnknownFeature { code: u8 },
    /// A read feature at a position (1-based) outside its read.
    #[error("read feature at position {position} outside the read of {read_length} bases")]
    FeatureOutsideRead { position: i64, read_length: i64 },
    /// A slice whose embedded reference block is not among its blocks.
    #[error("the slice's embedded reference block (content id {content_id}) is missing")]
    EmbeddedReferenceMissing { content_id: i32 },
    /// A slice whose embedded reference is shorter than its span.
    #[error("the slice's embedded reference is shorter than its span ({len} bases, span {span})")]
    EmbeddedReferenceShort { len: usize, span: i64 },
    /// A record that starts before the slice's embedded reference.
    #[error("the record starts before the slice's embedded reference (position {position})")]
    BeforeEmbeddedReference { position: i64 },
    /// A record (1-based within the slice) two records name as their
    /// mate.
    #[error("record {record} of the slice is the mate of two records")]
    MateOfTwo { record: i64 },
}

/// Each layer's fault as the decoder returns it: the [`DecodeError`]
/// variant holding it, as an `io::Error` ([`DecodeError::io`]).
macro_rules! fault_into_io {
    ($($fault:ident => $variant:ident),* $(,)?) => {$(
        impl From<$fault> for io::Error {
            #[doc = concat!("As the decoder returns it: a [`DecodeError::", stringify!($variant), "`].")]
            fn from(fault: $fault) -> io::Error {
                DecodeError::$variant(fault).io()
            }
        }
    )*};
}

fault_into_io!(
    ContainerFault => Container,
    BlockFault => Block,
    Rans4x8Fault => Rans4x8,
    RansNx16Fault => RansNx16,
    Tok3Fault => Tok3,
    RecordFault => Record,
);

impl DecodeError {
    /// As the `io::Error` (kind `InvalidData`) the decoder returns.
    pub fn io(self) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, self)
    }

    /// The decode error an `io::Error` carries, if it carries one.
    pub fn of(e: &io::Error) -> Option<&DecodeError> {
        e.get_ref()?.downcast_ref()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CramError {
    #[error("{file}: CRAM file definition or header: {source}")]
    Header {
        file: String,
        #[source]
        source: io::Error,
    },
    /// A file definition naming a CRAM version this crate does not read.
    #[error("{file}: CRAM version {major}.{minor} is not supported; alnsort reads {supported}")]
    Version {
        file: String,
        major: u8,
        minor: u8,
        supported: &'static str,
    },
    #[error("{file}: CRAM header text: {source}")]
    HeaderText {
        file: String,
        #[source]
        source: HeaderTextError,
    },
    /// `.crai` building (htslib's `cram_index_build`): containers, or a
    /// slice's records, out of coordinate order.
    #[error("{file}: the CRAM container at byte offset {offset} is not sorted by reference and position: {what}")]
    Unsorted {
        file: String,
        offset: u64,
        what: String,
    },
    #[error("{file}: reading the CRAM container after record {records_before}: {source}")]
    ReadContainer {
        file: String,
        records_before: u64,
        #[source]
        source: io::Error,
    },
    #[error("{file}: decoding CRAM container {index} (records {first}..{end}): {source}")]
    Decode {
        file: String,
        index: u64,
        first: u64,
        end: u64,
        #[source]
        source: io::Error,
    },
    #[error("{file}: decoding CRAM container {index} (records {first}..{end}): {source}")]
    DecodeReference {
        file: String,
        index: u64,
        first: u64,
        end: u64,
        #[source]
        source: Box<ReferenceError>,
    },
    #[error("{file}: writing CRAM record {record}: {source}")]
    Encode {
        file: String,
        record: u64,
        #[source]
        source: io::Error,
    },
    #[error("{file}: writing CRAM record {record}: {source}")]
    EncodeReference {
        file: String,
        record: u64,
        #[source]
        source: Box<ReferenceError>,
    },
    #[error("{file}: CRAM record {record} cannot be written as samtools would read it back: it has {what}")]
    Unsupported {
        file: String,
        record: u64,
        #[source]
        what: Unencodable,
    },
    #[error("{file}: writing CRAM: {source}")]
    Write {
        file: String,
        #[source]
        source: io::Error,
    },
    #[error("{file}: encoding CRAM: {source}")]
    Lost {
        file: String,
        #[source]
        source: alnsort_pipeline::Lost,
    },
    #[error("CRAM output option {0}")]
    Option(#[from] OptionError),
}

/// A `-O cram,KEY=VALUE` option this encoder refuses (the text follows
/// "CRAM output option").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("version={0}: alnsort writes CRAM 3.0 or 3.1")]
    Version(String),
    /// `embed_ref`, `no_ref`, `store_md` or `store_nm` with a value other
    /// than 0 or 1.
    #[error("{key}={value}: expected 0 or 1")]
    NotZeroOrOne { key: String, value: String },
    #[error(
        "embed_ref=2 cannot be honoured: alnsort does not build a consensus to embed \
         when there is no reference; use embed_ref=1 with --reference, or no_ref=1"
    )]
    Consensus,
    #[error(
        "{key}={value} is not supported (alnsort knows version, embed_ref, no_ref, \
         store_md, store_nm, level, reference)"
    )]
    Unknown { key: String, value: String },
    #[error(
        "embed_ref=1 and no_ref=1 contradict each other: a file without reference \
         bases (no_ref) has none to embed"
    )]
    EmbedAndNoRef,
}

/// Why a CRAM file's header text (read, or about to be written) is not a
/// SAM header: the parser's own error, kept whole.
#[derive(Debug, thiserror::Error)]
pub enum HeaderTextError {
    #[error(transparent)]
    Utf8(#[from] std::str::Utf8Error),
    #[error(transparent)]
    Parse(#[from] noodles_sam::header::ParseError),
}

/// The header text `text` as a SAM header, or [`CramError::HeaderText`]
/// naming `file`.
pub(crate) fn parse_header_text(file: &str, text: &[u8]) -> Result<noodles_sam::Header, CramError> {
    let parse = || -> Result<noodles_sam::Header, HeaderTextError> {
        Ok(std::str::from_utf8(text)?.parse()?)
    };
    parse().map_err(|source| CramError::HeaderText {
        file: file.to_string(),
        source,
    })
}

/// What a record has that the CRAM encoder does not write (the text
/// follows "it has"; [`CramError::Unsupported`] names the file and the
/// record).
#[derive(Debug, thiserror::Error)]
pub enum Unencodable {
    /// A reference id the header has no @SQ for.
    #[error("reference id {0}, which is not in the header")]
    UnknownReference(i32),
    /// htslib's `cram_encode_slice_read` fails on a position below 0.
    #[error(
        "position {0} (POS below 0, as BAM allows); samtools refuses \
         to write such a record to CRAM too"
    )]
    NegativePosition(i64),
    #[error("a malformed tag area")]
    MalformedTags(#[source] alnsort_bam::aux::AuxError),
    #[error(
        "more than one RG tag (samtools would keep one of them, \
         alnsort does not choose)"
    )]
    SecondReadGroup,
    #[error(
        "no reference position but flag 0x4 (unmapped) clear; samtools \
         refuses such a record in CRAM too"
    )]
    NoPosition,
    #[error("a CIGAR of query length {query_len} for {bases} bases")]
    CigarLength { query_len: usize, bases: usize },
    #[error(
        "bases and flag 0x4 (unmapped) clear but no CIGAR; samtools \
         refuses such a record in CRAM too"
    )]
    NoCigar,
    #[error("an unknown CIGAR operation {0}")]
    UnknownCigarOp(u8),
}

/// The [`ReferenceError`] an I/O error from noodles carries, if it came
/// from this crate's reference lookup.
pub(crate) fn take_reference_error(e: io::Error) -> Result<ReferenceError, io::Error> {
    e.downcast::<ReferenceError>()
}

#[cfg(test)]
mod decode_error_tests {
    use super::*;

    /// A decode error keeps its text as the `io::Error` the decoder
    /// returns, and is found again, typed, inside it.
    #[test]
    fn the_io_error_carries_the_typed_error_and_its_text() {
        let e = DecodeError::RansNx16(RansNx16Fault::Order1Bits { bits: 11 }).io();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert_eq!(e.to_string(), "rANS Nx16: order-1 frequencies of 11 bits");
        assert!(matches!(
            DecodeError::of(&e),
            Some(DecodeError::RansNx16(RansNx16Fault::Order1Bits {
                bits: 11
            }))
        ));
        let inner: io::Error = Tok3Fault::NoEnd { name: 3 }.into();
        let block = io::Error::new(
            inner.kind(),
            DecodeError::InBlock {
                content_id: 12,
                method: "tok3".into(),
                error: inner,
            },
        );
        assert_eq!(
            block.to_string(),
            "name tokeniser: name 3 has no END (block of content id 12, tok3)"
        );
        let Some(DecodeError::InBlock { error, .. }) = DecodeError::of(&block) else {
            panic!("the block's error is typed")
        };
        assert!(matches!(
            DecodeError::of(error),
            Some(DecodeError::Tok3(Tok3Fault::NoEnd { name: 3 }))
        ));
        assert!(DecodeError::of(&io::Error::other("plain")).is_none());
    }
}
