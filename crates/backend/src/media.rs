//! Media in prompts: a model's projector turns an image (or a sound) into positions of the
//! prompt. A prompt is rendered on the caller's thread, so the projector is shared there
//! ([`MediaEncoder`]); it hands back the medium's token ids ([`TokenId::media`]) and keeps what
//! the backend needs to evaluate them, found again by the run's first id when a step reaches
//! them.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use wick_types::{Media, MediaKind, TokenId};

use crate::{BackendError, Result};

/// A medium ready for the prompt: the ids of its positions and the backend's own form of it.
/// Requests keep it alive while their prompt is computed.
pub struct EncodedMedia {
    /// Image or sound.
    pub kind: MediaKind,
    /// One id per position ([`TokenId::media`]), the first marking the run's start.
    pub tokens: Vec<TokenId>,
    /// A 128-bit digest of the medium's bytes.
    pub digest: u128,
    /// What the backend evaluates (llama.cpp: the projector's tokenized chunk).
    pub data: Box<dyn Any + Send + Sync>,
}

/// Two encodings are the same medium when their bytes' digests and positions are.
impl PartialEq for EncodedMedia {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.digest == other.digest && self.tokens == other.tokens
    }
}

impl Eq for EncodedMedia {}

impl std::fmt::Debug for EncodedMedia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodedMedia")
            .field("kind", &self.kind)
            .field("positions", &self.tokens.len())
            .field("digest", &format_args!("{:032x}", self.digest))
            .finish_non_exhaustive()
    }
}

/// A model's projector, shared with the threads that render prompts.
pub trait MediaEncoder: Send + Sync + std::fmt::Debug {
    /// Whether it takes `kind` (vision projectors take images, audio ones sounds).
    fn accepts(&self, kind: MediaKind) -> bool;

    /// `media` as prompt positions.
    ///
    /// # Errors
    ///
    /// [`BackendError::Media`] for bytes that are not a medium of a kind it takes (not an
    /// image, truncated, too large), naming what is wrong.
    fn encode(&self, media: &Media) -> Result<Arc<EncodedMedia>>;
}

/// A projector behind an `Arc`.
pub type SharedMediaEncoder = Arc<dyn MediaEncoder>;

/// The media a projector encoded that some request still holds, by their runs' first ids: the
/// backend finds a run's data here when a step reaches it. Entries are weak; a medium no
/// request holds drops out.
#[derive(Debug, Default)]
pub struct MediaTable {
    live: Mutex<HashMap<TokenId, Weak<EncodedMedia>>>,
}

impl MediaTable {
    /// Registers the medium `make(salt)` builds, choosing the salt so its first id is free (or
    /// held by the same bytes, whose live entry is returned instead): within a process, a run's
    /// first id names one medium.
    ///
    /// # Errors
    ///
    /// What `make` returns.
    pub fn register(
        &self,
        digest: u128,
        make: impl Fn(u64) -> Result<EncodedMedia>,
    ) -> Result<Arc<EncodedMedia>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, weak| weak.strong_count() > 0);
        for salt in 0u64.. {
            let first = TokenId::media(hash_of(digest, salt), 0);
            match live.get(&first).and_then(Weak::upgrade) {
                Some(known) if known.digest == digest => return Ok(known),
                Some(_) => {}
                None => {
                    let encoded = Arc::new(make(hash_of(digest, salt))?);
                    live.insert(first, Arc::downgrade(&encoded));
                    return Ok(encoded);
                }
            }
        }
        unreachable!("a free first id is found: the table holds finitely many")
    }

    /// Checks that every media id in `tokens` starts or continues a whole run of a medium some
    /// request holds, in order.
    ///
    /// # Errors
    ///
    /// [`BackendError::Media`] naming the first id that is not.
    pub fn check_runs(&self, tokens: &[TokenId]) -> Result<()> {
        let mut i = 0;
        while i < tokens.len() {
            let t = tokens[i];
            if !t.is_media() {
                i += 1;
                continue;
            }
            let run =
                self.find(t)
                    .filter(|_| t.starts_media())
                    .ok_or_else(|| BackendError::Media {
                        reason: format!(
                            "token {t} stands for no medium the model's projector holds (or not \
                         for the start of one)"
                        ),
                    })?;
            let end = i + run.tokens.len();
            if tokens.get(i..end) != Some(&run.tokens[..]) {
                return Err(BackendError::Media {
                    reason: "a medium's positions are evaluated together, in order".into(),
                });
            }
            i = end;
        }
        Ok(())
    }

    /// The live medium whose run starts with `first`.
    pub fn find(&self, first: TokenId) -> Option<Arc<EncodedMedia>> {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&first)
            .and_then(Weak::upgrade)
    }
}

/// The 64-bit hash a medium's ids derive from: its digest, salted.
pub fn hash_of(digest: u128, salt: u64) -> u64 {
    #[allow(clippy::cast_possible_truncation)] // the two halves
    let (high, low) = ((digest >> 64) as u64, digest as u64);
    high ^ low.rotate_left(29) ^ salt.wrapping_mul(0xd6e8_feb8_6659_fd93)
}

/// What a medium's bytes are, from their first bytes: `Some(kind, format)` for the formats
/// llama.cpp's multimodal library decodes (images through `stb_image`: PNG, JPEG, GIF, BMP,
/// PSD, HDR, PNM, TGA is too loose to sniff; sounds: WAV, MP3, FLAC), `None` otherwise.
pub fn sniff(bytes: &[u8]) -> Option<(MediaKind, &'static str)> {
    let starts = |magic: &[u8]| bytes.starts_with(magic);
    let image = |format| Some((MediaKind::Image, format));
    let audio = |format| Some((MediaKind::Audio, format));
    if starts(b"\x89PNG\r\n\x1a\n") {
        image("PNG")
    } else if starts(&[0xff, 0xd8, 0xff]) {
        image("JPEG")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        image("GIF")
    } else if starts(b"BM") && bytes.len() > 26 {
        image("BMP")
    } else if starts(b"8BPS") {
        image("PSD")
    } else if starts(b"#?RADIANCE") || starts(b"#?RGBE") {
        image("HDR")
    } else if bytes.len() > 2 && bytes[0] == b'P' && (b'1'..=b'6').contains(&bytes[1]) {
        image("PNM")
    } else if starts(b"RIFF") && bytes.get(8..12) == Some(b"WAVE") {
        audio("WAV")
    } else if starts(b"ID3") || (bytes.len() > 1 && bytes[0] == 0xff && bytes[1] & 0xe0 == 0xe0) {
        audio("MP3")
    } else if starts(b"fLaC") {
        audio("FLAC")
    } else {
        None
    }
}

/// The widest side of an image wick decodes.
pub const MAX_SIDE: u32 = 16_384;
/// The most pixels of an image wick decodes (a 64-megapixel photo is 9,248 × 6,936).
pub const MAX_PIXELS: u64 = 64_000_000;

/// An image's width and height from its header (PNG, GIF, BMP, JPEG), before decoding it.
pub fn dimensions(bytes: &[u8]) -> Option<(u32, u32)> {
    let be32 = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let le16 = |at: usize| {
        Some(u32::from(u16::from_le_bytes(
            bytes.get(at..at + 2)?.try_into().ok()?,
        )))
    };
    let le32 = |at: usize| {
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?).unsigned_abs())
    };
    match sniff(bytes)?.1 {
        "PNG" => Some((be32(16)?, be32(20)?)),
        "GIF" => Some((le16(6)?, le16(8)?)),
        "BMP" => Some((le32(18)?, le32(22)?)),
        "JPEG" => {
            // The first start-of-frame segment (SOF0..SOF15 but DHT, JPG, DAC) holds them.
            let mut at = 2;
            while at + 9 < bytes.len() {
                if bytes[at] != 0xff {
                    return None;
                }
                let marker = bytes[at + 1];
                let length = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
                if (0xc0..=0xcf).contains(&marker) && ![0xc4, 0xc8, 0xcc].contains(&marker) {
                    let height = u16::from_be_bytes([bytes[at + 5], bytes[at + 6]]);
                    let width = u16::from_be_bytes([bytes[at + 7], bytes[at + 8]]);
                    return Some((u32::from(width), u32::from(height)));
                }
                at += 2 + length;
            }
            None
        }
        _ => None,
    }
}

/// Checks `media` before a projector sees it: its bytes are a format of its kind, and the
/// projector takes the kind.
///
/// # Errors
///
/// [`BackendError::Media`] naming what is wrong.
pub fn check(encoder: &dyn MediaEncoder, media: &Media) -> Result<&'static str> {
    let kind = media.kind.as_str();
    if !encoder.accepts(media.kind) {
        return Err(BackendError::Media {
            reason: format!("the model's projector takes no {kind} input"),
        });
    }
    if media.bytes.is_empty() {
        return Err(BackendError::Media {
            reason: format!("the {kind} is empty"),
        });
    }
    match sniff(&media.bytes) {
        Some((found, format)) if found == media.kind => {
            if let Some((width, height)) = dimensions(&media.bytes) {
                if width == 0
                    || height == 0
                    || width > MAX_SIDE
                    || height > MAX_SIDE
                    || u64::from(width) * u64::from(height) > MAX_PIXELS
                {
                    return Err(BackendError::Media {
                        reason: format!(
                            "the {format} image is {width} × {height} pixels: at most \
                             {MAX_SIDE} a side and {MAX_PIXELS} pixels are read"
                        ),
                    });
                }
            }
            Ok(format)
        }
        Some((found, format)) => Err(BackendError::Media {
            reason: format!("expected {kind} data, got {} ({format})", found.as_str()),
        }),
        None => Err(BackendError::Media {
            reason: format!(
                "not {kind} data: the bytes are no format wick reads (images: PNG, JPEG, GIF, \
                 BMP, PSD, HDR, PNM; audio: WAV, MP3, FLAC)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(digest: u128, salt: u64) -> EncodedMedia {
        EncodedMedia {
            kind: MediaKind::Image,
            tokens: (0..4).map(|i| TokenId::media(salt, i)).collect(),
            digest,
            data: Box::new(()),
        }
    }

    #[test]
    fn the_same_bytes_share_a_run_and_a_dropped_one_leaves_the_table() {
        let table = MediaTable::default();
        let a = table.register(1, |h| Ok(fake(1, h))).unwrap();
        let again = table.register(1, |h| Ok(fake(1, h))).unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        let b = table.register(2, |h| Ok(fake(2, h))).unwrap();
        assert_ne!(a.tokens[0], b.tokens[0]);
        assert!(table.find(b.tokens[0]).is_some());
        let first = a.tokens[0];
        drop((a, again));
        assert!(table.find(first).is_none());
    }

    /// A projector taking everything, for [`check`].
    #[derive(Debug)]
    struct Any;

    impl MediaEncoder for Any {
        fn accepts(&self, _: MediaKind) -> bool {
            true
        }

        fn encode(&self, _: &Media) -> Result<Arc<EncodedMedia>> {
            unreachable!("check never encodes")
        }
    }

    #[test]
    fn image_sizes_are_read_from_headers_and_huge_ones_refused() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(&640u32.to_be_bytes());
        png.extend_from_slice(&480u32.to_be_bytes());
        assert_eq!(dimensions(&png), Some((640, 480)));
        let mut huge = png[..16].to_vec();
        huge.extend_from_slice(&100_000u32.to_be_bytes());
        huge.extend_from_slice(&100_000u32.to_be_bytes());
        let jpeg = [
            0xff, 0xd8, 0xff, 0xe0, 0, 4, 0, 0, 0xff, 0xc0, 0, 11, 8, 0, 20, 0, 30, 3, 0, 0, 0,
        ];
        assert_eq!(dimensions(&jpeg), Some((30, 20)));
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&[7, 0, 9, 0]);
        assert_eq!(dimensions(&gif), Some((7, 9)));
        let err = check(&Any, &Media::image(huge)).unwrap_err().to_string();
        assert!(err.contains("100000 × 100000"), "{err}");
        assert!(check(&Any, &Media::image(png)).is_ok());
        let err = check(&Any, &Media::image(b"hello".to_vec()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not image data"), "{err}");
        let err = check(&Any, &Media::audio(b"\x89PNG\r\n\x1a\nxx".to_vec()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("expected audio data, got image (PNG)"),
            "{err}"
        );
    }

    #[test]
    fn media_formats_are_told_by_their_first_bytes() {
        assert_eq!(
            sniff(b"\x89PNG\r\n\x1a\nrest"),
            Some((MediaKind::Image, "PNG"))
        );
        assert_eq!(
            sniff(&[0xff, 0xd8, 0xff, 0xe0]),
            Some((MediaKind::Image, "JPEG"))
        );
        assert_eq!(
            sniff(b"RIFF\0\0\0\0WAVEfmt "),
            Some((MediaKind::Audio, "WAV"))
        );
        assert_eq!(sniff(b"hello world"), None);
        assert_eq!(sniff(b""), None);
    }
}
