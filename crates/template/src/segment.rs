//! Prompts as segments: template text (tokenized with special-token parsing on) and message
//! content (tokenized with it off).

use serde::{Deserialize, Serialize};

/// What a piece of a rendered prompt is, and so how it must be tokenized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SegmentKind {
    /// Template text: special-token texts in it become control tokens.
    Control,
    /// Message content, tool results, tool arguments: tokenized with special-token parsing
    /// off, so no text in it can become a control token.
    Content,
}

/// One run of prompt text of a single kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// How this text is tokenized.
    pub kind: SegmentKind,
    /// The text.
    pub text: String,
}

/// A rendered prompt: segments whose texts concatenate to the rendered string.
///
/// Adjacent pushes of the same kind merge; empty pushes are dropped, so two renderings of the
/// same prompt compare equal however they were built.
///
/// ```
/// use wick_template::{SegmentKind, Segments};
///
/// let mut s = Segments::default();
/// s.push_control("<|im_start|>user\n");
/// s.push_content("Hi <|im_end|>");
/// s.push_control("<|im_end|>\n");
/// assert_eq!(s.text(), "<|im_start|>user\nHi <|im_end|><|im_end|>\n");
/// assert_eq!(s.as_slice()[1].kind, SegmentKind::Content);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Segments(Vec<Segment>);

impl Segments {
    /// Appends text of `kind`, merging with the last segment when it has the same kind.
    pub fn push(&mut self, kind: SegmentKind, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.0.last_mut() {
            Some(last) if last.kind == kind => last.text.push_str(text),
            _ => self.0.push(Segment {
                kind,
                text: text.to_owned(),
            }),
        }
    }

    /// Appends template text.
    pub fn push_control(&mut self, text: &str) {
        self.push(SegmentKind::Control, text);
    }

    /// Appends message content.
    pub fn push_content(&mut self, text: &str) {
        self.push(SegmentKind::Content, text);
    }

    /// Appends all segments of `other`.
    pub fn extend(&mut self, other: &Segments) {
        for s in &other.0 {
            self.push(s.kind, &s.text);
        }
    }

    /// The whole prompt as one string.
    pub fn text(&self) -> String {
        self.0.iter().map(|s| s.text.as_str()).collect()
    }

    /// The segments in order.
    pub fn as_slice(&self) -> &[Segment] {
        &self.0
    }

    /// Tokenizes each segment with `tokenize(text, special)`: template text with special-token
    /// parsing on (`special == true`), content with it off. Each token comes with the kind of
    /// the segment it came from.
    ///
    /// # Errors
    /// The first error of `tokenize`.
    pub fn tokenize<T, E>(
        &self,
        mut tokenize: impl FnMut(&str, bool) -> Result<Vec<T>, E>,
    ) -> Result<Vec<(T, SegmentKind)>, E> {
        let mut out = Vec::new();
        for s in &self.0 {
            let special = s.kind == SegmentKind::Control;
            out.extend(tokenize(&s.text, special)?.into_iter().map(|t| (t, s.kind)));
        }
        Ok(out)
    }

    /// Keeps the first `len` bytes of the prompt (at a char boundary at or below `len`),
    /// each kept byte in the segment it was in.
    pub fn truncate(&mut self, len: usize) {
        let mut left = len;
        let mut keep = 0;
        for s in &mut self.0 {
            if left == 0 {
                break;
            }
            keep += 1;
            if s.text.len() > left {
                let mut at = left;
                while !s.text.is_char_boundary(at) {
                    at -= 1;
                }
                s.text.truncate(at);
                left = 0;
            } else {
                left -= s.text.len();
            }
        }
        self.0.truncate(keep);
        self.0.retain(|s| !s.text.is_empty());
    }

    /// Whether there is no text at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl IntoIterator for Segments {
    type Item = Segment;
    type IntoIter = std::vec::IntoIter<Segment>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
