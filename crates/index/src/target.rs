//! Where `--write-index` puts the index and which kind it is, following
//! samtools' `auto_index` (sam_utils.c): `out.bam` gets `out.bam.csi`;
//! `out.bam##idx##name` writes the index to `name`, as BAI when `name` ends
//! in `.bai` and as CSI otherwise.

use crate::IndexFormat;

/// Separates a data file name from its index name (`HTS_IDX_DELIM`).
pub const INDEX_DELIMITER: &str = "##idx##";

/// The data file and index file an output name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexTarget {
    /// Path of the BAM itself.
    pub data_path: String,
    /// Path of the index.
    pub index_path: String,
    /// BAI or CSI (min_shift 14).
    pub format: IndexFormat,
}

/// The index samtools would write for output `output` (`-o` argument), or
/// `None` when there is no file to index beside (`-`, empty).
pub fn auto_index_target(output: &str) -> Option<IndexTarget> {
    if output.is_empty() || output == "-" {
        return None;
    }
    match output.split_once(INDEX_DELIMITER) {
        Some((data, index)) => {
            let format = if index.ends_with(".bai") {
                IndexFormat::Bai
            } else {
                IndexFormat::DEFAULT_CSI
            };
            Some(IndexTarget {
                data_path: data.to_string(),
                index_path: index.to_string(),
                format,
            })
        }
        None => Some(IndexTarget {
            data_path: output.to_string(),
            index_path: format!("{output}.csi"),
            format: IndexFormat::DEFAULT_CSI,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_samtools_auto_index() {
        assert_eq!(auto_index_target("-"), None);
        assert_eq!(auto_index_target(""), None);
        let plain = auto_index_target("out.bam");
        assert_eq!(
            plain,
            Some(IndexTarget {
                data_path: "out.bam".into(),
                index_path: "out.bam.csi".into(),
                format: IndexFormat::Csi { min_shift: 14 },
            })
        );
        let bai = auto_index_target("x/out.bam##idx##x/out.bam.bai");
        assert_eq!(bai.as_ref().map(|t| t.format), Some(IndexFormat::Bai));
        assert_eq!(
            bai.as_ref().map(|t| t.data_path.as_str()),
            Some("x/out.bam")
        );
        assert_eq!(bai.map(|t| t.index_path), Some("x/out.bam.bai".to_string()));
        let named_csi = auto_index_target("out.bam##idx##my.index");
        assert_eq!(named_csi.map(|t| t.format), Some(IndexFormat::DEFAULT_CSI));
    }
}
