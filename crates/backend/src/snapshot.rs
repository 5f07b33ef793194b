//! The envelope around every KV snapshot: what [`crate::Backend::kv_pack`] returns.
//!
//! ```text
//! magic "WICKKV02" | u64 fingerprint len | fingerprint | u64 n_tokens | n_tokens × u32
//!                  | u64 payload len | payload | 16-byte XXH3-128 of everything before it (LE)
//! ```
//!
//! The fingerprint names the model and the context layout; a snapshot with another fingerprint,
//! a wrong length or a bad checksum is rejected before any byte of it reaches a model.
//!
//! The checksum finds truncation and corruption, not tampering (whoever can write the cache
//! directory can write anything there). XXH3-128 does that at memory speed: a 4,096-token
//! snapshot of the test model is 94 MB, which SHA-256 (with the CPU's SHA instructions) took
//! 43 ms to check on this project's machine, on the engine thread, at every restore from the
//! disk or the RAM tier. Version 01 snapshots (SHA-256) are refused as a bad magic and
//! recomputed.

use wick_types::TokenId;
use xxhash_rust::xxh3::xxh3_128;

use crate::{BackendError, Result};

const MAGIC: &[u8; 8] = b"WICKKV02";

/// Bytes of the checksum at the end.
const DIGEST: usize = 16;

/// A decoded snapshot: the sequence's tokens and the backend's own state bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot<'a> {
    /// The sequence's token history.
    pub tokens: Vec<TokenId>,
    /// The backend-specific state (KV cells); empty for backends that recompute.
    pub payload: &'a [u8],
}

/// Wraps `tokens` and `payload` for a model and context identified by `fingerprint`.
pub fn encode(fingerprint: &str, tokens: &[TokenId], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + fingerprint.len() + tokens.len() * 4 + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(fingerprint.len() as u64).to_le_bytes());
    out.extend_from_slice(fingerprint.as_bytes());
    out.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for t in tokens {
        out.extend_from_slice(&t.0.to_le_bytes());
    }
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    let digest = xxh3_128(&out).to_le_bytes();
    out.extend_from_slice(&digest);
    out
}

/// Checks and unwraps a snapshot made by [`encode`] with the same `fingerprint`.
///
/// # Errors
///
/// [`BackendError::InvalidSnapshot`] saying what is wrong.
pub fn decode<'a>(fingerprint: &str, bytes: &'a [u8]) -> Result<Snapshot<'a>> {
    let bad = |reason: &str| BackendError::InvalidSnapshot {
        reason: reason.to_owned(),
    };
    if bytes.len() < MAGIC.len() + DIGEST || &bytes[..MAGIC.len()] != MAGIC {
        return Err(bad("not a wick KV snapshot (bad magic or too short)"));
    }
    let (body, digest) = bytes.split_at(bytes.len() - DIGEST);
    if xxh3_128(body).to_le_bytes() != digest {
        return Err(bad(
            "checksum mismatch: the snapshot is truncated or corrupt",
        ));
    }
    let mut r = Reader {
        rest: &body[MAGIC.len()..],
    };
    let fp_len = r.len()?;
    let fp = r.take(fp_len)?;
    if fp != fingerprint.as_bytes() {
        return Err(BackendError::InvalidSnapshot {
            reason: format!(
                "made for `{}`, this backend is `{fingerprint}`",
                String::from_utf8_lossy(fp)
            ),
        });
    }
    let n_tokens = r.len()?;
    let raw = r.take(
        n_tokens
            .checked_mul(4)
            .ok_or_else(|| bad("token count overflows"))?,
    )?;
    let tokens = raw
        .chunks_exact(4)
        .map(|c| TokenId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    let payload_len = r.len()?;
    let payload = r.take(payload_len)?;
    if !r.rest.is_empty() {
        return Err(bad("trailing bytes after the payload"));
    }
    Ok(Snapshot { tokens, payload })
}

/// Reads only the token history from the start of a snapshot (magic, fingerprint, tokens),
/// without reading or checking the payload: enough to index snapshots on disk. The whole
/// snapshot is still checked by [`decode`] before use.
///
/// # Errors
///
/// [`BackendError::InvalidSnapshot`] for a bad magic or a header cut short; reading errors.
pub fn read_tokens(mut reader: impl std::io::Read) -> Result<Vec<TokenId>> {
    fn read(reader: &mut impl std::io::Read, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; n];
        reader
            .read_exact(&mut buf)
            .map_err(|e| BackendError::InvalidSnapshot {
                reason: format!("cannot read the snapshot header: {e}"),
            })?;
        Ok(buf)
    }
    fn len(reader: &mut impl std::io::Read, limit: u64) -> Result<usize> {
        let b = read(reader, 8)?;
        let n = u64::from_le_bytes(b.try_into().expect("invariant: read(8) yields 8 bytes"));
        if n > limit {
            return Err(BackendError::InvalidSnapshot {
                reason: format!("implausible header length {n}"),
            });
        }
        usize::try_from(n).map_err(|_| BackendError::InvalidSnapshot {
            reason: "length does not fit in memory".into(),
        })
    }
    if read(&mut reader, MAGIC.len())? != MAGIC {
        return Err(BackendError::InvalidSnapshot {
            reason: "not a wick KV snapshot (bad magic)".into(),
        });
    }
    let fp_len = len(&mut reader, 1 << 16)?;
    read(&mut reader, fp_len)?;
    let n_tokens = len(&mut reader, 1 << 28)?;
    let raw = read(&mut reader, n_tokens * 4)?;
    Ok(raw
        .chunks_exact(4)
        .map(|c| TokenId(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect())
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.rest.len() {
            return Err(BackendError::InvalidSnapshot {
                reason: "a length field points past the end".to_owned(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn len(&mut self) -> Result<usize> {
        let b = self.take(8)?;
        let n = u64::from_le_bytes(b.try_into().expect("invariant: take(8) yields 8 bytes"));
        usize::try_from(n).map_err(|_| BackendError::InvalidSnapshot {
            reason: "length does not fit in memory".to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_header_reads_without_the_payload() {
        let tokens = vec![TokenId(3), TokenId(9)];
        let bytes = encode("fp", &tokens, &[7; 1000]);
        assert_eq!(read_tokens(&bytes[..8 + 8 + 2 + 8 + 8]).unwrap(), tokens);
        assert!(read_tokens(&bytes[..20]).is_err());
        assert!(read_tokens(&b"NOTASNAPSHOT-----------"[..]).is_err());
    }

    #[test]
    fn round_trips_and_rejects_every_corruption() {
        let tokens = vec![TokenId(1), TokenId(70_000)];
        let bytes = encode("model-a", &tokens, b"kv-bytes");
        let snap = decode("model-a", &bytes).unwrap();
        assert_eq!(snap.tokens, tokens);
        assert_eq!(snap.payload, b"kv-bytes");

        assert!(decode("model-b", &bytes)
            .unwrap_err()
            .to_string()
            .contains("made for `model-a`"));
        for cut in 0..bytes.len() {
            assert!(
                decode("model-a", &bytes[..cut]).is_err(),
                "truncated at {cut}"
            );
        }
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x40;
            assert!(decode("model-a", &flipped).is_err(), "flipped byte {i}");
        }
    }
}
