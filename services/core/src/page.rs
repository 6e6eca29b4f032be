//! Page sizes and cursors shared by the list use cases.

use crate::error::CoreError;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// Validates a client-supplied page size, defaulting when absent.
pub fn limit(requested: Option<u32>) -> Result<u32, CoreError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(CoreError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {n}"
        ))),
    }
}

/// A page of items and the cursor to fetch the next one, if there may be more.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// `items` read with a page size of `limit`: a full page names the cursor of its last
    /// item (`cursor_of`), as the next page starts after it; a shorter one is the last.
    pub fn of(items: Vec<T>, limit: u32, cursor_of: impl Fn(&T) -> String) -> Page<T> {
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(cursor_of))
            .flatten();
        Page { items, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn limits_default_and_are_bounded() {
        assert_eq!(super::limit(None).ok(), Some(super::DEFAULT_LIMIT));
        assert!(super::limit(Some(0)).is_err());
        assert!(super::limit(Some(super::MAX_LIMIT + 1)).is_err());
        assert_eq!(super::limit(Some(7)).ok(), Some(7));
    }
}
