//! An exclusive lock on a file, so two processes never download the same model at once.

use std::fs::{File, OpenOptions};
use std::path::Path;

use fs4::fs_std::FileExt;

use crate::error::ModelError;

/// Held until dropped; the operating system releases it if the process dies.
#[derive(Debug)]
pub(crate) struct FileLock {
    file: File,
}

impl FileLock {
    /// Waits for the exclusive lock on `path` (created if missing).
    pub(crate) fn acquire(path: &Path) -> Result<Self, ModelError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| ModelError::io(path, e))?;
        FileExt::lock_exclusive(&file).map_err(|e| ModelError::io(path, e))?;
        Ok(Self { file })
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // The lock file stays: deleting it would let a waiter lock a file nobody else sees.
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
}
