//! Small helpers for blocks made of markers, names and argument sections.

use crate::engine::Step;
use crate::scan::{scan, Hit};

/// Longest name accepted before a call commits (bounds the look-behind of held text).
pub(crate) const MAX_NAME: usize = 256;

/// The result of reading text up to a terminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// The text before terminator `idx` is `len` bytes long; `end` is after the terminator.
    Found { len: usize, idx: usize, end: usize },
    /// More input needed.
    Need,
    /// A character not allowed, or too long, or the end of output.
    Bad,
}

/// Reads text made of `ok` characters up to one of `terms`.
pub(crate) fn until(s: &str, terms: &[&str], ok: fn(char) -> bool, eof: bool) -> Until {
    let hit = scan(s, terms, eof);
    let (limit, found) = match hit {
        Hit::Full { at, idx } => (at, Some(idx)),
        Hit::Partial { at } => (at, None),
        Hit::None => (s.len(), None),
    };
    let body = &s[..limit];
    if body.len() > MAX_NAME || !body.chars().all(ok) {
        return Until::Bad;
    }
    match found {
        Some(idx) => Until::Found {
            len: limit,
            idx,
            end: limit + terms[idx].len(),
        },
        None if eof => Until::Bad,
        None => Until::Need,
    }
}

/// Characters of a function name.
pub(crate) fn name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | '/')
}

/// Any character but a newline or `<`.
pub(crate) fn line_char(c: char) -> bool {
    c != '\n' && c != '<'
}

/// Skips to before (or after, with `consume`) the first of `markers`; without one, skips
/// everything.
pub(crate) fn skip_until(
    rest: &str,
    markers: &[&str],
    eof: bool,
    base: usize,
    consume: bool,
) -> Step {
    match scan(rest, markers, eof) {
        Hit::Full { at, idx } => {
            Step::Done(base + at + if consume { markers[idx].len() } else { 0 })
        }
        Hit::Partial { at } => Step::Need(base + at),
        Hit::None => Step::Need(base + rest.len()),
    }
}

/// The next non-whitespace character of `s` and its offset.
pub(crate) fn peek(s: &str) -> Option<(usize, char)> {
    s.char_indices().find(|(_, c)| !c.is_whitespace())
}
