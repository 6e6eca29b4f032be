//! docs/configuration.md against this build's `baton config reference`: the page's generated
//! keys table is byte for byte what the binary prints, it lists exactly the keys
//! `baton config explain` prints and in the same order, each with a default, a `BATON_*`
//! variable and a meaning, and it shows built-in defaults whatever the environment or the
//! working directory's `baton.toml` configure. Needs no chart tools.

use baton_server::config::{REFERENCE_BEGIN, REFERENCE_END, REFERENCE_REGENERATE};
use std::collections::BTreeMap;
use std::process::Command;

use crate::tools::{read, text};

const BATON: &str = env!("CARGO_BIN_EXE_baton");
/// The page, by its path from the workspace root.
const PAGE: &str = "docs/configuration.md";

/// `baton <args>` in an empty directory (plus `files`) under `env` only; its stdout.
fn baton(args: &[&str], env: &BTreeMap<&str, &str>, files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, contents) in files {
        std::fs::write(dir.path().join(name), contents).expect("write file");
    }
    let out = Command::new(BATON)
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .envs(env)
        .output()
        .expect("baton runs");
    assert!(out.status.success(), "baton {args:?}: {}", text(&out));
    String::from_utf8(out.stdout).expect("baton prints UTF-8")
}

fn reference() -> String {
    baton(&["config", "reference"], &BTreeMap::new(), &[])
}

/// The page's text between the line `REFERENCE_BEGIN` and the line `REFERENCE_END`.
fn generated_block(page: &str) -> &str {
    let begin_line = format!("{REFERENCE_BEGIN}\n");
    let end_line = format!("\n{REFERENCE_END}\n");
    let count = |marker: &str| page.matches(marker).count();
    assert_eq!(
        (count(REFERENCE_BEGIN), count(REFERENCE_END)),
        (1, 1),
        "{PAGE} must hold one line `{REFERENCE_BEGIN}` and, after it, one line \
         `{REFERENCE_END}` around the keys table"
    );
    let start = page
        .find(&begin_line)
        .unwrap_or_else(|| panic!("`{REFERENCE_BEGIN}` must be a line of its own in {PAGE}"))
        + begin_line.len();
    let end = page[start..]
        .find(&end_line)
        .unwrap_or_else(|| panic!("`{REFERENCE_END}` must be a line after the table in {PAGE}"));
    // The block's last newline precedes the end marker.
    &page[start..start + end + 1]
}

/// The cells of the table's key rows (header and rule left out).
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip(2)
        .map(|line| {
            let inner = line
                .strip_prefix("| ")
                .and_then(|l| l.strip_suffix(" |"))
                .unwrap_or_else(|| panic!("not a table row: {line}"));
            // Cell text escapes `|` as `\|`, so " | " only ever separates cells.
            inner.split(" | ").map(str::to_owned).collect()
        })
        .collect()
}

fn unquoted(cell: &str) -> &str {
    cell.strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .unwrap_or(cell)
}

#[test]
fn the_page_holds_this_builds_reference() {
    let page = read(PAGE);
    let printed = reference();
    let documented = generated_block(&page);
    if documented == printed {
        return;
    }
    let first_difference = documented
        .lines()
        .zip(printed.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| documented.lines().count().min(printed.lines().count()));
    let line = |text: &str| {
        text.lines()
            .nth(first_difference)
            .unwrap_or("(no such line)")
            .to_owned()
    };
    panic!(
        "the keys table in {PAGE} is not what `baton config reference` prints; edit the doc \
         comments in services/server/src/config/schema.rs, not the table, and regenerate it \
         from the workspace root with:\n\n    {REFERENCE_REGENERATE}\n\n\
         first difference, line {} of the table:\n  page:   {}\n  binary: {}",
        first_difference + 1,
        line(documented),
        line(&printed),
    );
}

#[test]
fn every_explained_key_is_documented_in_explain_order() {
    let explained: Vec<String> = baton(&["config", "explain"], &BTreeMap::new(), &[])
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(explained.len() >= 20, "{explained:?}");
    let table = reference();
    let mut lines = table.lines();
    assert_eq!(
        lines.next(),
        Some("| key | default | environment variable | meaning |")
    );
    assert_eq!(lines.next(), Some("|---|---|---|---|"));
    let rows = rows(&table);
    let documented: Vec<&str> = rows.iter().map(|cells| unquoted(&cells[0])).collect();
    for key in &explained {
        assert!(
            documented.contains(&key.as_str()),
            "`{key}` is in `baton config explain` but not in `baton config reference`"
        );
    }
    assert_eq!(
        documented, explained,
        "the reference follows explain's order"
    );
    for cells in &rows {
        let key = unquoted(&cells[0]);
        assert_eq!(cells.len(), 4, "{key}: {cells:?}");
        assert!(!cells[1].trim().is_empty(), "{key} has no default cell");
        let env = unquoted(&cells[2]);
        let expected = format!("BATON_{}", key.replace('.', "__").to_ascii_uppercase());
        assert!(
            env.starts_with(&expected),
            "{key}: variable {env}, expected {expected}"
        );
        assert!(
            cells[3].trim().len() > 10,
            "{key} has no meaning: document its field in services/server/src/config/schema.rs"
        );
    }
}

#[test]
fn the_reference_shows_defaults_not_the_configured_values() {
    let password = "hunter2-reference";
    let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    let url = format!("postgres://baton:{password}@db:5432/baton");
    let env = BTreeMap::from([
        ("BATON_DATABASE__URL", url.as_str()),
        ("BATON_CRYPTO__KEYS__K1", key),
        ("BATON_CRYPTO__ACTIVE_KEY", "k1"),
        ("BATON_HTTP__LISTEN", "0.0.0.0:9999"),
        ("HOSTNAME", "baton-7f9c"),
    ]);
    let file = ("baton.toml", "tier = \"team\"\n[log]\nfilter = \"debug\"\n");
    let configured = baton(&["config", "reference"], &env, &[file]);
    assert!(
        !configured.contains(password) && !configured.contains(key),
        "{configured}"
    );
    assert_eq!(configured, reference());
}
