//! Turning a stream of token bytes into text without ever splitting a UTF-8 character.

/// Buffers bytes and hands out the longest complete UTF-8 prefix.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds `bytes` and returns the text that is now complete. Invalid sequences become U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // `valid_up_to` marks valid UTF-8, so nothing is replaced here.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{fffd}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whatever is left at the end of the stream (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_splits_a_character_whatever_the_chunking() {
        let text = "héllo — 東京 🚀!";
        let bytes = text.as_bytes();
        for chunk in 1..=bytes.len() {
            let mut s = Utf8Stream::default();
            let mut out = String::new();
            for piece in bytes.chunks(chunk) {
                let got = s.push(piece);
                assert!(!got.contains('\u{fffd}'));
                out.push_str(&got);
            }
            out.push_str(&s.finish());
            assert_eq!(out, text, "chunk size {chunk}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut s = Utf8Stream::default();
        assert_eq!(s.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(s.push(b"\xe6\x9d"), "");
        assert_eq!(s.finish(), "\u{fffd}");
    }
}
