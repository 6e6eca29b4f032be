//! Metric label values that come from data (a model's name, a failure's code), kept to a
//! bounded set: each family takes the first [`MAX_VALUES`] distinct values this process
//! sees, and counts every later one as `other`. A tenant naming a thousand models cannot
//! make a thousand series.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// Distinct values one family keeps before the rest become `other`.
pub const MAX_VALUES: usize = 50;

/// The value to label with: `value` itself while the family has room or already holds
/// it, else `other`. Values longer than 64 bytes are `other` too.
pub fn bounded(family: &'static str, value: &str) -> String {
    static SEEN: Mutex<Option<HashMap<&'static str, HashSet<String>>>> = Mutex::new(None);
    if value.len() > 64 {
        return "other".to_owned();
    }
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let values = seen
        .get_or_insert_with(HashMap::new)
        .entry(family)
        .or_default();
    if values.contains(value) {
        return value.to_owned();
    }
    if values.len() < MAX_VALUES {
        values.insert(value.to_owned());
        return value.to_owned();
    }
    "other".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_keeps_its_first_values_and_calls_the_rest_other() {
        for i in 0..MAX_VALUES {
            assert_eq!(bounded("test.family", &format!("v{i}")), format!("v{i}"));
        }
        assert_eq!(bounded("test.family", "one-too-many"), "other");
        assert_eq!(bounded("test.family", "v3"), "v3", "a kept value stays");
        assert_eq!(bounded("test.other_family", "v-new"), "v-new", "per family");
        assert_eq!(bounded("test.other_family", &"x".repeat(65)), "other");
    }
}
