//! Nothing left behind: every run works in its own private temp directory
//! (mkdtemp, so two runs sharing `-T` never see each other's files), writes
//! its output under a temporary name beside the destination, and removes
//! both on success, on every error, and on SIGINT/SIGTERM/SIGHUP (exiting
//! 130/143/129). Only SIGKILL can leave a directory, and because each run's
//! directory has a unique name the next run is not disturbed by it.
//!
//! Signals are the program's business, not the library's: this module
//! keeps the list of what a run must remove ([`Debris`]), and the binary's
//! signal thread (`crates/cli/src/signals.rs`, installed by `alnsort::run`)
//! removes it before it exits; a library call of `run_sort` leaves the
//! caller's signal mask and handlers alone and removes its files itself
//! when it fails.
//!
//! A failed run removes only what it created itself (the registered paths);
//! whatever was at the output or index path before the run is never touched,
//! since the pending files reach their destination only by the final rename.

use crate::error::CreateError;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Paths to remove if the run does not finish: the shared list the signal
/// thread and the error path both read.
#[derive(Default, Clone)]
pub struct Debris {
    inner: Arc<Mutex<Vec<PathBuf>>>,
}

impl Debris {
    pub fn add(&self, p: PathBuf) {
        if let Ok(mut v) = self.inner.lock() {
            v.push(p);
        }
    }

    pub fn forget(&self, p: &Path) {
        if let Ok(mut v) = self.inner.lock() {
            v.retain(|x| x != p);
        }
    }

    /// Removes everything registered (files, or directories recursively).
    /// Errors are ignored: this runs on the way out.
    pub fn remove_all(&self) {
        let paths = match self.inner.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => return,
        };
        for p in paths.iter().rev() {
            remove_path(p);
        }
    }
}

fn remove_path(p: &Path) {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            // A spill may still be creating files while we remove: retry.
            for _ in 0..5 {
                if std::fs::remove_dir_all(p).is_ok() || !p.exists() {
                    break;
                }
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(p);
        }
        Err(_) => {}
    }
}

/// A private directory made with mkdtemp; removed when dropped.
pub struct TempDir {
    path: PathBuf,
    debris: Debris,
}

impl TempDir {
    /// Creates `<parent>/<stem>.XXXXXX` with mode 0700.
    pub fn new(parent: &Path, stem: &str, debris: &Debris) -> io::Result<TempDir> {
        let template = parent.join(format!("{stem}.XXXXXX"));
        let c = CString::new(template.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "temp path contains NUL"))?;
        let mut raw = c.into_bytes_with_nul();
        // SAFETY: `raw` is a NUL-terminated writable buffer ending in XXXXXX,
        // which is what mkdtemp requires; it writes only within it.
        let r = unsafe { libc::mkdtemp(raw.as_mut_ptr() as *mut libc::c_char) };
        if r.is_null() {
            return Err(io::Error::last_os_error());
        }
        raw.pop();
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&raw));
        debris.add(path.clone());
        Ok(TempDir {
            path,
            debris: debris.clone(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        remove_path(&self.path);
        self.debris.forget(&self.path);
    }
}

/// The directory a file at PATH lives in (`.` for a bare name): where its
/// pending file is created.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl CreateError {
    /// Explains SOURCE, the error of creating a file beside DEST.
    pub fn new(what: &'static str, dest: &Path, source: io::Error) -> CreateError {
        let dir = directory_of(dest);
        // The nearest ancestor that exists says why: a missing directory, or
        // a regular file where a directory should be.
        let existing = dir
            .ancestors()
            .find(|a| !a.as_os_str().is_empty() && std::fs::symlink_metadata(a).is_ok());
        let not_dir = existing.filter(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir()));
        let problem = if dest.is_dir() {
            format!("'{}' is a directory", dest.display())
        } else if let Some(f) = not_dir {
            format!("'{}' is not a directory", f.display())
        } else if !dir.is_dir() {
            format!("directory '{}' does not exist", dir.display())
        } else {
            match source.raw_os_error() {
                Some(libc::EROFS) => {
                    format!(
                        "directory '{}' is on a read-only file system",
                        dir.display()
                    )
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    format!(
                        "no permission to create files in directory '{}'",
                        dir.display()
                    )
                }
                _ => format!("in directory '{}'", dir.display()),
            }
        };
        CreateError {
            what,
            dest: dest.to_path_buf(),
            problem,
            source,
        }
    }
}

/// An output file written under a temporary name beside its destination and
/// renamed into place only by `commit`, after the last byte is flushed.
///
/// A destination that exists and is not a regular file (`/dev/null`,
/// `/dev/stdout`, a FIFO, or a symlink to one) is written directly: renaming
/// a temp file over it would replace the device node or the pipe with a
/// regular file (as root, `-o /dev/null` would destroy `/dev/null`). A
/// symlink to a regular file is followed, so the link survives the rename.
pub struct PendingFile {
    pub tmp: PathBuf,
    pub dest: PathBuf,
    debris: Debris,
    committed: bool,
    direct: bool,
}

/// What an output path names: the path to rename onto, and whether it must
/// be written in place instead (it exists and is not a regular file).
pub fn resolve_destination(dest: &Path) -> (PathBuf, bool) {
    match std::fs::metadata(dest) {
        Ok(m) if !m.is_file() => (dest.to_path_buf(), true),
        Ok(_) => (
            std::fs::canonicalize(dest).unwrap_or_else(|_| dest.to_path_buf()),
            false,
        ),
        Err(_) => (dest.to_path_buf(), false),
    }
}

impl PendingFile {
    pub fn create(dest: &Path, debris: &Debris) -> io::Result<(PendingFile, std::fs::File)> {
        let (dest, direct) = resolve_destination(dest);
        if direct {
            let f = std::fs::OpenOptions::new().write(true).open(&dest)?;
            let p = PendingFile {
                tmp: dest.clone(),
                dest,
                debris: debris.clone(),
                committed: true,
                direct: true,
            };
            return Ok((p, f));
        }
        let dir = directory_of(&dest);
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let pid = std::process::id();
        let mut n = 0u32;
        loop {
            let tmp = dir.join(format!(".{name}.alnsort-{pid}-{n}.tmp"));
            // Registered before it exists, so a signal between creating and
            // registering cannot leave it behind.
            debris.add(tmp.clone());
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
            {
                Ok(f) => {
                    return Ok((
                        PendingFile {
                            tmp,
                            dest,
                            debris: debris.clone(),
                            committed: false,
                            direct: false,
                        },
                        f,
                    ));
                }
                Err(e) => {
                    debris.forget(&tmp);
                    if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 {
                        n += 1;
                    } else {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// True when the destination is written in place (a device or a pipe):
    /// there is nothing to rename, and `fsync` does not apply.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Renames the finished file into place.
    pub fn commit(mut self) -> io::Result<()> {
        if self.direct {
            return Ok(());
        }
        std::fs::rename(&self.tmp, &self.dest)?;
        // rename(2) does nothing when both names are links to one file
        // (a resumed output whose file was linked in place before): the
        // temporary name then goes by itself.
        if std::fs::symlink_metadata(&self.tmp).is_ok() {
            std::fs::remove_file(&self.tmp)?;
        }
        self.debris.forget(&self.tmp);
        self.committed = true;
        Ok(())
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
            self.debris.forget(&self.tmp);
        }
    }
}

/// A report's destination (`--stats-json`, `--mqc`), created before the run starts and
/// committed after the output: a temporary file beside the destination
/// (registered for removal on error and on signals), so a failed run leaves
/// neither a new file nor a changed old one.
pub struct StatsFile {
    pending: PendingFile,
    file: std::fs::File,
}

impl StatsFile {
    pub fn create(dest: &Path, debris: &Debris) -> std::io::Result<StatsFile> {
        let (pending, file) = PendingFile::create(dest, debris)?;
        Ok(StatsFile { pending, file })
    }

    /// Writes `text` (a rendering of the report) and renames the file into
    /// place.
    pub fn write(mut self, text: &str) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self.file, text.as_bytes())?;
        if !self.pending.is_direct() {
            self.file.sync_all()?;
        }
        drop(self.file);
        self.pending.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A private directory under the system temp dir, removed (with what
    /// the test left in it) when the returned guard is dropped.
    struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn scratch() -> Scratch {
        let d = TempDir::new(
            &std::env::temp_dir(),
            "alnsort-cleanup-test",
            &Debris::default(),
        )
        .unwrap();
        let p = d.path().to_path_buf();
        // Keep the directory: the guard removes it at the end of the test.
        std::mem::forget(d);
        Scratch(p)
    }

    #[test]
    fn tempdirs_are_private_and_removed() {
        let base = scratch();
        let debris = Debris::default();
        let a = TempDir::new(&base, "alnsort", &debris).unwrap();
        let b = TempDir::new(&base, "alnsort", &debris).unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path().join("run.0"), b"x").unwrap();
        let pa = a.path().to_path_buf();
        drop(a);
        assert!(!pa.exists());
        let pb = b.path().to_path_buf();
        debris.remove_all();
        assert!(!pb.exists());
        drop(b);
    }

    #[test]
    fn create_error_says_what_is_wrong_with_the_directory() {
        let base = scratch();
        let missing = base.join("no-such-dir").join("out.bam");
        let e = PendingFile::create(&missing, &Debris::default())
            .err()
            .unwrap();
        let msg = CreateError::new("output", &missing, e).to_string();
        assert_eq!(
            msg,
            format!(
                "cannot create output '{}': directory '{}' does not exist",
                missing.display(),
                base.join("no-such-dir").display()
            )
        );
        let file = base.join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let under_file = file.join("sub").join("out.bam");
        let e = PendingFile::create(&under_file, &Debris::default())
            .err()
            .unwrap();
        let err = CreateError::new("index", &under_file, e);
        assert!(
            err.to_string()
                .ends_with(&format!("'{}' is not a directory", file.display())),
            "{err}"
        );
        let source = std::error::Error::source(&err).unwrap();
        assert!(
            source.downcast_ref::<io::Error>().is_some(),
            "the cause is kept"
        );
    }

    #[test]
    fn pending_file_only_appears_on_commit() {
        let base = scratch();
        let debris = Debris::default();
        let dest = base.join("out.bam");
        let _ = std::fs::remove_file(&dest);
        let (p, f) = PendingFile::create(&dest, &debris).unwrap();
        drop(f);
        let tmp = p.tmp.clone();
        assert!(tmp.exists() && !dest.exists());
        drop(p);
        assert!(
            !tmp.exists() && !dest.exists(),
            "dropped without commit leaves nothing"
        );
        let (p, f) = PendingFile::create(&dest, &debris).unwrap();
        drop(f);
        p.commit().unwrap();
        assert!(dest.exists());
    }

    #[test]
    fn devices_and_pipes_are_written_in_place() {
        let base = scratch();
        let debris = Debris::default();
        // A symlink to /dev/null must stay a symlink to /dev/null.
        let link = base.join("null-link.bam");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        let (p, mut f) = PendingFile::create(&link, &debris).unwrap();
        assert!(p.is_direct());
        std::io::Write::write_all(&mut f, b"data").unwrap();
        p.commit().unwrap();
        let m = std::fs::symlink_metadata(&link).unwrap();
        assert!(m.file_type().is_symlink(), "the link was replaced");
        assert!(!std::fs::metadata(&link).unwrap().is_file());
        assert_eq!(
            std::fs::read_dir(&*base)
                .unwrap()
                .filter(|e| e
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains("null-link.bam.alnsort"))
                .count(),
            0
        );
    }

    #[test]
    fn symlink_to_regular_file_is_followed() {
        let base = scratch();
        let debris = Debris::default();
        let target = base.join("target.bam");
        let link = base.join("link.bam");
        let _ = std::fs::remove_file(&link);
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (p, mut f) = PendingFile::create(&link, &debris).unwrap();
        assert!(!p.is_direct());
        std::io::Write::write_all(&mut f, b"new").unwrap();
        drop(f);
        p.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
    }
}
