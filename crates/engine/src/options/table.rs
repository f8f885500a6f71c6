//! The option-table machinery every command shares: one row type ([`OptSpec`]), how a row is named and looked up, help layout, and the value parsers.
pub use alnsort_bam::reader::UnknownReference;

use crate::error::ArgError;

/// The option of `table` that the Python keyword `keyword` names
/// ([`OptSpec::keyword`]); an option the command refuses is refused as on
/// the command line, naming it.
pub fn keyword_option<Id: OptionId>(
    table: &'static [OptSpec<Id>],
    keyword: &str,
) -> Result<&'static OptSpec<Id>, ArgError> {
    let spec = OptSpec::by_keyword(table, keyword)
        .ok_or_else(|| ArgError::UnknownOption(keyword.to_string()))?;
    match spec.refusal() {
        Some(refused) => Err(refused),
        None => Ok(spec),
    }
}

/// The refusal of an option that is not a setting of a run from Python
/// (the output, which is an argument there, help, the version).
pub fn not_a_keyword(option: String, keyword: &str) -> ArgError {
    ArgError::Invalid(format!(
        "{option} ({keyword}=) is not an option of a run from Python"
    ))
}

/// Where an option is listed in the help, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    Order,
    Output,
    Resources,
    Additions,
    Markdup,
    /// `--markdup=samtools`'s own options (samtools markdup's).
    SamtoolsMarkdup,
    Other,
    Unsupported,
}

impl Group {
    pub const ALL: [Group; 8] = [
        Group::Order,
        Group::Output,
        Group::Resources,
        Group::Additions,
        Group::Markdup,
        Group::SamtoolsMarkdup,
        Group::Other,
        Group::Unsupported,
    ];

    pub(crate) fn title(self) -> &'static str {
        match self {
            Group::Order => {
                "Sort order (default: coordinate; the last of -n, -N, -M, -I \
                 and --template-coordinate wins, as in samtools):"
            }
            Group::Output => "Output:",
            Group::Resources => "Memory, threads and temporary files:",
            Group::Additions => "alnsort additions (not in samtools):",
            Group::Markdup => {
                "Duplicate marking (alnsort addition; --markdup or --markdup=picard: \
                 flags and metrics as Picard MarkDuplicates 3.4.0 gives them; \
                 --markdup=samtools: the records of samtools collate | fixmate -m | \
                 sort | markdup 1.24; an option of the other flavour is refused):"
            }
            Group::SamtoolsMarkdup => {
                "Duplicate marking as samtools markdup 1.24 (--markdup=samtools only; \
                 with --remove-duplicates, --optical-distance and --barcode-tag above):"
            }
            Group::Other => "Other:",
            Group::Unsupported => {
                "Not supported yet (samtools options that alnsort refuses \
                 with a message):"
            }
        }
    }
}

/// One option of a command's table (`alnsort sort`'s [`OPTIONS`] with
/// [`OptId`]s, `alnsort merge`'s `merge::MERGE_OPTIONS` with
/// `merge::MergeOptId`s): how it is written, what it does, where help
/// lists it and its keyword in Python. The command's parser, its
/// `--help`, the man page, the completions and the Python keywords all
/// read the table.
#[derive(Debug)]
pub struct OptSpec<Id: 'static> {
    pub id: Id,
    pub short: Option<char>,
    pub long: Option<&'static str>,
    /// The value's name in the help; `None` for a flag.
    pub value: Option<&'static str>,
    pub group: Group,
    pub help: &'static str,
    /// The Python keyword of an option without a long name (`-n`:
    /// `name`); `None` where the long name gives it ([`OptSpec::keyword`]).
    pub key: Option<&'static str>,
}

/// What every table's option ids say about themselves.
pub trait OptionId: Copy + std::fmt::Debug {
    /// Why the command refuses the option, when it does (options samtools
    /// has that alnsort does not implement); none by default.
    fn refused(self) -> Option<&'static str> {
        None
    }
}

/// [`OptionId`] for an id enum whose `Unsupported(why)` variant holds the
/// reason each refused option is refused.
macro_rules! refused_when_unsupported {
    ($id:ident) => {
        impl $crate::options::table::OptionId for $id {
            fn refused(self) -> Option<&'static str> {
                match self {
                    $id::Unsupported(why) => Some(why),
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use refused_when_unsupported;

impl<Id> OptSpec<Id> {
    /// A row of a table (`const`, for the tables' statics).
    pub const fn new(
        id: Id,
        short: Option<char>,
        long: Option<&'static str>,
        value: Option<&'static str>,
        group: Group,
        help: &'static str,
        key: Option<&'static str>,
    ) -> Self {
        OptSpec {
            id,
            short,
            long,
            value,
            group,
            help,
            key,
        }
    }
}

impl<Id: OptionId> OptSpec<Id> {
    /// The option's keyword in Python: the long name with `-` as `_`, in
    /// lower case (`--no-PG`: `no_pg`), else the table's `key`.
    pub fn keyword(&self) -> String {
        match (self.long, self.key) {
            (_, Some(k)) => k.to_string(),
            (Some(l), None) => l.replace('-', "_").to_ascii_lowercase(),
            (None, None) => unreachable!("an option without a long name has a key"),
        }
    }

    /// The option of `table` whose Python keyword is `keyword`.
    pub fn by_keyword(
        table: &'static [OptSpec<Id>],
        keyword: &str,
    ) -> Option<&'static OptSpec<Id>> {
        table.iter().find(|s| s.keyword() == keyword)
    }

    /// The refusal of a refused option, naming it as the command line does.
    pub fn refusal(&self) -> Option<ArgError> {
        self.id.refused().map(|why| ArgError::Unsupported {
            option: self.name(),
            why,
        })
    }
}

/// How an option of a command's table is written; the lookup
/// ([`find_option`]) and messages ([`OptionName::name`]) of `alnsort sort`
/// and `alnsort merge` read their tables through it.
pub trait OptionName {
    fn short(&self) -> Option<char>;
    fn long(&self) -> Option<&'static str>;
    /// The value's name in the help; `None` for a flag.
    fn value(&self) -> Option<&'static str>;

    /// Whether the value may be left out: a table writes such a value's
    /// name as `[=NAME]` (`--markdup[=picard|samtools]`), and the parsers
    /// take it only when attached with `=` ([`optional_value`]).
    fn optional_value(&self) -> bool {
        self.value().is_some_and(optional_value)
    }

    /// The option as help shows it on the left: `-@, --threads INT`.
    fn synopsis(&self) -> String {
        let mut s = match (self.short(), self.long()) {
            (Some(c), Some(l)) => format!("-{c}, --{l}"),
            (Some(c), None) => format!("-{c}"),
            (None, Some(l)) => format!("    --{l}"),
            (None, None) => unreachable!("an option has a short or a long name"),
        };
        if let Some(v) = self.value() {
            if !optional_value(v) {
                s.push(' ');
            }
            s.push_str(v);
        }
        s
    }

    /// The option as a message names it: `-K` or `--reference`.
    fn name(&self) -> String {
        match (self.short(), self.long()) {
            (Some(c), _) => format!("-{c}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => unreachable!("an option has a short or a long name"),
        }
    }
}

/// Whether a table's value name `v` is an optional value's (`[=NAME]`):
/// the option may be given alone or as `--long=VALUE`, never with the
/// value as the next argument.
pub fn optional_value(v: &str) -> bool {
    v.starts_with("[=")
}

impl<Id> OptionName for OptSpec<Id> {
    fn short(&self) -> Option<char> {
        self.short
    }
    fn long(&self) -> Option<&'static str> {
        self.long
    }
    fn value(&self) -> Option<&'static str> {
        self.value
    }
}

/// Help is wrapped to this many columns.
pub const HELP_WIDTH: usize = 80;
/// Column where option descriptions start.
const HELP_INDENT: usize = 24;

/// Greedy word wrap of `text` into lines of at most `width` characters.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// One option's lines in a command's help: its synopsis, then `help`
/// wrapped to [`HELP_WIDTH`] from column [`HELP_INDENT`].
pub fn push_help_entry(out: &mut String, spec: &impl OptionName, help: &str) {
    let left = format!("  {}", spec.synopsis());
    let text = wrap(help, HELP_WIDTH - HELP_INDENT);
    let mut rest = text.iter();
    if left.chars().count() < HELP_INDENT - 1 {
        let first = rest.next().map(String::as_str).unwrap_or("");
        out.push_str(&format!("{left:<HELP_INDENT$}{first}\n"));
    } else {
        out.push_str(&left);
        out.push('\n');
    }
    let pad = " ".repeat(HELP_INDENT);
    for line in rest {
        out.push_str(&pad);
        out.push_str(line);
        out.push('\n');
    }
}

pub fn parse_seconds(opt: &str, v: &str) -> Result<f64, ArgError> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.01 => Ok(s),
        _ => Err(ArgError::Invalid(format!(
            "invalid value '{v}' for {opt}: expected seconds, at least 0.01 (e.g. 10 or 0.5)"
        ))),
    }
}

pub fn parse_int(opt: &str, v: &str) -> Result<i64, ArgError> {
    v.trim().parse::<i64>().map_err(|_| {
        ArgError::Invalid(format!(
            "invalid value '{v}' for {opt}: expected an integer"
        ))
    })
}

/// `-l INT`: samtools appends min(level, 9) to the mode; negative means
/// the default.
pub fn parse_level(v: &str) -> Result<Option<u32>, ArgError> {
    Ok(level_from(parse_int("-l", v)?))
}

/// The level `-l N` sets: at most 9, none (the default) when negative.
pub fn level_from(n: i64) -> Option<u32> {
    if n < 0 {
        None
    } else {
        Some(n.min(9) as u32)
    }
}

/// An integer that fits a C `int`, as samtools' `parse_int_value` wants.
pub fn parse_c_int(opt: &str, v: &str) -> Result<i64, ArgError> {
    let n = parse_int(opt, v)?;
    if i32::try_from(n).is_err() {
        return Err(ArgError::Invalid(format!(
            "invalid value '{v}' for {opt}: out of range"
        )));
    }
    Ok(n)
}
