//! The embedded tier's hold on its data directory: one `baton serve` at a time. The lock
//! (on `<data_dir>/baton.lock`) is the operating system's and goes with the process, so a
//! process that takes it knows whoever held it before is gone, killed or crashed, and that
//! every lease in the database was that process's: its runs can be adopted at once rather
//! than when their leases lapse.
//!
//! The directory holds conversations and keys in clear: Baton creates it, and every
//! directory it makes inside, readable by its own user alone (0700), and its files 0600
//! ([`create_private_dir`], [`private_file`]).

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
        create_private_dir(dir)
            .with_context(|| format!("creating the data directory {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let file = private_file(&path)?;
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

/// The mode of the files Baton keeps in a private directory.
const PRIVATE_FILE: u32 = 0o600;

/// Creates `dir` and its missing parents, each readable by this user alone (0700). An
/// existing directory keeps its mode: it is the operator's.
#[cfg(unix)]
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// Makes sure the file at `path` exists and only this user can read it (0600): creates it
/// empty when missing, and takes group and other access away when an earlier version left
/// it readable. (SQLite gives its `-wal` and `-shm` files the mode of the database file.)
/// Returns the file, open for writing.
pub fn private_file(path: &Path) -> anyhow::Result<File> {
    let mut options = File::options();
    options.create(true).truncate(false).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, PRIVATE_FILE);
    let file = options
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file
            .metadata()
            .with_context(|| format!("reading the mode of {}", path.display()))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(mode & 0o700))
                .with_context(|| format!("making {} private", path.display()))?;
            tracing::info!(path = %path.display(), "made the file readable by its owner only");
        }
    }
    Ok(file)
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
