//! `-O cram,OPT=VAL` options as samtools takes them, limited to what this
//! encoder can honour; anything else is refused by name.

use crate::error::{CramError, OptionError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CramVersion {
    /// CRAM 3.0 (gzip blocks), samtools' default.
    #[default]
    V3_0,
    /// CRAM 3.1 (rANS Nx16 blocks).
    V3_1,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CramOptions {
    pub version: CramVersion,
    /// Deflate level of gzip blocks (0..12, libdeflate); `None` is the
    /// default (5, as htslib).
    pub level: Option<u32>,
    /// `no_ref=1`: bases stored verbatim, no reference needed to write or
    /// read the file.
    pub no_ref: bool,
    /// `store_md=1` / `store_nm=1`: MD and NM stored as given even where a
    /// reader computes them back the same (htslib's options; by default
    /// they are left out then, as samtools does, and a reader appends
    /// them after the other tags).
    pub store_md: bool,
    pub store_nm: bool,
    /// `embed_ref=1`: each slice carries the reference bases it spans, so
    /// the file reads without the reference (RR false, as htslib writes
    /// it); slices then hold one reference each.
    pub embed_ref: bool,
}

impl CramOptions {
    /// Applies one `KEY=VALUE` CRAM output option. `version`, `embed_ref`,
    /// `no_ref`, `store_md`, `store_nm` are handled here (`level` and `reference` by the caller,
    /// which shares them with the other formats).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), CramError> {
        match (key, value) {
            ("version", "3.0" | "3") => self.version = CramVersion::V3_0,
            ("version", "3.1") => self.version = CramVersion::V3_1,
            ("version", v) => return Err(OptionError::Version(v.to_string()).into()),
            ("embed_ref", "0" | "1") => self.embed_ref = value == "1",
            ("store_md", "0" | "1") => self.store_md = value == "1",
            ("store_nm", "0" | "1") => self.store_nm = value == "1",
            ("no_ref", "0") => self.no_ref = false,
            ("no_ref", "1") => self.no_ref = true,
            ("embed_ref", "2") => return Err(OptionError::Consensus.into()),
            (k @ ("embed_ref" | "no_ref" | "store_md" | "store_nm"), v) => {
                return Err(OptionError::NotZeroOrOne {
                    key: k.to_string(),
                    value: v.to_string(),
                }
                .into());
            }
            (k, _) => {
                return Err(OptionError::Unknown {
                    key: k.to_string(),
                    value: value.to_string(),
                }
                .into())
            }
        }
        Ok(())
    }

    /// Refuses options that contradict each other (after every `set`).
    pub fn check(&self) -> Result<(), CramError> {
        if self.embed_ref && self.no_ref {
            return Err(OptionError::EmbedAndNoRef.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_options_are_taken_and_the_rest_refused_by_name() {
        let mut o = CramOptions::default();
        o.set("version", "3.1").expect("3.1");
        assert_eq!(o.version, CramVersion::V3_1);
        o.set("version", "3.0").expect("3.0");
        assert_eq!(o.version, CramVersion::V3_0);
        o.set("embed_ref", "1").expect("embed_ref=1");
        assert!(o.embed_ref);
        o.set("embed_ref", "0").expect("embed_ref=0");
        assert!(!o.embed_ref);
        o.set("no_ref", "1").expect("no_ref=1");
        assert!(o.no_ref);
        o.set("no_ref", "0").expect("no_ref=0");
        assert!(!o.no_ref);
        o.set("store_md", "1").expect("store_md=1");
        o.set("store_nm", "1").expect("store_nm=1");
        assert!(o.store_md && o.store_nm);
        o.set("store_nm", "0").expect("store_nm=0");
        assert!(!o.store_nm);
        for (k, v, want) in [
            ("embed_ref", "2", "embed_ref=2"),
            ("no_ref", "2", "no_ref=2"),
            ("store_md", "yes", "store_md=yes"),
            ("version", "2.1", "version=2.1"),
            ("seqs_per_slice", "100", "seqs_per_slice=100"),
        ] {
            let e = o.set(k, v).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    /// A refused option is a typed error a caller can match, with the
    /// text it always had.
    #[test]
    fn refused_options_are_typed() {
        let mut o = CramOptions::default();
        let refused = |r: Result<(), CramError>| match r {
            Err(CramError::Option(e)) => e,
            other => panic!("an option error: {other:?}"),
        };
        let e = refused(o.set("version", "2.1"));
        assert_eq!(e, OptionError::Version("2.1".into()));
        assert_eq!(
            CramError::from(e).to_string(),
            "CRAM output option version=2.1: alnsort writes CRAM 3.0 or 3.1"
        );
        let e = refused(o.set("store_md", "yes"));
        assert_eq!(
            e,
            OptionError::NotZeroOrOne {
                key: "store_md".into(),
                value: "yes".into()
            }
        );
        assert_eq!(e.to_string(), "store_md=yes: expected 0 or 1");
        let e = refused(o.set("embed_ref", "2"));
        assert_eq!(e, OptionError::Consensus);
        assert!(e
            .to_string()
            .starts_with("embed_ref=2 cannot be honoured: "));
        let e = refused(o.set("seqs_per_slice", "100"));
        assert!(
            matches!(&e, OptionError::Unknown { key, value } if key == "seqs_per_slice" && value == "100")
        );
        assert_eq!(
            e.to_string(),
            "seqs_per_slice=100 is not supported (alnsort knows version, embed_ref, no_ref, \
             store_md, store_nm, level, reference)"
        );
        o.set("embed_ref", "1").expect("embed_ref=1");
        o.set("no_ref", "1").expect("no_ref=1");
        let e = refused(o.check());
        assert_eq!(e, OptionError::EmbedAndNoRef);
        assert!(e
            .to_string()
            .starts_with("embed_ref=1 and no_ref=1 contradict each other"));
    }
}
