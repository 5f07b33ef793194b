//! Synthetic GGUF files: a valid header (architecture, context length, file type, chat template,
//! a small vocabulary with special tokens) and one F32 tensor that pads the file to a size.

/// The chat template written into synthetic files.
pub const SYNTHETIC_TEMPLATE: &str =
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}";

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_kv_u32(out: &mut Vec<u8>, key: &str, v: u32) {
    put_str(out, key);
    out.extend_from_slice(&4u32.to_le_bytes());
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_kv_str(out: &mut Vec<u8>, key: &str, v: &str) {
    put_str(out, key);
    out.extend_from_slice(&8u32.to_le_bytes());
    put_str(out, v);
}

/// A GGUF v3 file of about `size` bytes (at least a few hundred): architecture `arch`,
/// `general.file_type` `file_type` (e.g. 15 for `Q4_K_M`), context length 2048, a chat
/// template, tokens `<unk> <s> </s> hello world` with bos 1 and eos 2, and one F32 tensor
/// `pad` whose data fills the rest. `seed` varies the padding bytes, so files differ.
pub fn synthetic_gguf(size: usize, arch: &str, file_type: u32, seed: u8) -> Vec<u8> {
    synthetic_gguf_with(size, arch, file_type, seed, &[])
}

/// [`synthetic_gguf`] with further string metadata `extra` (key, value), written after the
/// standard keys (so a repeated key appears more than once).
pub fn synthetic_gguf_with(
    size: usize,
    arch: &str,
    file_type: u32,
    seed: u8,
    extra: &[(&str, &str)],
) -> Vec<u8> {
    let tokens = ["<unk>", "<s>", "</s>", "hello", "world"];
    let mut out = Vec::with_capacity(size + 64);
    out.extend_from_slice(b"GGUF");
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&1u64.to_le_bytes()); // tensors
    out.extend_from_slice(&(8 + extra.len() as u64).to_le_bytes()); // key-value pairs
    put_kv_str(&mut out, "general.architecture", arch);
    put_kv_str(&mut out, "general.name", "synthetic");
    put_kv_u32(&mut out, "general.file_type", file_type);
    put_kv_u32(&mut out, &format!("{arch}.context_length"), 2048);
    put_kv_str(&mut out, "tokenizer.chat_template", SYNTHETIC_TEMPLATE);
    put_str(&mut out, "tokenizer.ggml.tokens");
    out.extend_from_slice(&9u32.to_le_bytes());
    out.extend_from_slice(&8u32.to_le_bytes());
    out.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for t in tokens {
        put_str(&mut out, t);
    }
    put_kv_u32(&mut out, "tokenizer.ggml.bos_token_id", 1);
    put_kv_u32(&mut out, "tokenizer.ggml.eos_token_id", 2);
    for (k, v) in extra {
        put_kv_str(&mut out, k, v);
    }
    // The tensor list: after it, 32-byte alignment, then the data.
    let info_len = 8 + 3 + 4 + 8 + 4 + 8;
    let data_start = (out.len() + info_len).div_ceil(32) * 32;
    let elements = (size.saturating_sub(data_start) / 4).max(8);
    put_str(&mut out, "pad");
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&(elements as u64).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // F32
    out.extend_from_slice(&0u64.to_le_bytes()); // offset
    out.resize(data_start, 0);
    out.extend((0..elements * 4).map(|i| {
        #[allow(clippy::cast_possible_truncation)]
        let b = (i as u8).wrapping_mul(31) ^ seed;
        b
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_and_magic() {
        let f = synthetic_gguf(4 << 20, "llama", 15, 0);
        assert_eq!(&f[..4], b"GGUF");
        assert!(f.len().abs_diff(4 << 20) < 64, "{}", f.len());
        assert_ne!(f, synthetic_gguf(4 << 20, "llama", 15, 1));
    }
}
