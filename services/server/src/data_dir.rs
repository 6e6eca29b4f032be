//! The embedded tier's hold on its data directory: one `baton serve` at a time. The lock
//! (on `<data_dir>/baton.lock`) is the operating system's and goes with the process, so a
//! process that takes it knows whoever held it before is gone, killed or crashed, and that
//! every lease in the database was that process's: its runs can be adopted at once rather
//! than when their leases lapse.

use anyhow::{Context, bail};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "baton.lock";

/// The lock, held until dropped (or the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the lock of `dir`, creating the directory if needed; refuses when another
    /// process holds it.
    pub fn take(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file, path }),
            Err(TryLockError::WouldBlock) => bail!(
                "another baton process serves the data directory {} (it holds {}); stop it \
                 first, or give this one another data_dir",
                dir.display(),
                path.display()
            ),
            Err(TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DataDirLock::take(dir.path()).expect("the first takes it");
        let refused = DataDirLock::take(dir.path()).expect_err("held");
        assert!(
            refused.to_string().contains("another baton process"),
            "{refused}"
        );
        drop(first);
        assert!(DataDirLock::take(dir.path()).is_ok(), "free again");
    }
}
