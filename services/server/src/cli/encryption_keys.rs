//! `baton encryption-keys`: the operator's side of encryption keys.
//!
//! - `generate` makes a new random key, printed for the configuration or written as a key
//!   file (the operator then adds it to every replica, makes it `crypto.active_key` and
//!   rolls the replicas);
//! - `rotate` re-seals, with the configured keyring, every secret and checkpoint of every
//!   tenant that is not under the active key, in batches of one transaction each, showing
//!   progress on stderr (in the embedded tier, `--new` first makes a new generated key
//!   active);
//! - `status` counts, per key id, the records sealed under it;
//! - `retire` refuses while a key is active or seals anything, naming what still uses it.
//!
//! Key material is printed by `generate` alone, on purpose; everything else names key ids.

use super::load;
use crate::app;
use crate::config::{CliOverrides, Config, Crypto};
use crate::encryption_keys;
use anyhow::Context;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use baton_core::crypto::{self, Keyring};
use baton_core::encryption_keys::{DEFAULT_BATCH, KeyStatus, MAX_BATCH, ResealOptions, Resealer};
use baton_core::ports::{Clock, SystemClock};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a new random 256-bit key. Prints its id and base64 (shown once) for the
    /// configuration or the Secret, or with --dir writes it there as a key file (mode
    /// 0600). Reads no configuration.
    Generate {
        /// The key id (default `key_<UTC date>_<time>`): 1 to 64 of `[A-Za-z0-9._-]`, never
        /// the id of an existing or retired key.
        #[arg(long)]
        id: Option<String>,
        /// Write the key as the file DIR/ID, the way `crypto.keys_dir` reads keys, instead
        /// of printing it.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Re-seal every secret and checkpoint (of every tenant) that is not under the active
    /// key under it, in batches of one transaction each, with progress on stderr. Safe to
    /// interrupt: running it again continues with what is left. Records that open under no
    /// configured key are listed by id and left as they are, and it exits non-zero.
    Rotate {
        /// Records re-sealed per transaction.
        #[arg(long, default_value_t = DEFAULT_BATCH,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH)))]
        batch: u32,
        /// Milliseconds to pause after each batch, to spread the load on the database.
        #[arg(long, default_value_t = 0, value_name = "MS")]
        pause_ms: u64,
        /// Embedded tier with a generated keyring: first generate a new key in
        /// `<data_dir>/keyring` and make it the active key there. Stop `baton serve` first,
        /// or restart it right after: a server knows only the keys it started with.
        #[arg(long)]
        new: bool,
        /// The id of the key `--new` generates (default `key_<UTC date>_<time>`).
        #[arg(long, requires = "new")]
        id: Option<String>,
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Per key id: whether it is the active key, whether the keyring holds it, and how many
    /// secrets and checkpoints of every tenant are sealed under it.
    Status {
        #[command(flatten)]
        overrides: CliOverrides,
    },
    /// Retire a key: refuses, naming what still uses it, while it is the active key or
    /// seals any secret or checkpoint. Otherwise it may leave the configuration; with --dir
    /// (and in the embedded tier's generated keyring) its key file is deleted.
    Retire {
        /// The key id.
        id: String,
        /// The key directory holding the key's file, to delete it from.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        #[command(flatten)]
        overrides: CliOverrides,
    },
}

pub(super) async fn run(config_path: Option<PathBuf>, command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Generate { id, dir } => generate(id, dir.as_deref()),
        KeysCommand::Rotate {
            batch,
            pause_ms,
            new,
            id,
            overrides,
        } => {
            let config = load(config_path, overrides)?;
            let opts = ResealOptions {
                tenant: None,
                batch,
                pause: Duration::from_millis(pause_ms),
            };
            rotate(&config, &opts, new.then_some(id)).await
        }
        KeysCommand::Status { overrides } => status(&load(config_path, overrides)?).await,
        KeysCommand::Retire { id, dir, overrides } => {
            retire(&load(config_path, overrides)?, &id, dir.as_deref()).await
        }
    }
}

/// `key_20250131_142501`: sorts by creation, unique enough for keys made by hand, and
/// usable both as a file name and in a `BATON_CRYPTO__KEYS__<ID>` variable name.
fn default_id() -> String {
    format!("key_{}", SystemClock.now().format("%Y%m%d_%H%M%S"))
}

/// `1 secret`, `2 secrets`.
fn count(n: u64, what: &str) -> String {
    if n == 1 {
        format!("{n} {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn generate(id: Option<String>, dir: Option<&Path>) -> anyhow::Result<()> {
    let id = id.unwrap_or_else(default_id);
    crypto::validate_key_id(&id)?;
    match dir {
        Some(dir) => {
            let path = encryption_keys::write_new_key(dir, &id)?;
            println!("key_id: {id}");
            println!("file:   {}", path.display());
            eprintln!(
                "Add the key to every replica's keyring (the key directory or Secret), roll \
                 the replicas, then make it crypto.active_key and roll them again."
            );
        }
        None => {
            println!("key_id: {id}");
            println!("key:    {}", BASE64.encode(Keyring::generate_key()));
            // Variable names are read in lower case, and `-` and `.` do not fit in them.
            let in_variables = id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            let variable = if in_variables {
                format!(", or as BATON_CRYPTO__KEYS__{}", id.to_ascii_uppercase())
            } else {
                String::new()
            };
            eprintln!(
                "The key is shown once: store it now (as the file {id} of the key \
                 directory{variable}), then roll the replicas before making it \
                 crypto.active_key."
            );
        }
    }
    Ok(())
}

/// The configured keyring and the database's sealed records.
async fn open(config: &Config) -> anyhow::Result<(Resealer, app::Stores)> {
    let ring = encryption_keys::load(&config.crypto).context("loading the encryption keys")?;
    let stores = app::open_stores(&config.storage).await?;
    let resealer = Resealer {
        store: stores.sealed.clone(),
        keyring: Arc::new(ring),
    };
    Ok((resealer, stores))
}

async fn rotate(
    config: &Config,
    opts: &ResealOptions,
    new: Option<Option<String>>,
) -> anyhow::Result<()> {
    if let Some(id) = new {
        let Crypto::Generated { dir } = &config.crypto else {
            anyhow::bail!(
                "--new is for the embedded tier's generated keyring; with configured keys, make \
                 a key with `baton encryption-keys generate`, add it to every replica, make it \
                 crypto.active_key, roll the replicas, then run `baton encryption-keys rotate`"
            );
        };
        // Creates the first key of a fresh data directory, so the new one is not alone.
        let current =
            encryption_keys::load(&config.crypto).context("loading the encryption keys")?;
        let id = id.unwrap_or_else(default_id);
        anyhow::ensure!(
            !current.contains(&id),
            "key {id:?} is in the keyring already: choose another id"
        );
        let path = encryption_keys::activate_new_generated_key(dir, &id)?;
        eprintln!(
            "generated the key {id:?} ({}) and made it the active key; restart a running \
             `baton serve` now: it knows only the keys it started with",
            path.display()
        );
    }
    let (resealer, stores) = open(config).await?;
    let active = resealer.keyring.active_id().to_string();
    eprintln!("re-sealing under the active key {active:?}");
    let report = resealer.reseal(opts, |p| eprintln!("{p}"), || false).await;
    stores.close().await;
    let report = report.context("re-sealing the records")?;
    let p = report.progress;
    println!(
        "re-sealed {} and {} under the key {active:?}",
        count(p.secrets.resealed, "secret"),
        count(p.checkpoints.resealed, "checkpoint")
    );
    let changed = p.secrets.changed + p.checkpoints.changed;
    if changed > 0 {
        println!(
            "{} rewritten while this ran kept what was written",
            count(changed, "record")
        );
    }
    for u in &report.unreadable {
        eprintln!("unreadable: {u}");
    }
    let unreadable = report.unreadable.len() as u64;
    anyhow::ensure!(
        unreadable == 0,
        "{} open under no configured key and were left as they are (listed above): put \
         their keys back into the keyring and run this again, or write those secrets again",
        count(unreadable, "record")
    );
    let left = report.left_total();
    anyhow::ensure!(
        left == 0,
        "{} are still sealed under other keys: they were written under another key while \
         this ran (does every replica seal with {active:?}?); run `baton encryption-keys rotate` again",
        count(left, "record")
    );
    println!("every secret and checkpoint is sealed under {active:?}");
    Ok(())
}

async fn status(config: &Config) -> anyhow::Result<()> {
    let (resealer, stores) = open(config).await?;
    let keys = resealer.status(None).await;
    stores.close().await;
    let keys = keys.context("counting the sealed records")?;
    print!("{}", status_table(&keys));
    let lost: u64 = keys
        .iter()
        .filter(|k| !k.configured)
        .map(|k| k.secrets + k.checkpoints)
        .sum();
    if lost > 0 {
        eprintln!(
            "{} are sealed under keys the keyring lacks (configured: no) and cannot be read",
            count(lost, "record")
        );
    }
    Ok(())
}

/// One line per key: id, active, configured, secrets, checkpoints, in aligned columns.
fn status_table(keys: &[KeyStatus]) -> String {
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut rows = vec![[
        "key_id".to_string(),
        "active".into(),
        "configured".into(),
        "secrets".into(),
        "checkpoints".into(),
    ]];
    rows.extend(keys.iter().map(|k| {
        [
            k.key_id.clone(),
            yes_no(k.active).into(),
            yes_no(k.configured).into(),
            k.secrets.to_string(),
            k.checkpoints.to_string(),
        ]
    }));
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

async fn retire(config: &Config, id: &str, dir: Option<&Path>) -> anyhow::Result<()> {
    crypto::validate_key_id(id)?;
    let (resealer, stores) = open(config).await?;
    let usage = resealer.store.key_usage(None).await;
    stores.close().await;
    let usage = usage.context("counting the sealed records")?;
    let keyring = &resealer.keyring;
    anyhow::ensure!(
        keyring.active_id() != id,
        "key {id:?} is the active key: make another key active (crypto.active_key), roll the \
         replicas and run `baton encryption-keys rotate` first"
    );
    let (secrets, checkpoints) = usage
        .iter()
        .find(|u| u.key_id == id)
        .map_or((0, 0), |u| (u.secrets, u.checkpoints));
    anyhow::ensure!(
        secrets + checkpoints == 0,
        "key {id:?} still seals {} and {}: run `baton encryption-keys rotate` first (`baton encryption-keys \
         status` shows every key)",
        count(secrets, "secret"),
        count(checkpoints, "checkpoint")
    );
    let file_dir = match (dir, &config.crypto) {
        (Some(dir), _) => Some(dir.to_path_buf()),
        (None, Crypto::Generated { dir }) => Some(dir.clone()),
        (None, Crypto::Keys { .. }) => None,
    };
    match file_dir {
        Some(dir) => {
            let path = dir.join(id);
            if encryption_keys::remove_key_file(&dir, id)? {
                println!(
                    "nothing is sealed under key {id:?}: deleted its key file {}",
                    path.display()
                );
            } else {
                println!(
                    "nothing is sealed under key {id:?}, and there is no key file {}",
                    path.display()
                );
            }
        }
        None => println!(
            "nothing is sealed under key {id:?}: remove it from crypto.keys or crypto.keys_dir \
             (the Secret) and roll the replicas"
        ),
    }
    if keyring.contains(id) {
        eprintln!("Keep a copy of the key while database backups that need it exist.");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_table_lines_up_and_names_every_key() {
        let key = |id: &str, active, configured, secrets, checkpoints| KeyStatus {
            key_id: id.into(),
            active,
            configured,
            secrets,
            checkpoints,
        };
        let table = status_table(&[
            key("k1", false, true, 12, 3400),
            key("key_20250131_142501", true, true, 0, 7),
            key("gone", false, false, 1, 0),
        ]);
        assert_eq!(
            table,
            "key_id               active  configured  secrets  checkpoints\n\
             k1                   no      yes         12       3400\n\
             key_20250131_142501  yes     yes         0        7\n\
             gone                 no      no          1        0\n"
        );
    }

    #[test]
    fn default_ids_are_valid_key_ids() {
        let id = default_id();
        assert!(id.starts_with("key_") && id.len() == "key_20250131_142501".len());
        crypto::validate_key_id(&id).expect("a valid id");
        assert_eq!(count(1, "secret"), "1 secret");
        assert_eq!(count(0, "checkpoint"), "0 checkpoints");
    }
}
