//! Finding each @SQ's reference sequence as htslib does, with the MD5 check.
//!
//! Order of the search for a sequence named SN with header M5:
//! 1. the FASTA given by `--reference` (by name, through its `.fai` when
//!    there is one, else read whole once);
//! 2. when the @SQ has an M5: each entry of `REF_CACHE`, then of `REF_PATH`
//!    (entries separated by `:`; `%s` is the rest of the M5, `%Ns` its next N
//!    characters, and an entry without `%s` gets `/%s` appended), each a file
//!    holding the bare sequence. URL entries (`http:`, `https:`, `ftp:`) are
//!    not fetched: alnsort does no network access, and the error says so;
//! 3. the @SQ's UR when it names a local file (`file://` or a path).
//!
//! A sequence found is upper-cased (htslib does the same). When the @SQ
//! has an M5 and the sequence's MD5 differs from it:
//! - writing ([`M5Mismatch::Refuse`]) is an error: records would be stored
//!   against other bases than the header names;
//! - reading ([`M5Mismatch::Warn`]) is a warning naming the file, the
//!   reference and both MD5s, as htslib compares no @SQ M5 with a local
//!   FASTA (a test FASTA is often a piece of the sequence the M5 is of).
//!   The bases are then vouched for by each slice's own MD5 over its span
//!   ([`Lease::check_slice`]); a slice that carries none (multi-reference
//!   slices, an all-zero MD5) cannot be checked and is refused by name
//!   ([`Lease::refuse_unchecked`]) where htslib would decode it against
//!   bases that may not be the ones it was written with.

use crate::error::{FaiError, ReferenceError};
use md5::{Digest, Md5};
use noodles_fasta as fasta;
use noodles_sam as sam;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Where references are looked for.
#[derive(Debug, Clone, Default)]
pub struct RefSource {
    /// `--reference FILE` (or `-O cram,reference=FILE`).
    pub fasta: Option<PathBuf>,
    /// `REF_PATH` as found in the environment.
    pub ref_path: Option<String>,
    /// `REF_CACHE` as found in the environment.
    pub ref_cache: Option<String>,
    /// References loaded (found, read and MD5-checked) through this source
    /// and its clones: the reader's and the writer's caches share it.
    loads: Arc<AtomicU64>,
}

impl RefSource {
    /// `fasta` and the process environment's `REF_PATH` and `REF_CACHE`.
    pub fn from_env(fasta: Option<PathBuf>) -> RefSource {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        RefSource {
            fasta,
            ref_path: var("REF_PATH"),
            ref_cache: var("REF_CACHE"),
            loads: Arc::default(),
        }
    }

    /// The UR htslib gives every @SQ of a CRAM it writes with a FASTA given
    /// (`cram_write_SAM_hdr`, its `full_path` of `fd->ref_fn`): the path as
    /// given when absolute, else the working directory, `/` and the path,
    /// not normalised (`./` and `../` kept; the path as given when the
    /// working directory cannot be read). None without a FASTA: found
    /// through `REF_CACHE`/`REF_PATH`, a reference leaves UR as it is.
    pub fn header_url(&self) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let fasta = self.fasta.as_ref()?;
        let given = fasta.as_os_str().as_bytes();
        if given.starts_with(b"/") {
            return Some(given.to_vec());
        }
        Some(match std::env::current_dir() {
            Ok(cwd) => [cwd.as_os_str().as_bytes(), b"/", given].concat(),
            Err(_) => given.to_vec(),
        })
    }

    /// The `--reference` FASTA's sequence lengths by name (its `.fai`'s,
    /// else counted), None without one.
    pub(crate) fn fasta_lengths(&self) -> io::Result<Option<HashMap<Vec<u8>, u64>>> {
        match &self.fasta {
            Some(p) => FastaFile::new(p.clone()).lengths().map(Some),
            None => Ok(None),
        }
    }

    /// How many reference sequences have been loaded through this source
    /// (and its clones) so far: each time a sequence is read from its file
    /// and checked, a reload after eviction included.
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// The header's references, resolved on demand (only the references
    /// that records use are looked for, as htslib does), each checked
    /// against its @SQ M5, and held as `holding` says.
    pub(crate) fn references(
        &self,
        header: &sam::Header,
        holding: RefHolding,
        mismatch: M5Mismatch,
    ) -> Arc<References> {
        let mut sq = HashMap::new();
        let mut names = Vec::new();
        for (name, rs) in header.reference_sequences() {
            let other = rs.other_fields();
            let get = |tag: [u8; 2]| {
                other
                    .get(&tag)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            };
            sq.insert(
                name.to_vec(),
                SqInfo {
                    m5: get(*b"M5").map(|m| m.to_ascii_lowercase()),
                    ur: get(*b"UR"),
                },
            );
            names.push(name.to_vec());
        }
        let resolver = Arc::new(Resolver {
            src: self.clone(),
            sq,
            fasta: Mutex::new(self.fasta.as_ref().map(|p| FastaFile::new(p.clone()))),
            mismatch,
            mismatched: Mutex::default(),
        });
        let all = match holding {
            RefHolding::All => Some(fasta::Repository::new(Loader {
                resolver: Arc::clone(&resolver),
            })),
            RefHolding::InUse => None,
        };
        Arc::new(References {
            resolver,
            names,
            all,
            slots: Mutex::new(Slots::default()),
        })
    }
}

/// What a reference whose MD5 differs from its @SQ M5 is.
#[derive(Debug, Clone)]
pub(crate) enum M5Mismatch {
    /// An error (writing: records would be stored against other bases
    /// than the header names).
    Refuse,
    /// A warning naming the file (reading, as htslib: each slice's MD5
    /// checks the bases it uses); slices with no MD5 then cannot use it.
    Warn { file: Arc<str> },
}

/// How a run holds the reference sequences it loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefHolding {
    /// Each sequence only while a container job uses it, plus the
    /// [`KEPT_UNUSED`] used last (htslib frees a reference when no slice
    /// uses it). For records in coordinate order, where each reference is
    /// used by one run of containers and so loaded once.
    InUse,
    /// Every sequence loaded, until the run ends. For any other order,
    /// where containers visit the references again and again and evicting
    /// would reload them per container.
    All,
}

impl RefHolding {
    /// The holding for records that come in coordinate order (`true`) or
    /// in any other order.
    pub fn for_order(coordinate: bool) -> RefHolding {
        if coordinate {
            RefHolding::InUse
        } else {
            RefHolding::All
        }
    }

    /// The most bytes of reference sequence a run can hold at once, for
    /// the header's @SQ lengths and `jobs` container jobs running at once
    /// (the pool's threads).
    ///
    /// [`RefHolding::All`]: the sum of the lengths. [`RefHolding::InUse`]:
    /// a running job holds the references its container uses, two of them
    /// when it crosses from one reference to the next (as the writer's
    /// slices of 10,240 records do), so `jobs` jobs in coordinate order use
    /// at most `jobs + 1` references at once, and [`KEPT_UNUSED`] more are
    /// kept; a slice of several references is given copies of them (one
    /// noodles repository serves a slice, see [`Lease::repository`]), two
    /// references for a slice crossing one boundary; and while a sequence
    /// is loaded or copied it is there twice for a moment (noodles'
    /// repository copies the record its adapter returns). Hence the sum of
    /// the largest `jobs + 1 + KEPT_UNUSED` lengths, plus the largest two
    /// (copies), plus the largest once more. A container of many
    /// references (sparse records on many large references) can hold more
    /// than this.
    pub fn bytes(self, lengths: &[u64], jobs: usize) -> u64 {
        match self {
            RefHolding::All => lengths.iter().sum(),
            RefHolding::InUse => {
                let mut l = lengths.to_vec();
                l.sort_unstable_by(|a, b| b.cmp(a));
                let held: u64 = l.iter().take(jobs.max(1) + 1 + KEPT_UNUSED).sum();
                let copies: u64 = l.iter().take(2).sum();
                let loading = l.first().copied().unwrap_or(0);
                held + copies + loading
            }
        }
    }
}

/// References kept loaded after their last job ends, most recently used
/// first: between two containers of one reference there can be a moment
/// when no job holds it (always at `-@1`), and the next container should
/// not reload it.
pub const KEPT_UNUSED: usize = 1;

/// The header's references and how they are held: one noodles repository
/// per reference in use ([`RefHolding::InUse`]), so that dropping it frees
/// that sequence alone, or one repository for all ([`RefHolding::All`]).
pub(crate) struct References {
    resolver: Arc<Resolver>,
    /// @SQ names by reference id.
    names: Vec<Vec<u8>>,
    /// The repository of [`RefHolding::All`].
    all: Option<fasta::Repository>,
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    /// The repository of each reference held, by id, with how many leases
    /// hold it.
    held: HashMap<usize, Slot>,
    /// References no lease holds, most recently released first.
    unused: VecDeque<usize>,
}

struct Slot {
    repository: fasta::Repository,
    leases: usize,
}

impl References {
    /// A lease for one container job: the references it asks for stay
    /// loaded until it is dropped.
    pub(crate) fn lease(self: &Arc<Self>) -> Lease {
        Lease {
            refs: Arc::clone(self),
            held: Vec::new(),
            last: None,
        }
    }

    /// Loads each @SQ that has no M5 and returns its MD5 (as noodles'
    /// writer computes it for the header), on `pool`: one sequence per
    /// pool thread at a time, none kept.
    pub(crate) fn missing_m5(
        &self,
        header: &sam::Header,
        pool: &rayon::ThreadPool,
    ) -> io::Result<Vec<(usize, String)>> {
        use rayon::prelude::*;
        let missing: Vec<(usize, &[u8])> = header
            .reference_sequences()
            .iter()
            .enumerate()
            .filter(|(_, (_, rs))| rs.other_fields().get(b"M5").is_none())
            .map(|(id, (name, _))| (id, name.as_ref()))
            .collect();
        pool.install(|| {
            missing
                .par_iter()
                .with_max_len(1)
                .map(|&(id, name)| {
                    let seq = self.resolver.load(name)?;
                    Ok((id, normalized_md5_hex(&seq)))
                })
                .collect()
        })
    }

    fn name(&self, id: usize) -> io::Result<&[u8]> {
        self.names.get(id).map(Vec::as_slice).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, ReferenceError::UnknownId { id })
        })
    }

    /// The M5 of reference `id`'s @SQ, if it has one.
    fn sq_m5(&self, id: usize) -> Option<String> {
        self.names
            .get(id)
            .and_then(|n| self.resolver.sq.get(n))
            .and_then(|sq| sq.m5.clone())
    }

    fn id(&self, name: &[u8]) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The repository of reference `id`, counted as held once more.
    fn hold(&self, id: usize) -> fasta::Repository {
        let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = s.unused.iter().position(|&u| u == id) {
            s.unused.remove(at);
        }
        let resolver = &self.resolver;
        let slot = s.held.entry(id).or_insert_with(|| Slot {
            repository: fasta::Repository::new(Loader {
                resolver: Arc::clone(resolver),
            }),
            leases: 0,
        });
        slot.leases += 1;
        slot.repository.clone()
    }

    /// Counts reference `id` as held once less; drops the repositories
    /// of the references no lease holds beyond the [`KEPT_UNUSED`] most
    /// recent (their sequences are freed when the last job's copy of the
    /// repository goes).
    fn release(&self, id: usize) {
        let mut s = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = s.held.get_mut(&id) else {
            return;
        };
        slot.leases = slot.leases.saturating_sub(1);
        if slot.leases > 0 {
            return;
        }
        s.unused.push_front(id);
        while s.unused.len() > KEPT_UNUSED {
            if let Some(old) = s.unused.pop_back() {
                s.held.remove(&old);
            }
        }
    }
}

/// The references one container job uses, held until the lease is dropped.
pub(crate) struct Lease {
    refs: Arc<References>,
    /// Reference ids held through this lease (each once).
    held: Vec<usize>,
    /// The sequence asked for last, by id (records of a container mostly
    /// share one reference).
    last: Option<(usize, Arc<fasta::record::Sequence>)>,
}

impl Lease {
    /// Checks a slice written against reference `id` (0-based `start`,
    /// `span` bases) by the MD5 its header records, always, as htslib's
    /// `cram_decode_slice` does: the MD5 of the bases from `start`, `span`
    /// of them or up to the reference's end, of the reference given, or
    /// of the slice's `embedded` reference when it has one. An all-zero
    /// MD5 is not checked (htslib's "no MD5"); the callers skip what htslib
    /// skips: unmapped and multi-reference slices, and slices of a container
    /// whose records were written without a reference (RR false). An @SQ M5
    /// that matched the whole sequence does not vouch for the slice: the
    /// records may have been written against another sequence whose header
    /// was edited since. A mismatch is a [`ReferenceError::SliceMismatch`].
    pub(crate) fn check_slice(
        &mut self,
        id: usize,
        start: i64,
        span: i64,
        md5: &[u8; 16],
        embedded: Option<&[u8]>,
    ) -> io::Result<()> {
        if *md5 == [0; 16] {
            return Ok(());
        }
        let loaded;
        let (bases, from): (&[u8], usize) = match embedded {
            // The embedded bases start at the slice's start.
            Some(bases) => (bases, 0),
            None => {
                loaded = self.sequence(id)?;
                let bases: &[u8] = loaded.as_ref().as_ref();
                (bases, usize::try_from(start).unwrap_or(0).min(bases.len()))
            }
        };
        let span = usize::try_from(span).unwrap_or(0);
        let to = from.saturating_add(span).min(bases.len());
        let found: [u8; 16] = Md5::digest(&bases[from..to]).into();
        if found == *md5 {
            return Ok(());
        }
        let first = usize::try_from(start).unwrap_or(0) as u64 + 1;
        Err(io::Error::other(ReferenceError::SliceMismatch {
            sn: String::from_utf8_lossy(self.refs.name(id)?).into_owned(),
            first,
            last: first + (to - from) as u64 - 1,
            found: hex(&found),
            want: hex(md5),
            m5: self.refs.sq_m5(id).unwrap_or_else(|| "none".to_string()),
            embedded: embedded.is_some(),
        }))
    }

    /// Refuses reference `id` for a slice whose bases no MD5 checks
    /// (`span`: the 1-based first base and the last of a single-reference
    /// slice whose MD5 is all zero; None for a multi-reference slice) when the sequence loaded differs from its @SQ M5
    /// ([`M5Mismatch::Warn`]): the records may have been written against
    /// the sequence the M5 names, and nothing would show wrong bases.
    /// htslib decodes such a slice against the bases it has, unchecked.
    /// Call after loading `id` (the mismatch is known once loaded).
    pub(crate) fn refuse_unchecked(&self, id: usize, span: Option<(i64, i64)>) -> io::Result<()> {
        let name = self.refs.name(id)?;
        let sn = String::from_utf8_lossy(name).into_owned();
        let slice = match span {
            Some((first, last)) => {
                format!("the slice at {sn}:{first}-{last} (its reference MD5 is all zero)")
            }
            None => "a multi-reference slice".to_string(),
        };
        let seen = self
            .refs
            .resolver
            .mismatched
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match seen.get(name) {
            None => Ok(()),
            Some(m) => Err(io::Error::other(ReferenceError::Unchecked {
                sn,
                m5: m.m5.clone(),
                found: m.found.clone(),
                place: m.place.clone(),
                slice,
            })),
        }
    }

    /// The repository to hand noodles for a slice (or a container) whose
    /// records use reference `id` only (`Some`), or several (`None`, a
    /// multi-reference slice, or one whose references are not known).
    ///
    /// One reference: that reference's own repository, shared with every
    /// other job on it. Several: a repository of this job's own, which
    /// loads nothing itself but copies each sequence it is asked for from
    /// the shared one (noodles takes one repository per slice, and a
    /// repository keeps everything it has been asked for, so sharing one
    /// would hold every reference ever asked for together).
    pub(crate) fn repository(&mut self, id: Option<usize>) -> fasta::Repository {
        if let Some(all) = &self.refs.all {
            return all.clone();
        }
        match id {
            Some(id) => self.hold(id),
            None => self.repository_between(None),
        }
    }

    /// As [`Lease::repository`] for a slice of several references, when
    /// its records are in coordinate order and use references `first` to
    /// `last` (header order): a reference strictly between them has all its
    /// records in this slice, so it is loaded straight into the job's
    /// repository (once, not shared and copied); `first` and `last` may
    /// have records in the slices before and after, and are copied from
    /// their shared repositories.
    pub(crate) fn repository_between(&mut self, span: Option<(usize, usize)>) -> fasta::Repository {
        if let Some(all) = &self.refs.all {
            return all.clone();
        }
        fasta::Repository::new(Copier {
            lease: self.refs.lease(),
            inner: span.map(|(first, last)| first + 1..last),
        })
    }

    /// The sequence of reference `id` (loaded if need be), held until the
    /// lease is dropped.
    pub(crate) fn sequence(&mut self, id: usize) -> io::Result<Arc<fasta::record::Sequence>> {
        if let Some((last, seq)) = &self.last {
            if *last == id {
                return Ok(Arc::clone(seq));
            }
        }
        let name = self.refs.name(id)?.to_vec();
        let repository = self.repository(Some(id));
        let seq = repository
            .get(&name)
            .transpose()?
            .ok_or_else(|| unavailable(&name))?;
        self.last = Some((id, Arc::clone(&seq)));
        Ok(seq)
    }

    /// Holds reference `id` for this lease from now on without loading it
    /// (a job's references taken when the job is queued, so that one
    /// finishing early cannot evict a reference a job queued before it
    /// still needs).
    pub(crate) fn reserve(&mut self, id: usize) {
        if self.refs.all.is_none() && !self.held.contains(&id) {
            self.held.push(id);
            // Counted held; the repository is the slot's, kept there.
            drop(self.refs.hold(id));
        }
    }

    fn hold(&mut self, id: usize) -> fasta::Repository {
        if self.held.contains(&id) {
            // Already counted for this lease: just the repository.
            let s = self.refs.slots.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = s.held.get(&id) {
                return slot.repository.clone();
            }
        }
        self.held.push(id);
        self.refs.hold(id)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.last = None;
        for id in std::mem::take(&mut self.held) {
            self.refs.release(id);
        }
    }
}

/// Loads a reference by name through the resolver (the repository adapter
/// of a reference's own repository, and of [`RefHolding::All`]'s).
struct Loader {
    resolver: Arc<Resolver>,
}

/// The error for a reference the repository has no sequence for (its
/// adapters always answer, so this is a broken promise, kept typed).
fn unavailable(name: &[u8]) -> io::Error {
    io::Error::other(ReferenceError::Unavailable {
        sn: String::from_utf8_lossy(name).into_owned(),
    })
}

impl fasta::repository::Adapter for Loader {
    fn get(&mut self, name: &[u8]) -> Option<io::Result<fasta::Record>> {
        // Always Some: noodles' encoder treats None as a bug (it panics),
        // and the error says where we looked.
        Some(self.resolver.load(name).map(|seq| record(name, seq)))
    }
}

/// A job's repository for a slice of several references: copies each
/// sequence from that reference's shared repository, holding it through
/// its own lease while the job's repository lives.
struct Copier {
    lease: Lease,
    /// References loaded here rather than copied (see
    /// [`Lease::repository_between`]).
    inner: Option<std::ops::Range<usize>>,
}

impl fasta::repository::Adapter for Copier {
    fn get(&mut self, name: &[u8]) -> Option<io::Result<fasta::Record>> {
        let Some(id) = self.lease.refs.id(name) else {
            // Not an @SQ: the resolver's error names it.
            return Some(self.lease.refs.resolver.load(name).map(|s| record(name, s)));
        };
        if self.inner.as_ref().is_some_and(|r| r.contains(&id)) {
            return Some(self.lease.refs.resolver.load(name).map(|s| record(name, s)));
        }
        Some(
            self.lease
                .sequence(id)
                .map(|seq| record(name, AsRef::<[u8]>::as_ref(&*seq).to_vec())),
        )
    }
}

fn record(name: &[u8], seq: Vec<u8>) -> fasta::Record {
    fasta::Record::new(
        fasta::record::Definition::new(name.to_vec(), None),
        fasta::record::Sequence::from(seq),
    )
}

#[derive(Debug, Clone)]
struct SqInfo {
    m5: Option<String>,
    ur: Option<String>,
}

struct Resolver {
    src: RefSource,
    sq: HashMap<Vec<u8>, SqInfo>,
    fasta: Mutex<Option<FastaFile>>,
    mismatch: M5Mismatch,
    /// The references loaded whose MD5 differs from their @SQ M5
    /// ([`M5Mismatch::Warn`]), by name, each warned about once.
    mismatched: Mutex<HashMap<Vec<u8>, Mismatched>>,
}

/// A reference's MD5 that differs from its @SQ M5, and where it was found.
#[derive(Debug, Clone)]
struct Mismatched {
    m5: String,
    found: String,
    place: String,
}

/// Lower-case hex MD5 of `seq` as the SAM spec (§1.3.2) and noodles'
/// writer compute it: bytes outside `!`..`~` left out, lower case taken
/// as upper.
pub(crate) fn normalized_md5_hex(seq: &[u8]) -> String {
    let mut h = Md5::new();
    let mut buf = Vec::with_capacity(seq.len().min(1 << 20));
    for chunk in seq.chunks(1 << 20) {
        buf.clear();
        // Counted first, without branches, so that the common chunk (all
        // graphic) is upper-cased by a loop that vectorises.
        let others = chunk.iter().filter(|b| !b.is_ascii_graphic()).count();
        if others == 0 {
            buf.extend(chunk.iter().map(u8::to_ascii_uppercase));
        } else {
            buf.extend(
                chunk
                    .iter()
                    .filter(|b| b.is_ascii_graphic())
                    .map(u8::to_ascii_uppercase),
            );
        }
        h.update(&buf);
    }
    hex(&h.finalize())
}

/// Lower-case hex MD5 of `seq`.
pub(crate) fn md5_hex(seq: &[u8]) -> String {
    hex(&Md5::digest(seq))
}

/// `bytes` as lower-case hex (how M5 values are written).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// htslib's cache path expansion: `%s` is the rest of the M5, `%Ns` its
/// next N characters; an entry with no `%s` gets `/%s` appended.
pub(crate) fn expand_path(pattern: &str, m5: &str) -> String {
    let pattern = if pattern.contains("%s") || has_width_s(pattern) {
        pattern.to_string()
    } else if pattern.is_empty() {
        "%s".to_string()
    } else {
        format!("{}/%s", pattern.trim_end_matches('/'))
    };
    let mut out = String::new();
    let mut rest = m5;
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j < b.len() && b[j] == b's' {
                let n = pattern[i + 1..j].parse::<usize>().ok();
                let take = n.unwrap_or(rest.len()).min(rest.len());
                out.push_str(&rest[..take]);
                rest = &rest[take..];
                i = j + 1;
                continue;
            }
        }
        out.push(b[i] as char);
        i += 1;
    }
    out
}

fn has_width_s(p: &str) -> bool {
    let b = p.as_bytes();
    (0..b.len()).any(|i| {
        b[i] == b'%' && {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            j > i + 1 && j < b.len() && b[j] == b's'
        }
    })
}

/// Splits a `REF_PATH`-style list at `:`, keeping `http://…`, `https://…`
/// and `ftp://…` entries whole (htslib's rule).
pub(crate) fn split_path_list(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let parts: Vec<&str> = list.split(':').collect();
    let mut i = 0;
    while i < parts.len() {
        let p = parts[i];
        if matches!(p, "http" | "https" | "ftp") && i + 1 < parts.len() {
            cur = format!("{p}:{}", parts[i + 1]);
            i += 2;
            // A URL's port or later colons would follow; htslib keeps "::"
            // as a literal colon. Keep it simple: a URL entry ends here.
            out.push(std::mem::take(&mut cur));
            continue;
        }
        if !p.is_empty() {
            out.push(p.to_string());
        }
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn is_url(p: &str) -> bool {
    p.starts_with("http:") || p.starts_with("https:") || p.starts_with("ftp:")
}

/// Upper-cases the bases and drops anything that is not a printable
/// character (line ends, spaces), as htslib does when loading a reference.
fn clean(mut seq: Vec<u8>) -> Vec<u8> {
    seq.retain(|&c| c > b' ');
    seq.make_ascii_uppercase();
    seq
}

impl Resolver {
    /// [`Resolver::find`], counted as a load, its error as an `io::Error`
    /// (what noodles' repository passes on).
    fn load(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        let seq = self.find(name).map_err(io::Error::other)?;
        self.src.loads.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    fn find(&self, name: &[u8]) -> Result<Vec<u8>, ReferenceError> {
        let sn = String::from_utf8_lossy(name).into_owned();
        let info = self
            .sq
            .get(name)
            .cloned()
            .unwrap_or(SqInfo { m5: None, ur: None });
        let m5_shown = info.m5.clone().unwrap_or_else(|| "absent".into());
        let mut looked: Vec<String> = Vec::new();
        let check = |seq: Vec<u8>, place: String| -> Result<Vec<u8>, ReferenceError> {
            if let Some(m5) = &info.m5 {
                let found = md5_hex(&seq);
                if &found != m5 {
                    let mismatch = Mismatched {
                        m5: m5.clone(),
                        found,
                        place,
                    };
                    match &self.mismatch {
                        M5Mismatch::Refuse => {
                            return Err(ReferenceError::Mismatch {
                                sn: sn.clone(),
                                m5: mismatch.m5,
                                found: mismatch.found,
                                place: mismatch.place,
                            })
                        }
                        M5Mismatch::Warn { file } => {
                            let mut seen =
                                self.mismatched.lock().unwrap_or_else(|p| p.into_inner());
                            if !seen.contains_key(name) {
                                eprintln!(
                                    "[W::alnsort] {file}: reference {sn}: its MD5 is {} in {}, \
                                     but the header's @SQ M5 is {}; reading on, each slice's \
                                     bases checked by the slice's own MD5",
                                    mismatch.found, mismatch.place, mismatch.m5
                                );
                                seen.insert(name.to_vec(), mismatch);
                            }
                        }
                    }
                }
            }
            Ok(seq)
        };
        if let Some(path) = &self.src.fasta {
            let mut guard = self.fasta.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = guard.as_mut() {
                match f.get(name) {
                    Ok(Some(seq)) => {
                        return check(clean(seq), format!("--reference {}", path.display()))
                    }
                    Ok(None) => looked.push(format!(
                        "--reference {} (no sequence named {sn})",
                        path.display()
                    )),
                    Err(source) => {
                        return Err(ReferenceError::Read {
                            sn,
                            place: format!("--reference {}", path.display()),
                            source,
                        })
                    }
                }
            }
        } else {
            looked.push("no --reference given".into());
        }
        if let Some(m5) = &info.m5 {
            for (var, list) in [
                ("REF_CACHE", &self.src.ref_cache),
                ("REF_PATH", &self.src.ref_path),
            ] {
                let Some(list) = list else {
                    looked.push(format!("{var} not set"));
                    continue;
                };
                for entry in split_path_list(list) {
                    let p = expand_path(&entry, m5);
                    if is_url(&p) {
                        looked.push(format!(
                            "{var} URL {p} (not fetched: alnsort does no network access)"
                        ));
                        continue;
                    }
                    match std::fs::read(&p) {
                        Ok(seq) => return check(clean(seq), format!("{var} file {p}")),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {
                            looked.push(format!("{var} file {p} (absent)"))
                        }
                        Err(source) => {
                            return Err(ReferenceError::Read {
                                sn,
                                place: format!("{var} file {p}"),
                                source,
                            })
                        }
                    }
                }
            }
        } else {
            looked.push("REF_PATH/REF_CACHE not searched (the @SQ has no M5)".into());
        }
        if let Some(ur) = &info.ur {
            let local = ur.strip_prefix("file://").unwrap_or(ur);
            if !is_url(local) && Path::new(local).is_file() {
                let mut f = FastaFile::new(PathBuf::from(local));
                match f.get(name) {
                    Ok(Some(seq)) => return check(clean(seq), format!("@SQ UR {ur}")),
                    Ok(None) => looked.push(format!("@SQ UR {ur} (no sequence named {sn})")),
                    Err(source) => {
                        return Err(ReferenceError::Read {
                            sn,
                            place: format!("@SQ UR {ur}"),
                            source,
                        })
                    }
                }
            } else {
                looked.push(format!("@SQ UR {ur} (not a local file)"));
            }
        }
        Err(ReferenceError::NotFound {
            sn,
            m5: m5_shown,
            looked: looked.join("; "),
        })
    }
}

/// One `.fai` line: where a sequence's bases are.
#[derive(Debug, Clone, Copy)]
struct FaiEntry {
    len: u64,
    offset: u64,
    line_bases: u64,
    line_width: u64,
}

/// A FASTA file read by name: through its `.fai` when it has one, else read
/// whole on first use and kept.
struct FastaFile {
    path: PathBuf,
    fai: Option<HashMap<Vec<u8>, FaiEntry>>,
    all: Option<HashMap<Vec<u8>, Vec<u8>>>,
    tried_fai: bool,
}

impl FastaFile {
    fn new(path: PathBuf) -> FastaFile {
        FastaFile {
            path,
            fai: None,
            all: None,
            tried_fai: false,
        }
    }

    fn load_fai(&mut self) -> io::Result<()> {
        self.tried_fai = true;
        let mut fai_path = self.path.clone().into_os_string();
        fai_path.push(".fai");
        let text = match std::fs::read_to_string(&fai_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut map = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let f: Vec<&str> = line.split('\t').collect();
            let num = |k: usize| -> io::Result<u64> {
                let path = || PathBuf::from(&fai_path);
                let (line, column) = (i + 1, k + 1);
                let e = match f.get(k) {
                    None => FaiError::MissingColumn {
                        path: path(),
                        line,
                        column,
                    },
                    Some(v) => match v.parse() {
                        Ok(n) => return Ok(n),
                        Err(source) => FaiError::NotANumber {
                            path: path(),
                            line,
                            column,
                            text: v.to_string(),
                            source,
                        },
                    },
                };
                Err(io::Error::new(io::ErrorKind::InvalidData, e))
            };
            let e = FaiEntry {
                len: num(1)?,
                offset: num(2)?,
                line_bases: num(3)?,
                line_width: num(4)?,
            };
            map.insert(f[0].as_bytes().to_vec(), e);
        }
        self.fai = Some(map);
        Ok(())
    }

    /// Each sequence's length by name: from the `.fai`, else counted in
    /// the FASTA (bases only, as [`clean`] keeps them; nothing kept).
    fn lengths(&mut self) -> io::Result<HashMap<Vec<u8>, u64>> {
        if !self.tried_fai {
            self.load_fai()?;
        }
        if let Some(fai) = &self.fai {
            return Ok(fai.iter().map(|(n, e)| (n.clone(), e.len)).collect());
        }
        let mut out = HashMap::new();
        let r = BufReader::new(File::open(&self.path)?);
        let mut cur: Option<(Vec<u8>, u64)> = None;
        for line in r.split(b'\n') {
            let line = line?;
            if let Some(def) = line.strip_prefix(b">") {
                if let Some((n, len)) = cur.take() {
                    out.entry(n).or_insert(len);
                }
                let n = def
                    .split(|c| c.is_ascii_whitespace())
                    .next()
                    .unwrap_or(b"")
                    .to_vec();
                cur = Some((n, 0));
            } else if let Some((_, len)) = cur.as_mut() {
                *len += line.iter().filter(|&&c| c > b' ').count() as u64;
            }
        }
        if let Some((n, len)) = cur.take() {
            out.entry(n).or_insert(len);
        }
        Ok(out)
    }

    fn get(&mut self, name: &[u8]) -> io::Result<Option<Vec<u8>>> {
        if !self.tried_fai {
            self.load_fai()?;
        }
        if let Some(fai) = &self.fai {
            let Some(e) = fai.get(name).copied() else {
                return Ok(None);
            };
            let mut f = File::open(&self.path)?;
            f.seek(SeekFrom::Start(e.offset))?;
            let lb = e.line_bases.max(1);
            let span = (e.len / lb) * e.line_width + e.len % lb;
            let mut buf = Vec::with_capacity(span as usize);
            f.take(span).read_to_end(&mut buf)?;
            let seq = clean(buf);
            if seq.len() as u64 != e.len {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    FaiError::Length {
                        path: self.path.clone(),
                        sn: String::from_utf8_lossy(name).into_owned(),
                        read: seq.len() as u64,
                        len: e.len,
                    },
                ));
            }
            return Ok(Some(seq));
        }
        if self.all.is_none() {
            let mut all = HashMap::new();
            let r = BufReader::new(File::open(&self.path)?);
            let mut cur: Option<(Vec<u8>, Vec<u8>)> = None;
            for line in r.split(b'\n') {
                let line = line?;
                if let Some(def) = line.strip_prefix(b">") {
                    if let Some((n, s)) = cur.take() {
                        all.entry(n).or_insert(s);
                    }
                    let n = def
                        .split(|c| c.is_ascii_whitespace())
                        .next()
                        .unwrap_or(b"")
                        .to_vec();
                    cur = Some((n, Vec::new()));
                } else if let Some((_, s)) = cur.as_mut() {
                    s.extend_from_slice(&line);
                }
            }
            if let Some((n, s)) = cur.take() {
                all.entry(n).or_insert(s);
            }
            self.all = Some(all);
        }
        Ok(self.all.as_ref().and_then(|a| a.get(name).cloned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_md5_skips_other_bytes_and_upper_cases_in_every_chunk() {
        // Three 1 MiB chunks: all graphic and mixed case; with spaces and
        // newlines; all graphic upper case.
        let mut seq: Vec<u8> = b"acgtNACGTn"
            .iter()
            .copied()
            .cycle()
            .take(1 << 20)
            .collect();
        seq.extend(b"AC gt\nN\r".iter().copied().cycle().take(1 << 20));
        seq.extend(b"ACGTN".iter().copied().cycle().take(1 << 20));
        let plain: Vec<u8> = seq
            .iter()
            .filter(|b| b.is_ascii_graphic())
            .map(u8::to_ascii_uppercase)
            .collect();
        assert_eq!(normalized_md5_hex(&seq), md5_hex(&plain));
        assert_ne!(normalized_md5_hex(&seq), md5_hex(&seq));
    }

    #[test]
    fn paths_expand_as_htslib_does() {
        let m5 = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            expand_path("/c/%2s/%2s/%s", m5),
            "/c/01/23/456789abcdef0123456789abcdef"
        );
        assert_eq!(expand_path("/c", m5), format!("/c/{m5}"));
        assert_eq!(expand_path("/c/%s.fa", m5), format!("/c/{m5}.fa"));
    }

    #[test]
    fn path_lists_keep_urls_whole() {
        assert_eq!(
            split_path_list("/a/%s:https://x.org/md5/%s:/b"),
            vec!["/a/%s", "https://x.org/md5/%s", "/b"]
        );
    }

    #[test]
    fn md5_of_a_known_sequence() {
        // `printf ACGT | md5sum`
        assert_eq!(md5_hex(b"ACGT"), "f1f8f4bf413b16ad135722aa4591043e");
    }

    fn header(sq: &str) -> sam::Header {
        format!("@HD\tVN:1.6\n{sq}\n").parse().expect("header")
    }

    /// A repository that serves any of the header's references.
    fn repository(src: &RefSource, h: &sam::Header) -> fasta::Repository {
        src.references(h, RefHolding::InUse, M5Mismatch::Refuse)
            .lease()
            .repository(None)
    }

    /// Four references `c0`..`c3` of `len` bases each in `r.fa` (with a
    /// `.fai`), their header with M5s, and a source for them.
    fn four_references(dir: &Path, len: usize) -> (sam::Header, RefSource) {
        let fa = dir.join("r.fa");
        let mut text = String::new();
        let mut fai = String::new();
        let mut sq = Vec::new();
        for k in 0..4 {
            let seq: String = (0..len)
                .map(|i| b"ACGT"[(i * (k + 1)) % 4] as char)
                .collect();
            let offset = text.len() + format!(">c{k}\n").len();
            text.push_str(&format!(">c{k}\n{seq}\n"));
            fai.push_str(&format!("c{k}\t{len}\t{offset}\t{len}\t{}\n", len + 1));
            sq.push(format!(
                "@SQ\tSN:c{k}\tLN:{len}\tM5:{}",
                md5_hex(seq.as_bytes())
            ));
        }
        std::fs::write(&fa, text).expect("fa");
        std::fs::write(dir.join("r.fa.fai"), fai).expect("fai");
        let src = RefSource {
            fasta: Some(fa),
            ..Default::default()
        };
        (header(&sq.join("\n")), src)
    }

    #[test]
    fn references_in_use_are_shared_and_unused_ones_evicted() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 1000);
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Refuse);
        let get = |lease: &mut Lease, k: usize| {
            let seq = lease.sequence(k).expect("found");
            assert_eq!(seq.len(), 1000);
        };
        // Two jobs on c0 at once, then more after them: loaded once.
        let mut a = refs.lease();
        let mut b = refs.lease();
        get(&mut a, 0);
        get(&mut b, 0);
        let held = a.repository(Some(0));
        assert_eq!(held.len(), 1, "a reference's repository holds it alone");
        drop((a, b));
        let mut c = refs.lease();
        get(&mut c, 0);
        drop(c);
        assert_eq!(src.loads(), 1);
        // c1 then c2 with no job between: c0 goes (KEPT_UNUSED is 1), c1
        // is kept while c2's job runs.
        for k in [1, 2] {
            let mut l = refs.lease();
            get(&mut l, k);
        }
        assert_eq!(src.loads(), 3);
        let mut l = refs.lease();
        get(&mut l, 2);
        assert_eq!(src.loads(), 3, "the reference used last is kept");
        get(&mut l, 0);
        assert_eq!(src.loads(), 4, "an evicted reference is loaded again");
        drop(l);
        // What was evicted is freed once no job holds it.
        let s = refs.slots.lock().expect("lock");
        assert_eq!(s.held.len(), KEPT_UNUSED);
    }

    #[test]
    fn a_slice_of_several_references_gets_copies_of_the_shared_ones() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 500);
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Refuse);
        let mut one = refs.lease();
        let c1 = one.sequence(1).expect("c1");
        let mut job = refs.lease();
        let several = job.repository(None);
        let a = several.get(b"c1").expect("some").expect("c1");
        let b = several.get(b"c3").expect("some").expect("c3");
        assert_eq!(*a, *c1);
        assert_eq!(b.len(), 500);
        assert_eq!(
            src.loads(),
            2,
            "c1 copied from the shared one, c3 loaded once"
        );
        // An @SQ's M5 still checks a reference loaded again.
        drop((one, job, several, a, b, c1));
        let e = repository(
            &src,
            &header("@SQ\tSN:c2\tLN:500\tM5:00000000000000000000000000000000"),
        )
        .get(b"c2")
        .expect("some")
        .unwrap_err()
        .to_string();
        assert!(e.contains("MD5"), "{e}");
    }

    #[test]
    fn references_inside_a_slice_span_are_loaded_for_it_alone() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 300);
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Refuse);
        let mut job = refs.lease();
        let repo = job.repository_between(Some((0, 3)));
        for name in [b"c0", b"c1", b"c2", b"c3"] {
            repo.get(name).expect("some").expect("found");
        }
        assert_eq!(src.loads(), 4);
        {
            let s = refs.slots.lock().expect("lock");
            let mut shared: Vec<_> = s.held.keys().copied().collect();
            shared.sort_unstable();
            assert_eq!(shared, vec![0, 3], "only the span's ends are shared");
        }
        // The next slice goes on with c3: no reload.
        drop((repo, job));
        let mut next = refs.lease();
        next.sequence(3).expect("c3");
        assert_eq!(src.loads(), 4);
    }

    #[test]
    fn holding_all_keeps_every_reference() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 100);
        let refs = src.references(&h, RefHolding::All, M5Mismatch::Refuse);
        for _ in 0..2 {
            for k in 0..4 {
                let mut l = refs.lease();
                l.sequence(k).expect("found");
            }
        }
        assert_eq!(src.loads(), 4);
    }

    #[test]
    fn charge_counts_running_jobs_kept_and_copied_references() {
        let lengths = [10, 50, 20, 40, 30];
        assert_eq!(RefHolding::All.bytes(&lengths, 2), 150);
        // -@1: one job's two references and one kept (50 + 40 + 30),
        // copies of the two largest (50 + 40), the largest loading (50).
        assert_eq!(RefHolding::InUse.bytes(&lengths, 1), 120 + 90 + 50);
        assert_eq!(RefHolding::InUse.bytes(&lengths, 9), 150 + 90 + 50);
    }

    #[test]
    fn missing_m5_is_the_normalized_md5() {
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">a\nacgtn\n>b\nTT\n").expect("write");
        let h = header("@SQ\tSN:a\tLN:5\n@SQ\tSN:b\tLN:2\tM5:x");
        let src = RefSource {
            fasta: Some(fa),
            ..Default::default()
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .expect("pool");
        let m5 = src
            .references(&h, RefHolding::InUse, M5Mismatch::Refuse)
            .missing_m5(&h, &pool)
            .expect("m5");
        assert_eq!(m5, vec![(0, md5_hex(b"ACGTN"))]);
    }

    #[test]
    fn fasta_without_fai_is_read_whole_and_md5_checked() {
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">chrA desc\nacgt\nAC\n>chrB\nTTTT\n").expect("write");
        let m5 = md5_hex(b"ACGTAC");
        let h = header(&format!(
            "@SQ\tSN:chrA\tLN:6\tM5:{m5}\n@SQ\tSN:chrB\tLN:4\tM5:{}",
            "0".repeat(32)
        ));
        let repo = repository(
            &RefSource {
                fasta: Some(fa.clone()),
                ..Default::default()
            },
            &h,
        );
        let a = repo.get(b"chrA").expect("some").expect("found");
        assert_eq!(AsRef::<[u8]>::as_ref(&*a), b"ACGTAC");
        let e = repo.get(b"chrB").expect("some").unwrap_err().to_string();
        assert!(
            e.contains("chrB") && e.contains(&"0".repeat(32)) && e.contains("r.fa"),
            "{e}"
        );
        let e = repo.get(b"chrC").expect("some").unwrap_err().to_string();
        assert!(
            e.contains("not found") && e.contains("no sequence named chrC"),
            "{e}"
        );
    }

    #[test]
    fn reading_takes_a_sequence_other_than_its_m5_and_refuses_it_only_unchecked() {
        // A FASTA holding a piece of the sequence the M5 is of (as test
        // FASTAs often do): reading uses it, each slice's MD5 checks the
        // bases it uses, and a slice without one cannot use it.
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">chrA\nACGTACGTAA\n").expect("write");
        let m5 = md5_hex(b"ACGTACGTAAGGGG");
        let h = header(&format!("@SQ\tSN:chrA\tLN:14\tM5:{m5}"));
        let src = RefSource {
            fasta: Some(fa.clone()),
            ..Default::default()
        };
        let file: Arc<str> = "in.cram".into();
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Warn { file });
        let mut lease = refs.lease();
        let seq = lease.sequence(0).expect("read on");
        assert_eq!(AsRef::<[u8]>::as_ref(&*seq), b"ACGTACGTAA");
        // A slice over bases 3..=6 written against these bases is read.
        let right: [u8; 16] = Md5::digest(b"GTAC").into();
        lease
            .check_slice(0, 2, 4, &right, None)
            .expect("slice MD5 matches");
        // One written against other bases is refused by its MD5.
        let wrong: [u8; 16] = Md5::digest(b"GTAA").into();
        let e = lease
            .check_slice(0, 2, 4, &wrong, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MD5 checksum reference mismatch at chrA:3-6"),
            "{e}"
        );
        // A slice with no MD5 (all zero, or several references) is refused
        // naming the reference, both MD5s and the FASTA.
        for (span, what) in [
            (
                Some((3, 6)),
                "the slice at chrA:3-6 (its reference MD5 is all zero)",
            ),
            (None, "a multi-reference slice"),
        ] {
            let e = lease.refuse_unchecked(0, span).unwrap_err().to_string();
            assert!(
                e.contains(what)
                    && e.contains(&m5)
                    && e.contains(&md5_hex(b"ACGTACGTAA"))
                    && e.contains("r.fa"),
                "{e}"
            );
        }
        // Writing against it stays an error.
        let e = repository(&src, &h)
            .get(b"chrA")
            .expect("some")
            .unwrap_err()
            .to_string();
        assert!(e.contains("but the header's @SQ M5 is"), "{e}");
        // A sequence that matches its M5 is never refused.
        let h = header(&format!(
            "@SQ\tSN:chrA\tLN:10\tM5:{}",
            md5_hex(b"ACGTACGTAA")
        ));
        let file: Arc<str> = "in.cram".into();
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Warn { file });
        let mut lease = refs.lease();
        lease.sequence(0).expect("found");
        lease.refuse_unchecked(0, None).expect("nothing to refuse");
    }

    #[test]
    fn ref_path_pattern_finds_the_sequence_by_m5() {
        let dir = tempfile::tempdir().expect("tmp");
        let m5 = md5_hex(b"GATTACA");
        let sub = dir.path().join(&m5[..2]).join(&m5[2..4]);
        std::fs::create_dir_all(&sub).expect("mkdir");
        std::fs::write(sub.join(&m5[4..]), b"GATTACA").expect("write");
        let h = header(&format!("@SQ\tSN:c1\tLN:7\tM5:{m5}"));
        let src = RefSource {
            fasta: None,
            ref_path: Some(format!("/nonexistent:{}/%2s/%2s/%s", dir.path().display())),
            ..Default::default()
        };
        let repo = repository(&src, &h);
        let c1 = repo.get(b"c1").expect("some").expect("ok");
        assert_eq!(AsRef::<[u8]>::as_ref(&*c1), b"GATTACA");
        // Missing: the message names each place looked at.
        let h = header(&format!("@SQ\tSN:c2\tLN:7\tM5:{}", "ab".repeat(16)));
        let e = repository(&src, &h)
            .get(b"c2")
            .expect("some")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/abab") && e.contains("REF_CACHE not set"),
            "{e}"
        );
    }

    #[test]
    fn fai_is_used_when_present() {
        let dir = tempfile::tempdir().expect("tmp");
        let fa = dir.path().join("r.fa");
        std::fs::write(&fa, ">x\nACG\nTA\n>y\nGG\n").expect("write");
        std::fs::write(
            dir.path().join("r.fa.fai"),
            "x\t5\t3\t3\t4\ny\t2\t13\t2\t3\n",
        )
        .expect("fai");
        let mut f = FastaFile::new(fa);
        assert_eq!(f.get(b"x").expect("ok").expect("x"), b"ACGTA");
        assert_eq!(f.get(b"y").expect("ok").expect("y"), b"GG");
        assert!(f.fai.is_some());
    }

    /// The typed error an I/O error carries, if it is a `T`.
    fn typed<T: std::error::Error + 'static>(e: &io::Error) -> Option<&T> {
        e.get_ref().and_then(|e| e.downcast_ref::<T>())
    }

    #[test]
    fn a_reference_id_not_in_the_header_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 100);
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Refuse);
        let e = refs.lease().sequence(7).expect_err("no id 7");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(matches!(
            typed::<ReferenceError>(&e),
            Some(ReferenceError::UnknownId { id: 7 })
        ));
        assert_eq!(e.to_string(), "reference id 7 is not in the header");
        // The decoder takes it out of the io::Error whole.
        assert!(matches!(
            crate::error::take_reference_error(e),
            Ok(ReferenceError::UnknownId { id: 7 })
        ));
    }

    #[test]
    fn a_reference_not_available_is_a_typed_error_naming_it() {
        let e = unavailable(b"chr2");
        assert!(matches!(
            typed::<ReferenceError>(&e),
            Some(ReferenceError::Unavailable { sn }) if sn == "chr2"
        ));
        assert_eq!(e.to_string(), "reference chr2 is not available");
    }

    /// `r.fa` holding `>x ACGTA` in `dir`, with `fai` as its index.
    fn fasta_with_fai(dir: &Path, fai: &str) -> FastaFile {
        let fa = dir.join("r.fa");
        std::fs::write(&fa, ">x\nACG\nTA\n").expect("write");
        std::fs::write(dir.join("r.fa.fai"), fai).expect("fai");
        FastaFile::new(fa)
    }

    #[test]
    fn a_fai_column_that_is_not_a_number_keeps_the_parse_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let fai_path = dir.path().join("r.fa.fai");
        let mut f = fasta_with_fai(dir.path(), "x\t5\t3\t3\t4\ny\t2\tabc\t2\t3\n");
        let e = f.get(b"x").expect_err("line 2 is bad");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let Some(FaiError::NotANumber {
            path,
            line,
            column,
            text,
            source,
        }) = typed::<FaiError>(&e)
        else {
            panic!("typed: {e:?}")
        };
        assert_eq!(
            (path, *line, *column, text.as_str()),
            (&fai_path, 2, 3, "abc")
        );
        assert_eq!(source, &"abc".parse::<u64>().expect_err("not a number"));
        assert_eq!(
            e.to_string(),
            format!(
                "{}: line 2 is not a .fai line: column 3 (\"abc\") is not a number: \
                 invalid digit found in string",
                fai_path.display()
            )
        );
        let inner = typed::<FaiError>(&e).expect("typed");
        let source = std::error::Error::source(inner).expect("source kept");
        assert!(source.downcast_ref::<std::num::ParseIntError>().is_some());
    }

    #[test]
    fn a_fai_line_short_of_columns_names_the_file_line_and_column() {
        let dir = tempfile::tempdir().expect("tmp");
        let fai_path = dir.path().join("r.fa.fai");
        let mut f = fasta_with_fai(dir.path(), "x\t5\t3\n");
        let e = f.get(b"x").expect_err("short line");
        assert!(matches!(
            typed::<FaiError>(&e),
            Some(FaiError::MissingColumn { line: 1, column: 4, path }) if *path == fai_path
        ));
        assert_eq!(
            e.to_string(),
            format!(
                "{}: line 1 is not a .fai line: it has no column 4",
                fai_path.display()
            )
        );
    }

    #[test]
    fn a_fai_length_the_file_does_not_hold_is_a_typed_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut f = fasta_with_fai(dir.path(), "x\t50\t3\t3\t4\n");
        let e = f.get(b"x").expect_err("too short");
        assert!(matches!(
            typed::<FaiError>(&e),
            Some(FaiError::Length { sn, read: 5, len: 50, .. }) if sn == "x"
        ));
        assert_eq!(
            e.to_string(),
            format!(
                "{}: 5 bases read for x, its .fai says 50",
                dir.path().join("r.fa").display()
            )
        );
    }

    /// Through the reference lookup, a bad `.fai` is the source of the
    /// reference's read error, typed at both levels.
    #[test]
    fn a_bad_fai_is_the_source_of_the_reference_read_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let (h, src) = four_references(dir.path(), 100);
        std::fs::write(dir.path().join("r.fa.fai"), "c0\tlong\n").expect("fai");
        let refs = src.references(&h, RefHolding::InUse, M5Mismatch::Refuse);
        let e = refs.lease().sequence(0).expect_err("bad fai");
        let Some(ReferenceError::Read { sn, source, .. }) = typed::<ReferenceError>(&e) else {
            panic!("typed: {e:?}")
        };
        assert_eq!(sn, "c0");
        assert!(matches!(
            typed::<FaiError>(source),
            Some(FaiError::NotANumber {
                line: 1,
                column: 2,
                ..
            })
        ));
        let text = e.to_string();
        assert!(
            text.contains("r.fa.fai: line 1 is not a .fai line"),
            "{text}"
        );
    }
}
