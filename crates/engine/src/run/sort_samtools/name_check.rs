//! The check that `--markdup=samtools`'s input is grouped by read name, within a memory cap: each finished template's name fingerprint must be new; over the cap the fingerprints are sorted and spilled to the temporary directory, and the spills checked against each other by a merge once the input ends.
//!
//! A name that comes back while its first template's fingerprint is still
//! in memory is refused at once, by name. One that comes back after the
//! first was spilled is found by the merge, before any output is written,
//! and refused naming the two templates by their number in the input (the
//! names themselves are not kept). Each spill holds (fingerprint, template
//! number) pairs, 16 bytes a template, sorted; at most [`MAX_SPILLS`] are
//! kept, merged into one (and checked) when there would be more, so the
//! files open at once stay few.

use crate::error::{Context, Error, Result};
use alnsort_markdup::hash::WordMap;
use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Bytes one fingerprint takes in memory: its key and template number (16)
/// in a hash table that is at most 7/8 full, with a control byte each,
/// and room for the table to double.
const BYTES_PER_ENTRY: usize = 40;
/// Spill files at most before they are merged into one.
const MAX_SPILLS: usize = 16;
/// Bytes of one (fingerprint, template) pair in a spill.
const PAIR: usize = 16;

pub(crate) struct NameCheck {
    /// Fingerprint -> template number (1-based), since the last spill.
    seen: WordMap<u64, u64>,
    /// Entries in memory at most.
    cap: usize,
    templates: u64,
    dir: PathBuf,
    spills: Vec<PathBuf>,
    made: usize,
    /// The input's name, for errors.
    file: String,
}

impl NameCheck {
    /// A check keeping at most `cap_bytes` of fingerprints in memory,
    /// spilling into `dir`.
    pub(crate) fn new(file: &str, dir: &Path, cap_bytes: usize) -> NameCheck {
        NameCheck {
            seen: WordMap::default(),
            cap: (cap_bytes / BYTES_PER_ENTRY).max(1),
            templates: 0,
            dir: dir.to_path_buf(),
            spills: Vec::new(),
            made: 0,
            file: file.to_string(),
        }
    }

    /// Notes the next template, whose name has fingerprint `fp` (`name`
    /// gives the name itself, for the error): an error when a template
    /// before it had the same name and is still in memory.
    pub(crate) fn note<'a>(&mut self, fp: u64, name: impl FnOnce() -> &'a [u8]) -> Result<()> {
        self.templates += 1;
        if self.seen.insert(fp, self.templates).is_some() {
            return Err(super::scattered(&self.file, name()));
        }
        if self.seen.len() >= self.cap {
            self.spill()?;
        }
        Ok(())
    }

    /// Templates noted.
    #[cfg(test)]
    pub(crate) fn templates(&self) -> u64 {
        self.templates
    }

    /// Spill files written so far.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> usize {
        self.made
    }

    /// The fingerprints in memory, sorted, to a file of their own.
    fn spill(&mut self) -> Result<()> {
        let mut pairs: Vec<(u64, u64)> = self.seen.drain().collect();
        pairs.sort_unstable();
        self.seen.shrink_to(self.cap);
        let path = self.dir.join(format!("names-{:06}.fp", self.made));
        self.made += 1;
        let write = || -> std::io::Result<()> {
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
            for (fp, t) in &pairs {
                w.write_all(&fp.to_le_bytes())?;
                w.write_all(&t.to_le_bytes())?;
            }
            w.into_inner().map_err(|e| e.into_error())?.sync_data()
        };
        write().with_context(|| {
            format!(
                "writing the read-name check's fingerprints to {}",
                path.display()
            )
        })?;
        self.spills.push(path);
        if self.spills.len() >= MAX_SPILLS {
            let merged = self.dir.join(format!("names-{:06}.fp", self.made));
            self.made += 1;
            let parts = std::mem::take(&mut self.spills);
            self.merge(&parts, Some(&merged))?;
            for p in &parts {
                let _ = std::fs::remove_file(p);
            }
            self.spills.push(merged);
        }
        Ok(())
    }

    /// Once the input has ended: the fingerprints spilled and in memory
    /// checked against each other; the spills removed.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.spills.is_empty() {
            return Ok(());
        }
        if !self.seen.is_empty() {
            // The last ones join the spills (a merge reads files only).
            let cap = self.cap;
            self.cap = 0;
            self.spill()?;
            self.cap = cap;
        }
        let parts = std::mem::take(&mut self.spills);
        let checked = self.merge(&parts, None);
        for p in &parts {
            let _ = std::fs::remove_file(p);
        }
        checked
    }

    /// Merges the sorted spills `parts`, into `out` when given; an error
    /// naming the two templates when a fingerprint is in two of them.
    fn merge(&self, parts: &[PathBuf], out: Option<&Path>) -> Result<()> {
        let open = |p: &PathBuf| -> Result<BufReader<std::fs::File>> {
            std::fs::File::open(p)
                .map(|f| BufReader::with_capacity(256 << 10, f))
                .with_context(|| format!("reading the read-name check's {}", p.display()))
        };
        let mut readers: Vec<BufReader<std::fs::File>> =
            parts.iter().map(open).collect::<Result<_>>()?;
        let next = |r: &mut BufReader<std::fs::File>, p: &Path| -> Result<Option<(u64, u64)>> {
            let mut b = [0u8; PAIR];
            match r.read_exact(&mut b) {
                Ok(()) => Ok(Some((
                    u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                    u64::from_le_bytes(b[8..].try_into().expect("8 bytes")),
                ))),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
                Err(e) => Err(Error::context(
                    format!("reading the read-name check's {}", p.display()),
                    e,
                )),
            }
        };
        let mut heap = BinaryHeap::new();
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some((fp, t)) = next(r, &parts[i])? {
                heap.push(std::cmp::Reverse((fp, t, i)));
            }
        }
        let mut w = match out {
            Some(p) => Some((
                BufWriter::with_capacity(
                    1 << 20,
                    std::fs::File::create(p).with_context(|| {
                        format!("writing the read-name check's {}", p.display())
                    })?,
                ),
                p,
            )),
            None => None,
        };
        let mut last: Option<(u64, u64)> = None;
        while let Some(std::cmp::Reverse((fp, t, i))) = heap.pop() {
            if let Some((lfp, lt)) = last {
                if lfp == fp {
                    let (a, b) = (lt.min(t), lt.max(t));
                    return Err(Error::input(
                        &self.file,
                        format!(
                            "templates {a} and {b} (counted from the input's start) have the same \
                             read name: it comes back after other names, and --markdup=samtools \
                             needs input grouped by read name (aligner output, or alnsort sort -n / \
                             samtools collate output)"
                        ),
                    ));
                }
            }
            last = Some((fp, t));
            if let Some((w, p)) = w.as_mut() {
                w.write_all(&fp.to_le_bytes())
                    .and_then(|()| w.write_all(&t.to_le_bytes()))
                    .with_context(|| format!("writing the read-name check's {}", p.display()))?;
            }
            if let Some(pair) = next(&mut readers[i], &parts[i])? {
                heap.push(std::cmp::Reverse((pair.0, pair.1, i)));
            }
        }
        if let Some((w, p)) = w {
            w.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|f| f.sync_data())
                .with_context(|| format!("writing the read-name check's {}", p.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(cap_entries: usize, dir: &Path) -> NameCheck {
        NameCheck::new("in.bam", dir, cap_entries * BYTES_PER_ENTRY)
    }

    #[test]
    fn distinct_names_pass_through_many_spills_and_merges() {
        let d = tempfile::tempdir().unwrap();
        let mut c = check(10, d.path());
        for i in 0..2_000u64 {
            c.note(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), || b"x")
                .unwrap();
        }
        // 200 spills of 10, merged 16 at a time.
        assert_eq!(c.templates(), 2_000);
        assert!(c.spilled() > 200, "{}", c.spilled());
        c.finish().unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_name_back_in_memory_is_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let mut c = check(100, d.path());
        c.note(1, || b"r1").unwrap();
        c.note(2, || b"r2").unwrap();
        let e = c.note(1, || b"r1").unwrap_err().to_string();
        assert!(e.contains("read name r1 comes back"), "{e}");
    }

    #[test]
    fn a_name_back_after_its_spill_is_refused_naming_both_templates() {
        for back_at in [15u64, 150, 1_999] {
            let d = tempfile::tempdir().unwrap();
            let mut c = check(10, d.path());
            let fp = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let mut refused = None;
            for i in 1..=2_000u64 {
                // Template `back_at` has template 3's name.
                let f = if i == back_at { fp(3) } else { fp(i) };
                if let Err(e) = c.note(f, || b"n") {
                    refused = Some(e.to_string());
                    break;
                }
            }
            let e = match refused {
                Some(e) => e,
                None => c.finish().unwrap_err().to_string(),
            };
            assert!(
                e.contains(&format!("templates 3 and {back_at}")),
                "{back_at}: {e}"
            );
        }
    }
}
