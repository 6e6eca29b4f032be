//! Checks on client-supplied text shared by the use cases. Both databases must accept
//! whatever passes: Postgres refuses NUL characters in text and JSON, so they are refused
//! here, for every field, with the field named.

use crate::error::CoreError;

/// `value` has at most `max` characters and no NUL.
pub fn text(field: &str, value: &str, max: usize) -> Result<(), CoreError> {
    if value.contains('\0') {
        return Err(CoreError::invalid(format!(
            "{field} must not contain NUL characters"
        )));
    }
    if value.chars().count() > max {
        return Err(CoreError::invalid(format!(
            "{field} is longer than {max} characters"
        )));
    }
    Ok(())
}

/// Like [`text`], and not empty or blank.
pub fn non_blank(field: &str, value: &str, max: usize) -> Result<(), CoreError> {
    if value.trim().is_empty() {
        return Err(CoreError::invalid(format!("{field} must not be empty")));
    }
    text(field, value, max)
}

/// A client-supplied JSON value: no NUL character in any string or object key, at any
/// depth (Postgres cannot store one in JSONB).
pub fn json(field: &str, value: &serde_json::Value) -> Result<(), CoreError> {
    fn has_nul(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains('\0'),
            serde_json::Value::Array(items) => items.iter().any(has_nul),
            serde_json::Value::Object(map) => {
                map.iter().any(|(k, v)| k.contains('\0') || has_nul(v))
            }
            _ => false,
        }
    }
    if has_nul(value) {
        return Err(CoreError::invalid(format!(
            "{field} must not contain NUL characters"
        )));
    }
    Ok(())
}

/// A client idempotency key: 1 to `max` characters, no control characters.
pub fn request_id(id: Option<&str>, max: usize) -> Result<(), CoreError> {
    match id {
        Some("") => Err(CoreError::invalid("request_id must not be empty")),
        Some(id) if id.chars().any(char::is_control) => Err(CoreError::invalid(
            "request_id must not contain control characters",
        )),
        Some(id) => text("request_id", id, max),
        None => Ok(()),
    }
}

/// The `request_id` prefixes of the runs Baton starts itself: a schedule's fires
/// (`schedule:<id>:…`) and a delegate call's child (`delegate:<receipt>`).
pub const RESERVED_REQUEST_ID_PREFIXES: [&str; 2] = ["schedule:", "delegate:"];

/// A client's `request_id` uses none of [`RESERVED_REQUEST_ID_PREFIXES`], so it can never
/// take the place of a fire or a delegation's child.
pub fn client_request_id(id: Option<&str>) -> Result<(), CoreError> {
    match id {
        Some(id)
            if RESERVED_REQUEST_ID_PREFIXES
                .iter()
                .any(|p| id.starts_with(p)) =>
        {
            Err(CoreError::invalid(format!(
                "request_id must not start with {}: those name the runs Baton starts itself",
                RESERVED_REQUEST_ID_PREFIXES.join(" or ")
            )))
        }
        _ => Ok(()),
    }
}

/// An optional cursor or version from a client: absent means 0.
pub fn non_negative(field: &str, v: Option<i64>) -> Result<i64, CoreError> {
    match v {
        Some(n) if n < 0 => Err(CoreError::invalid(format!(
            "{field} must not be negative, got {n}"
        ))),
        v => Ok(v.unwrap_or(0)),
    }
}

/// An absolute `http` or `https` URL with a host. The error names the field, never
/// echoes the value (it may hold credentials).
pub fn http_url(field: &str, value: &str) -> Result<url::Url, CoreError> {
    text(field, value, 2048)?;
    match url::Url::parse(value) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u),
        _ => Err(CoreError::invalid(format!(
            "{field} must be an absolute http or https URL"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_blank_and_overlong_text_is_refused_naming_the_field() {
        let msg = |r: Result<(), CoreError>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg(text("title", "a\0b", 10)).contains("title"));
        assert!(msg(text("title", "abcdef", 5)).contains("longer than 5"));
        assert!(msg(non_blank("content", " \n", 5)).contains("content must not be empty"));
        assert!(
            text("title", "héllo", 5).is_ok(),
            "counts characters, not bytes"
        );
    }

    #[test]
    fn json_with_a_nul_anywhere_is_refused_naming_the_field() {
        let msg = |v: serde_json::Value| json("input_schema", &v).err().map(|e| e.to_string());
        for bad in [
            serde_json::json!("a\u{0}b"),
            serde_json::json!({"properties": {"q": {"description": "\u{0}"}}}),
            serde_json::json!({"a\u{0}": 1}),
            serde_json::json!([1, ["\u{0}"]]),
        ] {
            let err = msg(bad.clone()).unwrap_or_else(|| panic!("{bad} passed"));
            assert!(err.contains("input_schema must not contain NUL"), "{err}");
        }
        assert_eq!(
            msg(serde_json::json!({"type": "object", "n": [1, null, true]})),
            None
        );
    }
}
