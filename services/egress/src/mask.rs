//! Masking the secrets an outbound call carried (an API key, a tool's secret headers) in
//! whatever comes back: outputs, error messages, events. Masking comes before any cut to
//! a size limit, so a secret at the cut is never shown in part.

/// What a secret is replaced with.
pub const MASK: &str = "***";

/// The secret values one call carried.
#[derive(Debug, Clone, Default)]
pub struct Mask {
    /// Longest first, so a secret that contains another is masked whole.
    secrets: Vec<String>,
}

/// The shortest credential after an authorization scheme (`Bearer <credential>`) masked
/// on its own: shorter ones are too likely to be ordinary words.
const MIN_CREDENTIAL: usize = 8;

impl Mask {
    /// Masks each of `secrets`; of a header value in the `<scheme> <credential>` form
    /// (`Bearer ...`, `Basic ...`), the credential alone too, since a server that echoes
    /// it back rarely echoes the scheme.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .flat_map(|s| {
                let credential = s
                    .split_once(' ')
                    .filter(|(scheme, _)| {
                        !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphabetic())
                    })
                    .map(|(_, credential)| credential.trim().to_string())
                    .filter(|c| c.len() >= MIN_CREDENTIAL);
                std::iter::once(s).chain(credential)
            })
            .filter(|s| !s.is_empty())
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets }
    }

    /// The length in bytes of the longest secret: how far past a cut to read, so that a
    /// secret across it is seen whole.
    pub fn longest(&self) -> usize {
        self.secrets.first().map_or(0, String::len)
    }

    /// `text` with every secret replaced by `***`.
    pub fn apply(&self, text: &str) -> String {
        let mut text = text.to_string();
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), MASK);
            }
        }
        text
    }

    /// `text` masked, then cut to at most `max` bytes on a character boundary; and
    /// whether it was cut.
    pub fn apply_and_cut(&self, text: &str, max: usize) -> (String, bool) {
        cut(self.apply(text), max)
    }
}

/// `text` cut to at most `max` bytes on a character boundary; and whether it was cut.
pub fn cut(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-live-7fQ2xZ9pLm4Kw8Rt1Yv6Nb3Hc5Jd0";

    /// Whether any run of 4 or more characters of `secret` shows in `text`.
    fn shows_part_of(text: &str, secret: &str) -> bool {
        let chars: Vec<char> = secret.chars().collect();
        (0..chars.len()).any(|i| {
            (i + 4..=chars.len()).any(|j| text.contains(&chars[i..j].iter().collect::<String>()))
        })
    }

    #[test]
    fn a_secret_at_every_offset_around_the_cut_is_never_shown_in_part() {
        let mask = Mask::new([KEY.to_string(), "hdr-secret-Q1w2E3r4".to_string()]);
        let max = 300;
        for secret in [KEY, "hdr-secret-Q1w2E3r4"] {
            for offset in max - secret.len() - 3..=max + 3 {
                let text = format!("{}{secret}{}", ".".repeat(offset), ".".repeat(50));
                let (shown, cut) = mask.apply_and_cut(&text, max);
                assert!(cut, "offset {offset}");
                assert!(shown.len() <= max);
                assert!(
                    !shows_part_of(&shown, secret),
                    "offset {offset}: {}",
                    &shown[shown.len().saturating_sub(40)..]
                );
            }
        }
    }

    #[test]
    fn the_credential_after_an_authorization_scheme_is_masked_alone() {
        let mask = Mask::new(["Bearer tok-9f8e7d6c".to_string(), "Token short".to_string()]);
        assert_eq!(
            mask.apply("got Bearer tok-9f8e7d6c and tok-9f8e7d6c"),
            "got *** and ***"
        );
        assert_eq!(mask.apply("a short answer"), "a short answer");
    }

    #[test]
    fn every_occurrence_is_masked_and_a_longer_secret_first() {
        let mask = Mask::new(["abcd".to_string(), "abcdef".to_string(), String::new()]);
        assert_eq!(mask.apply("x abcdef y abcd z"), "x *** y *** z");
        assert_eq!(mask.longest(), 6);
        assert_eq!(Mask::default().apply("nothing"), "nothing");
        let (shown, cut) = Mask::default().apply_and_cut("héllo", 2);
        assert_eq!(
            (shown.as_str(), cut),
            ("h", true),
            "cut on a character boundary"
        );
    }
}
