//! An exclusive lock on a file, so two processes never download the same model at once.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use fs4::fs_std::FileExt;

use crate::error::ModelError;

/// Held until dropped; the operating system releases it if the process dies.
///
/// The lock file is removed when the lock is released, so they do not pile up. That is safe
/// because a holder checks, once it has the lock, that its file is still the one at the path:
/// a waiter that opened the file before the previous holder removed it finds it gone, and
/// starts over on a fresh file.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Waits for the exclusive lock on `path` (created if missing).
    pub(crate) fn acquire(path: &Path) -> Result<Self, ModelError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        }
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)
                .map_err(|e| ModelError::io(path, e))?;
            FileExt::lock_exclusive(&file).map_err(|e| ModelError::io(path, e))?;
            if still_at(&file, path) {
                return Ok(Self {
                    file,
                    path: path.to_path_buf(),
                });
            }
        }
    }
}

/// Whether `file` is still the file at `path` (not removed or replaced since it was opened).
#[cfg(unix)]
fn still_at(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(open), Ok(named)) => open.ino() == named.ino() && open.dev() == named.dev(),
        _ => false,
    }
}

/// Elsewhere lock files are never removed, so the file is always the one at the path.
#[cfg(not(unix))]
fn still_at(_file: &File, _path: &Path) -> bool {
    true
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Removed while still held (see the type's docs); elsewhere than Unix it stays.
        #[cfg(unix)]
        let _ = std::fs::remove_file(&self.path);
        // Closing the file releases the lock too, so a failed unlock loses nothing.
        let _ = FileExt::unlock(&self.file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tmp/x.lock");
        let first = FileLock::acquire(&path).unwrap();
        let released = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&released);
        let waiter = std::thread::spawn(move || {
            let _second = FileLock::acquire(&path).unwrap();
            seen.load(Ordering::SeqCst)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        released.store(true, Ordering::SeqCst);
        drop(first);
        assert!(
            waiter.join().unwrap(),
            "the second lock was taken while the first was held"
        );
    }

    #[test]
    fn issue_15_lock_files_do_not_pile_up_and_still_exclude() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tmp/y.lock");
        for _ in 0..3 {
            drop(FileLock::acquire(&path).unwrap());
        }
        assert!(!path.exists(), "the lock file is removed on release");
        // Many threads taking turns: never two holders at once.
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (path, held) = (path.clone(), Arc::clone(&held));
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let _lock = FileLock::acquire(&path).unwrap();
                        assert_eq!(held.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                        std::thread::yield_now();
                        held.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(!path.exists());
    }
}
