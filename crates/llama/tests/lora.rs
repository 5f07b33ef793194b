//! LoRA adapters on the real model, with a tiny adapter the test writes itself.

mod common;

use wick_backend::{Backend, BackendError};
use wick_types::{SeqId, TokenId};

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
    std::fs::write(
        &path,
        wick_testutil::lora_adapter("llama", info.n_layer, u64::from(info.n_embd), 0),
    )
    .unwrap();

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
