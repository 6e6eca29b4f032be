//! Builds the encryption [`Keyring`] from the configuration at start-up: the keys of
//! `crypto.keys`, the key files of `crypto.keys_dir`, or — in the embedded tier without
//! configured keys — the keys Baton generates under the data directory. Also writes key
//! files (`baton encryption-keys generate --dir`), makes a new generated key active (`baton encryption-keys
//! rotate --new` in the embedded tier) and deletes a retired key's file.
//!
//! The embedded tier's keyring directory holds its keys, one file each, and a hidden file
//! [`ACTIVE_FILE`] naming the active one. Without that file (before the first rotation)
//! the active key is [`GENERATED_KEY_ID`], created on first start.
//!
//! Key bytes are never formatted: errors name key ids and paths only.

use crate::config::{Crypto, GENERATED_KEY_ID};
use crate::data_dir::create_private_dir;
use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use baton_core::crypto::{self, Keyring};
use secrecy::ExposeSecret;
use std::io::Write;
use std::path::{Path, PathBuf};

/// In a generated keyring directory, the file naming the active key. Hidden, so it is
/// never read as a key.
pub const ACTIVE_FILE: &str = ".active";

/// The keyring `crypto` describes. In the [`Crypto::Generated`] case, creates the first key
/// file if no key has been made active yet.
pub fn load(crypto: &Crypto) -> anyhow::Result<Keyring> {
    let (mut keys, dir, active) = match crypto {
        Crypto::Keys { keys, dir, active } => {
            let keys: Vec<(String, String)> = keys
                .iter()
                .map(|(id, key)| (id.clone(), key.expose_secret().to_owned()))
                .collect();
            (keys, dir.as_deref(), active.clone())
        }
        Crypto::Generated { dir } => (Vec::new(), Some(dir.as_path()), generated_active(dir)?),
    };
    if let Some(dir) = dir {
        keys.extend(read_key_dir(dir)?);
    }
    Keyring::from_config(&keys, &active).context("building the encryption keyring")
}

/// The active key of a generated keyring: the one [`ACTIVE_FILE`] names, or else
/// [`GENERATED_KEY_ID`], generated first if it does not exist yet.
fn generated_active(dir: &Path) -> anyhow::Result<String> {
    let marker = dir.join(ACTIVE_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(text) => {
            let id = text.trim().to_owned();
            crypto::validate_key_id(&id)
                .with_context(|| format!("reading the active key id from {}", marker.display()))?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            ensure_generated_key(dir)?;
            Ok(GENERATED_KEY_ID.to_owned())
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", marker.display())),
    }
}

/// A key id that can name a key file: a valid id that does not start with `.` (key
/// directories skip hidden names, and `.`/`..` are not files).
fn check_file_id(id: &str) -> anyhow::Result<()> {
    crypto::validate_key_id(id)?;
    anyhow::ensure!(
        !id.starts_with('.'),
        "key id {id:?} starts with `.`: a key directory would skip its file"
    );
    Ok(())
}

/// Writes a fresh random key as the key file `dir/id` (0600; `dir` is created 0700 when
/// missing), as `crypto.keys_dir` reads it. Refuses an invalid id and an existing file.
/// Returns the file's path.
pub fn write_new_key(dir: &Path, id: &str) -> anyhow::Result<PathBuf> {
    check_file_id(id)?;
    let path = dir.join(id);
    anyhow::ensure!(
        write_key_file(dir, id)?,
        "{} exists already: choose another key id (never reuse one)",
        path.display()
    );
    Ok(path)
}

/// The embedded tier's rotation: a fresh key `id` in the generated keyring `dir`, made its
/// active key (the key file first, then [`ACTIVE_FILE`], each written whole, so a crash in
/// between leaves the previous key active).
pub fn activate_new_generated_key(dir: &Path, id: &str) -> anyhow::Result<PathBuf> {
    let path = write_new_key(dir, id)?;
    let marker = dir.join(ACTIVE_FILE);
    let temp = dir.join(format!(".{ACTIVE_FILE}.{}", uuid::Uuid::new_v4().simple()));
    let written = write_private_file(&temp, id)
        .and_then(|()| std::fs::rename(&temp, &marker))
        .with_context(|| format!("writing {}", marker.display()));
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    sync_dir(dir);
    tracing::info!(key_id = id, "made a new generated key active");
    Ok(path)
}

/// Deletes the key file `dir/id` of a retired key; returns whether there was one.
pub fn remove_key_file(dir: &Path, id: &str) -> anyhow::Result<bool> {
    check_file_id(id)?;
    let path = dir.join(id);
    match std::fs::remove_file(&path) {
        Ok(()) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e).with_context(|| format!("deleting the key file {}", path.display())),
    }
}

/// The keys of a key directory, by file name. Names starting with `.` are skipped (a
/// mounted Kubernetes Secret keeps its bookkeeping there, and unfinished writes of
/// [`ensure_generated_key`] are hidden too); every other entry must be a readable file.
fn read_key_dir(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading the key directory {}", dir.display()))?;
    let mut keys = Vec::new();
    for entry in entries {
        let entry =
            entry.with_context(|| format!("reading the key directory {}", dir.display()))?;
        let path = entry.path();
        let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
            anyhow::bail!(
                "the key file {} has a name that is not UTF-8",
                path.display()
            );
        };
        if id.starts_with('.') {
            continue;
        }
        // Follows symbolic links, as a mounted Secret's files are.
        let meta = std::fs::metadata(&path)
            .with_context(|| format!("reading the key file {}", path.display()))?;
        anyhow::ensure!(
            meta.is_file(),
            "{} is not a key file: {} may hold only key files",
            path.display(),
            dir.display()
        );
        let key = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the key file {}", path.display()))?;
        keys.push((id, key.trim().to_owned()));
    }
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(keys)
}

/// Creates `dir/local` with a fresh key unless it exists; a concurrent start that got
/// there first is never overwritten (its key is used).
fn ensure_generated_key(dir: &Path) -> anyhow::Result<()> {
    if dir.join(GENERATED_KEY_ID).exists() {
        return Ok(());
    }
    if write_key_file(dir, GENERATED_KEY_ID)? {
        tracing::info!(path = %dir.join(GENERATED_KEY_ID).display(), "generated the encryption key");
    }
    Ok(())
}

/// Creates `dir/id` with a fresh key unless it exists (then returns false): the directory
/// readable by the owner alone (0700), the file too (0600). Written under a hidden
/// temporary name and linked into place, so the key file is never seen half written and
/// an existing one is never overwritten.
fn write_key_file(dir: &Path, id: &str) -> anyhow::Result<bool> {
    let path = dir.join(id);
    create_private_dir(dir)
        .with_context(|| format!("creating the key directory {}", dir.display()))?;
    let temp = dir.join(format!(".{id}.{}", uuid::Uuid::new_v4().simple()));
    let written = write_private_file(&temp, &BASE64.encode(Keyring::generate_key()))
        .with_context(|| format!("writing the key file {}", temp.display()));
    let linked = written.and_then(|()| match std::fs::hard_link(&temp, &path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).with_context(|| format!("creating the key file {}", path.display())),
    });
    let _ = std::fs::remove_file(&temp);
    let created = linked?;
    sync_dir(dir);
    Ok(created)
}

/// Writes `contents` and a newline to the new file `path` (0600) and flushes it to disk.
fn write_private_file(path: &Path, contents: &str) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(contents.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()
}

/// Makes the new directory entry durable; best effort (not every platform can).
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::crypto::Aad;
    use baton_events::TenantId;
    use secrecy::SecretString;

    fn key(fill: u8) -> String {
        BASE64.encode([fill; baton_core::crypto::KEY_LEN])
    }

    #[test]
    fn the_generated_key_is_private_and_reused_across_starts() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("keyring");
        let crypto = Crypto::Generated { dir: dir.clone() };
        let first = load(&crypto).expect("first start");
        assert_eq!(first.active_id(), GENERATED_KEY_ID);
        let aad = Aad::secret(TenantId::new(), "token");
        let sealed = first.seal(&aad, b"value").expect("seal");

        let second = load(&crypto).expect("second start");
        assert_eq!(second.open(&aad, &sealed.bytes).expect("open"), b"value");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        assert_eq!(names, [GENERATED_KEY_ID], "no temporary file is left");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode();
            assert_eq!(mode(&dir.join(GENERATED_KEY_ID)) & 0o777, 0o600);
            assert_eq!(mode(&dir) & 0o777, 0o700);
        }
    }

    #[test]
    fn a_new_generated_key_becomes_active_and_the_old_one_can_go() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("keyring");
        let crypto = Crypto::Generated { dir: dir.clone() };
        let first = load(&crypto).expect("first start");
        let aad = Aad::secret(TenantId::new(), "token");
        let old = first.seal(&aad, b"value").expect("seal");

        activate_new_generated_key(&dir, "k2").expect("rotate");
        let both = load(&crypto).expect("after rotation");
        assert_eq!(both.active_id(), "k2");
        assert_eq!(both.ids().collect::<Vec<_>>(), ["k2", GENERATED_KEY_ID]);
        assert_eq!(both.open(&aad, &old.bytes).expect("open"), b"value");
        let err = format!(
            "{:#}",
            activate_new_generated_key(&dir, "k2").expect_err("reused")
        );
        assert!(err.contains("exists already"), "{err}");

        // Retired: the first key is not generated again.
        assert!(remove_key_file(&dir, GENERATED_KEY_ID).expect("remove"));
        assert!(!remove_key_file(&dir, GENERATED_KEY_ID).expect("gone"));
        let after = load(&crypto).expect("after retiring");
        assert_eq!(after.ids().collect::<Vec<_>>(), ["k2"]);
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .expect("dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        assert_eq!(names, [ACTIVE_FILE, "k2"], "no temporary file is left");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("k2"))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn key_files_are_written_once_under_valid_ids_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keys = dir.path().join("keys");
        let path = write_new_key(&keys, "k1").expect("write");
        assert_eq!(path, keys.join("k1"));
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(BASE64.decode(text.trim()).expect("base64").len(), 32);
        assert!(write_new_key(&keys, "k1").is_err(), "never overwritten");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), text);
        for bad in ["../escape", "a/b", "", "..", ".active"] {
            assert!(write_new_key(&keys, bad).is_err(), "{bad:?}");
            assert!(remove_key_file(&keys, bad).is_err(), "{bad:?}");
        }
        let crypto = Crypto::Keys {
            keys: vec![],
            dir: Some(keys),
            active: "k1".into(),
        };
        assert_eq!(load(&crypto).expect("ring").active_id(), "k1");
    }

    #[test]
    fn configured_keys_and_a_key_directory_make_one_ring() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("k2"), format!("{}\n", key(2))).expect("write");
        std::fs::create_dir(dir.path().join("..data")).expect("hidden dir");
        std::fs::write(dir.path().join(".hidden"), "not a key").expect("write");
        let crypto = Crypto::Keys {
            keys: vec![("k1".into(), SecretString::from(key(1)))],
            dir: Some(dir.path().to_path_buf()),
            active: "k2".into(),
        };
        let ring = load(&crypto).expect("ring");
        assert_eq!(ring.ids().collect::<Vec<_>>(), ["k1", "k2"]);
        assert_eq!(ring.active_id(), "k2");
    }

    #[test]
    fn bad_key_files_are_named_without_their_content() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("short"), "c2hvcnQta2V5LXNlY3JldA==").expect("write");
        let crypto = Crypto::Keys {
            keys: vec![],
            dir: Some(dir.path().to_path_buf()),
            active: "short".into(),
        };
        let err = format!("{:#}", load(&crypto).expect_err("too short"));
        assert!(err.contains("\"short\"") && err.contains("32"), "{err}");
        assert!(!err.contains("c2hvcnQta2V5LXNlY3JldA"), "{err}");

        let missing = Crypto::Keys {
            keys: vec![],
            dir: Some(dir.path().join("nowhere")),
            active: "k".into(),
        };
        let err = format!("{:#}", load(&missing).expect_err("no directory"));
        assert!(err.contains("nowhere"), "{err}");

        let absent = Crypto::Keys {
            keys: vec![("k1".into(), SecretString::from(key(1)))],
            dir: None,
            active: "k9".into(),
        };
        let err = format!("{:#}", load(&absent).expect_err("unknown active key"));
        assert!(err.contains("\"k9\""), "{err}");
    }
}
