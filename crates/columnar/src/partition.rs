//! Where a record's file goes: `ref=NAME/` folders (hive style) in
//! coordinate order, the name escaped as hive and the readers undo it.

/// The folder value of records with no reference (hive's name for a null
/// partition value; pyarrow reads it back as null).
pub const UNMAPPED: &str = "__HIVE_DEFAULT_PARTITION__";

/// `ref=` followed by NAME with every byte outside `[A-Za-z0-9._-]`
/// percent-encoded (reference names may hold `/`, `*`, `:`, `=`; hive
/// readers decode `%XX`).
pub fn folder(name: Option<&[u8]>) -> String {
    let mut out = String::from("ref=");
    match name {
        None => out.push_str(UNMAPPED),
        Some(name) => {
            for &b in name {
                if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
    out
}

/// The name of the `n`-th file of a folder: `part-NNNNN.parquet`, or
/// `part-RRRRR-NNNNN.parquet` in range R of a distributed sort (its files
/// then sit beside the other ranges' in one folder).
pub fn file_name(range: Option<usize>, n: usize) -> String {
    match range {
        None => format!("part-{n:05}.parquet"),
        Some(r) => format!("part-{r:05}-{n:05}.parquet"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped() {
        assert_eq!(folder(Some(b"chr1")), "ref=chr1");
        assert_eq!(folder(Some(b"HLA-A*01:01")), "ref=HLA-A%2A01%3A01");
        assert_eq!(folder(Some(b"a/b=c")), "ref=a%2Fb%3Dc");
        assert_eq!(folder(None), "ref=__HIVE_DEFAULT_PARTITION__");
        assert_eq!(file_name(None, 3), "part-00003.parquet");
        assert_eq!(file_name(Some(12), 3), "part-00012-00003.parquet");
    }
}
