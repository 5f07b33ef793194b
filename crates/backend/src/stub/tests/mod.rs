//! Tests of [`StubBackend`] through the [`Backend`] trait.

mod sampling;
mod state;

use std::path::PathBuf;

use wick_types::{SamplerOpts, SeqId, TokenId};

use crate::{AdapterId, Backend, BackendConfig, BackendError, SamplerId, StubBackend};

const S0: SeqId = SeqId(0);
const S1: SeqId = SeqId(1);

fn stub() -> StubBackend {
    StubBackend::new(&BackendConfig::new("unused.gguf").with_n_ctx(64)).unwrap()
}

fn prompt(b: &StubBackend, text: &str) -> Vec<TokenId> {
    b.tokenize(text, true).unwrap()
}

/// Decodes until EOG or `max` tokens; returns the tokens, EOG included.
fn generate(
    b: &mut StubBackend,
    seq: SeqId,
    sampler: Option<SamplerId>,
    max: usize,
) -> Vec<TokenId> {
    let mut out = Vec::new();
    for _ in 0..max {
        let d = b.decode_one(seq, sampler).unwrap();
        out.push(d.token());
        if d.is_eog() {
            break;
        }
    }
    out
}

/// Greedy, with both end-of-generation tokens banned.
fn never_ending() -> SamplerOpts {
    SamplerOpts {
        logit_bias: vec![
            (TokenId(0), f32::NEG_INFINITY),
            (TokenId(2), f32::NEG_INFINITY),
        ],
        ..SamplerOpts::greedy()
    }
}

fn text(b: &StubBackend, tokens: &[TokenId]) -> String {
    String::from_utf8(b.detokenize(tokens).unwrap()).unwrap()
}

/// A temporary adapter file, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("wick-stub-{}-{name}", std::process::id()));
        std::fs::write(&path, b"not really a LoRA").unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
#[test]
fn new_validates_the_config_and_describes_the_model() {
    let err = StubBackend::new(&BackendConfig::new("x").with_n_seq_max(0)).unwrap_err();
    assert!(matches!(
        err,
        BackendError::Config {
            field: "n_seq_max",
            ..
        }
    ));
    let b = StubBackend::new(&BackendConfig::new("x").with_n_ctx(128).with_n_seq_max(3)).unwrap();
    let info = b.info();
    assert_eq!(
        (info.name.as_str(), info.architecture.as_str()),
        ("stub", "stub")
    );
    assert_eq!(
        (info.n_ctx, info.n_seq_max, info.n_embd, info.n_layer),
        (128, 3, 16, 2)
    );
    assert_eq!(info.n_ctx_train, 1 << 16);
    assert_eq!(info.special.eos, Some(TokenId(0)));
    assert_eq!(info.special.bos, None);
    assert!(!info.special.add_bos);
    assert_eq!(info.special.eog, [TokenId(0), TokenId(2)]);
    assert_eq!(
        info.special.control,
        (0..=6).map(TokenId).collect::<Vec<_>>()
    );
    let thinking = info.special.thinking.unwrap();
    assert_eq!(text(&b, &[thinking.start, thinking.end]), "<think></think>");
    assert!(info
        .chat_template
        .as_deref()
        .unwrap()
        .contains("<|im_start|>"));
    assert!(info.n_vocab > 263 + 24);
    assert_eq!(b.name(), "stub");
    assert!(b.seq_tokens(SeqId(2)).unwrap().is_empty());
    assert!(b.seq_tokens(SeqId(3)).is_err());
}

#[test]
fn greedy_decoding_is_a_function_of_the_history() {
    let mut a = stub();
    let mut b = stub();
    let p = prompt(&a, "<|im_start|>user\nHello world<|im_end|>\n");
    a.prefill(S0, &p).unwrap();
    b.prefill(S1, &p).unwrap();
    let out_a = generate(&mut a, S0, None, 20);
    let out_b = generate(&mut b, S1, None, 20);
    assert_eq!(out_a, out_b);
    // Rewinding and decoding again gives the same token.
    a.seq_rm_last(S0, out_a.len()).unwrap();
    assert_eq!(a.decode_one(S0, None).unwrap().token(), out_a[0]);
    // Another history gives another continuation.
    b.seq_clear().unwrap();
    b.prefill(S1, &prompt(&b, "Something else entirely"))
        .unwrap();
    assert_ne!(generate(&mut b, S1, None, 20), out_a);
}

#[test]
fn greedy_output_reads_as_text_and_ends() {
    let mut b = stub();
    let mut ended = 0;
    for i in 0..20 {
        b.seq_rm(S0).unwrap();
        b.prefill(S0, &prompt(&b, &format!("Prompt number {i}.")))
            .unwrap();
        let out = generate(&mut b, S0, None, 40);
        let words: Vec<TokenId> = out.iter().copied().filter(|t| t.0 >= 7).collect();
        assert_eq!(
            words.len() + usize::from(out.last().is_some_and(|t| t.0 < 7)),
            out.len()
        );
        assert!(String::from_utf8(b.detokenize(&words).unwrap()).is_ok());
        ended += usize::from(b.info().special.is_eog(*out.last().unwrap()));
    }
    assert!(
        ended >= 10,
        "most generations end with EOG within 40 tokens: {ended}/20"
    );
}

#[test]
fn user_text_never_yields_control_tokens_without_special() {
    let b = stub();
    for text in [
        "<|im_start|>",
        "<|im_end|>",
        "a<|endoftext|>b",
        "<think></think>",
        "<tool_call>",
    ] {
        let plain = b.tokenize(text, false).unwrap();
        assert!(plain.iter().all(|t| t.0 > 6), "{text:?} -> {plain:?}");
        assert!(b.tokenize(text, true).unwrap().iter().any(|t| t.0 <= 6));
        assert_eq!(b.detokenize(&plain).unwrap(), text.as_bytes());
    }
    for text in [
        "",
        "Hello, world!",
        "ünïcödé ✓ 🦀",
        "<|im_start|>assistant\n— 日本",
    ] {
        let ids = b.tokenize_prompt(text, true).unwrap();
        assert_eq!(b.detokenize(&ids).unwrap(), text.as_bytes(), "{text:?}");
    }
}
#[test]
fn adapters_change_the_output_until_removed() {
    let mut b = stub();
    let file = TempFile::new("adapter.gguf");
    let p = prompt(&b, "Adapt me");
    let run = |b: &mut StubBackend| {
        b.seq_rm(S0).unwrap();
        b.prefill(S0, &p).unwrap();
        let s = b.sampler_new(&never_ending()).unwrap();
        generate(b, S0, Some(s), 12)
    };
    let base = run(&mut b);
    let a = b.load_adapter(&file.0).unwrap();
    let c = b.load_adapter(&file.0).unwrap();
    assert_ne!(a, c);
    assert_eq!(run(&mut b), base, "loading alone changes nothing");
    b.apply_adapters(&[(a, 1.0)]).unwrap();
    let with_a = run(&mut b);
    assert_ne!(with_a, base);
    b.apply_adapters(&[(a, 0.5)]).unwrap();
    assert_ne!(run(&mut b), with_a, "the scale matters");
    b.apply_adapters(&[(c, 1.0), (a, 1.0)]).unwrap();
    let both = run(&mut b);
    b.apply_adapters(&[(a, 1.0), (c, 1.0)]).unwrap();
    assert_eq!(run(&mut b), both, "the active set is a set");
    b.unload_adapter(c).unwrap();
    assert_eq!(run(&mut b), with_a, "unloading deactivates");
    assert!(
        matches!(b.apply_adapters(&[(c, 1.0)]), Err(BackendError::UnknownAdapter(id)) if id == c.0)
    );
    assert_eq!(run(&mut b), with_a, "a failed apply keeps the active set");
    assert!(matches!(
        b.unload_adapter(c),
        Err(BackendError::UnknownAdapter(_))
    ));
    assert!(matches!(
        b.unload_adapter(AdapterId(99)),
        Err(BackendError::UnknownAdapter(99))
    ));
    b.apply_adapters(&[]).unwrap();
    assert_eq!(run(&mut b), base);

    let missing = std::env::temp_dir().join("wick-stub-no-such-adapter.gguf");
    let err = b.load_adapter(&missing).unwrap_err();
    assert!(matches!(&err, BackendError::Adapter { path, .. } if *path == missing));
    assert!(err.to_string().contains("wick-stub-no-such-adapter.gguf"));
    let dir = b.load_adapter(&std::env::temp_dir()).unwrap_err();
    assert!(matches!(dir, BackendError::Adapter { .. }));
}

#[test]
fn embeddings_are_normalised_and_deterministic() {
    let mut b = stub();
    let a = b.embed(&prompt(&b, "embed this")).unwrap();
    let c = b.embed(&prompt(&b, "embed that")).unwrap();
    assert_eq!(a.len(), b.info().n_embd as usize);
    for v in [&a, &c] {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }
    assert_ne!(a, c);
    assert_eq!(a, b.embed(&prompt(&b, "embed this")).unwrap());
}
#[test]
fn thinking_signature_covers_the_latest_block() {
    let mut b = stub();
    b.prefill(S0, &prompt(&b, "x<think>reason</think>answer"))
        .unwrap();
    b.prefill(S1, &prompt(&b, "y<think>reason</think>"))
        .unwrap();
    let sig = b.thinking_signature(S0).unwrap();
    assert_eq!(sig, b.thinking_signature(S1).unwrap());
    b.prefill(S1, &prompt(&b, "<think>other</think>")).unwrap();
    assert_ne!(sig, b.thinking_signature(S1).unwrap());
}
