//! Marker scanning with a bounded look-behind: find the first marker in a buffer, or the
//! position from which the buffer's tail could still become one.

/// Where the first marker (or a possible marker) starts in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hit {
    /// Marker `idx` starts at byte `at`.
    Full { at: usize, idx: usize },
    /// The text from `at` to its end is a proper prefix of some marker.
    Partial { at: usize },
    /// No marker and no partial marker.
    None,
}

/// Finds the earliest marker of `markers` in `s`. At `eof`, partial markers do not count.
/// At one position the longest full marker wins, but a longer marker that `s` could still
/// complete makes the hit partial (wait for more text).
pub(crate) fn scan(s: &str, markers: &[&str], eof: bool) -> Hit {
    if markers.is_empty() {
        return Hit::None;
    }
    let bytes = s.as_bytes();
    for (at, &b) in bytes.iter().enumerate() {
        if !markers.iter().any(|m| m.as_bytes().first() == Some(&b)) {
            continue;
        }
        let rest = &bytes[at..];
        let mut best: Option<(usize, usize)> = None;
        let mut partial = false;
        for (idx, m) in markers.iter().enumerate() {
            let m = m.as_bytes();
            if rest.starts_with(m) {
                if best.is_none_or(|(_, len)| m.len() > len) {
                    best = Some((idx, m.len()));
                }
            } else if !eof && m.starts_with(rest) {
                partial = true;
            }
        }
        if partial {
            return Hit::Partial { at };
        }
        if let Some((idx, _)) = best {
            return Hit::Full { at, idx };
        }
    }
    Hit::None
}

/// The result of matching one of several literals at the start of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lit {
    /// Literal `idx` matched; `len` bytes (leading whitespace included) are consumed.
    Match { idx: usize, len: usize },
    /// The text (after whitespace) is a proper prefix of a literal: more input is needed.
    Partial,
    /// No literal matches.
    No,
}

/// Matches one of `alts` at the start of `s`, after whitespace when `ws` is set.
pub(crate) fn lit(s: &str, alts: &[&str], ws: bool, eof: bool) -> Lit {
    let skip = if ws {
        s.len() - s.trim_start().len()
    } else {
        0
    };
    let rest = &s[skip..];
    let mut best: Option<(usize, usize)> = None;
    let mut partial = false;
    for (idx, a) in alts.iter().enumerate() {
        if rest.starts_with(a) {
            if best.is_none_or(|(_, len)| a.len() > len) {
                best = Some((idx, a.len()));
            }
        } else if a.starts_with(rest) {
            partial = true;
        }
    }
    if partial && !eof {
        return Lit::Partial;
    }
    match best {
        Some((idx, len)) => Lit::Match {
            idx,
            len: skip + len,
        },
        None if rest.is_empty() && !eof => Lit::Partial,
        None => Lit::No,
    }
}

/// Length of the leading whitespace of `s`.
pub(crate) fn ws_len(s: &str) -> usize {
    s.len() - s.trim_start().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_full_and_partial() {
        assert_eq!(scan("ab<x>c", &["<x>"], false), Hit::Full { at: 2, idx: 0 });
        assert_eq!(scan("ab<x", &["<x>"], false), Hit::Partial { at: 2 });
        assert_eq!(scan("ab<x", &["<x>"], true), Hit::None);
        assert_eq!(scan("a<y<x>", &["<x>"], false), Hit::Full { at: 3, idx: 0 });
        assert_eq!(
            scan("<ab>", &["<a", "<ab>"], false),
            Hit::Full { at: 0, idx: 1 }
        );
    }

    #[test]
    fn lit_matches_after_whitespace() {
        assert_eq!(
            lit(" \n</a>x", &["</a>"], true, false),
            Lit::Match { idx: 0, len: 6 }
        );
        assert_eq!(lit(" </", &["</a>"], true, false), Lit::Partial);
        assert_eq!(lit(" x", &["</a>"], true, false), Lit::No);
        assert_eq!(lit("  ", &["</a>"], true, false), Lit::Partial);
        assert_eq!(lit("  ", &["</a>"], true, true), Lit::No);
    }
}
