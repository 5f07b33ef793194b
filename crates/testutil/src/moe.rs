//! A mixture-of-experts model made from the real test model, for the tests of wick's kernels
//! on mixture-of-experts graphs (`MUL_MAT_ID`, the router's `SOFT_MAX`, 3-D `SWIGLU`).

use crate::split::{kv, write_gguf, Parsed, TensorData};

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `llama` mixture of experts, the layout
/// of Mixtral's GGUF files: each layer's feed-forward network becomes `experts` experts, of
/// which the router picks `used` per token. Expert `e` is the layer's own network with its
/// output scaled by `2^s`, `s` cycling through 0, −1, 1 (exact: the blocks' F16 scales move by
/// whole powers of two), so the experts differ and the model stays close to the dense one (a
/// token's routing weights sum to 1). A first version whose experts were other layers'
/// networks answered noise, on which the deterministic and the fast kernels part at once. The
/// routers (`ffn_gate_inp`, F32) are drawn from `seed`: small weights, so every expert gets
/// tokens.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file whose feed-forward weights are `Q4_0`,
/// `Q4_1`, `Q5_0`, `Q5_1` or `Q8_0`: this is test support.
pub fn mixture_of_experts(bytes: &[u8], experts: u32, used: u32, seed: u64) -> Vec<u8> {
    let file = Parsed::new(bytes);
    let dense = file.tensor_data();
    assert!(
        dense.iter().any(|(n, ..)| n.ends_with(".ffn_up.weight")),
        "a dense model with feed-forward layers"
    );
    let mut draw = crate::Draw::new(seed);
    // (name, dims, type, data) of every tensor of the new file.
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in dense {
        let ffn = ["ffn_gate", "ffn_up", "ffn_down"]
            .iter()
            .find(|f| name.ends_with(&format!(".{f}.weight")));
        let Some(ffn) = ffn else {
            tensors.push((name, dims, ty, data));
            continue;
        };
        let layer: usize = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("a layer tensor: {name}"));
        // Each expert's copy without the padding after the tensor.
        let bytes = tensor_bytes(&dims, ty);
        let mut stacked = Vec::with_capacity(bytes * experts as usize);
        for e in 0..experts {
            let at = stacked.len();
            stacked.extend_from_slice(&data[..bytes]);
            if *ffn == "ffn_down" {
                scale_blocks(&mut stacked[at..], ty, [0, -1, 1][e as usize % 3]);
            }
        }
        let mut stacked_dims = dims.clone();
        stacked_dims.push(u64::from(experts));
        tensors.push((
            format!("blk.{layer}.{ffn}_exps.weight"),
            stacked_dims,
            ty,
            stacked,
        ));
        if *ffn == "ffn_up" {
            // The router: F32, `n_embd` inputs per expert.
            let n_embd = dims[0];
            let router: Vec<u8> = (0..n_embd * u64::from(experts))
                .flat_map(|_| (draw.next() * 0.1).to_le_bytes())
                .collect();
            tensors.push((
                format!("blk.{layer}.ffn_gate_inp.weight"),
                vec![n_embd, u64::from(experts)],
                0,
                router,
            ));
        }
    }
    let mut kvs: Vec<Vec<u8>> = file.kvs.iter().map(|kv| kv.to_vec()).collect();
    kvs.push(kv("llama.expert_count", 4, &experts.to_le_bytes())); // u32
    kvs.push(kv("llama.expert_used_count", 4, &used.to_le_bytes()));
    write_gguf(&kvs, &tensors, file.alignment)
}

/// A 32-value block type's bytes per block, and whether an F16 minimum follows its F16 scale.
fn block_layout(ty: u32) -> (usize, bool) {
    match ty {
        2 => (18, false), // Q4_0
        3 => (20, true),  // Q4_1
        6 => (22, false), // Q5_0
        7 => (24, true),  // Q5_1
        8 => (34, false), // Q8_0
        other => panic!("ggml type {other} is not one this test support reads"),
    }
}

/// The bytes of a tensor of `dims` in ggml type `ty` (a 32-value block type).
pub(crate) fn tensor_bytes(dims: &[u64], ty: u32) -> usize {
    let elements: u64 = dims.iter().product();
    usize::try_from(elements / 32).expect("a tensor in memory") * block_layout(ty).0
}

/// Every block's values times `2^shift`: its F16 scale (and minimum) with the exponent moved,
/// kept a normal number (zeros, infinities and subnormals stay).
fn scale_blocks(data: &mut [u8], ty: u32, shift: i32) {
    let (bytes, minimum) = block_layout(ty);
    let halves: &[usize] = if minimum { &[0, 2] } else { &[0] };
    for block in data.chunks_exact_mut(bytes) {
        for &at in halves {
            let bits = u16::from_le_bytes([block[at], block[at + 1]]);
            let exponent = i32::from((bits >> 10) & 0x1F);
            if exponent == 0 || exponent == 31 {
                continue;
            }
            let moved = u16::try_from((exponent + shift).clamp(1, 30)).expect("an F16 exponent");
            let bits = (bits & !(0x1F << 10)) | (moved << 10);
            block[at..at + 2].copy_from_slice(&bits.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-layer dense file of Q4_1 feed-forward weights (rows of 32 values), each tensor's
    /// bytes its number from 1.
    fn dense() -> Vec<u8> {
        let arch = kv(
            "general.architecture",
            8,
            &crate::split::string_value("llama"),
        );
        let mut tensors: Vec<TensorData> = Vec::new();
        for layer in 0..2 {
            for (ffn, dims) in [
                ("ffn_gate", [32u64, 2]),
                ("ffn_up", [32, 2]),
                ("ffn_down", [64, 1]),
            ] {
                let fill = u8::try_from(tensors.len() + 1).unwrap();
                let name = format!("blk.{layer}.{ffn}.weight");
                tensors.push((name, dims.to_vec(), 3, vec![fill; 40]));
            }
        }
        write_gguf(&[arch], &tensors, 32)
    }

    #[test]
    fn scaling_moves_the_f16_exponent_of_scales_and_minimums_only() {
        // Q4_1: scale 1.0 (0x3C00), minimum −2.0 (0xC000), then values; twice.
        let mut block = vec![0x00, 0x3C, 0x00, 0xC0];
        block.extend([0x77; 16]);
        let mut two = block.repeat(2);
        scale_blocks(&mut two, 3, 1);
        assert_eq!(&two[..4], &[0x00, 0x40, 0x00, 0xC4]); // 2.0, −4.0
        assert_eq!(&two[4..20], &block[4..]);
        assert_eq!(&two[20..24], &[0x00, 0x40, 0x00, 0xC4]);
        scale_blocks(&mut two, 3, -2);
        assert_eq!(&two[..4], &[0x00, 0x38, 0x00, 0xBC]); // 0.5, −1.0
        let mut zero = vec![0u8; 18];
        scale_blocks(&mut zero, 2, 1);
        assert_eq!(zero, vec![0u8; 18]);
    }

    #[test]
    fn experts_are_the_layer_s_network_scaled_and_each_layer_gets_a_router() {
        let moe = mixture_of_experts(&dense(), 3, 1, 5);
        let file = Parsed::new(&moe);
        assert_eq!(file.kvs.len(), 3);
        let names: Vec<_> = file
            .tensors
            .iter()
            .map(crate::split::Tensor::describe)
            .collect();
        assert_eq!(names.len(), 8);
        let (name, dims, ty) = &names[0];
        assert_eq!(
            (name.as_str(), dims.as_slice(), *ty),
            ("blk.0.ffn_gate_exps.weight", &[32u64, 2, 3][..], 3)
        );
        // The gate experts: the layer's gate three times (bytes 1).
        assert!(file.tensors[0].data[..120].iter().all(|&b| b == 1));
        let at = |name: &str| names.iter().position(|(n, _, _)| n == name).unwrap();
        // Layer 1's down experts: its blocks (bytes 6: scale and minimum 0x0606, F16 exponent
        // 1) as they are, halved (the exponent kept at the smallest normal one), doubled.
        let down = at("blk.1.ffn_down_exps.weight");
        assert_eq!(names[down].1, vec![64, 1, 3]);
        let data = file.tensors[down].data;
        assert!(data[..80].iter().all(|&b| b == 6));
        assert_eq!(&data[40..44], &[6, 6, 6, 6]);
        assert_eq!(&data[80..84], &[6, 0x0A, 6, 0x0A]);
        assert!(data[84..100].iter().all(|&b| b == 6));
        let router = at("blk.0.ffn_gate_inp.weight");
        assert_eq!((names[router].1.clone(), names[router].2), (vec![32, 3], 0));
    }
}
