//! A command's private copy of a run's workspace: materialized from the store's files
//! into a fresh directory, handed to the sandbox as `/workspace`, and afterwards compared
//! with what was materialized to find the change set to promote. The copy is the private
//! upper layer: nothing the command does reaches the workspace unless its change set is
//! promoted, and the directory is removed when the [`Workdir`] is dropped (a cancelled or
//! timed-out command leaves nothing behind).
//!
//! The comparison never follows a link: a symlink, FIFO, socket or device the command
//! left is refused (reported, not promoted), as are names the workspace would not take
//! (`baton_core::workspace::path`) and files over the size limit.

use baton_core::workspace::path;
use baton_events::FileChangeKind;
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The user a sandbox runs as on the host, who must own the copy it writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// One path of a change set, with its new content (none when removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub kind: FileChangeKind,
    pub content: Option<Vec<u8>>,
}

/// Something the command left that is not promoted, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub path: String,
    pub why: String,
}

/// What a command changed, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
    pub refused: Vec<Refused>,
}

impl ChangeSet {
    /// One line for the tool's output: files added, modified, removed, refused.
    pub fn summary(&self) -> String {
        let counts = baton_core::workspace::promote::tally(self.changes.iter().map(|c| c.kind));
        match self.refused_line() {
            Some(refused) => format!("{counts}; {refused}"),
            None => counts,
        }
    }

    /// `not kept: <path> (<why>), …`, when the command left anything refused.
    pub fn refused_line(&self) -> Option<String> {
        if self.refused.is_empty() {
            return None;
        }
        let names: Vec<String> = self
            .refused
            .iter()
            .map(|r| format!("{} ({})", r.path, r.why))
            .collect();
        Some(format!("not kept: {}", names.join(", ")))
    }
}

/// A fresh copy of a workspace on disk.
#[derive(Debug)]
pub struct Workdir {
    root: PathBuf,
    /// What was materialized: path to content.
    manifest: BTreeMap<String, Vec<u8>>,
}

impl Workdir {
    /// Writes `files` (normalised paths and their contents) into a new directory under
    /// `parent`, owned by `owner` when given (the sandbox's user when it is not ours).
    pub fn materialize(
        parent: &Path,
        files: Vec<(String, Vec<u8>)>,
        owner: Option<Owner>,
    ) -> io::Result<Self> {
        let root = parent.join(format!("ws-{}", uuid::Uuid::new_v4().simple()));
        fs::create_dir(&root)?;
        let dir = Self {
            root,
            manifest: BTreeMap::new(),
        };
        fs::set_permissions(&dir.root, fs::Permissions::from_mode(0o700))?;
        chown(&dir.root, owner)?;
        let mut dir = dir;
        for (name, content) in files {
            let name = path::normalize(&name)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let target = dir.root.join(&name);
            if let Some(folder) = target.parent() {
                create_dirs(&dir.root, folder, owner)?;
            }
            fs::write(&target, &content)?;
            chown(&target, owner)?;
            dir.manifest.insert(name, content);
        }
        Ok(dir)
    }

    /// The directory the sandbox binds as its workspace.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// What the directory holds now against what was materialized: files added,
    /// modified and removed, each file at most `max_file_bytes`, at most `max_files` of
    /// them (beyond that the rest is refused).
    pub fn changes(&self, max_file_bytes: u64, max_files: usize) -> io::Result<ChangeSet> {
        let mut found = BTreeMap::new();
        let mut set = ChangeSet::default();
        walk(&self.root, "", 0, &mut |name, meta, full| {
            if meta.is_dir() {
                return Ok(());
            }
            if let Err(e) = path::normalize(name) {
                set.refused.push(refused(name, &e.to_string()));
                return Ok(());
            }
            let kind = meta.file_type();
            if kind.is_symlink() {
                set.refused.push(refused(name, "a symbolic link"));
            } else if !kind.is_file() {
                set.refused.push(refused(name, "not a regular file"));
            } else if meta.len() > max_file_bytes {
                set.refused.push(refused(
                    name,
                    &format!("larger than {max_file_bytes} bytes"),
                ));
            } else if found.len() >= max_files {
                set.refused.push(refused(name, "over the run's file quota"));
            } else {
                found.insert(name.to_string(), fs::read(full)?);
            }
            Ok(())
        })?;
        for (name, before) in &self.manifest {
            match found.remove(name) {
                Some(now) if &now == before => {}
                Some(now) => set.changes.push(Change {
                    path: name.clone(),
                    kind: FileChangeKind::Modified,
                    content: Some(now),
                }),
                // A path the command turned into something refused keeps its file.
                None if set.refused.iter().any(|r| &r.path == name) => {}
                None => set.changes.push(Change {
                    path: name.clone(),
                    kind: FileChangeKind::Removed,
                    content: None,
                }),
            }
        }
        set.changes
            .extend(found.into_iter().map(|(name, content)| Change {
                path: name,
                kind: FileChangeKind::Added,
                content: Some(content),
            }));
        set.changes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(set)
    }
}

impl Drop for Workdir {
    /// Removes the copy, first making every directory writable again (a command may
    /// have taken the permissions away).
    fn drop(&mut self) {
        let _ = walk(&self.root, "", 0, &mut |_, meta, full| {
            if meta.is_dir() {
                let _ = fs::set_permissions(full, fs::Permissions::from_mode(0o700));
            }
            Ok(())
        });
        if let Err(e) = fs::remove_dir_all(&self.root) {
            tracing::warn!(dir = %self.root.display(), error = %e, "could not remove a command's workspace copy");
        }
    }
}

fn refused(name: &str, why: &str) -> Refused {
    Refused {
        path: name.escape_debug().to_string(),
        why: why.to_string(),
    }
}

/// Calls `visit(relative name, metadata, full path)` for every entry under `dir` but
/// directories, depth first, never following a link. Unreadable directories are made
/// readable first (the command may have locked them).
fn walk(
    dir: &Path,
    prefix: &str,
    depth: usize,
    visit: &mut dyn FnMut(&str, &fs::Metadata, &Path) -> io::Result<()>,
) -> io::Result<()> {
    if depth > path::MAX_DEPTH {
        return Ok(());
    }
    let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
    let mut entries: Vec<_> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let full = entry.path();
        let meta = fs::symlink_metadata(&full)?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let name = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if meta.is_dir() {
            visit(&name, &meta, &full)?;
            walk(&full, &name, depth + 1, visit)?;
        } else {
            visit(&name, &meta, &full)?;
        }
    }
    Ok(())
}

/// Creates `folder` (under `root`) and the directories above it, owned by `owner`.
fn create_dirs(root: &Path, folder: &Path, owner: Option<Owner>) -> io::Result<()> {
    if folder == root || folder.is_dir() {
        return Ok(());
    }
    if let Some(up) = folder.parent() {
        create_dirs(root, up, owner)?;
    }
    fs::create_dir(folder)?;
    chown(folder, owner)
}

fn chown(path: &Path, owner: Option<Owner>) -> io::Result<()> {
    match owner {
        Some(o) => std::os::unix::fs::chown(path, Some(o.uid), Some(o.gid)),
        None => Ok(()),
    }
}

/// The user this process runs as (the owner of `/proc/self`).
pub(crate) fn current_uid() -> io::Result<u32> {
    Ok(fs::metadata("/proc/self")?.uid())
}
