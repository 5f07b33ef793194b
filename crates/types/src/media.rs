//! Images and sounds in a prompt: what a message holds beside its text, where each goes in the
//! text, and the token ids that stand for them in a prompt.

use std::sync::Arc;

use crate::TokenId;

/// Where a medium goes in a message's text: U+FFFC OBJECT REPLACEMENT CHARACTER, Unicode's own
/// placeholder for an embedded object. Text from a client never holds it: [`scrub`] turns it
/// into U+FFFD, so each one in a prompt is a medium the message really carries.
pub const MEDIA_MARKER: char = '\u{FFFC}';

/// `text` with every [`MEDIA_MARKER`] replaced by U+FFFD REPLACEMENT CHARACTER, so text a client
/// wrote can never pose as an image.
pub fn scrub(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(MEDIA_MARKER) {
        std::borrow::Cow::Owned(text.replace(MEDIA_MARKER, "\u{FFFD}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// What a medium is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaKind {
    /// A picture (PNG, JPEG, GIF, BMP, …).
    Image,
    /// A sound (WAV, MP3, FLAC).
    Audio,
}

impl MediaKind {
    /// `image` or `audio`.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
        }
    }
}

/// One image or sound, as the client sent it (the encoded file's bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct Media {
    /// Image or audio.
    pub kind: MediaKind,
    /// The file's bytes.
    pub bytes: Arc<[u8]>,
}

impl Media {
    /// An image from its file's bytes.
    pub fn image(bytes: impl Into<Arc<[u8]>>) -> Self {
        Media {
            kind: MediaKind::Image,
            bytes: bytes.into(),
        }
    }

    /// A sound from its file's bytes.
    pub fn audio(bytes: impl Into<Arc<[u8]>>) -> Self {
        Media {
            kind: MediaKind::Audio,
            bytes: bytes.into(),
        }
    }
}

impl std::fmt::Debug for Media {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Media({}, {} bytes)",
            self.kind.as_str(),
            self.bytes.len()
        )
    }
}

/// Token ids of media positions. A prompt's medium takes as many positions as its projector
/// makes embeddings; each position gets an id above any vocabulary (bit 31 set), derived from a
/// hash of the medium's bytes and the position, so the same image gives the same ids and a
/// prompt cache keyed by token ids reuses it like text. The first position of a medium also
/// has bit 30 set, so a run's start is known: a cached prefix is never reused up to the middle
/// of a medium (two different images would have to agree on every position's 30 hashed bits).
impl TokenId {
    /// Bit 31: a media position.
    pub const MEDIA: u32 = 1 << 31;
    /// Bit 30 (with bit 31): the first position of a medium.
    pub const MEDIA_START: u32 = 1 << 30;

    /// The id of position `index` of the medium whose bytes hash to `hash`.
    pub fn media(hash: u64, index: usize) -> TokenId {
        let mixed = splitmix(hash ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        #[allow(clippy::cast_possible_truncation)] // 30 bits of it
        let low = (mixed as u32) & (Self::MEDIA_START - 1);
        let start = if index == 0 { Self::MEDIA_START } else { 0 };
        TokenId(Self::MEDIA | start | low)
    }

    /// Whether this id stands for a media position.
    pub fn is_media(self) -> bool {
        self.0 & Self::MEDIA != 0
    }

    /// Whether this id is the first position of a medium.
    pub fn starts_media(self) -> bool {
        self.is_media() && self.0 & Self::MEDIA_START != 0
    }
}

/// `tokens` without their media positions: the ids a vocabulary check sees.
pub fn text_tokens(tokens: &[TokenId]) -> Vec<TokenId> {
    tokens.iter().copied().filter(|t| !t.is_media()).collect()
}

/// How many leading tokens `a` and `b` share, ending with text: a match whose last token is a
/// media position (inside a medium, or its last) is cut back to the medium's start. A cached
/// prefix then never holds part of an image, and never ends with one (the last token of a
/// prefix is evaluated again with what follows, and an image's positions are evaluated
/// whole).
pub fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    let mut n = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    // Back over every image the match ends with (images may follow each other).
    while n > 0 && a[n - 1].is_media() {
        n = a[..n].iter().rposition(|t| t.starts_media()).unwrap_or(0);
    }
    n
}

/// The finaliser of `SplitMix64`: spreads a 64-bit value's bits.
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(hash: u64, n: usize) -> Vec<TokenId> {
        (0..n).map(|i| TokenId::media(hash, i)).collect()
    }

    #[test]
    fn media_ids_are_above_any_vocabulary_and_mark_their_start() {
        let ids = run(42, 4);
        assert!(ids.iter().all(|t| t.is_media() && t.0 >= 1 << 31));
        assert!(ids[0].starts_media());
        assert!(ids[1..].iter().all(|t| !t.starts_media()));
        assert_eq!(ids, run(42, 4), "the same bytes give the same ids");
        assert_ne!(ids, run(43, 4));
        assert!(!TokenId(151_000).is_media());
    }

    #[test]
    fn a_shared_prefix_never_ends_inside_a_medium() {
        let text = [TokenId(1), TokenId(2)];
        let mut a = text.to_vec();
        a.extend(run(7, 4));
        a.push(TokenId(3));
        let mut b = text.to_vec();
        b.extend(run(7, 4));
        b.push(TokenId(4));
        assert_eq!(common_prefix(&a, &b), 2, "a match never ends with an image");
        let mut d = b.clone();
        d[6] = TokenId(3);
        d.push(TokenId(9));
        assert_eq!(
            common_prefix(&a, &d),
            7,
            "text after the image is shared too"
        );
        // Another image whose first two positions happen to agree: back to the image's start.
        let mut c = text.to_vec();
        c.extend(&run(7, 4)[..2]);
        c.extend(&run(8, 4)[2..]);
        assert_eq!(common_prefix(&a, &c), 2);
        // A cached entry that stops inside an image.
        assert_eq!(common_prefix(&a[..4], &a), 2);
        assert_eq!(common_prefix(&text, &a), 2);
    }

    #[test]
    fn scrub_turns_markers_into_replacement_characters() {
        assert_eq!(scrub("a\u{FFFC}b"), "a\u{FFFD}b");
        assert!(matches!(
            scrub("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

    proptest! {
        #[test]
        fn common_prefix_is_at_most_the_plain_one_and_only_shorter_inside_media(
            a in proptest::collection::vec(0u32..6, 0..24),
            b in proptest::collection::vec(0u32..6, 0..24),
        ) {
            // Small alphabets: 0..3 text, 4 and 5 two images of three positions.
            let expand = |v: &[u32]| -> Vec<TokenId> {
                v.iter().flat_map(|&t| if t < 4 { vec![TokenId(t)] } else { run(u64::from(t), 3) }).collect()
            };
            let (a, b) = (expand(&a), expand(&b));
            let plain = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
            let n = common_prefix(&a, &b);
            prop_assert!(n <= plain);
            if n < plain {
                prop_assert!(a[n].starts_media());
            }
            prop_assert!(n == 0 || !a[n - 1].is_media());
            prop_assert_eq!(&a[..n], &b[..n]);
        }
    }
}
