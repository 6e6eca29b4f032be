//! A model's reasoning apart from its answer. Servers send reasoning in a field of its own
//! (`reasoning_content`, or `reasoning`), or the model writes it inline as one
//! `<think>…</think>` block that opens its content. [`ThinkSplitter`] takes content as
//! it streams and hands back what is answer and what is reasoning; the only text it holds
//! back is leading text that may still turn out to open the block, or the end of the
//! block cut by a chunk boundary. A `<think>` anywhere else is part of the answer.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// Content split into answer and reasoning.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    pub answer: String,
    pub reasoning: String,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Only whitespace so far: the content may still open a block.
    #[default]
    Start,
    /// Within the opening block.
    Inside,
    /// Past the block, or there was none: the rest is answer.
    Answer,
}

/// Splits a leading `<think>` block out of content fed piece by piece.
#[derive(Debug, Default)]
pub(crate) struct ThinkSplitter {
    place: Place,
    /// Text not handed out yet.
    held: String,
    /// A block was seen.
    pub seen: bool,
}

impl ThinkSplitter {
    /// Takes in the next piece of content.
    pub fn feed(&mut self, piece: &str) -> Split {
        let mut out = Split::default();
        self.held.push_str(piece);
        loop {
            match self.place {
                Place::Answer => {
                    out.answer.push_str(&std::mem::take(&mut self.held));
                    return out;
                }
                Place::Start => {
                    let rest = self.held.trim_start();
                    if let Some(after) = rest.strip_prefix(OPEN) {
                        self.held = after.to_string();
                        self.place = Place::Inside;
                        self.seen = true;
                    } else if OPEN.starts_with(rest) {
                        // Whitespace, or a start of the tag cut by the chunk: wait.
                        return out;
                    } else {
                        self.place = Place::Answer;
                    }
                }
                Place::Inside => {
                    if let Some(at) = self.held.find(CLOSE) {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held.drain(..at + CLOSE.len());
                        self.place = Place::Answer;
                        continue;
                    }
                    let keep = tag_start_at_end(&self.held, CLOSE);
                    let emit = self.held.len() - keep;
                    out.reasoning.push_str(&self.held[..emit]);
                    self.held.drain(..emit);
                    return out;
                }
            }
        }
    }

    /// The end of the content: what was held back is text after all (a block left open
    /// stays reasoning).
    pub fn finish(&mut self) -> Split {
        let mut out = Split::default();
        let rest = std::mem::take(&mut self.held);
        match self.place {
            Place::Inside => out.reasoning = rest,
            Place::Start | Place::Answer => out.answer = rest,
        }
        out
    }

    /// Splits whole content at once; whether it opened with a block.
    pub fn split(content: &str) -> (Split, bool) {
        let mut s = ThinkSplitter::default();
        let mut out = s.feed(content);
        let rest = s.finish();
        out.answer.push_str(&rest.answer);
        out.reasoning.push_str(&rest.reasoning);
        (out, s.seen)
    }
}

/// The length of the longest end of `text` that is a proper start of `tag`.
fn tag_start_at_end(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            n <= text.len()
                && text.is_char_boundary(text.len() - n)
                && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `content` cut at every pair of points, and checks each cut gives `want`.
    fn every_cut(content: &str, want: (&str, &str)) {
        let bounds: Vec<usize> = (0..=content.len())
            .filter(|&i| content.is_char_boundary(i))
            .collect();
        for &a in &bounds {
            for &b in bounds.iter().filter(|&&b| b >= a) {
                let mut s = ThinkSplitter::default();
                let mut got = Split::default();
                for piece in [&content[..a], &content[a..b], &content[b..]] {
                    let out = s.feed(piece);
                    got.answer.push_str(&out.answer);
                    got.reasoning.push_str(&out.reasoning);
                }
                let out = s.finish();
                got.answer.push_str(&out.answer);
                got.reasoning.push_str(&out.reasoning);
                assert_eq!(
                    (got.answer.as_str(), got.reasoning.as_str()),
                    want,
                    "cut at {a} and {b} of {content:?}"
                );
            }
        }
    }

    #[test]
    fn a_leading_block_splits_out_wherever_the_chunks_cut_the_tags() {
        every_cut("<think>plan ü</think>The answer", ("The answer", "plan ü"));
        every_cut("\n <think>r</think>a<think>b", ("a<think>b", "r"));
        every_cut("<think>left open", ("", "left open"));
    }

    #[test]
    fn a_think_tag_anywhere_else_is_part_of_the_answer() {
        every_cut(
            "Wrap it in a <think> tag </think> like so",
            ("Wrap it in a <think> tag </think> like so", ""),
        );
        every_cut("x <thin", ("x <thin", ""));
        every_cut("<thinking>", ("<thinking>", ""));
        every_cut("  ", ("  ", ""));
    }

    #[test]
    fn nothing_is_held_back_once_the_answer_has_begun() {
        let mut s = ThinkSplitter::default();
        assert_eq!(s.feed("Hello <").answer, "Hello <");
        assert_eq!(s.feed("think>").answer, "think>");
        assert!(!s.seen);
        let (split, seen) = ThinkSplitter::split("<think>r</think>a");
        assert!(seen);
        assert_eq!(
            (split.answer.as_str(), split.reasoning.as_str()),
            ("a", "r")
        );
    }
}
