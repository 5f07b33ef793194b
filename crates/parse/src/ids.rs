//! Tool-call id generation (README L14): unique within a response, format-shaped.

use std::collections::HashSet;

/// The shape of generated ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdStyle {
    /// `call_` + 24 alphanumerics.
    Call,
    /// 9 alphanumerics (the Mistral templates reject other shapes).
    Mistral,
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A small seedable generator (splitmix64) of unique ids.
#[derive(Debug, Clone)]
pub(crate) struct IdGen {
    style: IdStyle,
    state: u64,
    issued: HashSet<String>,
}

impl IdGen {
    pub(crate) fn new(style: IdStyle, seed: u64) -> Self {
        IdGen {
            style,
            state: seed,
            issued: HashSet::new(),
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Records an id the model supplied, so generated ids never collide with it.
    pub(crate) fn note(&mut self, id: &str) {
        self.issued.insert(id.to_owned());
    }

    /// A fresh id, unique among the ids of this generator.
    pub(crate) fn generate(&mut self) -> String {
        loop {
            let (prefix, n) = match self.style {
                IdStyle::Call => ("call_", 24),
                IdStyle::Mistral => ("", 9),
            };
            let mut id = String::from(prefix);
            for _ in 0..n {
                let r = usize::try_from(self.next_u64() % ALNUM.len() as u64).unwrap_or(0);
                id.push(char::from(ALNUM[r]));
            }
            if self.issued.insert(id.clone()) {
                return id;
            }
        }
    }
}

/// A default seed that differs between parsers and processes.
pub(crate) fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x5EED);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_uniqueness() {
        let mut g = IdGen::new(IdStyle::Call, 7);
        let a = g.generate();
        assert!(a.starts_with("call_") && a.len() == 29);
        assert_ne!(a, g.generate());
        let mut m = IdGen::new(IdStyle::Mistral, 7);
        let id = m.generate();
        assert!(id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()));
        assert_eq!(
            IdGen::new(IdStyle::Call, 1).generate(),
            IdGen::new(IdStyle::Call, 1).generate()
        );
    }
}
