//! The stub's pseudo-model: the next token's logits are a hash of the sequence's whole history
//! and the active adapters, and an embedding is a hash of its tokens.

use std::collections::BTreeMap;

use wick_types::TokenId;

use super::vocab::{Kind, Vocab, EOS, IM_END};

/// The hash of an empty history.
const ROOT: u64 = 0x5749_434B_5354_5542;
/// Salts that keep the hash streams of tokens, adapters, EOG gating and embeddings apart.
const TOKEN_SALT: u64 = 0x746F_6B65_6E00_0001;
const ADAPTER_SALT: u64 = 0x6164_6170_7400_0002;
const EOG_SALT: u64 = 0x656F_6700_0000_0003;
const LOGIT_SALT: u64 = 0x6C6F_6769_7400_0004;
const EMBED_SALT: u64 = 0x656D_6265_6400_0005;

/// The width of the stub's embeddings.
pub(super) const N_EMBD: u32 = 16;

/// One context in this many ends generation under greedy decoding.
const EOG_RATE: f64 = 1.0 / 16.0;
/// The logit of the EOG token a context gates open: above every other logit.
const EOG_OPEN: f64 = 14.0;

/// The splitmix64 finaliser: a fast, well-mixed 64-bit hash step.
pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform number in `[0, 1)` from the top 52 bits of `x`.
pub(super) fn unit(x: u64) -> f64 {
    f64::from_bits(0x3FF0_0000_0000_0000 | (x >> 12)) - 1.0
}

/// The hash of a history one token longer.
pub(super) fn extend_hash(hash: u64, token: TokenId) -> u64 {
    splitmix64(hash ^ splitmix64(u64::from(token.0) ^ TOKEN_SALT))
}

/// The hash of `tokens` as a whole history.
fn hash_tokens(tokens: &[TokenId]) -> u64 {
    tokens.iter().fold(ROOT, |h, &t| extend_hash(h, t))
}

/// One sequence: its token history and the hash of every prefix of it, so that a decode costs
/// one pass over the vocabulary whatever the history's length.
#[derive(Debug, Clone, Default)]
pub(super) struct Sequence {
    tokens: Vec<TokenId>,
    /// `hashes[i]` is the hash of `tokens[..=i]`.
    hashes: Vec<u64>,
}

impl Sequence {
    /// The token history.
    pub(super) fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    /// The number of tokens.
    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    /// The hash of the whole history.
    pub(super) fn hash(&self) -> u64 {
        self.hash_of(self.len())
    }

    /// The hash of the first `n` tokens (at most all of them).
    pub(super) fn hash_of(&self, n: usize) -> u64 {
        n.min(self.len())
            .checked_sub(1)
            .map_or(ROOT, |last| self.hashes[last])
    }

    /// Appends tokens.
    pub(super) fn extend(&mut self, tokens: &[TokenId]) {
        let mut h = self.hash();
        for &t in tokens {
            h = extend_hash(h, t);
            self.tokens.push(t);
            self.hashes.push(h);
        }
    }

    /// Keeps the first `n` tokens (all of them when `n` is larger).
    pub(super) fn truncate(&mut self, n: usize) {
        self.tokens.truncate(n);
        self.hashes.truncate(n);
    }

    /// A sequence holding the first `n` tokens of this one.
    pub(super) fn prefix(&self, n: usize) -> Sequence {
        let n = n.min(self.len());
        Sequence {
            tokens: self.tokens[..n].to_vec(),
            hashes: self.hashes[..n].to_vec(),
        }
    }
}

/// The hash of a context: the history's hash mixed with every active adapter (id and scale).
pub(super) fn context_hash(history: u64, adapters: &BTreeMap<u64, f32>) -> u64 {
    adapters.iter().fold(history, |h, (&id, scale)| {
        let adapter = splitmix64(id ^ ADAPTER_SALT) ^ u64::from(scale.to_bits());
        splitmix64(h ^ splitmix64(adapter))
    })
}

/// The next token's logits after a context with hash `ctx`, one per vocabulary entry.
///
/// Word pieces score highest, common text bytes next, rare bytes and control tokens lowest, so
/// greedy output reads like words. One context in sixteen gates an EOG token above everything
/// else, so generation ends now and then without EOG dominating.
pub(super) fn logits(vocab: &Vocab, ctx: u64) -> Vec<f64> {
    let gate = splitmix64(ctx ^ EOG_SALT);
    let open = unit(gate) < EOG_RATE;
    let eog = if gate & 1 == 0 { IM_END } else { EOS };
    (0..vocab.n_vocab())
        .map(|id| {
            let u = unit(splitmix64(ctx ^ splitmix64(u64::from(id) ^ LOGIT_SALT)));
            match vocab.kind(id) {
                Kind::Eog if open && id == eog.0 => EOG_OPEN,
                Kind::Eog => -2.0 + 8.0 * u,
                Kind::Control => -6.0 + 4.0 * u,
                Kind::RareByte => -8.0 + 4.0 * u,
                Kind::TextByte => 1.0 + 8.0 * u,
                Kind::Piece => 4.0 + 8.0 * u,
            }
        })
        .collect()
}

/// The most likely token: the highest logit, ties broken by the lowest id. `None` when every
/// logit is `-inf` (or there are none).
pub(super) fn argmax(logits: &[f64]) -> Option<TokenId> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l > f64::NEG_INFINITY && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| TokenId(u32::try_from(i).expect("invariant: vocabulary ids fit in u32")))
}

/// The greedy next token after a context with hash `ctx`.
pub(super) fn greedy(vocab: &Vocab, ctx: u64) -> TokenId {
    argmax(&logits(vocab, ctx)).expect("invariant: the stub's logits are all finite")
}

/// A pooled, L2-normalised embedding of `tokens`, [`N_EMBD`] wide.
pub(super) fn embed(tokens: &[TokenId]) -> Vec<f32> {
    let h = hash_tokens(tokens);
    let mut v: Vec<f32> = (0..u64::from(N_EMBD))
        .map(|i| {
            let bits = splitmix64(h ^ splitmix64(i ^ EMBED_SALT)) >> 41;
            let bits = u32::try_from(bits).expect("invariant: 23 bits fit in u32");
            // A uniform number in [-1, 1).
            (f32::from_bits(0x3F80_0000 | bits) - 1.0) * 2.0 - 1.0
        })
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    } else {
        v[0] = 1.0;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_hashes_match_a_fresh_fold() {
        let tokens: Vec<TokenId> = (0..50).map(|i| TokenId(i * 7 % 300)).collect();
        let mut seq = Sequence::default();
        seq.extend(&tokens[..20]);
        seq.extend(&tokens[20..]);
        assert_eq!(seq.hash(), hash_tokens(&tokens));
        seq.truncate(10);
        assert_eq!(seq.hash(), hash_tokens(&tokens[..10]));
        assert_eq!(seq.prefix(3).hash(), hash_tokens(&tokens[..3]));
        assert_eq!(seq.prefix(99).tokens(), &tokens[..10]);
        seq.truncate(0);
        assert_eq!(seq.hash(), ROOT);
        assert_ne!(
            hash_tokens(&[TokenId(1), TokenId(2)]),
            hash_tokens(&[TokenId(2), TokenId(1)])
        );
    }

    #[test]
    fn logits_are_deterministic_and_adapters_change_them() {
        let vocab = Vocab::new();
        let h = hash_tokens(&[TokenId(100), TokenId(200)]);
        assert_eq!(logits(&vocab, h), logits(&vocab, h));
        assert_eq!(logits(&vocab, h).len(), vocab.n_vocab() as usize);
        let none = BTreeMap::new();
        assert_eq!(context_hash(h, &none), h);
        let one = BTreeMap::from([(1, 1.0)]);
        let half = BTreeMap::from([(1, 0.5)]);
        assert_ne!(context_hash(h, &one), h);
        assert_ne!(context_hash(h, &one), context_hash(h, &half));
    }

    #[test]
    fn greedy_output_is_mostly_pieces_and_sometimes_ends() {
        let vocab = Vocab::new();
        let (mut pieces, mut eog, mut rare) = (0, 0, 0);
        for i in 0..2000u32 {
            let t = greedy(&vocab, hash_tokens(&[TokenId(i)]));
            match vocab.kind(t.0) {
                Kind::Piece | Kind::TextByte => pieces += 1,
                Kind::Eog => eog += 1,
                Kind::Control | Kind::RareByte => rare += 1,
            }
        }
        assert_eq!(
            rare, 0,
            "greedy never picks rare bytes or non-EOG control tokens"
        );
        assert!(
            eog > 50 && eog < 250,
            "EOG is reachable but not dominant: {eog}/2000"
        );
        assert!(pieces > 1700);
    }

    #[test]
    fn argmax_breaks_ties_by_lowest_id_and_skips_banned() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), Some(TokenId(1)));
        assert_eq!(argmax(&[f64::NEG_INFINITY, -5.0]), Some(TokenId(1)));
        assert_eq!(argmax(&[f64::NEG_INFINITY; 3]), None);
        assert_eq!(argmax(&[]), None);
    }

    #[test]
    fn embeddings_are_unit_length_and_depend_on_tokens() {
        let a = embed(&[TokenId(10), TokenId(11)]);
        let b = embed(&[TokenId(11), TokenId(10)]);
        assert_eq!(a.len(), N_EMBD as usize);
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        assert_ne!(a, b);
        assert_eq!(a, embed(&[TokenId(10), TokenId(11)]));
    }
}
