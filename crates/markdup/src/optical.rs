//! Optical duplicates: the flow-cell location read from a read name and the
//! search for duplicates that lie close together on the same tile.
//!
//! Behaviour follows Picard 3.4.0 with its default `READ_NAME_REGEX` (the
//! fast path: the last three `:`-separated fields are tile, x and y, and the
//! name must have 5 or 7 fields), or a user's ([`NameParser`]), and
//! `OPTICAL_DUPLICATE_PIXEL_DISTANCE` (100 by default).
//! Picard keeps tile, x and y in 16 bits, so values above 32767 wrap.

/// Picard's default pixel distance.
pub const DEFAULT_PIXEL_DISTANCE: i32 = 100;

/// Picard's `MAX_OPTICAL_DUPLICATE_SET_SIZE` default: larger sets get no
/// optical duplicates at all.
pub const MAX_SET_SIZE: usize = 300_000;

/// A flow-cell location as Picard stores it in a read end: 16-bit tile, x
/// and y, plus the read group's position in the header. `tile == -1` means
/// "no location" (names that do not parse, and a parsed tile of 65535).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    pub read_group: i16,
    pub tile: i16,
    pub x: i16,
    pub y: i16,
}

impl Location {
    /// A read end whose name did not parse.
    pub const NONE: Location = Location {
        read_group: -1,
        tile: -1,
        x: -1,
        y: -1,
    };

    pub fn has_location(&self) -> bool {
        self.tile != -1
    }

    /// A location from [`NameParser::parse`] with the record's read group
    /// (its header position) put in, as [`NameParser::location`] gives it:
    /// a name that did not parse stays without one.
    pub fn with_read_group(self, read_group_ordinal: i16) -> Location {
        if self.read_group == -1 {
            self
        } else {
            Location {
                read_group: read_group_ordinal,
                ..self
            }
        }
    }
}

/// Picard's `rapidParseInt`: an optional `-`, then the leading ASCII digits
/// (at least one), ignoring whatever follows; 32-bit arithmetic that wraps.
fn rapid_parse_int(s: &[u8]) -> Option<i32> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let mut val: i32 = 0;
    let mut any = false;
    for &c in digits {
        if !c.is_ascii_digit() {
            break;
        }
        val = val.wrapping_mul(10).wrapping_add((c - b'0') as i32);
        any = true;
    }
    if !any {
        return None;
    }
    Some(if neg { val.wrapping_neg() } else { val })
}

/// The default-regex fast path: `(tile, x, y)` as 32-bit values, or `None`
/// when the name does not have 5 or 7 `:`-separated fields or one of the
/// last three fields does not start with a number.
///
/// Field counting is Picard's: a field ends at each `:` scanning from the
/// right, and position 0 always closes the first field, so a leading `:`
/// does not add an empty field.
pub fn parse_tile_xy(name: &[u8]) -> Option<(i32, i32, i32)> {
    let mut tokens = [0i32; 3];
    let mut tok = 3usize; // number of tokens still to read
    let mut fields = 0;
    let mut end = name.len();
    let mut i = name.len() as isize - 1;
    let mut parse_failed = false;
    while i >= 0 && tok > 0 {
        let iu = i as usize;
        if name[iu] == b':' || iu == 0 {
            fields += 1;
            let start = if iu == 0 { 0 } else { iu + 1 };
            match rapid_parse_int(&name[start..end]) {
                Some(v) => tokens[tok - 1] = v,
                // Picard throws here and the caller reports "no location".
                None => {
                    parse_failed = true;
                    break;
                }
            }
            tok -= 1;
            end = iu;
        }
        i -= 1;
    }
    if parse_failed {
        return None;
    }
    while i >= 0 {
        let iu = i as usize;
        if name[iu] == b':' || iu == 0 {
            fields += 1;
        }
        i -= 1;
    }
    if !(fields == 5 || fields == 7) {
        return None;
    }
    Some((tokens[0], tokens[1], tokens[2]))
}

/// The location Picard records for a read end: parsed from the name and
/// truncated to 16 bits, with the read group's header position.
pub fn location_from_name(name: &[u8], read_group_ordinal: i16) -> Location {
    match parse_tile_xy(name) {
        Some((tile, x, y)) => Location {
            read_group: read_group_ordinal,
            tile: tile as i16,
            x: x as i16,
            y: y as i16,
        },
        None => Location::NONE,
    }
}

/// Picard's value of `READ_NAME_REGEX` that selects the fast default
/// parsing ([`parse_tile_xy`]).
pub const DEFAULT_READ_NAME_REGEX: &str =
    "<optimized capture of last three ':' separated fields as numeric values>";

/// How read names give flow-cell locations (Picard's `READ_NAME_REGEX`).
#[derive(Clone, Debug, Default)]
pub enum NameParser {
    /// The default: the last three `:`-separated fields ([`parse_tile_xy`]).
    #[default]
    Default,
    /// A user regex that must match the whole name; groups 1, 2 and 3 are
    /// tile, x and y (Java's `Matcher.matches` and `Integer.parseInt`).
    Regex(regex::bytes::Regex),
    /// `null`: no locations, no optical duplicate detection.
    Disabled,
}

/// A `READ_NAME_REGEX` alnsort cannot honour with Picard's meaning.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReadNameRegexError {
    #[error(
        "read-name regex '{pattern}' uses {what}, Java regex syntax alnsort does not implement"
    )]
    JavaOnly { pattern: String, what: &'static str },
    #[error("read-name regex '{pattern}' has {groups} capturing group(s): Picard reads tile, x and y from groups 1, 2 and 3")]
    TooFewGroups { pattern: String, groups: usize },
    #[error("read-name regex '{pattern}' does not compile: {source}")]
    Invalid {
        pattern: String,
        #[source]
        source: regex::Error,
    },
}

/// Java regex constructs whose meaning the `regex` crate does not share
/// (it rejects most of them; some it would read differently).
fn java_only_construct(p: &str) -> Option<&'static str> {
    const CONSTRUCTS: &[(&str, &str)] = &[
        ("(?=", "a lookahead '(?='"),
        ("(?!", "a negative lookahead '(?!'"),
        ("(?<=", "a lookbehind '(?<='"),
        ("(?<!", "a negative lookbehind '(?<!'"),
        ("(?>", "an atomic group '(?>'"),
        ("*+", "a possessive quantifier '*+'"),
        ("++", "a possessive quantifier '++'"),
        ("?+", "a possessive quantifier '?+'"),
        ("}+", "a possessive quantifier '}+'"),
        ("\\Q", "quoting '\\Q...\\E'"),
        ("\\k<", "a named backreference '\\k<'"),
        ("\\p", "a character property '\\p'"),
        ("\\P", "a character property '\\P'"),
        ("\\G", "'\\G'"),
        ("\\Z", "'\\Z'"),
        ("\\R", "'\\R'"),
        ("\\X", "'\\X'"),
        ("\\h", "'\\h'"),
        ("\\H", "'\\H'"),
        ("\\v", "'\\v'"),
        ("\\V", "'\\V'"),
        (
            "[:",
            "'[:' (a POSIX class in the regex crate, literal characters in Java)",
        ),
    ];
    let b = p.as_bytes();
    // Backslashes escape the next character: look at unescaped positions.
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if let Some(&c) = b.get(i + 1) {
                if c.is_ascii_digit() && c != b'0' {
                    return Some("a backreference ('\\1' to '\\9')");
                }
                if let Some((_, what)) = CONSTRUCTS
                    .iter()
                    .find(|(c, _)| c.starts_with('\\') && b[i..].starts_with(c.as_bytes()))
                {
                    return Some(what);
                }
            }
            i += 2;
            continue;
        }
        if let Some((_, what)) = CONSTRUCTS
            .iter()
            .find(|(c, _)| !c.starts_with('\\') && b[i..].starts_with(c.as_bytes()))
        {
            return Some(what);
        }
        // Inline flags: Java's u, d and U mean other things here.
        if b[i..].starts_with(b"(?") {
            let flags = b[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_alphabetic() || **c == b'-');
            if flags
                .clone()
                .any(|c| !matches!(c, b'i' | b'm' | b's' | b'x' | b'-'))
            {
                return Some("an inline flag other than i, m, s and x");
            }
        }
        i += 1;
    }
    None
}

impl NameParser {
    /// From the text given as `READ_NAME_REGEX`: Picard's default string,
    /// `null`, or a regex in the common subset of Java's and the `regex`
    /// crate's syntax (ASCII classes, as Java's `\d`, `\w` and `\s`).
    pub fn from_picard_arg(pattern: &str) -> Result<NameParser, ReadNameRegexError> {
        if pattern == DEFAULT_READ_NAME_REGEX {
            return Ok(NameParser::Default);
        }
        if pattern == "null" {
            return Ok(NameParser::Disabled);
        }
        if let Some(what) = java_only_construct(pattern) {
            return Err(ReadNameRegexError::JavaOnly {
                pattern: pattern.to_string(),
                what,
            });
        }
        let re = regex::bytes::RegexBuilder::new(&format!("\\A(?:{pattern})\\z"))
            .unicode(false)
            .build()
            .map_err(|source| ReadNameRegexError::Invalid {
                pattern: pattern.to_string(),
                source,
            })?;
        let groups = re.captures_len() - 1;
        if groups < 3 {
            return Err(ReadNameRegexError::TooFewGroups {
                pattern: pattern.to_string(),
                groups,
            });
        }
        Ok(NameParser::Regex(re))
    }

    /// Whether optical duplicates are looked for at all.
    pub fn detects_optical(&self) -> bool {
        !matches!(self, NameParser::Disabled)
    }

    /// The location Picard records for a read end with this parser.
    /// The location of `name` as [`NameParser::location`] gives it for read
    /// group 0, for [`Location::with_read_group`] to complete: what a read
    /// job can work out without the read groups.
    pub fn parse(&self, name: &[u8]) -> Location {
        self.location(name, 0)
    }

    pub fn location(&self, name: &[u8], read_group_ordinal: i16) -> Location {
        match self {
            NameParser::Default => location_from_name(name, read_group_ordinal),
            NameParser::Disabled => Location::NONE,
            NameParser::Regex(re) => {
                let Some(c) = re.captures(name) else {
                    return Location::NONE;
                };
                // Picard sets tile, then x, then y, and stops at the first
                // group that is not an integer (what it set stays set; the
                // read group is only recorded on success).
                let mut loc = Location::NONE;
                let group = |i: usize| c.get(i).and_then(|m| java_parse_int(m.as_bytes()));
                let Some(tile) = group(1) else { return loc };
                loc.tile = tile as i16;
                let Some(x) = group(2) else { return loc };
                loc.x = x as i16;
                let Some(y) = group(3) else { return loc };
                loc.y = y as i16;
                loc.read_group = read_group_ordinal;
                loc
            }
        }
    }
}

/// Java's `Integer.parseInt` for ASCII: an optional sign, then one or more
/// digits, within 32 bits.
fn java_parse_int(s: &[u8]) -> Option<i32> {
    let digits = match s.first() {
        Some(b'-') | Some(b'+') => &s[1..],
        _ => s,
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

fn close_enough(a: &Location, b: &Location, distance: i32) -> bool {
    a.has_location()
        && b.has_location()
        && a.read_group == b.read_group
        && a.tile == b.tile
        && (a.x as i32 - b.x as i32).abs() <= distance
        && (a.y as i32 - b.y as i32).abs() <= distance
}

fn close_enough_xy(a: &Location, b: &Location, distance: i32) -> bool {
    (a.x as i32 - b.x as i32).abs() <= distance && (a.y as i32 - b.y as i32).abs() <= distance
}

/// Which members of a duplicate set are optical duplicates, for a set given
/// in Picard's sorted order with `keeper` the index of its representative.
/// Sets of up to three use pairwise comparison; larger ones cluster by
/// connected components within (read group, tile) and keep one per cluster
/// (the keeper's cluster keeps the keeper), as Picard does.
pub fn find_optical_duplicates(
    locs: &[Location],
    keeper: Option<usize>,
    distance: i32,
) -> Vec<bool> {
    let graph_min = if keeper.is_none() { 3 } else { 4 };
    find_optical_duplicates_with_threshold(locs, keeper, graph_min, distance)
}

/// As [`find_optical_duplicates`], with the set size from which the
/// clustering is used given: Picard decides it by whether a keeper was passed
/// at all, which for pairs it always is, even to a sub-list (FR or RF ends)
/// that does not hold the keeper.
pub fn find_optical_duplicates_with_threshold(
    locs: &[Location],
    keeper: Option<usize>,
    graph_min: usize,
    distance: i32,
) -> Vec<bool> {
    let n = locs.len();
    let mut flags = vec![false; n];
    if !(2..=MAX_SET_SIZE).contains(&n) {
        return flags;
    }
    // Picard compares against the keeper only when it has a location.
    let actual_keeper = keeper.filter(|&k| locs[k].has_location());
    if n >= graph_min {
        return with_graph(locs, actual_keeper, distance, flags);
    }
    if let Some(k) = actual_keeper {
        for (i, l) in locs.iter().enumerate() {
            flags[i] = i != k && close_enough(&locs[k], l, distance);
        }
    }
    for i in 0..n {
        if Some(i) == actual_keeper {
            continue;
        }
        for j in i + 1..n {
            if Some(j) == actual_keeper {
                continue;
            }
            if flags[i] && flags[j] {
                continue;
            }
            if close_enough(&locs[i], &locs[j], distance) {
                let idx = if flags[j] { i } else { j };
                flags[idx] = true;
            }
        }
    }
    flags
}

fn find_rep(grouping: &mut [usize], mut node: usize) -> usize {
    let mut rep = node;
    while rep != grouping[rep] {
        rep = grouping[rep];
    }
    while node != rep {
        let next = grouping[node];
        grouping[node] = rep;
        node = next;
    }
    rep
}

/// The order in which Java's `HashMap<Integer, _>` built by inserting keys
/// `0..n` iterates them: by bucket (`(h ^ h >>> 16) & (capacity - 1)`), then
/// insertion order. Picard walks its cluster map in this order.
fn java_int_hashmap_order(n: usize) -> Vec<usize> {
    let mut cap = 16usize;
    // Resize happens when size exceeds 0.75 * capacity.
    while n > cap * 3 / 4 {
        cap *= 2;
    }
    let mut order: Vec<usize> = (0..n).collect();
    let bucket = |k: usize| {
        let h = k as u32;
        ((h ^ (h >> 16)) as usize) & (cap - 1)
    };
    order.sort_by_key(|&k| (bucket(k), k));
    order
}

fn with_graph(
    locs: &[Location],
    keeper: Option<usize>,
    distance: i32,
    mut flags: Vec<bool>,
) -> Vec<bool> {
    let n = locs.len();
    // Group by (read group << 16) + tile as Picard keys its map (32-bit).
    let mut groups: std::collections::HashMap<i32, Vec<usize>> = std::collections::HashMap::new();
    for (i, l) in locs.iter().enumerate() {
        if l.has_location() {
            let key = ((l.read_group as i32) << 16).wrapping_add(l.tile as i32);
            groups.entry(key).or_default().push(i);
        }
    }
    // Adjacency lists in Picard's insertion order; only connectivity matters
    // for the clusters, but union order decides the cluster ids, which are
    // only used as keys, so any union order gives the same partition.
    let mut grouping: Vec<usize> = (0..n).collect();
    for members in groups.values() {
        for a in 0..members.len() {
            for b in a + 1..members.len() {
                let (i, j) = (members[a], members[b]);
                if close_enough_xy(&locs[i], &locs[j], distance) {
                    let ri = find_rep(&mut grouping, i);
                    let rj = find_rep(&mut grouping, j);
                    if ri != rj {
                        grouping[ri] = rj;
                    }
                }
            }
        }
    }
    let cluster: Vec<usize> = (0..n).map(|i| find_rep(&mut grouping, i)).collect();
    let mut representative: std::collections::HashMap<usize, usize> =
        std::collections::HashMap::new();
    let keeper_cluster = keeper.map(|k| {
        representative.insert(cluster[k], k);
        cluster[k]
    });
    for i in java_int_hashmap_order(n) {
        let c = cluster[i];
        match representative.get(&c).copied() {
            Some(rep) if Some(i) != keeper => {
                let (cur, r) = (&locs[i], &locs[rep]);
                let left_of = cur.x < r.x || (cur.x == r.x && cur.y < r.y);
                if keeper_cluster != Some(c) && left_of {
                    flags[rep] = true;
                    representative.insert(c, i);
                } else {
                    flags[i] = true;
                }
            }
            _ => {
                representative.insert(c, i);
            }
        }
    }
    flags
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user regex: whole-name match, groups parsed as Java's parseInt
    /// (sign allowed, overflow fails), a failing group leaving what was
    /// set before it; `null` and the default string; Java-only syntax and
    /// fewer than 3 groups refused.
    #[test]
    fn read_name_regex_as_picard_reads_it() {
        let p = NameParser::from_picard_arg(r"[a-zA-Z0-9]+:[0-9]:([0-9]+):([0-9]+):([-+0-9]+).*")
            .unwrap();
        let l = p.location(b"M1:7:1101:70000:-20/1", 3);
        assert_eq!(
            (l.read_group, l.tile, l.x, l.y),
            (3, 1101, 70000u32 as i16, -20)
        );
        // Not a whole-name match ('_' in the first field).
        assert_eq!(p.location(b"M_1:7:1101:10:20", 3), Location::NONE);
        // y overflows 32 bits: tile and x stay set, no read group.
        let l = p.location(b"M1:7:1101:10:99999999999", 3);
        assert_eq!((l.read_group, l.tile, l.x, l.y), (-1, 1101, 10, -1));
        assert!(matches!(
            NameParser::from_picard_arg("null"),
            Ok(NameParser::Disabled)
        ));
        assert!(!NameParser::from_picard_arg("null")
            .unwrap()
            .detects_optical());
        assert!(matches!(
            NameParser::from_picard_arg(DEFAULT_READ_NAME_REGEX),
            Ok(NameParser::Default)
        ));
        let e = NameParser::from_picard_arg(r"(\d+)(?=:)(\d+):(\d+)").unwrap_err();
        assert!(matches!(e, ReadNameRegexError::JavaOnly { .. }), "{e}");
        // Escaped, the same characters are fine.
        assert!(NameParser::from_picard_arg(r"\(\?=(\d+):(\d+):(\d+)").is_ok());
        let e = NameParser::from_picard_arg(r"(\d+):(\d+)").unwrap_err();
        assert_eq!(
            e,
            ReadNameRegexError::TooFewGroups {
                pattern: r"(\d+):(\d+)".into(),
                groups: 2
            }
        );
    }

    fn loc(tile: i16, x: i16, y: i16) -> Location {
        Location {
            read_group: 0,
            tile,
            x,
            y,
        }
    }

    #[test]
    fn five_and_seven_fields_parse_six_does_not() {
        assert_eq!(
            parse_tile_xy(b"M1:7:1101:1000:2000"),
            Some((1101, 1000, 2000))
        );
        assert_eq!(
            parse_tile_xy(b"A:B:C:D:1101:1000:2000"),
            Some((1101, 1000, 2000))
        );
        assert_eq!(parse_tile_xy(b"A:B:C:1101:1000:2000"), None);
        assert_eq!(parse_tile_xy(b"1101:1000:2000"), None);
        assert_eq!(parse_tile_xy(b"read1"), None);
    }

    #[test]
    fn fields_parse_leading_digits_and_fail_without_any() {
        // Trailing text after the digits is ignored (e.g. "/1").
        assert_eq!(
            parse_tile_xy(b"M:7:1101:1000:2000/1"),
            Some((1101, 1000, 2000))
        );
        assert_eq!(parse_tile_xy(b"M:7:1101:x1000:2000"), None);
        assert_eq!(parse_tile_xy(b"M:7:1101:-5:2000"), Some((1101, -5, 2000)));
    }

    #[test]
    fn coordinates_wrap_to_16_bits() {
        let l = location_from_name(b"M:7:1101:65636:40000", 0);
        assert_eq!((l.tile, l.x, l.y), (1101, 100, (40000u32 as u16) as i16));
        // A tile of 65535 is -1 in 16 bits: Picard then sees no location.
        assert!(!location_from_name(b"M:7:65535:1:1", 0).has_location());
    }

    #[test]
    fn small_set_compares_to_keeper_then_pairwise() {
        let locs = [loc(1, 0, 0), loc(1, 50, 50), loc(1, 500, 500)];
        assert_eq!(
            find_optical_duplicates(&locs, Some(0), 100),
            vec![false, true, false]
        );
        // Different tile: never optical.
        let locs = [loc(1, 0, 0), loc(2, 0, 0)];
        assert_eq!(
            find_optical_duplicates(&locs, Some(0), 100),
            vec![false, false]
        );
        // Distance is inclusive.
        let locs = [loc(1, 0, 0), loc(1, 100, 100)];
        assert_eq!(
            find_optical_duplicates(&locs, Some(1), 100),
            vec![true, false]
        );
    }

    #[test]
    fn keeper_without_location_is_not_compared() {
        let locs = [Location::NONE, loc(1, 0, 0), loc(1, 10, 10)];
        assert_eq!(
            find_optical_duplicates(&locs, Some(0), 100),
            vec![false, false, true]
        );
    }

    #[test]
    fn graph_keeps_one_per_cluster() {
        // Four ends, a chain 1-2-3 (each within 100 of the next) and 0 apart.
        let locs = [
            loc(1, 5000, 5000),
            loc(1, 0, 0),
            loc(1, 90, 0),
            loc(1, 180, 0),
        ];
        let f = find_optical_duplicates(&locs, Some(0), 100);
        assert_eq!(f.iter().filter(|&&b| b).count(), 2);
        assert!(!f[0]);
        // The keeper's cluster keeps the keeper.
        let f = find_optical_duplicates(&locs, Some(2), 100);
        assert_eq!(f, vec![false, true, false, true]);
    }

    #[test]
    fn sets_above_the_maximum_get_no_optical_duplicates() {
        let near = vec![loc(1, 0, 0); MAX_SET_SIZE + 1];
        assert!(find_optical_duplicates(&near, Some(0), 100)
            .iter()
            .all(|&b| !b));
        assert_eq!(
            find_optical_duplicates(&near[..2], Some(0), 100),
            vec![false, true]
        );
    }

    #[test]
    fn java_hashmap_order_is_ascending_for_small_sets() {
        assert_eq!(java_int_hashmap_order(5), vec![0, 1, 2, 3, 4]);
        let o = java_int_hashmap_order(70_000);
        assert_eq!(o.len(), 70_000);
        assert_ne!(o, (0..70_000).collect::<Vec<_>>());
    }
}
