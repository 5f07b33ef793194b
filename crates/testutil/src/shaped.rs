//! A dense `llama` model of a real model's shape, random weights and the test model's
//! tokenizer: for measuring wick's kernels on the shapes people run. The test model's rows
//! are 576 values wide, which the 256-value super-block types cannot hold (llama-quantize
//! writes most of its tensors in fallback types), and at 135M parameters its weights fit
//! this machine's caches; a model of Llama 3.2 1B's shape has every tensor in the type asked
//! for and streams its weights from memory, as the GGUF files users download do.

use crate::split::{key_of, kv, write_gguf, Parsed, TensorData};

/// A dense `llama` model's shape: its width, its feed-forward width, its layers and its
/// attention heads (queries, and keys and values), each head `width / heads` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Values per token between layers (`llama.embedding_length`).
    pub width: u32,
    /// The feed-forward network's width (`llama.feed_forward_length`).
    pub feed_forward: u32,
    /// Layers (`llama.block_count`).
    pub layers: u32,
    /// Query heads (`llama.attention.head_count`).
    pub heads: u32,
    /// Key and value heads (`llama.attention.head_count_kv`).
    pub kv_heads: u32,
}

impl Shape {
    /// The weights of the layers' matrices (attention and feed-forward network in every
    /// layer): what a weight type given to the layers covers, the embeddings aside.
    pub fn layer_weights(self) -> u64 {
        let width = u64::from(self.width);
        let kv_width = u64::from(self.width / self.heads * self.kv_heads);
        let per_layer =
            2 * width * width + 2 * width * kv_width + 3 * width * u64::from(self.feed_forward);
        u64::from(self.layers) * per_layer
    }
}

/// Llama 3.2 1B's shape: 2048 wide, a 8192-wide feed-forward network, 16 layers, 32 query
/// heads of 64 values sharing 8 key and value heads. With the test model's vocabulary (49,152
/// tokens, tied embeddings) that is 1.07 billion parameters.
pub const LLAMA_1B: Shape = Shape {
    width: 2048,
    feed_forward: 8192,
    layers: 16,
    heads: 32,
    kv_heads: 8,
};

/// ggml's type id of BF16, and llama.cpp's file type "mostly BF16".
const BF16: (u32, u32) = (30, 32);

/// The dense `llama` model `bytes` (SmolLM2-135M: its tokenizer, chat template and vocabulary)
/// as a model of `shape`: every matrix drawn from `seed` (uniform, ±0.02) in BF16, the norms'
/// weights ones (F32), the output matrix tied to the embeddings as in the test model. Its
/// answers are noise; its products are those of a real model of that shape. `wick quantize`
/// (llama-quantize) turns it into any weight type.
///
/// # Panics
///
/// When `bytes` is not a `llama` GGUF file, or `shape`'s width is not a multiple of its heads
/// (nor its heads of its key and value heads): this is test support.
pub fn shaped_model(bytes: &[u8], shape: Shape, seed: u64) -> Vec<u8> {
    assert!(
        shape.width.is_multiple_of(shape.heads) && shape.heads.is_multiple_of(shape.kv_heads),
        "{shape:?}"
    );
    let file = Parsed::new(bytes);
    let embeddings = file
        .tensors
        .iter()
        .map(crate::split::Tensor::describe)
        .find(|(name, ..)| name == "token_embd.weight")
        .expect("the token embeddings");
    let vocabulary = embeddings.1[1];
    let head = shape.width / shape.heads;
    let u32_kv = |key: &str, value: u32| kv(key, 4, &value.to_le_bytes());
    let shaped = [
        ("llama.block_count", shape.layers),
        ("llama.embedding_length", shape.width),
        ("llama.feed_forward_length", shape.feed_forward),
        ("llama.attention.head_count", shape.heads),
        ("llama.attention.head_count_kv", shape.kv_heads),
        ("llama.rope.dimension_count", head),
        ("general.file_type", BF16.1),
    ];
    let kvs: Vec<Vec<u8>> = file
        .kvs
        .iter()
        .filter_map(|pair| {
            let key = key_of(pair);
            if key == "general.size_label" {
                return None; // the test model's ("135M")
            }
            Some(match shaped.iter().find(|(k, _)| *k == key) {
                Some((key, value)) => u32_kv(key, *value),
                None => pair.to_vec(),
            })
        })
        .collect();
    for (key, _) in shaped {
        assert!(
            kvs.iter().any(|pair| key_of(pair) == key),
            "the test model has no {key}"
        );
    }

    let mut draw = crate::Draw::new(seed);
    let mut matrix = |name: String, columns: u32, rows: u64| -> TensorData {
        let count = u64::from(columns) * rows;
        let mut data = Vec::with_capacity(usize::try_from(2 * count).expect("in memory"));
        for _ in 0..count {
            data.extend_from_slice(&bf16_bits(draw.next() * 0.02).to_le_bytes());
        }
        (name, vec![u64::from(columns), rows], BF16.0, data)
    };
    let ones = |name: String, len: u32| -> TensorData {
        let data = (0..len).flat_map(|_| 1.0f32.to_le_bytes()).collect();
        (name, vec![u64::from(len)], 0, data) // F32
    };
    let (width, kv_width) = (shape.width, u64::from(shape.kv_heads * head));
    let mut tensors = vec![
        matrix("token_embd.weight".into(), width, vocabulary),
        ones("output_norm.weight".into(), width),
    ];
    for layer in 0..shape.layers {
        let name = |part: &str| format!("blk.{layer}.{part}.weight");
        tensors.push(ones(name("attn_norm"), width));
        tensors.push(matrix(name("attn_q"), width, width.into()));
        tensors.push(matrix(name("attn_k"), width, kv_width));
        tensors.push(matrix(name("attn_v"), width, kv_width));
        tensors.push(matrix(name("attn_output"), width, width.into()));
        tensors.push(ones(name("ffn_norm"), width));
        tensors.push(matrix(name("ffn_gate"), width, shape.feed_forward.into()));
        tensors.push(matrix(name("ffn_up"), width, shape.feed_forward.into()));
        tensors.push(matrix(name("ffn_down"), shape.feed_forward, width.into()));
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// `value` as BF16 (its top 16 bits, rounded to nearest even): for finite values.
fn bf16_bits(value: f32) -> u16 {
    let bits = value.to_bits();
    let rounded = bits + 0x7FFF + ((bits >> 16) & 1);
    u16::try_from(rounded >> 16).expect("16 bits")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::{string_value, u32_value, Tensor};

    /// A one-layer `llama` file with the keys a shape replaces, a vocabulary of 10 tokens.
    fn tiny() -> Vec<u8> {
        let mut kvs = vec![
            kv("general.architecture", 8, &string_value("llama")),
            kv("general.size_label", 8, &string_value("135M")),
            kv("tokenizer.ggml.model", 8, &string_value("gpt2")),
        ];
        for key in [
            "llama.block_count",
            "llama.embedding_length",
            "llama.feed_forward_length",
            "llama.attention.head_count",
            "llama.attention.head_count_kv",
            "llama.rope.dimension_count",
            "general.file_type",
        ] {
            kvs.push(kv(key, 4, &1u32.to_le_bytes()));
        }
        let embeddings = (
            "token_embd.weight".to_string(),
            vec![4, 10],
            0,
            vec![0; 160],
        );
        write_gguf(&kvs, &[embeddings], 32)
    }

    #[test]
    fn a_shaped_model_has_the_shape_s_keys_and_tensors() {
        let shape = Shape {
            width: 64,
            feed_forward: 96,
            layers: 2,
            heads: 4,
            kv_heads: 2,
        };
        let out = shaped_model(&tiny(), shape, 7);
        let parsed = Parsed::new(&out);
        let value = |key: &str| u32_value(&parsed, key);
        assert_eq!(value("llama.block_count"), 2);
        assert_eq!(value("llama.embedding_length"), 64);
        assert_eq!(value("llama.feed_forward_length"), 96);
        assert_eq!(value("llama.attention.head_count"), 4);
        assert_eq!(value("llama.attention.head_count_kv"), 2);
        assert_eq!(value("llama.rope.dimension_count"), 16);
        assert_eq!(value("general.file_type"), 32);
        assert!(!parsed.kvs.iter().any(|p| key_of(p) == "general.size_label"));
        assert!(parsed
            .kvs
            .iter()
            .any(|p| key_of(p) == "tokenizer.ggml.model"));

        let tensors: Vec<_> = parsed.tensors.iter().map(Tensor::describe).collect();
        assert_eq!(tensors.len(), 2 + 2 * 9);
        let matrices: u64 = tensors
            .iter()
            .filter(|(name, dims, _)| name.starts_with("blk.") && dims.len() == 2)
            .map(|(_, dims, _)| dims.iter().product::<u64>())
            .sum();
        assert_eq!(matrices, shape.layer_weights());
        assert_eq!(tensors[0], ("token_embd.weight".into(), vec![64, 10], 30));
        assert_eq!(tensors[1], ("output_norm.weight".into(), vec![64], 0));
        let layer: Vec<_> = tensors[2..11]
            .iter()
            .map(|(name, dims, ty)| (name.as_str(), dims.clone(), *ty))
            .collect();
        assert_eq!(
            layer,
            [
                ("blk.0.attn_norm.weight", vec![64], 0),
                ("blk.0.attn_q.weight", vec![64, 64], 30),
                ("blk.0.attn_k.weight", vec![64, 32], 30),
                ("blk.0.attn_v.weight", vec![64, 32], 30),
                ("blk.0.attn_output.weight", vec![64, 64], 30),
                ("blk.0.ffn_norm.weight", vec![64], 0),
                ("blk.0.ffn_gate.weight", vec![64, 96], 30),
                ("blk.0.ffn_up.weight", vec![64, 96], 30),
                ("blk.0.ffn_down.weight", vec![96, 64], 30),
            ]
        );
        // The matrices are drawn (not zeros, within ±0.02), the norms ones.
        let q = &parsed.tensors[3].data[..2 * 64 * 64];
        let values: Vec<f32> = q
            .chunks_exact(2)
            .map(|b| f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
            .collect();
        assert!(values.iter().all(|v| v.abs() <= 0.0201), "{values:?}");
        assert!(values.iter().filter(|v| **v != 0.0).count() > 4000);
        assert_eq!(parsed.tensors[2].data[..4], 1.0f32.to_le_bytes());
        // The same seed, the same file.
        assert_eq!(shaped_model(&tiny(), shape, 7), out);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3F80);
        assert_eq!(bf16_bits(-2.0), 0xC000);
        // Half-way cases go to the even neighbour; past half-way, up.
        assert_eq!(bf16_bits(f32::from_bits(0x3F80_8000)), 0x3F80);
        assert_eq!(bf16_bits(f32::from_bits(0x3F81_8000)), 0x3F82);
        assert_eq!(bf16_bits(f32::from_bits(0x3F80_8001)), 0x3F81);
    }
}
