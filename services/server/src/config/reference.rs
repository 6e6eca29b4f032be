//! `baton config reference`: the Markdown table of every configuration key with its default,
//! its environment variable and its meaning, generated from the schema types so that the
//! "Keys" section of docs/configuration.md cannot drift from them.
//!
//! - keys and their order are those of `config explain` (`explain::rows`);
//! - defaults are `RawConfig::default()` as `config explain` shows it with no layer set, so the
//!   table never holds a configured value, let alone a secret;
//! - environment variables follow the naming `layers` reads (`BATON_HTTP__LISTEN`); a map's
//!   entries get a placeholder, `BATON_CRYPTO__KEYS__<ID>`;
//! - meanings are the doc comments of the `RawConfig` fields, read from the JSON schema that
//!   `schemars` derives from them. A key without one is an error, not an empty cell.
//!
//! The page holds the table between [`REFERENCE_BEGIN`] and [`REFERENCE_END`]. After changing a
//! key, a default or a doc comment, regenerate it from the workspace root with
//! [`REFERENCE_REGENERATE`]:
//!
//! ```text
//! cargo run -q --bin baton -- config reference --update docs/configuration.md
//! ```
//!
//! The deploy test `reference` fails while the page and the types disagree.

use std::fmt::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};

use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::Layer;
use super::explain::{self, UNSET};
use super::layers::{ENV_PREFIX, ENV_SEPARATOR};
use super::schema::RawConfig;

/// The line that opens the generated table in a Markdown page.
pub const REFERENCE_BEGIN: &str = "<!-- BEGIN GENERATED: baton config reference -->";
/// The line that closes it.
pub const REFERENCE_END: &str = "<!-- END GENERATED -->";
/// The command, run from the workspace root, that regenerates the table in
/// docs/configuration.md.
pub const REFERENCE_REGENERATE: &str =
    "cargo run -q --bin baton -- config reference --update docs/configuration.md";

/// Schema extension on a map field naming one of its entries, for the placeholder in the
/// entry's variable name: `"ID"` gives `BATON_CRYPTO__KEYS__<ID>`.
const ENTRY_NAME: &str = "x-entry-name";
/// The placeholder of a map whose field does not name its entries.
const DEFAULT_ENTRY_NAME: &str = "NAME";

/// One key of the reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceRow {
    /// Dotted key, e.g. `http.listen`.
    pub key: String,
    /// The built-in default as `config explain` shows it; `None` when the key is unset by
    /// default.
    pub default: Option<String>,
    /// The environment variable that sets it, e.g. `BATON_HTTP__LISTEN`.
    pub env: String,
    /// The field's doc comment on one line.
    pub meaning: String,
}

/// Why the reference could not be produced or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// `config explain` prints a key the schema does not describe.
    #[error("configuration key `{key}` is missing from the schema of RawConfig")]
    NotInSchema {
        /// Dotted key.
        key: String,
    },
    /// A key whose field has no doc comment.
    #[error(
        "configuration key `{key}` has no doc comment: document its field in \
         services/server/src/config/schema.rs"
    )]
    Undocumented {
        /// Dotted key.
        key: String,
    },
    /// The page to update could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadPage {
        /// The page as given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The page to update could not be written.
    #[error("cannot write {}: {source}", path.display())]
    WritePage {
        /// The page as given.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The page's marker lines do not enclose exactly one block.
    #[error("{}: {problem}", path.display())]
    Markers {
        /// The page as given.
        path: PathBuf,
        /// What is wrong with its markers.
        #[source]
        problem: MarkerError,
    },
}

/// What is wrong with the marker lines of a page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MarkerError {
    /// A marker line is missing.
    #[error("no line `{0}`")]
    Missing(&'static str),
    /// A marker appears more than once.
    #[error("`{0}` appears more than once")]
    Repeated(&'static str),
    /// A marker shares its line with other text.
    #[error("`{0}` must be a line of its own")]
    NotALine(&'static str),
    /// The end marker comes before the begin marker.
    #[error("`{REFERENCE_END}` comes before `{REFERENCE_BEGIN}`")]
    OutOfOrder,
}

/// Every key of the configuration, in `config explain` order, with its default, variable and
/// meaning.
pub fn reference_rows() -> Result<Vec<ReferenceRow>, ReferenceError> {
    // Inlined, every section's fields sit under `properties` of the section's property, so a
    // dotted key is a plain path through the schema.
    let schema = SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<RawConfig>();
    explain::rows(&RawConfig::default(), |_| Layer::Default)
        .into_iter()
        .map(|row| {
            let field = field_schema(schema.as_value(), &row.key).ok_or_else(|| {
                ReferenceError::NotInSchema {
                    key: row.key.clone(),
                }
            })?;
            let meaning = field
                .get("description")
                .and_then(Value::as_str)
                .map(one_line)
                .filter(|text| !text.is_empty())
                .ok_or_else(|| ReferenceError::Undocumented {
                    key: row.key.clone(),
                })?;
            Ok(ReferenceRow {
                env: env_var(&row.key, field),
                default: (row.value != UNSET).then_some(row.value),
                key: row.key,
                meaning,
            })
        })
        .collect()
}

/// The text `baton config reference` prints: a Markdown table, one row per key.
pub fn reference_markdown() -> Result<String, ReferenceError> {
    let mut out =
        String::from("| key | default | environment variable | meaning |\n|---|---|---|---|\n");
    for row in reference_rows()? {
        let default = match &row.default {
            Some(value) => code(value),
            None => "unset".to_owned(),
        };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| {} | {default} | {} | {} |",
            code(&row.key),
            code(&row.env),
            escape(&row.meaning)
        );
    }
    Ok(out)
}

/// `page` with the text between its marker lines replaced by `table`. The markers must each
/// be a line of their own, appear once, begin before end.
pub fn splice_reference(page: &str, table: &str) -> Result<String, MarkerError> {
    let block = generated_block(page)?;
    let mut out = String::with_capacity(page.len() + table.len());
    out.push_str(&page[..block.start]);
    out.push_str(table);
    out.push_str(&page[block.end..]);
    Ok(out)
}

/// Regenerates the table in the Markdown page at `path`; writes the page only when it
/// changes, and says whether it did.
pub fn update_reference(path: &Path) -> Result<bool, ReferenceError> {
    let page = std::fs::read_to_string(path).map_err(|source| ReferenceError::ReadPage {
        path: path.to_owned(),
        source,
    })?;
    let table = reference_markdown()?;
    let updated = splice_reference(&page, &table).map_err(|problem| ReferenceError::Markers {
        path: path.to_owned(),
        problem,
    })?;
    if updated == page {
        return Ok(false);
    }
    std::fs::write(path, updated).map_err(|source| ReferenceError::WritePage {
        path: path.to_owned(),
        source,
    })?;
    Ok(true)
}

/// The byte range between the end of the begin marker's line and the start of the end
/// marker's line.
fn generated_block(page: &str) -> Result<Range<usize>, MarkerError> {
    let begin = marker_line(page, REFERENCE_BEGIN)?;
    let end = marker_line(page, REFERENCE_END)?;
    if end.start < begin.end {
        return Err(MarkerError::OutOfOrder);
    }
    Ok(begin.end..end.start)
}

/// The range of the one line of `page` that is `marker`, its newline included.
fn marker_line(page: &str, marker: &'static str) -> Result<Range<usize>, MarkerError> {
    let mut found = page.match_indices(marker).map(|(at, _)| at);
    let at = found.next().ok_or(MarkerError::Missing(marker))?;
    if found.next().is_some() {
        return Err(MarkerError::Repeated(marker));
    }
    let after = at + marker.len();
    let starts_line = at == 0 || page[..at].ends_with('\n');
    let rest = &page[after..];
    let ends_line = rest.is_empty() || rest.starts_with('\n') || rest.starts_with("\r\n");
    if !(starts_line && ends_line) {
        return Err(MarkerError::NotALine(marker));
    }
    let newline = rest.find('\n').map_or(0, |i| i + 1);
    Ok(at..after + newline)
}

/// The schema of the field at dotted `key`.
fn field_schema<'a>(root: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.')
        .try_fold(root, |node, segment| node.get("properties")?.get(segment))
}

/// `BATON_` and the key's segments upper-cased, joined by `__`; a map's entries add
/// `__<ENTRY>`, named by the field's `x-entry-name`.
fn env_var(key: &str, field: &Value) -> String {
    let segments: Vec<String> = key.split('.').map(str::to_ascii_uppercase).collect();
    let mut name = format!("{ENV_PREFIX}{}", segments.join(ENV_SEPARATOR));
    if field
        .get("additionalProperties")
        .is_some_and(Value::is_object)
    {
        let entry = field
            .get(ENTRY_NAME)
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_ENTRY_NAME);
        let _ = write!(name, "{ENV_SEPARATOR}<{entry}>");
    }
    name
}

/// A doc comment on one line: a table cell cannot hold line breaks.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `text` safe inside a table cell: a bare `|` would end the cell, even in a code span.
fn escape(text: &str) -> String {
    text.replace('|', "\\|")
}

fn code(text: &str) -> String {
    format!("`{}`", escape(text))
}
