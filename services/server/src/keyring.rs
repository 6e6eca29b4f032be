//! Builds the encryption [`Keyring`] from the configuration at start-up: the keys of
//! `crypto.keys`, the key files of `crypto.keys_dir`, or — in the embedded tier without
//! configured keys — the key generated on first start under the data directory.
//!
//! Key bytes are never formatted: errors name key ids and paths only.

use crate::config::{Crypto, GENERATED_KEY_ID};
use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use baton_core::crypto::Keyring;
use secrecy::ExposeSecret;
use std::io::Write;
use std::path::Path;

/// The keyring `crypto` describes. In the [`Crypto::Generated`] case, creates the key file
/// first if it does not exist yet.
pub fn load(crypto: &Crypto) -> anyhow::Result<Keyring> {
    let (mut keys, dir, active) = match crypto {
        Crypto::Keys { keys, dir, active } => {
            let keys: Vec<(String, String)> = keys
                .iter()
                .map(|(id, key)| (id.clone(), key.expose_secret().to_owned()))
                .collect();
            (keys, dir.as_deref(), active.as_str())
        }
        Crypto::Generated { dir } => {
            ensure_generated_key(dir)?;
            (Vec::new(), Some(dir.as_path()), GENERATED_KEY_ID)
        }
    };
    if let Some(dir) = dir {
        keys.extend(read_key_dir(dir)?);
    }
    Keyring::from_config(&keys, active).context("building the encryption keyring")
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

/// Creates `dir/local` with a fresh key unless it exists: the directory readable by the
/// owner alone (0700), the file too (0600). Written under a hidden temporary name and
/// linked into place, so the key file is never seen half written, and a concurrent start
/// that got there first is never overwritten.
fn ensure_generated_key(dir: &Path) -> anyhow::Result<()> {
    let path = dir.join(GENERATED_KEY_ID);
    if path.exists() {
        return Ok(());
    }
    create_private_dir(dir)
        .with_context(|| format!("creating the key directory {}", dir.display()))?;
    let temp = dir.join(format!(
        ".{GENERATED_KEY_ID}.{}",
        uuid::Uuid::new_v4().simple()
    ));
    let written = write_private_file(&temp, &BASE64.encode(Keyring::generate_key()))
        .with_context(|| format!("writing the key file {}", temp.display()));
    let linked = written.and_then(|()| match std::fs::hard_link(&temp, &path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "generated the encryption key");
            Ok(())
        }
        // Another process generated it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the key file {}", path.display())),
    });
    let _ = std::fs::remove_file(&temp);
    linked?;
    sync_dir(dir);
    Ok(())
}

/// Creates `dir` (0700) and, with default permissions, its missing parents.
#[cfg(unix)]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
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
