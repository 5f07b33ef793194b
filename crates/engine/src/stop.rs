//! Stop strings that may span tokens: partial matches are held back, never emitted.

/// Finds the first stop string in a stream of text pieces.
///
/// Text that could still be the start of a stop string is held back until it is decided; once
/// a stop string is complete, the text before it is released and the rest is discarded. The
/// work per piece is bounded by the piece plus the longest stop string.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released: always shorter than the longest stop string.
    held: String,
    max_len: usize,
}

/// What one [`StopMatcher::push`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopScan {
    /// No stop string yet: this text is safe to emit (it may be empty while text is held).
    Continue(String),
    /// A stop string completed: emit this text (before the stop string) and end.
    Stopped {
        /// The text before the stop string.
        text: String,
        /// Which stop string matched.
        stop: String,
    },
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        let max_len = stops.iter().map(String::len).max().unwrap_or(0);
        StopMatcher {
            stops,
            held: String::new(),
            max_len,
        }
    }

    /// Adds `piece` to the stream.
    pub fn push(&mut self, piece: &str) -> StopScan {
        if self.stops.is_empty() {
            return StopScan::Continue(piece.to_owned());
        }
        // Only the held tail and the new piece can contain a new match: the held text is
        // bounded by the longest stop string, so the scan window stays bounded.
        self.held.push_str(piece);
        self.decide(false)
    }

    /// The end of the stream: a stop string that was waiting on a longer or earlier
    /// candidate is decided now, and whatever else was held is released.
    pub fn finish(&mut self) -> StopScan {
        self.decide(true)
    }

    /// Releases what is decided. A complete stop string is final once no earlier (or equally
    /// early, longer) stop string could still complete: the result is then the same for any
    /// chunking of the stream, leftmost match first, longest on a tie.
    fn decide(&mut self, end: bool) -> StopScan {
        let found = self.first_match();
        let limit = found.as_ref().map_or(self.held.len(), |(at, _)| *at);
        let partial = if end { None } else { self.partial_start(limit) };
        match (found, partial) {
            (Some((at, stop)), None) => {
                let text = self.held[..at].to_owned();
                self.held.clear();
                StopScan::Stopped { text, stop }
            }
            (_, Some(keep_from)) => {
                let text = self.held[..keep_from].to_owned();
                self.held.drain(..keep_from);
                StopScan::Continue(text)
            }
            (None, None) => StopScan::Continue(std::mem::take(&mut self.held)),
        }
    }

    /// The earliest complete stop string in `held` (leftmost start, then longest).
    fn first_match(&self) -> Option<(usize, String)> {
        self.stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by(|a, b| a.0.cmp(&b.0).then(b.1.len().cmp(&a.1.len())))
            .map(|(at, s)| (at, s.clone()))
    }

    /// The earliest position, at most `limit`, from which the rest of `held` is a proper
    /// prefix of a stop string (a stop that may still complete).
    fn partial_start(&self, limit: usize) -> Option<usize> {
        let held = self.held.as_str();
        let lo = held.len().saturating_sub(self.max_len.saturating_sub(1));
        (lo..=limit.min(held.len().saturating_sub(1)))
            .filter(|&i| held.is_char_boundary(i))
            .find(|&i| {
                let tail = &held[i..];
                self.stops
                    .iter()
                    .any(|s| s.len() > tail.len() && s.starts_with(tail))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut m = StopMatcher::new(stops.iter().map(|s| (*s).to_owned()));
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopScan::Continue(t) => out.push_str(&t),
                StopScan::Stopped { text, stop } => {
                    out.push_str(&text);
                    return (out, Some(stop));
                }
            }
        }
        match m.finish() {
            StopScan::Continue(t) => {
                out.push_str(&t);
                (out, None)
            }
            StopScan::Stopped { text, stop } => {
                out.push_str(&text);
                (out, Some(stop))
            }
        }
    }

    #[test]
    fn a_stop_split_across_pieces_is_found_and_never_emitted() {
        let (out, stop) = run(&["<|im_end|>"], &["Hello <|im", "_e", "nd|> tail"]);
        assert_eq!(out, "Hello ");
        assert_eq!(stop.as_deref(), Some("<|im_end|>"));
    }

    #[test]
    fn a_partial_match_that_fails_is_released() {
        let mut m = StopMatcher::new(["STOP".to_owned()]);
        assert_eq!(m.push("ab ST"), StopScan::Continue("ab ".into()));
        assert_eq!(m.push("AR"), StopScan::Continue("STAR".into()));
        assert_eq!(m.finish(), StopScan::Continue(String::new()));
    }

    #[test]
    fn held_text_is_released_at_the_end() {
        assert_eq!(run(&["</s>"], &["done </"]), ("done </".into(), None));
    }

    #[test]
    fn the_earliest_stop_wins() {
        let (out, stop) = run(&["world", "lo w"], &["hello world"]);
        assert_eq!(out, "hel");
        assert_eq!(stop.as_deref(), Some("lo w"));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        let (out, stop) = run(&["ÿé"], &["日本ÿ", "é!"]);
        assert_eq!(out, "日本");
        assert_eq!(stop.as_deref(), Some("ÿé"));
        assert_eq!(run(&["éx"], &["aé", "é"]), ("aéé".into(), None));
    }

    #[test]
    fn a_complete_stop_waits_for_an_earlier_one_that_may_still_complete() {
        // "|" is complete, but "<|a" started earlier: wait for the next piece.
        let mut m = StopMatcher::new(["<|a".to_owned(), "|".to_owned()]);
        assert_eq!(m.push("x<|"), StopScan::Continue("x".into()));
        assert_eq!(
            m.push("a"),
            StopScan::Stopped {
                text: String::new(),
                stop: "<|a".into()
            }
        );
        // At the end of the stream the waiting match is decided.
        let mut m = StopMatcher::new(["<|a".to_owned(), "|".to_owned()]);
        assert_eq!(m.push("x<|"), StopScan::Continue("x".into()));
        assert_eq!(
            m.finish(),
            StopScan::Stopped {
                text: "<".into(),
                stop: "|".into()
            }
        );
    }

    #[test]
    fn no_stops_passes_everything() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), None));
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_whole_text_answer(
            text in "[ab<|>]{0,40}",
            cuts in proptest::collection::vec(0usize..40, 0..6),
        ) {
            let stops = ["<|a", "bb>", "|"];
            let whole = run(&stops, &[text.as_str()]);
            let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= text.len()).collect();
            cuts.sort_unstable();
            let mut pieces = Vec::new();
            let mut last = 0;
            for c in cuts {
                pieces.push(&text[last..c]);
                last = c;
            }
            pieces.push(&text[last..]);
            prop_assert_eq!(run(&stops, &pieces), whole.clone());
            // The emitted text never contains a stop string.
            for s in stops {
                prop_assert!(!whole.0.contains(s));
            }
        }
    }
}
