//! Synthetic LoRA adapters for the real test model.

/// A GGUF LoRA adapter for a model of architecture `arch` with `n_layer` layers of width
/// `n_embd` (SmolLM2-135M: `llama`, 30, 576): a rank-4 update of the query and output
/// projections of every layer, its weights drawn from `seed`. At scale 1 it nudges the model;
/// at 8 it changes greedy answers.
///
/// # Panics
///
/// Never: the weights are 24-bit draws, exact in an `f32`.
pub fn lora_adapter(arch: &str, n_layer: u32, n_embd: u64, seed: u64) -> Vec<u8> {
    const RANK: u64 = 4;
    let mut kv = Vec::new();
    let mut n_kv = 0u64;
    let put_str = |buf: &mut Vec<u8>, s: &str| {
        buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
        buf.extend_from_slice(s.as_bytes());
    };
    for (key, value) in [
        ("general.architecture", arch),
        ("general.type", "adapter"),
        ("adapter.type", "lora"),
    ] {
        put_str(&mut kv, key);
        kv.extend_from_slice(&8u32.to_le_bytes()); // string
        put_str(&mut kv, value);
        n_kv += 1;
    }
    put_str(&mut kv, "adapter.lora.alpha");
    kv.extend_from_slice(&6u32.to_le_bytes()); // float32
    kv.extend_from_slice(&4.0f32.to_le_bytes()); // alpha = rank: scale 1
    n_kv += 1;

    let mut infos = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    let mut n_tensors = 0u64;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // 24 random bits, exactly representable in an f32.
        let bits = u32::try_from(state >> 40).expect("24 bits");
        (f32::from(u16::try_from(bits >> 8).expect("16 bits")) / 65536.0 - 0.5) * 0.5
    };
    for layer in 0..n_layer {
        for proj in ["attn_q", "attn_output"] {
            for (suffix, dims) in [("lora_a", [n_embd, RANK]), ("lora_b", [RANK, n_embd])] {
                put_str(&mut infos, &format!("blk.{layer}.{proj}.weight.{suffix}"));
                infos.extend_from_slice(&2u32.to_le_bytes());
                for d in dims {
                    infos.extend_from_slice(&d.to_le_bytes());
                }
                infos.extend_from_slice(&0u32.to_le_bytes()); // F32
                infos.extend_from_slice(&(data.len() as u64).to_le_bytes());
                for _ in 0..dims[0] * dims[1] {
                    data.extend_from_slice(&next().to_le_bytes());
                }
                while !data.len().is_multiple_of(32) {
                    data.push(0);
                }
                n_tensors += 1;
            }
        }
    }
    let mut file = b"GGUF".to_vec();
    file.extend_from_slice(&3u32.to_le_bytes());
    file.extend_from_slice(&n_tensors.to_le_bytes());
    file.extend_from_slice(&n_kv.to_le_bytes());
    file.extend_from_slice(&kv);
    file.extend_from_slice(&infos);
    while !file.len().is_multiple_of(32) {
        file.push(0);
    }
    file.extend_from_slice(&data);
    file
}
