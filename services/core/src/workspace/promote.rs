//! Promoting a command's change set into the workspace: the command saw the workspace at
//! version `base`; by the time its result is recorded, a member may have changed some of
//! the same paths. A path nobody else changed since `base` takes the command's change; a
//! path changed meanwhile is never clobbered: the command's content is kept beside it as
//! `<path>.conflict-<n>`, and its removal is dropped (the other writer's file stays).
//! Pure: the engine reads the paths' current state, resolves, and appends the result
//! with the command's `tool.result`, at the run version it read.

use baton_events::{FileChange, FileChangeKind};
use std::collections::{BTreeMap, BTreeSet};

/// A path as the workspace holds it now: the stream version of its last change and its
/// content (none when that change removed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    pub version: i64,
    pub sha256: Option<String>,
}

/// A change set as it lands, and what it could not apply as proposed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The changes to append, in path order.
    pub changes: Vec<FileChange>,
    /// `(path, copy)`: the command's content for `path` kept as `copy`.
    pub conflicts: Vec<(String, String)>,
    /// Removals dropped because someone else changed the path meanwhile.
    pub kept: Vec<String>,
}

/// `"<n> added, <n> modified, <n> removed"` of a change set's kinds.
pub fn tally(kinds: impl Iterator<Item = FileChangeKind>) -> String {
    let (mut added, mut modified, mut removed) = (0, 0, 0);
    for kind in kinds {
        match kind {
            FileChangeKind::Added => added += 1,
            FileChangeKind::Modified => modified += 1,
            FileChangeKind::Removed => removed += 1,
        }
    }
    format!("{added} added, {modified} modified, {removed} removed")
}

impl Resolved {
    /// One line for the tool's output.
    pub fn summary(&self) -> String {
        let mut line = tally(self.changes.iter().map(|c| c.change));
        for (path, copy) in &self.conflicts {
            line.push_str(&format!(
                "; {path} changed meanwhile: this command's version is {copy}"
            ));
        }
        for path in &self.kept {
            line.push_str(&format!("; {path} changed meanwhile and was not removed"));
        }
        line
    }
}

/// Resolves `proposed` (made against workspace version `base`) against `current`, the
/// state of every proposed path and of every path named `<path>.conflict-<n>` (absent:
/// never written).
pub fn resolve(
    base: i64,
    proposed: Vec<FileChange>,
    current: &BTreeMap<String, Current>,
) -> Resolved {
    let live = |path: &str| current.get(path).is_some_and(|c| c.sha256.is_some());
    let mut taken: BTreeSet<String> = proposed.iter().map(|c| c.path.clone()).collect();
    let mut out = Resolved::default();
    for mut change in proposed {
        let now = current.get(&change.path);
        let changed_meanwhile = now.is_some_and(|c| c.version > base);
        let same = now.and_then(|c| c.sha256.as_deref()) == change.sha256.as_deref();
        match change.change {
            FileChangeKind::Removed if !live(&change.path) => {}
            FileChangeKind::Removed if changed_meanwhile => out.kept.push(change.path),
            FileChangeKind::Removed => out.changes.push(change),
            _ if same => {}
            _ if changed_meanwhile => {
                let copy = (1..)
                    .map(|n| format!("{}.conflict-{n}", change.path))
                    .find(|name| !live(name) && !taken.contains(name))
                    .unwrap_or_default();
                taken.insert(copy.clone());
                out.conflicts.push((change.path.clone(), copy.clone()));
                change.path = copy;
                change.change = FileChangeKind::Added;
                out.changes.push(change);
            }
            _ => {
                change.change = if live(&change.path) {
                    FileChangeKind::Modified
                } else {
                    FileChangeKind::Added
                };
                out.changes.push(change);
            }
        }
    }
    out.changes.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(path: &str, sha: &str) -> FileChange {
        FileChange {
            path: path.into(),
            change: FileChangeKind::Modified,
            sha256: Some(sha.into()),
            size: Some(1),
        }
    }

    fn remove(path: &str) -> FileChange {
        FileChange {
            path: path.into(),
            change: FileChangeKind::Removed,
            sha256: None,
            size: None,
        }
    }

    fn at(version: i64, sha: Option<&str>) -> Current {
        Current {
            version,
            sha256: sha.map(str::to_string),
        }
    }

    fn paths(r: &Resolved) -> Vec<(&str, FileChangeKind)> {
        r.changes
            .iter()
            .map(|c| (c.path.as_str(), c.change))
            .collect()
    }

    #[test]
    fn paths_nobody_else_changed_take_the_commands_changes() {
        let current = BTreeMap::from([
            ("a.txt".to_string(), at(3, Some("old"))),
            ("gone.txt".to_string(), at(2, Some("x"))),
        ]);
        let r = resolve(
            5,
            vec![put("a.txt", "new"), put("b.txt", "b"), remove("gone.txt")],
            &current,
        );
        assert_eq!(
            paths(&r),
            [
                ("a.txt", FileChangeKind::Modified),
                ("b.txt", FileChangeKind::Added),
                ("gone.txt", FileChangeKind::Removed),
            ]
        );
        assert!(r.conflicts.is_empty() && r.kept.is_empty());
        assert_eq!(r.summary(), "1 added, 1 modified, 1 removed");
    }

    #[test]
    fn a_path_changed_meanwhile_keeps_both_and_is_never_removed() {
        let current = BTreeMap::from([
            ("a.txt".to_string(), at(7, Some("theirs"))),
            ("a.txt.conflict-1".to_string(), at(4, Some("older copy"))),
            ("b.txt".to_string(), at(8, Some("theirs"))),
            // Removed meanwhile by someone else: the command's content comes back beside.
            ("c.txt".to_string(), at(9, None)),
        ]);
        let r = resolve(
            5,
            vec![put("a.txt", "mine"), remove("b.txt"), put("c.txt", "mine")],
            &current,
        );
        assert_eq!(
            paths(&r),
            [
                ("a.txt.conflict-2", FileChangeKind::Added),
                ("c.txt.conflict-1", FileChangeKind::Added),
            ]
        );
        assert_eq!(
            r.conflicts,
            [
                ("a.txt".to_string(), "a.txt.conflict-2".to_string()),
                ("c.txt".to_string(), "c.txt.conflict-1".to_string()),
            ]
        );
        assert_eq!(r.kept, ["b.txt"]);
        assert!(
            r.summary()
                .contains("a.txt changed meanwhile: this command's version is a.txt.conflict-2")
        );
    }

    #[test]
    fn the_same_content_and_removing_nothing_change_nothing() {
        let current = BTreeMap::from([("a.txt".to_string(), at(9, Some("same")))]);
        let r = resolve(5, vec![put("a.txt", "same"), remove("never.txt")], &current);
        assert_eq!(r, Resolved::default());
    }
}
