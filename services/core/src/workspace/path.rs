//! Workspace paths: what a tenant may name a file. A path is hostile until it passes
//! [`normalize`]: it arrives percent-decoded (so `%2e%2e` is already `..`) and leaves as a
//! relative, `/`-separated path whose every segment is a plain name, so it can neither
//! climb out of the workspace nor mean two different files. Paths are keys of the store,
//! never opened on the host as given.

use crate::error::CoreError;

/// The longest path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The longest segment (a file or directory name), in bytes: what Linux file systems hold.
pub const MAX_SEGMENT_BYTES: usize = 255;
/// The deepest nesting.
pub const MAX_DEPTH: usize = 32;

/// `path` as stored, or why it is refused (`InvalidPath`, naming the rule broken but
/// never echoing control characters).
pub fn normalize(path: &str) -> Result<String, CoreError> {
    let refuse = |why: &str| Err(CoreError::InvalidPath(format!("file path {why}")));
    if path.is_empty() {
        return refuse("is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return refuse(&format!("is longer than {MAX_PATH_BYTES} bytes"));
    }
    if path.starts_with('/') {
        return refuse("must be relative (it starts with /)");
    }
    if path.contains('\\') {
        return refuse("may not hold a backslash");
    }
    if path.chars().any(char::is_control) {
        return refuse("may not hold NUL or other control characters");
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() > MAX_DEPTH {
        return refuse(&format!("is nested deeper than {MAX_DEPTH} levels"));
    }
    for segment in &segments {
        match *segment {
            "" => return refuse("may not hold an empty segment (// or a trailing /)"),
            "." | ".." => return refuse("may not hold . or .. segments"),
            s if s.len() > MAX_SEGMENT_BYTES => {
                return refuse(&format!("has a name longer than {MAX_SEGMENT_BYTES} bytes"));
            }
            s if s.trim() != s => {
                return refuse("may not have a name starting or ending with whitespace");
            }
            _ => {}
        }
    }
    Ok(path.to_string())
}

/// The last segment of a normalised path: the file's name.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_paths_pass_unchanged() {
        for p in [
            "a.txt",
            "outputs/report.csv",
            "uploads/ünïcode name.md",
            "a/b/c/.hidden",
        ] {
            assert_eq!(normalize(p).expect(p), p);
        }
    }

    #[test]
    fn every_escape_and_ambiguity_is_refused_with_its_rule() {
        let cases = [
            ("", "empty"),
            ("/etc/passwd", "relative"),
            ("../x", ". or .."),
            ("outputs/../../x", ". or .."),
            ("outputs/./x", ". or .."),
            ("outputs//x", "empty segment"),
            ("outputs/", "empty segment"),
            ("outputs\\..\\x", "backslash"),
            ("a\0b", "control"),
            ("a\nb", "control"),
            (" a", "whitespace"),
        ];
        for (path, rule) in cases {
            let err = normalize(path).expect_err(path).to_string();
            assert!(err.contains(rule), "{path:?}: {err}");
            assert!(!err.contains('\0') && !err.contains('\n'), "{err:?}");
        }
        let long = "a".repeat(MAX_SEGMENT_BYTES + 1);
        assert!(normalize(&long).is_err());
        assert!(normalize(&vec!["a"; MAX_DEPTH].join("/")).is_ok());
        assert!(normalize(&"ab/".repeat(MAX_PATH_BYTES / 3 + 1)).is_err());
        assert!(normalize(&vec!["a"; MAX_DEPTH + 1].join("/")).is_err());
    }

    #[test]
    fn the_file_name_is_the_last_segment() {
        assert_eq!(file_name("outputs/report.csv"), "report.csv");
        assert_eq!(file_name("a.txt"), "a.txt");
    }
}
