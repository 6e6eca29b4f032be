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

/// Every item of a listing kept in use and archived, read page by page: `list(archived,
/// before)` reads at most [`MAX_LIMIT`] items after cursor `before` (the `cursor_of` of
/// the previous page's last item), and `keep` chooses what is collected.
pub async fn every<T, C, E, F>(
    mut list: impl FnMut(bool, Option<C>) -> F,
    cursor_of: impl Fn(&T) -> C,
    keep: impl Fn(&T) -> bool,
) -> Result<Vec<T>, E>
where
    F: std::future::Future<Output = Result<Vec<T>, E>>,
{
    let mut found = Vec::new();
    for archived in [false, true] {
        let mut before = None;
        loop {
            let page = list(archived, before).await?;
            let full = page.len() == MAX_LIMIT as usize;
            before = page.last().map(&cursor_of);
            found.extend(page.into_iter().filter(&keep));
            if !full {
                break;
            }
        }
    }
    Ok(found)
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

    #[tokio::test]
    async fn every_reads_each_listing_to_its_last_short_page() {
        let max = super::MAX_LIMIT as usize;
        // In use: a full page, then a short one; archived: one short page.
        let in_use: Vec<usize> = (0..max + 3).collect();
        let archived: Vec<usize> = (10_000..10_005).collect();
        let mut asked = Vec::new();
        let found = super::every(
            |archived_too: bool, before: Option<usize>| {
                asked.push((archived_too, before));
                let all = if archived_too { &archived } else { &in_use };
                let start =
                    before.map_or(0, |b| all.iter().position(|x| *x == b).map_or(0, |i| i + 1));
                let page: Vec<usize> = all[start..].iter().take(max).copied().collect();
                std::future::ready(Ok::<_, ()>(page))
            },
            |x| *x,
            |x| x % 2 == 0,
        )
        .await
        .expect("listed");
        assert_eq!(
            asked,
            vec![(false, None), (false, Some(max - 1)), (true, None)]
        );
        let expected: Vec<usize> = in_use
            .iter()
            .chain(&archived)
            .copied()
            .filter(|x| x % 2 == 0)
            .collect();
        assert_eq!(found, expected);
    }
}
