//! A run's metadata (string labels clients set to find runs by) and the filters of the
//! run list: the bounds every label, patch and filter is checked against.

use crate::error::CoreError;
use crate::ports::{RunFilter, fold_title};
use crate::validate;
use baton_events::Metadata;
use serde::Deserialize;

/// Most labels one run carries.
pub const MAX_METADATA_KEYS: usize = 16;
/// Longest label key, in characters (ASCII letters, digits, `_`, `-`, `.`).
pub const MAX_METADATA_KEY_CHARS: usize = 64;
/// Longest label value, in characters.
pub const MAX_METADATA_VALUE_CHARS: usize = 512;
/// Longest title search, in characters.
pub const MAX_SEARCH_CHARS: usize = 200;

/// Checks `metadata` against the bounds: a run's labels, or the result of a patch.
pub fn check(metadata: &Metadata) -> Result<(), CoreError> {
    if metadata.len() > MAX_METADATA_KEYS {
        return Err(CoreError::invalid(format!(
            "metadata holds at most {MAX_METADATA_KEYS} keys, not {}",
            metadata.len()
        )));
    }
    for (key, value) in metadata {
        check_key(key)?;
        check_value(key, value)?;
    }
    Ok(())
}

/// A key is 1 to 64 ASCII letters, digits, `_`, `-` or `.`: safe in a query string, a
/// header or a file name, and never mistaken for the `:` of a filter.
pub fn check_key(key: &str) -> Result<(), CoreError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if key.is_empty() || key.len() > MAX_METADATA_KEY_CHARS || !key.chars().all(allowed) {
        return Err(CoreError::invalid(format!(
            "metadata key {:?} must be 1 to {MAX_METADATA_KEY_CHARS} ASCII letters, digits, \
             '_', '-' or '.'",
            truncate(key)
        )));
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<(), CoreError> {
    validate::text(
        &format!("metadata value of {key:?}"),
        value,
        MAX_METADATA_VALUE_CHARS,
    )?;
    if value.chars().any(char::is_control) {
        return Err(CoreError::invalid(format!(
            "metadata value of {key:?} must not contain control characters"
        )));
    }
    Ok(())
}

/// A key shown in an error, cut to a readable length.
fn truncate(key: &str) -> String {
    key.chars().take(MAX_METADATA_KEY_CHARS + 1).collect()
}

/// A change to a run's title and metadata: a JSON merge patch (RFC 7396) of both.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPatch {
    /// The new title (at most 200 characters); `null` removes it; absent keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, max_length = 200)]
    pub title: Option<Option<String>>,
    /// Keys to set (a string value) or remove (`null`); keys not named stay as they are.
    /// `null` for the whole object removes every key.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<std::collections::BTreeMap<String, Option<String>>>)]
    pub metadata: Option<Option<std::collections::BTreeMap<String, Option<String>>>>,
}

/// A field that is present deserializes to `Some`, even when it is `null`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl RunPatch {
    /// `current` with the patch applied, checked against the bounds.
    pub fn apply(
        &self,
        title: Option<&str>,
        current: &Metadata,
    ) -> Result<(Option<String>, Metadata), CoreError> {
        let title = match &self.title {
            None => title.map(str::to_string),
            Some(None) => None,
            Some(Some(t)) => {
                validate::text("title", t, super::MAX_TITLE_CHARS)?;
                Some(t.clone())
            }
        };
        let mut metadata = match &self.metadata {
            Some(None) => Metadata::new(),
            _ => current.clone(),
        };
        let changes = self.metadata.iter().flatten().flatten();
        for (key, value) in changes {
            check_key(key)?;
            match value {
                Some(v) => {
                    metadata.insert(key.clone(), v.clone());
                }
                None => {
                    metadata.remove(key);
                }
            }
        }
        check(&metadata)?;
        Ok((title, metadata))
    }
}

/// `filter` with its bounds checked and its title search folded.
pub fn check_filter(mut filter: RunFilter) -> Result<RunFilter, CoreError> {
    if filter.metadata.len() > MAX_METADATA_KEYS {
        return Err(CoreError::invalid(format!(
            "at most {MAX_METADATA_KEYS} metadata filters, not {}",
            filter.metadata.len()
        )));
    }
    for (key, value) in &filter.metadata {
        check_key(key)?;
        check_value(key, value)?;
    }
    if let Some(q) = &filter.title_contains {
        validate::non_blank("the title search", q, MAX_SEARCH_CHARS)?;
        filter.title_contains = Some(fold_title(q));
    }
    for (field, after, before) in [
        ("created", filter.created_after, filter.created_before),
        ("updated", filter.updated_after, filter.updated_before),
    ] {
        if let (Some(a), Some(b)) = (after, before)
            && a >= b
        {
            return Err(CoreError::invalid(format!(
                "{field}_after must be earlier than {field}_before"
            )));
        }
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_values_and_counts_are_bounded() {
        assert!(check(&labels(&[("team", "support"), ("a.b-c_9", "")])).is_ok());
        for bad in ["", "has space", "colon:key", "ünïcode", &"k".repeat(65)] {
            let err = check(&labels(&[(bad, "v")])).expect_err(bad).to_string();
            assert!(err.contains("metadata key"), "{err}");
        }
        let long = "v".repeat(MAX_METADATA_VALUE_CHARS + 1);
        assert!(check(&labels(&[("k", &long)])).is_err());
        assert!(check(&labels(&[("k", "line\nbreak")])).is_err());
        let many: Metadata = (0..=MAX_METADATA_KEYS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let err = check(&many).expect_err("17 keys").to_string();
        assert!(err.contains("at most 16"), "{err}");
    }

    #[test]
    fn a_patch_sets_removes_and_keeps_and_is_checked_as_a_whole() {
        let current = labels(&[("a", "1"), ("b", "2")]);
        let patch: RunPatch =
            serde_json::from_str(r#"{"metadata": {"a": null, "c": "3"}}"#).expect("patch");
        let (title, after) = patch.apply(Some("t"), &current).expect("applies");
        assert_eq!(title.as_deref(), Some("t"), "absent keeps the title");
        assert_eq!(after, labels(&[("b", "2"), ("c", "3")]));
        let clear: RunPatch = serde_json::from_str(r#"{"title": null}"#).expect("patch");
        assert_eq!(clear.apply(Some("t"), &current).expect("ok").0, None);
        let all: RunPatch = serde_json::from_str(r#"{"metadata": null}"#).expect("patch");
        assert_eq!(all.apply(None, &current).expect("ok").1, Metadata::new());
        let full: Metadata = (0..MAX_METADATA_KEYS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let one_more: RunPatch =
            serde_json::from_str(r#"{"metadata": {"extra": "x"}}"#).expect("patch");
        assert!(
            one_more.apply(None, &full).is_err(),
            "17 keys after the patch"
        );
        let unknown = serde_json::from_str::<RunPatch>(r#"{"status": "x"}"#);
        assert!(unknown.is_err());
    }

    #[test]
    fn filters_are_checked_and_their_search_folded() {
        let f = RunFilter {
            title_contains: Some("Ünïcode".into()),
            ..RunFilter::default()
        };
        let f = check_filter(f).expect("ok");
        assert_eq!(f.title_contains.as_deref(), Some("ünïcode"));
        let now = chrono::Utc::now();
        let backwards = RunFilter {
            created_after: Some(now),
            created_before: Some(now),
            ..RunFilter::default()
        };
        assert!(check_filter(backwards).is_err());
        let blank = RunFilter {
            title_contains: Some("  ".into()),
            ..RunFilter::default()
        };
        assert!(check_filter(blank).is_err());
    }
}
