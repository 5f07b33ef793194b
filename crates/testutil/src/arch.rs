//! The test model as other architectures, for the tests of wick's kernels on graphs unlike
//! `llama`'s: layer norm (`NORM`), GELU, biases (`starcoder2`); soft caps, `GEGLU`, post-norms
//! and sliding-window attention (`gemma2`), with query and key norms and a window's own rotary
//! base (`gemma3`); biased queries, keys and values (`qwen2`); queries and keys normed per head
//! (`qwen3`, and a mixture of experts: `qwen3moe`); fused matrices and rotary factors (`phi3`);
//! attention sinks and biased experts (`gpt-oss`); layers without rotary positions
//! (`smollm3`); scaled embeddings, residuals, attention and logits (`granite`); `YaRN` rotary
//! scaling and an attention temperature (`mistral3`); norms after the attention and network
//! only, with queries and keys normed as a whole (`olmo2`) or per head (`exaone4`); parallel
//! attention and network on one layer norm without a bias (`cohere2`); multi-head latent
//! attention, its per-head matrices 3-D (`deepseek2`); short convolutions with a recurrent
//! state beside attention layers (`lfm2`); selective state spaces and no attention (`mamba`).

use crate::split::{key_of, kv, string_value, u32_value, write_gguf, Parsed, TensorData};

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `starcoder2` model: layer norms with
/// biases where it has RMS norms (the same weights, biases drawn from `seed`), a GELU network
/// of its `ffn_up` and `ffn_down` (its `ffn_gate` dropped; biases drawn), biases on the
/// attention's output, rotary positions of llama.cpp's `NEOX` kind. Its answers are not the
/// test model's; they are those of a real llama.cpp graph of another family (`starcoder2`:
/// GPT-2-style blocks with grouped-query attention), computed with ggml's `NORM` and `GELU`.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file: this is test support.
pub fn layer_norm_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    const ARCH: &str = "starcoder2";
    let file = Parsed::new(bytes);
    let mut kvs = renamed_keys(&file, ARCH);
    let eps = format!("{ARCH}.attention.layer_norm_epsilon");
    kvs.push(kv(&eps, 6, &1e-5f32.to_le_bytes())); // f32

    let mut draw = crate::Draw::new(seed);
    let mut bias = |name: String, len: u64| -> TensorData {
        let data = (0..len)
            .flat_map(|_| (draw.next() * 0.02).to_le_bytes())
            .collect();
        (name, vec![len], 0, data) // F32
    };
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        if name.ends_with(".ffn_gate.weight") {
            continue;
        }
        let biased = [
            "attn_norm",
            "attn_output",
            "ffn_norm",
            "ffn_up",
            "ffn_down",
            "output_norm",
        ]
        .iter()
        .find(|b| name.ends_with(&format!("{b}.weight")))
        .map(|b| {
            // A bias as long as the weight's output: rows for a matrix, the length for a
            // norm's vector.
            let len = if dims.len() == 2 { dims[1] } else { dims[0] };
            (
                name.replace(&format!("{b}.weight"), &format!("{b}.bias")),
                len,
            )
        });
        tensors.push((name, dims, ty, data));
        if let Some((name, len)) = biased {
            tensors.push(bias(name, len));
        }
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `gemma2` model: the same tensors, plus
/// the norms after attention and after the feed-forward network (copies of the layer's norms
/// before them), GELU-gated networks (llama.cpp's `GEGLU`), the input embedding scaled by
/// `sqrt(n_embd)`, attention logits soft-capped at 50 and final logits at 30, and every other
/// layer attending to a sliding window of `window` tokens. Its answers are poor; its graph is
/// Gemma 2's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file: this is test support.
pub fn gemma2_model(bytes: &[u8], window: u32) -> Vec<u8> {
    gemma_model(bytes, "gemma2", window, None)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `gemma3` model: [`gemma2_model`]'s
/// post-norms, `GEGLU` and scaled embedding, without its soft caps, with each query and key
/// head RMS-normed before its rotary positions (weights drawn around 1 from `seed`), five
/// layers in six attending to a sliding window of `window` tokens with their own rotary base
/// (10,000), as Gemma 3 has. Its answers are poor; its graph is Gemma 3's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file with its width and head count: this is test
/// support.
pub fn gemma3_model(bytes: &[u8], window: u32, seed: u64) -> Vec<u8> {
    gemma_model(bytes, "gemma3", window, Some(seed))
}

/// [`gemma2_model`] (`arch` `gemma2`) and [`gemma3_model`] (`gemma3`, with head norms drawn
/// from `head_norms`).
fn gemma_model(bytes: &[u8], arch: &str, window: u32, head_norms: Option<u64>) -> Vec<u8> {
    let file = Parsed::new(bytes);
    let mut kvs = renamed_keys(&file, arch);
    if head_norms.is_some() {
        kvs.push(f32_key(arch, "rope.freq_base_swa", 10_000.0));
    } else {
        kvs.push(f32_key(arch, "attn_logit_softcapping", 50.0));
        kvs.push(f32_key(arch, "final_logit_softcapping", 30.0));
    }
    kvs.push(u32_key(arch, "attention.sliding_window", window));
    let mut head = head_norms.map(|seed| (head_len(&file), crate::Draw::new(seed)));
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        let post = [
            ("attn_norm", "post_attention_norm"),
            ("ffn_norm", "post_ffw_norm"),
        ]
        .iter()
        .find(|(before, _)| name.ends_with(&format!(".{before}.weight")))
        .map(|(before, after)| {
            let name = name.replace(&format!(".{before}."), &format!(".{after}."));
            (name, dims.clone(), ty, data.clone())
        });
        let norms = match &mut head {
            Some((len, draw)) if name.ends_with(".attn_norm.weight") => {
                head_norm_tensors(&name, *len, draw).to_vec()
            }
            _ => Vec::new(),
        };
        tensors.push((name, dims, ty, data));
        tensors.extend(post);
        tensors.extend(norms);
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// A layer's query and key head norms (`attn_q_norm`, `attn_k_norm`, named after its
/// `attn_norm`): `len` F32 weights each, drawn around 1.
fn head_norm_tensors(attn_norm: &str, len: u64, draw: &mut crate::Draw) -> [TensorData; 2] {
    ["attn_q_norm", "attn_k_norm"].map(|norm| {
        drawn_f32(
            draw,
            attn_norm.replace("attn_norm", norm),
            vec![len],
            1.0,
            0.1,
        )
    })
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `qwen2` model (Qwen 2 and 2.5): the
/// same tensors plus biases on the queries, keys and values (drawn from `seed`), rotary
/// positions of llama.cpp's `NEOX` kind. Its answers are poor; its graph is Qwen 2's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file: this is test support.
pub fn qwen2_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    let file = Parsed::new(bytes);
    let kvs = renamed_keys(&file, "qwen2");
    let mut draw = crate::Draw::new(seed);
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        let bias = ["attn_q", "attn_k", "attn_v"]
            .iter()
            .find(|b| name.ends_with(&format!(".{b}.weight")))
            .map(|_| {
                let values = (0..dims[1])
                    .flat_map(|_| (draw.next() * 0.02).to_le_bytes())
                    .collect();
                (name.replace(".weight", ".bias"), vec![dims[1]], 0, values) // F32
            });
        tensors.push((name, dims, ty, data));
        tensors.extend(bias);
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `qwen3` model: the same tensors plus
/// an RMS norm of each query and key head before the rotary positions (`attn_q_norm`,
/// `attn_k_norm`: one weight per head value, drawn around 1 from `seed`), rotary positions of
/// the `NEOX` kind. Its answers are poor; its graph is Qwen 3's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file with its width and head count: this is test
/// support.
pub fn qwen3_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    head_normed(&Parsed::new(bytes), "qwen3", seed, Vec::new())
}

/// A `llama` mixture of experts `bytes` ([`crate::mixture_of_experts`]) as a `qwen3moe` model
/// (Qwen3-30B-A3B's graph): [`qwen3_model`]'s head norms on it, and the experts' width in
/// `expert_feed_forward_length` (Qwen's key; without it llama.cpp divides the dense width by
/// the experts used).
///
/// # Panics
///
/// When `bytes` is not a `llama` GGUF mixture of experts with its width, head count and
/// feed-forward width: this is test support.
pub fn qwen3moe_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    let file = Parsed::new(bytes);
    let width = u32_value(&file, "llama.feed_forward_length");
    let key = u32_key("qwen3moe", "expert_feed_forward_length", width);
    head_normed(&file, "qwen3moe", seed, vec![key])
}

/// A `llama` mixture of experts `bytes` ([`crate::mixture_of_experts`], best requantized with
/// `MXFP4_MOE` as gpt-oss ships) as a `gpt-oss` model: attention sinks (one logit per head,
/// drawn from `seed`), biases on the attention's output, the router and every expert (drawn),
/// the pre-network norm under gpt-oss's name (`post_attention_norm`), an output matrix of its
/// own (a copy of the embeddings), every other layer attending to a sliding window of
/// `window` tokens. llama.cpp then builds gpt-oss's graph: sinks in the attention's softmax,
/// `SWIGLU_OAI` experts with per-expert biases (`ADD_ID`), the router's softmax over the
/// chosen experts' logits. Its answers are poor; its graph is gpt-oss's.
///
/// # Panics
///
/// When `bytes` is not a `llama` GGUF mixture of experts with its head count and feed-forward
/// width: this is test support.
pub fn gpt_oss_model(bytes: &[u8], window: u32, seed: u64) -> Vec<u8> {
    const ARCH: &str = "gpt-oss";
    let file = Parsed::new(bytes);
    let heads = u64::from(u32_value(&file, "llama.attention.head_count"));
    let width = u32_value(&file, "llama.feed_forward_length");
    let mut kvs = renamed_keys(&file, ARCH);
    kvs.push(u32_key(ARCH, "expert_feed_forward_length", width));
    kvs.push(u32_key(ARCH, "attention.sliding_window", window));
    let mut draw = crate::Draw::new(seed);
    let mut drawn = |name: String, dims: Vec<u64>, spread: f32| -> TensorData {
        let values = (0..dims.iter().product::<u64>())
            .flat_map(|_| (draw.next() * spread).to_le_bytes())
            .collect();
        (name, dims, 0, values) // F32
    };
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        let mut after = Vec::new();
        if name == "token_embd.weight" {
            after.push(("output.weight".to_string(), dims.clone(), ty, data.clone()));
        } else if name.ends_with(".attn_norm.weight") {
            after.push(drawn(
                name.replace("attn_norm", "attn_sinks"),
                vec![heads],
                2.0,
            ));
        } else if name.ends_with(".attn_output.weight") || name.ends_with(".ffn_gate_inp.weight") {
            after.push(drawn(name.replace(".weight", ".bias"), vec![dims[1]], 0.02));
        } else if name.ends_with("_exps.weight") {
            // One bias row per expert.
            after.push(drawn(
                name.replace(".weight", ".bias"),
                dims[1..].to_vec(),
                0.02,
            ));
        }
        let name = name.replace(".ffn_norm.", ".post_attention_norm.");
        tensors.push((name, dims, ty, data));
        tensors.extend(after);
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The `llama` model `file` as architecture `arch`, with `extra` keys and each layer's query
/// and key head norms (drawn from `seed`).
fn head_normed(file: &Parsed<'_>, arch: &str, seed: u64, extra: Vec<Vec<u8>>) -> Vec<u8> {
    let head = head_len(file);
    let mut kvs = renamed_keys(file, arch);
    kvs.extend(extra);
    let mut draw = crate::Draw::new(seed);
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        let norm = name
            .ends_with(".attn_norm.weight")
            .then(|| head_norm_tensors(&name, head, &mut draw));
        tensors.push((name, dims, ty, data));
        tensors.extend(norm.into_iter().flatten());
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `phi3` model (Phi-3, Phi-3.5,
/// Phi-4-mini): each layer's queries, keys and values in one matrix (`attn_qkv`, their rows one
/// after another: llama.cpp computes one product and views it three ways), its network's gate
/// and up projections in one (`ffn_up`, the gate's rows then the up's: `SWIGLU` of one source
/// split in halves), rotary factors per frequency (`rope_factors_short` and `_long`, drawn
/// near 1 from `seed`, as Phi-3.5's long-context rotary scaling has), rotary positions of the
/// `NEOX` kind. Its answers are poor; its graph is Phi 3's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file whose query, key and value (and gate and
/// up) share a 32-value block type: this is test support.
pub fn phi3_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    use std::collections::HashMap;
    let file = Parsed::new(bytes);
    let rotary = u64::from(u32_value(&file, "llama.rope.dimension_count"));
    let kvs = renamed_keys(&file, "phi3");
    let all = file.tensor_data();
    let by_name: HashMap<&str, &TensorData> = all.iter().map(|t| (t.0.as_str(), t)).collect();
    // The matrices `blk.N.{part}.weight` of `parts` as one: their rows one after another.
    let fuse = |layer: &str, parts: &[&str], into: &str| -> TensorData {
        let mut rows = 0;
        let mut data = Vec::new();
        let mut types = Vec::new();
        let mut width = 0;
        for part in parts {
            let (_, dims, ty, bytes) = by_name[format!("{layer}.{part}.weight").as_str()];
            width = dims[0];
            rows += dims[1];
            types.push(*ty);
            // Without the padding after the tensor.
            data.extend_from_slice(&bytes[..crate::moe::tensor_bytes(dims, *ty)]);
        }
        assert!(types.windows(2).all(|t| t[0] == t[1]), "{layer}: {types:?}");
        (
            format!("{layer}.{into}.weight"),
            vec![width, rows],
            types[0],
            data,
        )
    };
    let mut draw = crate::Draw::new(seed);
    let mut tensors: Vec<TensorData> = Vec::new();
    for name in ["rope_factors_short", "rope_factors_long"] {
        let values = (0..rotary / 2)
            .flat_map(|_| (1.0 + draw.next() * 0.25).to_le_bytes())
            .collect();
        tensors.push((format!("{name}.weight"), vec![rotary / 2], 0, values)); // F32
    }
    for tensor in &all {
        let name = tensor.0.as_str();
        let layer = name.rsplitn(3, '.').nth(2).unwrap_or_default();
        if name.ends_with(".attn_q.weight") {
            tensors.push(fuse(layer, &["attn_q", "attn_k", "attn_v"], "attn_qkv"));
        } else if name.ends_with(".ffn_up.weight") {
            tensors.push(fuse(layer, &["ffn_gate", "ffn_up"], "ffn_up"));
        } else if ![".attn_k.weight", ".attn_v.weight", ".ffn_gate.weight"]
            .iter()
            .any(|part| name.ends_with(part))
        {
            tensors.push(tensor.clone());
        }
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `smollm3` model (`SmolLM` 3): the same
/// tensors and keys; llama.cpp leaves every fourth layer without rotary positions. Its graph
/// is `SmolLM` 3's.
///
/// # Panics
///
/// When `bytes` is not a GGUF file: this is test support.
pub fn smollm3_model(bytes: &[u8]) -> Vec<u8> {
    let file = Parsed::new(bytes);
    write_gguf(
        &renamed_keys(&file, "smollm3"),
        &file.tensor_data(),
        file.alignment,
    )
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `granite` model (IBM Granite 3): the
/// same tensors; the input embedding scaled by 12, each layer's attention and network outputs
/// by 0.22 before their residual adds, the attention's logits by 1/64 instead of one over the
/// square root of the head size, the final logits divided by 8 (Granite 3's multipliers).
/// Its answers are poor; its graph is Granite's.
///
/// # Panics
///
/// When `bytes` is not a GGUF file: this is test support.
pub fn granite_model(bytes: &[u8]) -> Vec<u8> {
    const ARCH: &str = "granite";
    let file = Parsed::new(bytes);
    let mut kvs = renamed_keys(&file, ARCH);
    for (key, value) in [
        ("embedding_scale", 12.0f32),
        ("residual_scale", 0.22),
        ("attention.scale", 0.015_625),
        ("logit_scale", 8.0),
    ] {
        kvs.push(f32_key(ARCH, key, value));
    }
    write_gguf(&kvs, &file.tensor_data(), file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `mistral3` model (Mistral Small 3 and
/// Ministral 3): the same tensors; `YaRN` rotary scaling (factor 4 over an original context of
/// 32 tokens) and Llama 4's attention temperature (queries scaled by a factor that grows with
/// the position's log past each 32 tokens), as Ministral 3 has. Its answers are poor; its graph
/// is Mistral 3's.
///
/// # Panics
///
/// When `bytes` is not a GGUF file: this is test support.
pub fn mistral3_model(bytes: &[u8]) -> Vec<u8> {
    const ARCH: &str = "mistral3";
    let file = Parsed::new(bytes);
    let mut kvs = renamed_keys(&file, ARCH);
    kvs.push(kv(
        &format!("{ARCH}.rope.scaling.type"),
        8,
        &string_value("yarn"),
    ));
    kvs.push(u32_key(ARCH, "rope.scaling.original_context_length", 32));
    for (key, value) in [
        ("rope.scaling.factor", 4.0f32),
        ("rope.scaling.yarn_beta_fast", 32.0),
        ("rope.scaling.yarn_beta_slow", 1.0),
        ("rope.scaling.yarn_log_multiplier", 1.0),
        ("attention.temperature_scale", 0.1),
    ] {
        kvs.push(f32_key(ARCH, key, value));
    }
    write_gguf(&kvs, &file.tensor_data(), file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as an `olmo2` model with a sliding window
/// (`OLMo` 3's graph): its norms moved after the attention and after the network (no norms
/// before them), queries and keys each RMS-normed as a whole (weights drawn around 1 from
/// `seed`), an output matrix of its own (a copy of the embeddings), three layers in four
/// attending to a sliding window of `window` tokens. Its answers are poor; its graph is
/// `OLMo`'s.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file with its width and head counts: this is test
/// support.
pub fn olmo2_model(bytes: &[u8], window: u32, seed: u64) -> Vec<u8> {
    const ARCH: &str = "olmo2";
    let file = Parsed::new(bytes);
    let width = u64::from(u32_value(&file, "llama.embedding_length"));
    let kv_heads = u64::from(u32_value(&file, "llama.attention.head_count_kv"));
    let mut kvs = renamed_keys(&file, ARCH);
    kvs.push(u32_key(ARCH, "attention.sliding_window", window));
    let mut draw = crate::Draw::new(seed);
    let mut norm = |name: String, len: u64| -> TensorData {
        let values = (0..len)
            .flat_map(|_| (1.0 + draw.next() * 0.1).to_le_bytes())
            .collect();
        (name, vec![len], 0, values) // F32
    };
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        if name == "token_embd.weight" {
            tensors.push(("output.weight".to_string(), dims.clone(), ty, data.clone()));
        }
        if name.ends_with(".attn_norm.weight") {
            tensors.push(norm(name.replace("attn_norm", "attn_q_norm"), width));
            let keys = kv_heads * head_len(&file);
            tensors.push(norm(name.replace("attn_norm", "attn_k_norm"), keys));
        }
        tensors.push((moved_after(&name), dims, ty, data));
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as an `exaone4` model (EXAONE 4.0 1.2B):
/// its norms moved after the attention and after the network (no norms before them), each
/// query and key head RMS-normed before its rotary positions (weights drawn around 1 from
/// `seed`). Its answers are poor; its graph is EXAONE 4's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file with its width and head count: this is test
/// support.
pub fn exaone4_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    let file = Parsed::new(bytes);
    let head = head_len(&file);
    let kvs = renamed_keys(&file, "exaone4");
    let mut draw = crate::Draw::new(seed);
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        if name.ends_with(".attn_norm.weight") {
            tensors.extend(head_norm_tensors(&name, head, &mut draw));
        }
        tensors.push((moved_after(&name), dims, ty, data));
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `cohere2` model (Command R7B, Command
/// A): one layer norm without a bias before each layer's attention and network, which run side
/// by side on it and add to the residual together (the network's own norm dropped), rotary
/// positions only on the three layers in four that attend to a sliding window of `window`
/// tokens, the final logits scaled by 1/4. Its answers are poor; its graph is Cohere's.
///
/// # Panics
///
/// When `bytes` is not a GGUF file: this is test support.
pub fn cohere2_model(bytes: &[u8], window: u32) -> Vec<u8> {
    const ARCH: &str = "cohere2";
    let file = Parsed::new(bytes);
    let mut kvs = renamed_keys(&file, ARCH);
    kvs.push(u32_key(ARCH, "attention.sliding_window", window));
    for (key, value) in [
        ("logit_scale", 0.25f32),
        ("attention.layer_norm_epsilon", 1e-5),
    ] {
        kvs.push(f32_key(ARCH, key, value));
    }
    let tensors: Vec<TensorData> = file
        .tensor_data()
        .into_iter()
        .filter(|(name, ..)| !name.ends_with(".ffn_norm.weight"))
        .collect();
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `deepseek2` model with multi-head
/// latent attention (DeepSeek V2 Lite's graph, every layer dense): its query matrix and
/// output kept, its key and value matrices replaced by one compressing each token to a
/// 128-value latent and a 32-value rotary key shared by every head (`attn_kv_a_mqa`, with the
/// latent's RMS norm `attn_kv_a_norm`), and each head's matrices taking the latent to its
/// keys and values (`attn_k_b`, `attn_v_b`: 3-D, one slice per head), all drawn from `seed`
/// (F32). llama.cpp then multiplies each head's queries by its slice of `attn_k_b` and its
/// attention output by its slice of `attn_v_b` (3-D `MUL_MAT`s) and attends over the cached
/// latents (one key-value head, keys of 160 values, values of 128). Its answers are poor; its
/// graph is DeepSeek 2's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file with its width, head count, block count and
/// feed-forward width, and 64-value heads: this is test support.
pub fn deepseek2_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    const ARCH: &str = "deepseek2";
    // The latent's width, and the rotary and plain parts of each head's 64 query values.
    const LATENT: u32 = 128;
    const ROTARY: u32 = 32;
    const PLAIN: u32 = 32;
    let file = Parsed::new(bytes);
    let heads = u32_value(&file, "llama.attention.head_count");
    let layers = u32_value(&file, "llama.block_count");
    let width = u32_value(&file, "llama.feed_forward_length");
    assert_eq!(head_len(&file), u64::from(ROTARY + PLAIN), "64-value heads");
    let ours = [
        ("attention.head_count_kv", 1),
        ("rope.dimension_count", ROTARY),
        ("attention.key_length", LATENT + ROTARY),
        ("attention.value_length", LATENT),
        ("attention.key_length_mla", ROTARY + PLAIN),
        ("attention.value_length_mla", ROTARY + PLAIN),
        ("attention.q_lora_rank", 0),
        ("attention.kv_lora_rank", LATENT),
        ("leading_dense_block_count", layers),
        ("expert_feed_forward_length", width),
        ("expert_shared_count", 0),
    ];
    let mut kvs: Vec<Vec<u8>> = renamed_keys(&file, ARCH)
        .into_iter()
        .filter(|pair| {
            let key = key_of(pair);
            !ours.iter().any(|(name, _)| key == format!("{ARCH}.{name}"))
        })
        .collect();
    for (name, value) in ours {
        kvs.push(u32_key(ARCH, name, value));
    }
    let mut draw = crate::Draw::new(seed);
    let mut drawn = |name, dims, around, spread| drawn_f32(&mut draw, name, dims, around, spread);
    let (latent, rotary, plain) = (u64::from(LATENT), u64::from(ROTARY), u64::from(PLAIN));
    let (heads, embd) = (
        u64::from(heads),
        u64::from(u32_value(&file, "llama.embedding_length")),
    );
    let mut tensors: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in file.tensor_data() {
        if name.ends_with(".attn_k.weight") || name.ends_with(".attn_v.weight") {
            continue;
        }
        let latent_parts = name.ends_with(".attn_q.weight").then(|| {
            let named = |part: &str| name.replace("attn_q", part);
            [
                drawn(
                    named("attn_kv_a_mqa"),
                    vec![embd, latent + rotary],
                    0.0,
                    0.08,
                ),
                drawn(named("attn_kv_a_norm"), vec![latent], 1.0, 0.1),
                drawn(named("attn_k_b"), vec![plain, latent, heads], 0.0, 0.3),
                drawn(
                    named("attn_v_b"),
                    vec![latent, rotary + plain, heads],
                    0.0,
                    0.15,
                ),
            ]
        });
        tensors.push((name, dims, ty, data));
        tensors.extend(latent_parts.into_iter().flatten());
    }
    write_gguf(&kvs, &tensors, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as an `lfm2` model (Liquid's LFM2): a
/// hybrid of attention layers (every third, with per-head query and key norms drawn from
/// `seed`) and gated short-convolution layers (the others) whose state is recurrent. A
/// convolution layer's input projection is its query, output and query matrices' rows one
/// after another (the three gates), its output projection the attention's output matrix,
/// its 3-tap kernel drawn (F32); the final norm is renamed `token_embd_norm` as LFM2 names
/// it. llama.cpp then runs the convolution layers with `SSM_CONV` over a state of the last
/// two tokens per sequence, which it cannot cut back to an earlier position. Its answers
/// are poor; its graph and its memory are LFM2's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file of 32-value block types: this is test
/// support.
pub fn lfm2_model(bytes: &[u8], seed: u64) -> Vec<u8> {
    const ARCH: &str = "lfm2";
    // The kernel's taps: the token itself and the two before it.
    const TAPS: u32 = 3;
    let file = Parsed::new(bytes);
    let layers = u32_value(&file, "llama.block_count");
    let kv_heads = u32_value(&file, "llama.attention.head_count_kv");
    let attention = |layer: u32| layer % 3 == 2;
    let mut kvs: Vec<Vec<u8>> = renamed_keys(&file, ARCH)
        .into_iter()
        .filter(|pair| key_of(pair) != format!("{ARCH}.attention.head_count_kv"))
        .collect();
    // Per layer: the attention layers' key-value heads, 0 for a convolution layer.
    let mut heads = 4u32.to_le_bytes().to_vec(); // an array of u32
    heads.extend_from_slice(&u64::from(layers).to_le_bytes());
    for layer in 0..layers {
        let n = if attention(layer) { kv_heads } else { 0 };
        heads.extend_from_slice(&n.to_le_bytes());
    }
    kvs.push(kv(&format!("{ARCH}.attention.head_count_kv"), 9, &heads));
    kvs.push(u32_key(ARCH, "shortconv.l_cache", TAPS));
    let tensors = file.tensor_data();
    let len = head_len(&file);
    let mut draw = crate::Draw::new(seed);
    let mut out: Vec<TensorData> = Vec::new();
    for tensor in &tensors {
        let name = &tensor.0;
        let layer = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<u32>().ok());
        if name == "output_norm.weight" {
            let (_, dims, ty, data) = tensor.clone();
            out.push(("token_embd_norm.weight".into(), dims, ty, data));
            continue;
        }
        let Some(layer) = layer else {
            out.push(tensor.clone());
            continue;
        };
        if attention(layer) {
            if name.ends_with(".attn_norm.weight") {
                out.extend(head_norm_tensors(name, len, &mut draw));
            }
            out.push(tensor.clone());
            continue;
        }
        let at = |part: &str| format!("blk.{layer}.{part}");
        if name.ends_with(".attn_q.weight") {
            let (q, o) = (
                named(&tensors, &at("attn_q.weight")),
                named(&tensors, &at("attn_output.weight")),
            );
            let ((_, q_dims, q_ty, _), (_, o_dims, o_ty, _)) = (q, o);
            let (q, o) = (unpadded(q), unpadded(o));
            assert_eq!(
                (q_dims, q_ty),
                (o_dims, o_ty),
                "square matrices of one type"
            );
            let gates = [q, o, q].concat();
            out.push((
                at("shortconv.in_proj.weight"),
                vec![q_dims[0], 3 * q_dims[1]],
                *q_ty,
                gates,
            ));
            out.push((
                at("shortconv.out_proj.weight"),
                o_dims.clone(),
                *o_ty,
                o.to_vec(),
            ));
            let kernel = vec![u64::from(TAPS), q_dims[0]];
            out.push(drawn_f32(
                &mut draw,
                at("shortconv.conv.weight"),
                kernel,
                0.3,
                0.3,
            ));
            continue;
        }
        let attention_only = [".attn_k.", ".attn_v.", ".attn_output."];
        if !attention_only.iter().any(|part| name.contains(part)) {
            out.push(tensor.clone());
        }
    }
    write_gguf(&kvs, &out, file.alignment)
}

/// The dense `llama` model `bytes` (SmolLM2-135M) as a `mamba` model of its first `layers`
/// layers: each a selective state-space block (Mamba 1: an inner width of twice the model's,
/// a 4-tap convolution, a state of 16 per channel) after the layer's norm, with no attention
/// and no feed-forward network. The input projection is the layer's gate and half its up
/// matrix, rows one after another; the others are drawn from `seed` (F32). llama.cpp runs it
/// with `SSM_CONV` and `SSM_SCAN` over a per-sequence recurrent state and no KV cells at all.
/// Its answers are poor; its graph and its memory are Mamba's.
///
/// # Panics
///
/// When `bytes` is not a dense `llama` GGUF file whose gate and up matrices have one type and
/// the rows for twice its width, or it has fewer than `layers` layers: this is test support.
pub fn mamba_model(bytes: &[u8], layers: u32, seed: u64) -> Vec<u8> {
    const ARCH: &str = "mamba";
    const CONV: u64 = 4;
    const STATE: u64 = 16;
    let file = Parsed::new(bytes);
    assert!(
        u32_value(&file, "llama.block_count") >= layers,
        "{layers} layers"
    );
    let embd = u64::from(u32_value(&file, "llama.embedding_length"));
    let inner = 2 * embd;
    let rank = embd.div_ceil(16);
    let replaced = [
        "block_count",
        "attention.head_count",
        "attention.head_count_kv",
        "feed_forward_length",
    ];
    let mut kvs: Vec<Vec<u8>> = renamed_keys(&file, ARCH)
        .into_iter()
        .filter(|pair| {
            let key = key_of(pair);
            !replaced.iter().any(|name| key == format!("{ARCH}.{name}"))
                && !key.starts_with(&format!("{ARCH}.rope."))
        })
        .collect();
    for (name, value) in [
        ("block_count", u64::from(layers)),
        ("attention.head_count", 0),
        ("attention.head_count_kv", 0),
        ("feed_forward_length", 0),
        ("ssm.conv_kernel", CONV),
        ("ssm.inner_size", inner),
        ("ssm.state_size", STATE),
        ("ssm.time_step_rank", rank),
    ] {
        let value = u32::try_from(value).expect("a u32");
        kvs.push(u32_key(ARCH, name, value));
    }
    let tensors = file.tensor_data();
    let mut draw = crate::Draw::new(seed);
    let mut drawn = |name, dims, around, spread| drawn_f32(&mut draw, name, dims, around, spread);
    let mut out: Vec<TensorData> = Vec::new();
    for (name, dims, ty, data) in &tensors {
        if !name.starts_with("blk.") {
            out.push((name.clone(), dims.clone(), *ty, data.clone()));
        }
    }
    for layer in 0..layers {
        let at = |part: &str| format!("blk.{layer}.{part}");
        out.push(named(&tensors, &at("attn_norm.weight")).clone());
        let gate = named(&tensors, &at("ffn_gate.weight"));
        let (_, gate_dims, gate_ty, _) = gate;
        let (_, up_dims, up_ty, up) = named(&tensors, &at("ffn_up.weight"));
        assert_eq!(
            (gate_ty, gate_dims[0], embd),
            (up_ty, up_dims[0], gate_dims[0]),
            "gate and up of one type and the model's width"
        );
        assert!(
            gate_dims[1] + up_dims[1] >= 2 * inner,
            "rows for twice the width"
        );
        let rows = 2 * inner - gate_dims[1];
        let up = &up[..crate::moe::tensor_bytes(&[embd, rows], *up_ty)];
        let input = [unpadded(gate), up].concat();
        out.push((at("ssm_in.weight"), vec![embd, 2 * inner], *gate_ty, input));
        out.push(drawn(
            at("ssm_conv1d.weight"),
            vec![CONV, inner],
            0.25,
            0.25,
        ));
        out.push(drawn(at("ssm_conv1d.bias"), vec![inner], 0.0, 0.1));
        out.push(drawn(
            at("ssm_x.weight"),
            vec![inner, rank + 2 * STATE],
            0.0,
            0.05,
        ));
        out.push(drawn(at("ssm_dt.weight"), vec![rank, inner], 0.0, 0.2));
        out.push(drawn(at("ssm_dt.bias"), vec![inner], -3.0, 1.0));
        out.push(drawn(at("ssm_a"), vec![STATE, inner], -2.0, 1.0));
        out.push(drawn(at("ssm_d"), vec![inner], 1.0, 0.1));
        out.push(drawn(at("ssm_out.weight"), vec![inner, embd], 0.0, 0.04));
    }
    write_gguf(&kvs, &out, file.alignment)
}

/// A layer's tensor `name`, its norms before the attention and the network renamed as the
/// norms after them (`post_attention_norm`, `post_ffw_norm`).
fn moved_after(name: &str) -> String {
    name.replace(".attn_norm.", ".post_attention_norm.")
        .replace(".ffn_norm.", ".post_ffw_norm.")
}

/// An F32 tensor `name` of `dims`, its values drawn from `draw`: `around`, `spread` either
/// side.
fn drawn_f32(
    draw: &mut crate::Draw,
    name: String,
    dims: Vec<u64>,
    around: f32,
    spread: f32,
) -> TensorData {
    let values = (0..dims.iter().product::<u64>())
        .flat_map(|_| (around + draw.next() * spread).to_le_bytes())
        .collect();
    (name, dims, 0, values) // F32
}

/// Tensor `name` of `tensors`.
///
/// # Panics
///
/// When there is no such tensor: this is test support.
fn named<'t>(tensors: &'t [TensorData], name: &str) -> &'t TensorData {
    tensors
        .iter()
        .find(|(n, ..)| n == name)
        .unwrap_or_else(|| panic!("no {name}"))
}

/// The data of `tensor` (of a 32-value block type) without the padding after it.
fn unpadded(tensor: &TensorData) -> &[u8] {
    let (_, dims, ty, data) = tensor;
    &data[..crate::moe::tensor_bytes(dims, *ty)]
}

/// The key-value pair `{arch}.{name}` with the F32 `value`.
fn f32_key(arch: &str, name: &str, value: f32) -> Vec<u8> {
    kv(&format!("{arch}.{name}"), 6, &value.to_le_bytes())
}

/// The key-value pair `{arch}.{name}` with the U32 `value`.
fn u32_key(arch: &str, name: &str, value: u32) -> Vec<u8> {
    kv(&format!("{arch}.{name}"), 4, &value.to_le_bytes())
}

/// Values per attention head of the `llama` model `file`: its width over its head count.
fn head_len(file: &Parsed<'_>) -> u64 {
    let width = u32_value(file, "llama.embedding_length");
    let heads = u32_value(file, "llama.attention.head_count");
    u64::from(width / heads)
}

/// `file`'s key-value pairs for architecture `arch`: `general.architecture` set to it, the
/// `llama.` keys renamed to `arch.`, the others as they are.
fn renamed_keys(file: &Parsed<'_>, arch: &str) -> Vec<Vec<u8>> {
    file.kvs
        .iter()
        .map(|pair| {
            let key = key_of(pair);
            // After the key's length and bytes: the value's type and the value.
            let typed_value = &pair[8 + key.len()..];
            if key == "general.architecture" {
                kv(&key, 8, &string_value(arch))
            } else if let Some(rest) = key.strip_prefix("llama.") {
                let mut out = string_value(&format!("{arch}.{rest}"));
                out.extend_from_slice(typed_value);
                out
            } else {
                pair.to_vec()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-layer dense `llama` file: a norm, the gate and the up projection, F32.
    fn dense() -> Vec<u8> {
        let kvs = [
            kv("general.architecture", 8, &string_value("llama")),
            kv("llama.block_count", 4, &1u32.to_le_bytes()),
            kv("tokenizer.ggml.model", 8, &string_value("gpt2")),
        ];
        let tensors: Vec<TensorData> = [
            ("blk.0.attn_norm.weight", vec![8u64]),
            ("blk.0.ffn_gate.weight", vec![8, 4]),
            ("blk.0.ffn_up.weight", vec![8, 4]),
        ]
        .into_iter()
        .map(|(name, dims)| {
            let bytes = 4 * usize::try_from(dims.iter().product::<u64>()).unwrap();
            (name.to_string(), dims, 0, vec![1; bytes])
        })
        .collect();
        write_gguf(&kvs, &tensors, 32)
    }

    fn keys(file: &Parsed<'_>) -> Vec<String> {
        file.kvs.iter().map(|kv| key_of(kv)).collect()
    }

    fn names_and_dims(file: &Parsed<'_>) -> Vec<(String, Vec<u64>)> {
        file.tensors
            .iter()
            .map(|t| {
                let (n, d, _) = t.describe();
                (n, d)
            })
            .collect()
    }

    #[test]
    fn gemma2_gets_its_keys_and_post_norms() {
        let out = gemma2_model(&dense(), 64);
        let parsed = Parsed::new(&out);
        assert_eq!(
            keys(&parsed),
            [
                "general.architecture",
                "gemma2.block_count",
                "tokenizer.ggml.model",
                "gemma2.attn_logit_softcapping",
                "gemma2.final_logit_softcapping",
                "gemma2.attention.sliding_window",
            ]
        );
        assert!(parsed.kvs[0].ends_with(b"gemma2"));
        assert!(parsed.kvs[5].ends_with(&64u32.to_le_bytes()));
        assert_eq!(
            names_and_dims(&parsed),
            [
                ("blk.0.attn_norm.weight".to_string(), vec![8]),
                ("blk.0.post_attention_norm.weight".to_string(), vec![8]),
                ("blk.0.ffn_gate.weight".to_string(), vec![8, 4]),
                ("blk.0.ffn_up.weight".to_string(), vec![8, 4]),
            ]
        );
        assert_eq!(parsed.tensors[0].data[..32], parsed.tensors[1].data[..32]);
    }

    #[test]
    fn gemma3_gets_post_norms_head_norms_and_no_soft_caps() {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        kvs.push(kv("llama.embedding_length", 4, &8u32.to_le_bytes()));
        kvs.push(kv("llama.attention.head_count", 4, &4u32.to_le_bytes()));
        let file = write_gguf(&kvs, &parsed.tensor_data(), 32);
        let out = gemma3_model(&file, 16, 3);
        let parsed = Parsed::new(&out);
        assert_eq!(
            keys(&parsed),
            [
                "general.architecture",
                "gemma3.block_count",
                "tokenizer.ggml.model",
                "gemma3.embedding_length",
                "gemma3.attention.head_count",
                "gemma3.rope.freq_base_swa",
                "gemma3.attention.sliding_window",
            ]
        );
        assert!(parsed.kvs[0].ends_with(b"gemma3"));
        assert!(parsed.kvs[6].ends_with(&16u32.to_le_bytes()));
        assert_eq!(
            names_and_dims(&parsed)[..4],
            [
                ("blk.0.attn_norm.weight".to_string(), vec![8]),
                ("blk.0.post_attention_norm.weight".to_string(), vec![8]),
                ("blk.0.attn_q_norm.weight".to_string(), vec![2]),
                ("blk.0.attn_k_norm.weight".to_string(), vec![2]),
            ]
        );
    }

    #[test]
    fn qwen3moe_names_the_experts_width() {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        kvs.push(kv("llama.embedding_length", 4, &8u32.to_le_bytes()));
        kvs.push(kv("llama.attention.head_count", 4, &2u32.to_le_bytes()));
        kvs.push(kv("llama.feed_forward_length", 4, &4u32.to_le_bytes()));
        let file = write_gguf(&kvs, &parsed.tensor_data(), 32);
        let out = qwen3moe_model(&file, 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"qwen3moe"));
        let names = keys(&parsed);
        assert_eq!(names[5], "qwen3moe.feed_forward_length");
        assert_eq!(names[6], "qwen3moe.expert_feed_forward_length");
        assert_eq!(u32_value(&parsed, "qwen3moe.expert_feed_forward_length"), 4);
        assert_eq!(names_and_dims(&parsed)[1].0, "blk.0.attn_q_norm.weight");
    }

    #[test]
    fn gpt_oss_gets_sinks_biases_its_norm_s_name_and_an_output() {
        let mut kvs = vec![
            kv("general.architecture", 8, &string_value("llama")),
            kv("llama.attention.head_count", 4, &3u32.to_le_bytes()),
            kv("llama.feed_forward_length", 4, &4u32.to_le_bytes()),
        ];
        kvs.push(kv("llama.expert_count", 4, &2u32.to_le_bytes()));
        let f32s = |name: &str, dims: Vec<u64>| -> TensorData {
            let bytes = 4 * usize::try_from(dims.iter().product::<u64>()).unwrap();
            (name.to_string(), dims, 0, vec![0; bytes])
        };
        let tensors = vec![
            f32s("token_embd.weight", vec![8, 5]),
            f32s("blk.0.attn_norm.weight", vec![8]),
            f32s("blk.0.attn_output.weight", vec![8, 8]),
            f32s("blk.0.ffn_norm.weight", vec![8]),
            f32s("blk.0.ffn_gate_inp.weight", vec![8, 2]),
            f32s("blk.0.ffn_down_exps.weight", vec![4, 8, 2]),
        ];
        let out = gpt_oss_model(&write_gguf(&kvs, &tensors, 32), 4, 1);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"gpt-oss"));
        assert_eq!(
            keys(&parsed)[4..],
            [
                "gpt-oss.expert_feed_forward_length",
                "gpt-oss.attention.sliding_window"
            ]
        );
        assert_eq!(
            names_and_dims(&parsed),
            [
                ("token_embd.weight".to_string(), vec![8, 5]),
                ("output.weight".to_string(), vec![8, 5]),
                ("blk.0.attn_norm.weight".to_string(), vec![8]),
                ("blk.0.attn_sinks.weight".to_string(), vec![3]),
                ("blk.0.attn_output.weight".to_string(), vec![8, 8]),
                ("blk.0.attn_output.bias".to_string(), vec![8]),
                ("blk.0.post_attention_norm.weight".to_string(), vec![8]),
                ("blk.0.ffn_gate_inp.weight".to_string(), vec![8, 2]),
                ("blk.0.ffn_gate_inp.bias".to_string(), vec![2]),
                ("blk.0.ffn_down_exps.weight".to_string(), vec![4, 8, 2]),
                ("blk.0.ffn_down_exps.bias".to_string(), vec![8, 2]),
            ]
        );
    }

    #[test]
    fn qwen2_gets_biased_queries_keys_and_values() {
        // A layer's query, key and value, as qwen2 biases them.
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut tensors = parsed.tensor_data();
        let kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        for name in ["attn_q", "attn_k", "attn_v"] {
            tensors.push((
                format!("blk.0.{name}.weight"),
                vec![8, 6],
                0,
                vec![2; 4 * 48],
            ));
        }
        let file = write_gguf(&kvs, &tensors, 32);
        let out = qwen2_model(&file, 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"qwen2"));
        assert_eq!(keys(&parsed)[1], "qwen2.block_count");
        let names: Vec<_> = names_and_dims(&parsed);
        assert_eq!(names.len(), 9, "{names:?}");
        for name in ["attn_q", "attn_k", "attn_v"] {
            let weight = names
                .iter()
                .position(|(n, _)| *n == format!("blk.0.{name}.weight"))
                .unwrap();
            assert_eq!(
                names[weight + 1],
                (format!("blk.0.{name}.bias"), vec![6]),
                "{names:?}"
            );
        }
    }

    #[test]
    fn qwen3_gets_a_norm_per_query_and_key_head() {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        kvs.push(kv("llama.embedding_length", 4, &8u32.to_le_bytes()));
        kvs.push(kv("llama.attention.head_count", 4, &2u32.to_le_bytes()));
        let file = write_gguf(&kvs, &parsed.tensor_data(), 32);
        let out = qwen3_model(&file, 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"qwen3"));
        assert_eq!(keys(&parsed)[3], "qwen3.embedding_length");
        assert_eq!(
            names_and_dims(&parsed)[..3],
            [
                ("blk.0.attn_norm.weight".to_string(), vec![8]),
                ("blk.0.attn_q_norm.weight".to_string(), vec![4]),
                ("blk.0.attn_k_norm.weight".to_string(), vec![4]),
            ]
        );
        // Weights near 1: a norm, not noise (the data's padding after them).
        let weights = &parsed.tensors[1].data[..16];
        assert!(weights.chunks(4).all(|w| {
            let w = f32::from_le_bytes(w.try_into().unwrap());
            (0.8..1.2).contains(&w)
        }));
    }

    #[test]
    fn phi3_fuses_the_attention_s_and_the_network_s_matrices_and_gets_rotary_factors() {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        kvs.push(kv("llama.rope.dimension_count", 4, &8u32.to_le_bytes()));
        // Q4_1 blocks (20 bytes: a scale, a minimum, 16 bytes of values) numbered by matrix.
        let q4_1 = |name: &str, rows: u64, fill: u8| -> TensorData {
            let bytes = usize::try_from(rows).unwrap() * 20;
            (
                format!("blk.0.{name}.weight"),
                vec![32, rows],
                3,
                vec![fill; bytes],
            )
        };
        let tensors = vec![
            q4_1("attn_q", 4, 1),
            q4_1("attn_k", 2, 2),
            q4_1("attn_v", 2, 3),
            q4_1("ffn_gate", 3, 4),
            q4_1("ffn_up", 3, 5),
        ];
        let file = write_gguf(&kvs, &tensors, 32);
        let out = phi3_model(&file, 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"phi3"));
        assert_eq!(
            names_and_dims(&parsed),
            [
                ("rope_factors_short.weight".to_string(), vec![4]),
                ("rope_factors_long.weight".to_string(), vec![4]),
                ("blk.0.attn_qkv.weight".to_string(), vec![32, 8]),
                ("blk.0.ffn_up.weight".to_string(), vec![32, 6]),
            ]
        );
        // Rows in order: the query's, the key's, the value's; the gate's, the up's.
        let qkv = &parsed.tensors[2].data;
        assert_eq!(qkv[..80], [1; 80]);
        assert_eq!(qkv[80..120], [2; 40]);
        assert_eq!(qkv[120..160], [3; 40]);
        let up = &parsed.tensors[3].data;
        assert_eq!(
            (up[..60].to_vec(), up[60..120].to_vec()),
            (vec![4; 60], vec![5; 60])
        );
    }

    #[test]
    fn the_keys_are_renamed_the_gate_dropped_and_biases_added() {
        let out = layer_norm_model(&dense(), 3);
        let parsed = Parsed::new(&out);
        assert_eq!(
            keys(&parsed),
            [
                "general.architecture",
                "starcoder2.block_count",
                "tokenizer.ggml.model",
                "starcoder2.attention.layer_norm_epsilon"
            ]
        );
        assert!(parsed.kvs[0].ends_with(b"starcoder2"));
        assert_eq!(
            names_and_dims(&parsed),
            [
                ("blk.0.attn_norm.weight".to_string(), vec![8]),
                ("blk.0.attn_norm.bias".to_string(), vec![8]),
                ("blk.0.ffn_up.weight".to_string(), vec![8, 4]),
                ("blk.0.ffn_up.bias".to_string(), vec![4]),
            ]
        );
    }

    /// [`dense`] with a width of 8, 4 heads of 2 values and 2 key-value heads.
    fn with_heads() -> Vec<u8> {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut kvs: Vec<Vec<u8>> = parsed.kvs.iter().map(|kv| kv.to_vec()).collect();
        kvs.push(kv("llama.embedding_length", 4, &8u32.to_le_bytes()));
        kvs.push(kv("llama.attention.head_count", 4, &4u32.to_le_bytes()));
        kvs.push(kv("llama.attention.head_count_kv", 4, &2u32.to_le_bytes()));
        write_gguf(&kvs, &parsed.tensor_data(), 32)
    }

    #[test]
    fn smollm3_granite_and_mistral3_rename_the_keys_and_add_their_own() {
        let dense = dense();
        let tensors = names_and_dims(&Parsed::new(&dense));
        let smollm3 = smollm3_model(&dense);
        let parsed = Parsed::new(&smollm3);
        assert!(parsed.kvs[0].ends_with(b"smollm3"));
        assert_eq!(keys(&parsed)[1], "smollm3.block_count");
        assert_eq!(names_and_dims(&parsed), tensors);

        let granite = granite_model(&dense);
        let parsed = Parsed::new(&granite);
        assert_eq!(
            keys(&parsed)[3..],
            [
                "granite.embedding_scale",
                "granite.residual_scale",
                "granite.attention.scale",
                "granite.logit_scale",
            ]
        );
        assert!(parsed.kvs[6].ends_with(&8.0f32.to_le_bytes()));
        assert_eq!(names_and_dims(&parsed), tensors);

        let mistral3 = mistral3_model(&dense);
        let parsed = Parsed::new(&mistral3);
        assert_eq!(
            keys(&parsed)[3..],
            [
                "mistral3.rope.scaling.type",
                "mistral3.rope.scaling.original_context_length",
                "mistral3.rope.scaling.factor",
                "mistral3.rope.scaling.yarn_beta_fast",
                "mistral3.rope.scaling.yarn_beta_slow",
                "mistral3.rope.scaling.yarn_log_multiplier",
                "mistral3.attention.temperature_scale",
            ]
        );
        assert!(parsed.kvs[3].ends_with(b"yarn"));
        assert_eq!(names_and_dims(&parsed), tensors);
    }

    #[test]
    fn olmo2_moves_the_norms_after_and_norms_queries_and_keys_whole() {
        let out = olmo2_model(&with_heads(), 4, 7);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"olmo2"));
        assert_eq!(
            keys(&parsed).last().map(String::as_str),
            Some("olmo2.attention.sliding_window")
        );
        assert_eq!(
            names_and_dims(&parsed),
            [
                ("blk.0.attn_q_norm.weight".to_string(), vec![8]),
                // Two key-value heads of two values.
                ("blk.0.attn_k_norm.weight".to_string(), vec![4]),
                ("blk.0.post_attention_norm.weight".to_string(), vec![8]),
                ("blk.0.ffn_gate.weight".to_string(), vec![8, 4]),
                ("blk.0.ffn_up.weight".to_string(), vec![8, 4]),
            ]
        );
    }

    #[test]
    fn exaone4_moves_the_norms_after_and_norms_each_head() {
        let out = exaone4_model(&with_heads(), 7);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"exaone4"));
        assert_eq!(
            names_and_dims(&parsed)[..3],
            [
                ("blk.0.attn_q_norm.weight".to_string(), vec![2]),
                ("blk.0.attn_k_norm.weight".to_string(), vec![2]),
                ("blk.0.post_attention_norm.weight".to_string(), vec![8]),
            ]
        );
    }

    #[test]
    fn cohere2_keeps_one_norm_per_layer_and_gets_a_window_and_a_logit_scale() {
        let dense = dense();
        let parsed = Parsed::new(&dense);
        let mut tensors = parsed.tensor_data();
        tensors.push(("blk.0.ffn_norm.weight".to_string(), vec![8], 0, vec![1; 32]));
        let with_ffn_norm = write_gguf(
            &parsed.kvs.iter().map(|kv| kv.to_vec()).collect::<Vec<_>>(),
            &tensors,
            32,
        );
        let out = cohere2_model(&with_ffn_norm, 16);
        let parsed = Parsed::new(&out);
        assert_eq!(
            keys(&parsed)[3..],
            [
                "cohere2.attention.sliding_window",
                "cohere2.logit_scale",
                "cohere2.attention.layer_norm_epsilon",
            ]
        );
        assert!(parsed.kvs[3].ends_with(&16u32.to_le_bytes()));
        assert_eq!(
            names_and_dims(&parsed),
            names_and_dims(&Parsed::new(&dense))
        );
    }

    /// The keys of a three-layer `llama` file 32 values wide with two attention heads, and
    /// `more`.
    fn narrow_keys(more: Vec<u8>) -> Vec<Vec<u8>> {
        vec![
            kv("general.architecture", 8, &string_value("llama")),
            kv("llama.block_count", 4, &3u32.to_le_bytes()),
            kv("llama.embedding_length", 4, &32u32.to_le_bytes()),
            kv("llama.attention.head_count", 4, &2u32.to_le_bytes()),
            more,
        ]
    }

    #[test]
    fn lfm2_turns_two_layers_in_three_into_short_convolutions_of_the_attention_s_rows() {
        // Three layers 32 values wide, two query heads and one key-value head of 16 values,
        // the matrices in Q8_0 (34 bytes per 32 values), each filled with its own byte.
        let kvs = narrow_keys(kv("llama.attention.head_count_kv", 4, &1u32.to_le_bytes()));
        let mut tensors: Vec<TensorData> = Vec::new();
        for layer in 0..3u8 {
            for (i, (part, rows)) in [
                ("attn_q", 32),
                ("attn_k", 16),
                ("attn_v", 16),
                ("attn_output", 32),
            ]
            .into_iter()
            .enumerate()
            {
                let fill = layer * 10 + u8::try_from(i).unwrap();
                let bytes = vec![fill; rows * 34];
                tensors.push((
                    format!("blk.{layer}.{part}.weight"),
                    vec![32, rows as u64],
                    8,
                    bytes,
                ));
            }
            tensors.push((
                format!("blk.{layer}.attn_norm.weight"),
                vec![32],
                0,
                vec![0; 128],
            ));
        }
        tensors.push(("output_norm.weight".into(), vec![32], 0, vec![0; 128]));
        let out = lfm2_model(&write_gguf(&kvs, &tensors, 32), 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"lfm2"));
        let heads = parsed
            .kvs
            .iter()
            .find(|pair| key_of(pair) == "lfm2.attention.head_count_kv")
            .expect("per-layer key-value heads");
        // An array (9) of three u32 (4): 0, 0, then the attention layer's one head.
        let mut want = 9u32.to_le_bytes().to_vec();
        for word in [4u32, 3, 0, 0, 1] {
            want.extend_from_slice(&word.to_le_bytes());
        }
        want.splice(12..12, [0; 4]); // the count is a u64
        assert!(heads.ends_with(&want), "{heads:?}");
        assert_eq!(u32_value(&parsed, "lfm2.shortconv.l_cache"), 3);
        let data = parsed.tensor_data();
        let find = |name: &str| {
            data.iter()
                .find(|(n, ..)| n == name)
                .unwrap_or_else(|| panic!("no {name}"))
        };
        for layer in 0..2u8 {
            let (_, dims, ty, bytes) = find(&format!("blk.{layer}.shortconv.in_proj.weight"));
            assert_eq!((dims.as_slice(), *ty), (&[32u64, 96][..], 8));
            let (q, o) = (layer * 10, layer * 10 + 3);
            let gates: Vec<u8> = [q, o, q].iter().flat_map(|&b| vec![b; 32 * 34]).collect();
            assert_eq!(&bytes[..gates.len()], gates.as_slice());
            let (_, dims, _, bytes) = find(&format!("blk.{layer}.shortconv.out_proj.weight"));
            assert_eq!(dims, &[32, 32]);
            assert!(bytes[..32 * 34].iter().all(|&b| b == o));
            assert_eq!(
                find(&format!("blk.{layer}.shortconv.conv.weight")).1,
                [3, 32]
            );
            for part in ["attn_q", "attn_k", "attn_v", "attn_output"] {
                let name = format!("blk.{layer}.{part}.weight");
                assert!(data.iter().all(|(n, ..)| *n != name), "{name} is left");
            }
        }
        for part in ["attn_q", "attn_k", "attn_v", "attn_output"] {
            find(&format!("blk.2.{part}.weight"));
        }
        assert_eq!(find("blk.2.attn_q_norm.weight").1, [16]);
        assert_eq!(find("blk.2.attn_k_norm.weight").1, [16]);
        find("token_embd_norm.weight");
        assert!(data.iter().all(|(n, ..)| n != "output_norm.weight"));
    }

    #[test]
    fn mamba_keeps_the_norms_and_builds_state_space_blocks_of_the_gate_and_up_rows() {
        // Three layers 32 values wide; gate and up of 96 rows each in Q8_0, one byte each.
        let kvs = narrow_keys(kv("llama.rope.freq_base", 6, &1e4f32.to_le_bytes()));
        let mut tensors: Vec<TensorData> = Vec::new();
        for layer in 0..3u8 {
            tensors.push((
                format!("blk.{layer}.attn_norm.weight"),
                vec![32],
                0,
                vec![0; 128],
            ));
            for (part, fill) in [("ffn_gate", 1), ("ffn_up", 2), ("attn_q", 3)] {
                let rows = if part == "attn_q" { 32 } else { 96 };
                let bytes = vec![layer * 10 + fill; rows * 34];
                tensors.push((
                    format!("blk.{layer}.{part}.weight"),
                    vec![32, rows as u64],
                    8,
                    bytes,
                ));
            }
        }
        tensors.push(("output_norm.weight".into(), vec![32], 0, vec![0; 128]));
        let out = mamba_model(&write_gguf(&kvs, &tensors, 32), 2, 5);
        let parsed = Parsed::new(&out);
        assert!(parsed.kvs[0].ends_with(b"mamba"));
        for (key, value) in [
            ("mamba.block_count", 2),
            ("mamba.attention.head_count", 0),
            ("mamba.ssm.conv_kernel", 4),
            ("mamba.ssm.inner_size", 64),
            ("mamba.ssm.state_size", 16),
            ("mamba.ssm.time_step_rank", 2),
        ] {
            assert_eq!(u32_value(&parsed, key), value, "{key}");
        }
        assert!(keys(&parsed).iter().all(|k| !k.starts_with("mamba.rope.")));
        let dims = names_and_dims(&parsed);
        let layer = |name: &str| dims.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone());
        assert_eq!(layer("blk.0.ssm_in.weight"), Some(vec![32, 128]));
        assert_eq!(layer("blk.1.ssm_x.weight"), Some(vec![64, 34]));
        assert_eq!(layer("blk.1.ssm_dt.weight"), Some(vec![2, 64]));
        assert_eq!(layer("blk.1.ssm_a"), Some(vec![16, 64]));
        assert_eq!(layer("blk.1.ssm_out.weight"), Some(vec![64, 32]));
        assert_eq!(layer("blk.0.attn_norm.weight"), Some(vec![32]));
        assert_eq!(layer("output_norm.weight"), Some(vec![32]));
        assert!(
            dims.iter().all(|(n, _)| !n.starts_with("blk.2.")),
            "two layers"
        );
        assert!(dims
            .iter()
            .all(|(n, _)| !n.contains("ffn_") && !n.contains("attn_q")));
        // The input projection: all 96 gate rows, then the first 32 up rows.
        let data = parsed.tensor_data();
        let (_, _, ty, input) = data
            .iter()
            .find(|(n, ..)| n == "blk.1.ssm_in.weight")
            .unwrap();
        assert_eq!(*ty, 8);
        assert!(input[..96 * 34].iter().all(|&b| b == 11));
        assert!(input[96 * 34..128 * 34].iter().all(|&b| b == 12));
    }
}
