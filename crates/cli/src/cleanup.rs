//! Nothing left behind: every run works in its own private temp directory
//! (mkdtemp, so two runs sharing `-T` never see each other's files), writes
//! its output under a temporary name beside the destination, and removes
//! both on success, on every error, and on SIGINT/SIGTERM/SIGHUP (exiting
//! 130/143/129). Only SIGKILL can leave a directory, and because each run's
//! directory has a unique name the next run is not disturbed by it.
//!
//! Signals are handled without async-signal-unsafe work in a handler: they
//! are blocked in every thread (the mask is inherited by threads created
//! after `SignalGuard::install`), and one dedicated thread waits for them with
//! `sigwait`, removes what is registered, and exits the process.

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

/// Blocks SIGINT/SIGTERM/SIGHUP in this thread (and so in every thread it
/// creates afterwards) and starts the thread that cleans up on them.
pub struct SignalGuard;

const HANDLED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

impl SignalGuard {
    /// Call before any other thread is created.
    pub fn install(debris: Debris) -> io::Result<SignalGuard> {
        // SAFETY: plain libc calls on a zeroed, locally owned sigset_t.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in HANDLED {
                libc::sigaddset(&mut set, s);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            set
        };
        let set = SigSet(set);
        std::thread::Builder::new().name("alnsort-signals".into()).spawn(move || {
            let set = set;
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is a valid initialised sigset_t owned by this thread.
                let r = unsafe { libc::sigwait(&set.0, &mut sig) };
                if r == 0 && HANDLED.contains(&sig) {
                    debris.remove_all();
                    crate::progress::clear_for_exit();
                    eprintln!("alnsort: interrupted by signal {sig}; temporary files and partial output removed");
                    // SAFETY: terminating the process; _exit runs no destructors
                    // that could race with the threads still working.
                    unsafe { libc::_exit(128 + sig) };
                }
            }
        })?;
        Ok(SignalGuard)
    }
}

struct SigSet(libc::sigset_t);
// SAFETY: a sigset_t is plain data; it is moved to one thread and only read there.
unsafe impl Send for SigSet {}

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
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!("alnsort-cleanup-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
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
            std::fs::read_dir(&base)
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
