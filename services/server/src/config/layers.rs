//! The figment layers (`HOSTNAME`, `baton.toml`, `BATON_*` variables), the translation of
//! figment errors into `ConfigError`, and finding which layer set a key. Reads only the
//! environment it is given, never the process environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::{ConfigError, Layer};

/// Prefix of the environment variables that set configuration keys.
pub(crate) const ENV_PREFIX: &str = "BATON_";
/// Separator of nesting levels in variable names (`BATON_HTTP__LISTEN` = `http.listen`).
pub(crate) const ENV_SEPARATOR: &str = "__";
/// Variable whose value is the default of `replica_name`.
pub(crate) const HOSTNAME_VAR: &str = "HOSTNAME";
/// Marks metadata of the environment layers, whose interpolater names the variable.
const ENV_SOURCE: &str = "environment";

/// A provider over a prepared dictionary, named by `metadata`.
struct DictLayer {
    dict: Dict,
    metadata: Metadata,
}

impl Provider for DictLayer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// The TOML file layer; reads nothing itself, so the file is read once with a clear error.
struct FileLayer {
    path: PathBuf,
    contents: String,
}

impl Provider for FileLayer {
    fn metadata(&self) -> Metadata {
        Metadata::from("TOML file", self.path.as_path())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Toml::string(&self.contents).data()
    }
}

/// `replica_name` from `HOSTNAME`, the lowest layer above the built-in defaults.
pub(crate) fn hostname_layer(env: &[(String, String)]) -> Option<impl Provider> {
    let (_, host) = env
        .iter()
        .find(|(name, value)| name == HOSTNAME_VAR && !value.trim().is_empty())?;
    let mut dict = Dict::new();
    dict.insert("replica_name".into(), Value::from(host.trim().to_owned()));
    let metadata = Metadata::named("HOSTNAME environment variable")
        .source(figment::Source::Custom(ENV_SOURCE.into()))
        .interpolater(|_: &Profile, _: &[&str]| HOSTNAME_VAR.to_owned());
    Some(DictLayer { dict, metadata })
}

/// Reads the config file at `path`.
pub(crate) fn file_layer(path: &Path) -> Result<impl Provider, ConfigError> {
    let contents = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    Ok(FileLayer {
        path: path.to_owned(),
        contents,
    })
}

/// The `BATON_*` variables of `env` as one layer. Values stay strings; lossy extraction turns
/// them into numbers and booleans where the schema wants those.
pub(crate) fn env_layer(env: &[(String, String)]) -> Result<impl Provider, ConfigError> {
    let mut vars: Vec<&(String, String)> =
        env.iter().filter(|(name, _)| has_prefix(name)).collect();
    vars.sort();

    let mut dict = Dict::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in vars {
        let path = env_key(name)?;
        let dotted = path.join(".");
        if let Some((_, other)) = names.iter().find(|(key, _)| overlaps(key, &dotted)) {
            return Err(ConfigError::EnvName {
                name: name.clone(),
                reason: format!("sets `{dotted}`, which {other} also sets"),
            });
        }
        insert(&mut dict, &path, Value::from(value.clone()));
        names.insert(dotted, name.clone());
    }

    let metadata = Metadata::named("BATON_* environment variables")
        .source(figment::Source::Custom(ENV_SOURCE.into()))
        .interpolater(move |_: &Profile, keys: &[&str]| {
            let dotted = keys.join(".");
            names.get(&dotted).cloned().unwrap_or_else(|| {
                format!(
                    "{ENV_PREFIX}{}",
                    keys.join(ENV_SEPARATOR).to_ascii_uppercase()
                )
            })
        });
    Ok(DictLayer { dict, metadata })
}

fn has_prefix(name: &str) -> bool {
    name.get(..ENV_PREFIX.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(ENV_PREFIX))
}

/// `BATON_HTTP__LISTEN` -> `["http", "listen"]`.
fn env_key(name: &str) -> Result<Vec<String>, ConfigError> {
    let invalid = |reason: &str| ConfigError::EnvName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let rest = &name[ENV_PREFIX.len()..];
    if !rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(invalid("only letters, digits and `_` may follow BATON_"));
    }
    let path: Vec<String> = rest
        .split(ENV_SEPARATOR)
        .map(str::to_ascii_lowercase)
        .collect();
    if path.iter().any(String::is_empty) {
        return Err(invalid(
            "empty key segment (use `__` only between two key names, e.g. BATON_HTTP__LISTEN)",
        ));
    }
    Ok(path)
}

/// Whether setting `a` and `b` conflicts: equal, or one is a table holding the other.
fn overlaps(a: &str, b: &str) -> bool {
    a == b || b.starts_with(&format!("{a}.")) || a.starts_with(&format!("{b}."))
}

fn insert(dict: &mut Dict, path: &[String], value: Value) {
    match path {
        [] => {}
        [last] => {
            dict.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = dict
                .entry(first.clone())
                .or_insert_with(|| Value::from(Dict::new()));
            if let Value::Dict(_, inner) = entry {
                insert(inner, rest, value);
            }
        }
    }
}

/// Which layer of `figment` set `key` (dotted); `Layer::Default` when none did.
pub(crate) fn layer_of_key(figment: &Figment, key: &str) -> Layer {
    let path: Vec<&str> = key.split('.').collect();
    match figment.find_value(key) {
        Ok(value) => layer_of(figment.get_metadata(value.tag()), &path),
        Err(_) => Layer::Default,
    }
}

fn layer_of<K: AsRef<str>>(metadata: Option<&Metadata>, path: &[K]) -> Layer {
    let Some(md) = metadata else {
        return Layer::Default;
    };
    match &md.source {
        Some(figment::Source::File(p)) => Layer::File(p.clone()),
        Some(figment::Source::Custom(s)) if s == ENV_SOURCE => {
            Layer::Env(md.interpolate(&Profile::Default, path))
        }
        _ => Layer::Default,
    }
}

/// Turns a figment error into a `ConfigError` naming the key and its layer. Messages never
/// echo string values: a misplaced secret must not reach the logs.
pub(crate) fn translate(error: figment::Error) -> ConfigError {
    use figment::error::{Actual, Kind};

    let key = error.path.join(".");
    let origin = layer_of(error.metadata.as_ref(), &error.path);
    if key.is_empty() {
        return match origin {
            Layer::File(path) => ConfigError::ParseFile {
                path,
                message: without_snippets(&error.kind.to_string()),
            },
            _ => ConfigError::Other(first_line(&error.kind.to_string())),
        };
    }
    let shown = |actual: &Actual| match actual {
        Actual::Str(_) => "a string".to_owned(),
        Actual::Char(_) => "a character".to_owned(),
        other => other.to_string(),
    };
    let message = match &error.kind {
        Kind::UnknownField(_, expected) => {
            return ConfigError::UnknownKey {
                key,
                origin,
                expected: expected.join(", "),
            };
        }
        Kind::InvalidType(actual, expected) => {
            format!("expected {expected}, found {}", shown(actual))
        }
        Kind::InvalidValue(actual, expected) => {
            format!("expected {expected}, found {}", shown(actual))
        }
        Kind::UnknownVariant(found, expected) => {
            format!("`{found}` is not one of: {}", expected.join(", "))
        }
        Kind::Message(message) => first_line(message),
        other => other.to_string(),
    };
    ConfigError::InvalidValue {
        key,
        origin,
        message,
    }
}

/// The first line of a parser message: later lines quote the source, which may hold secrets.
fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or_default().trim().to_owned()
}

/// A TOML parser message without its source snippet (`2 | url = "…`), which may hold secrets:
/// the position line and the explanation lines, joined with `; `.
fn without_snippets(message: &str) -> String {
    let is_snippet = |line: &str| {
        line.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ')
            .starts_with('|')
    };
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !is_snippet(line))
        .collect::<Vec<_>>()
        .join("; ")
}
