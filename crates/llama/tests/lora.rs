//! LoRA adapters on the real model, with a tiny adapter this test writes itself.

mod common;

use std::path::Path;

use wick_backend::{Backend, BackendError};
use wick_types::{SeqId, TokenId};

/// Writes a GGUF LoRA adapter for SmolLM2 (architecture `llama`, width 576) that adds a rank-4
/// update to the query and output projections of every layer.
fn write_adapter(path: &Path, n_layer: u32, n_embd: u64) {
    const RANK: u64 = 4;
    let mut kv = Vec::new();
    let mut n_kv = 0u64;
    let put_str = |buf: &mut Vec<u8>, s: &str| {
        buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
        buf.extend_from_slice(s.as_bytes());
    };
    for (key, value) in [
        ("general.architecture", "llama"),
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
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
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
                while data.len() % 32 != 0 {
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
    while file.len() % 32 != 0 {
        file.push(0);
    }
    file.extend_from_slice(&data);
    std::fs::write(path, file).unwrap();
}

fn greedy(backend: &mut dyn Backend, prompt: &[TokenId], n: usize) -> Vec<TokenId> {
    backend.seq_rm(SeqId(0)).unwrap();
    backend.prefill(SeqId(0), prompt).unwrap();
    (0..n)
        .map(|_| backend.decode_one(SeqId(0), None).unwrap().token())
        .collect()
}

#[test]
fn a_lora_adapter_changes_the_output_and_unloading_restores_it() {
    let mut backend = common::backend();
    let info = backend.info().clone();
    let dir = std::env::temp_dir().join(format!("wick-lora-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-lora.gguf");
    write_adapter(&path, info.n_layer, u64::from(info.n_embd));

    let prompt = backend
        .tokenize_prompt("The capital of France is", false)
        .unwrap();
    let base = greedy(&mut backend, &prompt, 8);

    // A live sequence survives the adapter load (the context is rebuilt under it).
    backend.seq_rm(SeqId(1)).unwrap();
    backend.prefill(SeqId(1), &prompt).unwrap();
    let adapter = backend.load_adapter(&path).unwrap();
    assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), prompt);
    assert_eq!(
        backend.decode_one(SeqId(1), None).unwrap().token(),
        base[0],
        "loading (not applying) an adapter must not change the output"
    );

    backend.apply_adapters(&[(adapter, 8.0)]).unwrap();
    let with_lora = greedy(&mut backend, &prompt, 8);
    assert_ne!(
        with_lora, base,
        "a strong adapter must change greedy output"
    );

    backend.apply_adapters(&[]).unwrap();
    assert_eq!(greedy(&mut backend, &prompt, 8), base);

    backend.apply_adapters(&[(adapter, 8.0)]).unwrap();
    backend.unload_adapter(adapter).unwrap();
    assert_eq!(greedy(&mut backend, &prompt, 8), base);
    assert!(matches!(
        backend.apply_adapters(&[(adapter, 1.0)]),
        Err(BackendError::UnknownAdapter(_))
    ));

    let text = dir.join("not-an-adapter.gguf");
    std::fs::write(&text, "plain text, not GGUF, long enough to have a header").unwrap();
    assert!(matches!(
        backend.load_adapter(&text),
        Err(BackendError::Adapter { .. })
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
