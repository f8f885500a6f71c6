//! `alnsort verify`'s command line: one table (`VERIFY_OPTIONS`), its parser and help, and the parsed `VerifyArgs`.

use crate::error::ArgError;
use crate::options::sort::OrderFlag;
use crate::options::table::{Group, OptSpec};
use std::ffi::OsString;

/// What an option of `alnsort verify` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyOptId {
    Coordinate,
    Name,
    NameLex,
    Tag,
    TemplateCoordinate,
    Threads,
    Reference,
    Help,
}

impl crate::options::table::OptionId for VerifyOptId {}

/// One option of `alnsort verify` ([`VERIFY_OPTIONS`]).
pub type VerifySpec = OptSpec<VerifyOptId>;

/// Every option `alnsort verify` knows; the parser and the help read it.
pub const VERIFY_OPTIONS: &[VerifySpec] = &[
    OptSpec::new(
        VerifyOptId::Coordinate,
        None,
        Some("coordinate"),
        None,
        Group::Order,
        "Check coordinate order (samtools sort's default), whatever the header claims.",
        None,
    ),
    OptSpec::new(
        VerifyOptId::Name,
        Some('n'),
        None,
        None,
        Group::Order,
        "Check name order as samtools sort -n makes it (natural order of names).",
        Some("name"),
    ),
    OptSpec::new(
        VerifyOptId::NameLex,
        Some('N'),
        None,
        None,
        Group::Order,
        "Check name order as samtools sort -N makes it (lexicographic).",
        Some("name_lex"),
    ),
    OptSpec::new(
        VerifyOptId::Tag,
        Some('t'),
        None,
        Some("TAG"),
        Group::Order,
        "Check the order of samtools sort -t TAG: by the tag's value, then by \
         coordinate (by name with -n or -N).",
        Some("tag"),
    ),
    OptSpec::new(
        VerifyOptId::TemplateCoordinate,
        None,
        Some("template-coordinate"),
        None,
        Group::Order,
        "Check samtools sort --template-coordinate's order.",
        None,
    ),
    OptSpec::new(
        VerifyOptId::Threads,
        Some('@'),
        Some("threads"),
        Some("INT"),
        Group::Resources,
        "Threads decoding beside the reading thread.",
        None,
    ),
    OptSpec::new(
        VerifyOptId::Reference,
        None,
        Some("reference"),
        Some("FILE"),
        Group::Other,
        "Reference FASTA for CRAM input (else REF_PATH, REF_CACHE, @SQ UR).",
        None,
    ),
    OptSpec::new(
        VerifyOptId::Help,
        Some('h'),
        Some("help"),
        None,
        Group::Other,
        "Print this help.",
        None,
    ),
];

/// `alnsort verify --help`, from [`VERIFY_OPTIONS`].
pub fn verify_help() -> String {
    let mut out = String::from(
        "Usage: alnsort verify [options] <in.bam|in.sam|in.cram>...\n\n\
         Says whether each file is sorted in the order its @HD line claims (SO, and SS's\n\
         sub-sort as samtools writes it), or in the order the options below name, with\n\
         the keys alnsort sort sorts by: equal keys may come in any order. Reads each file\n\
         once, decoding on the threads; sorts and writes nothing.\n\
         Exit status: 0 every file sorted (one line each on standard output), 1 a file\n\
         not sorted (its first record out of order named), 2 could not tell (bad\n\
         options, no order claimed or given, an unreadable or malformed file).\n\nOptions:\n",
    );
    for s in VERIFY_OPTIONS {
        crate::options::table::push_help_entry(&mut out, s, s.help);
    }
    out
}

/// `alnsort verify`'s arguments.
#[derive(Debug, Default)]
pub struct VerifyArgs {
    pub inputs: Vec<String>,
    /// The order options as given (the last of the order flags wins, as in
    /// samtools sort); `None`: the header's claim.
    pub order: Option<OrderFlag>,
    pub lexicographic: bool,
    pub tag: Option<String>,
    pub threads: usize,
    pub reference: Option<std::path::PathBuf>,
}

/// What parsing `alnsort verify`'s arguments produced.
#[derive(Debug)]
pub enum ParsedVerify {
    Run(VerifyArgs),
    Usage,
}

/// Parses the arguments after `alnsort verify` with [`VERIFY_OPTIONS`].
pub fn parse_verify(rest: Vec<OsString>) -> std::result::Result<ParsedVerify, ArgError> {
    use lexopt::prelude::*;
    if rest.is_empty() {
        return Ok(ParsedVerify::Usage);
    }
    let mut a = VerifyArgs::default();
    let mut p = lexopt::Parser::from_args(rest);
    while let Some(arg) = p.next()? {
        if let Value(v) = arg {
            a.inputs.push(v.string()?);
            continue;
        }
        let s = crate::options::sort_args::find_option(VERIFY_OPTIONS, &arg)?;
        let value = match s.value {
            Some(_) => Some(p.value()?.string()?),
            None => None,
        };
        match s.id {
            VerifyOptId::Help => return Ok(ParsedVerify::Usage),
            VerifyOptId::Coordinate => a.order = Some(OrderFlag::Coordinate),
            VerifyOptId::Name => a.order = Some(OrderFlag::Name),
            VerifyOptId::NameLex => {
                a.order = Some(OrderFlag::Name);
                a.lexicographic = true;
            }
            VerifyOptId::TemplateCoordinate => a.order = Some(OrderFlag::TemplateCoordinate),
            VerifyOptId::Tag => a.tag = value,
            VerifyOptId::Threads => {
                a.threads = crate::options::table::parse_int("-@", value.as_deref().unwrap_or(""))?
                    .max(0) as usize
            }
            VerifyOptId::Reference => a.reference = value.map(Into::into),
        }
    }
    if a.inputs.is_empty() {
        return Err(ArgError::Invalid("no input file given".into()));
    }
    Ok(ParsedVerify::Run(a))
}
