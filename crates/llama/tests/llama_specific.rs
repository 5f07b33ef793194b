//! What the conformance suite does not cover: JSON-schema grammars, prefills longer than a
//! batch, and sequences that outlive a step's failure.

mod common;

use wick_backend::{Backend, BackendConfig, BackendError, Decoded, StepOp};
use wick_llama::LlamaBackend;
use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

fn generate(
    backend: &mut dyn Backend,
    seq: SeqId,
    sampler: Option<wick_backend::SamplerId>,
    n: usize,
) -> Vec<TokenId> {
    let mut out = Vec::new();
    for _ in 0..n {
        match backend.decode_one(seq, sampler).unwrap() {
            Decoded::Token(t) => out.push(t),
            Decoded::Eog(_) => break,
        }
    }
    out
}

#[test]
fn a_json_schema_grammar_yields_json_of_that_schema() {
    let mut backend = common::backend();
    let schema = r#"{"type":"object","properties":{"answer":{"type":"string","enum":["yes","no"]}},"required":["answer"],"additionalProperties":false}"#;
    let sampler = backend
        .sampler_new(&SamplerOpts {
            grammar: Some(Grammar::JsonSchema(schema.to_owned())),
            ..SamplerOpts::greedy()
        })
        .unwrap();
    let prompt = backend
        .tokenize_prompt("Is Paris in France? Reply in JSON.", false)
        .unwrap();
    backend.prefill(SeqId(0), &prompt).unwrap();
    let out = generate(&mut backend, SeqId(0), Some(sampler), 64);
    let text = String::from_utf8(backend.detokenize(&out).unwrap()).unwrap();
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(
        compact == r#"{"answer":"yes"}"# || compact == r#"{"answer":"no"}"#,
        "not an instance of the schema: {text:?}"
    );

    let bad = backend.sampler_new(&SamplerOpts {
        grammar: Some(Grammar::JsonSchema("{not json".to_owned())),
        ..SamplerOpts::greedy()
    });
    assert!(matches!(bad, Err(BackendError::Grammar { .. })), "{bad:?}");
}

#[test]
fn prefills_longer_than_a_batch_are_chunked_exactly() {
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(20);
    let run = |n_batch: u32| {
        let config = BackendConfig::new(wick_testutil::model_path())
            .with_n_ctx(512)
            .with_n_batch(n_batch)
            .with_n_threads(Some(2));
        let mut backend = LlamaBackend::load(&config).unwrap();
        let prompt = backend.tokenize_prompt(&text, false).unwrap();
        assert!(
            prompt.len() > 64,
            "the prompt must span several 32-token batches"
        );
        // Two sequences prefilled in one step: their tokens share the batches.
        backend
            .step(&[
                (SeqId(0), StepOp::Prefill(prompt.clone())),
                (
                    SeqId(1),
                    StepOp::Prefill(prompt[..prompt.len() / 2].to_vec()),
                ),
            ])
            .unwrap();
        (
            generate(&mut backend, SeqId(0), None, 8),
            generate(&mut backend, SeqId(1), None, 8),
        )
    };
    assert_eq!(run(32), run(512));
}

#[test]
fn a_failed_operation_leaves_the_sequence_usable() {
    let mut backend = common::backend();
    let prompt = backend.tokenize_prompt("Hello there,", false).unwrap();
    backend.prefill(SeqId(0), &prompt).unwrap();
    let n_ctx = backend.info().n_ctx as usize;
    let overflow = vec![prompt[0]; n_ctx];
    assert!(matches!(
        backend.prefill(SeqId(0), &overflow),
        Err(BackendError::ContextFull { .. })
    ));
    assert!(matches!(
        backend.step(&[
            (SeqId(1), StepOp::Prefill(prompt.clone())),
            (SeqId(0), StepOp::Prefill(vec![TokenId(u32::MAX)])),
        ]),
        Err(BackendError::TokenOutOfRange { .. })
    ));
    assert_eq!(backend.seq_tokens(SeqId(0)).unwrap(), prompt);
    assert!(
        backend.seq_tokens(SeqId(1)).unwrap().is_empty(),
        "a failed step applies nothing"
    );
    let after = generate(&mut backend, SeqId(0), None, 4);
    backend.seq_rm(SeqId(0)).unwrap();
    backend.prefill(SeqId(0), &prompt).unwrap();
    assert_eq!(generate(&mut backend, SeqId(0), None, 4), after);
}

#[test]
fn the_token_count_lower_bound_holds_for_every_kind_of_text() {
    let config = BackendConfig::new(wick_testutil::model_path()).with_n_ctx(512);
    let backend = LlamaBackend::load(&config).unwrap();
    let tokenizer = backend.tokenizer();
    let bound = tokenizer
        .max_token_bytes()
        .expect("known for llama.cpp models");
    assert!(bound >= 2, "{bound}");
    let texts = [
        " ".repeat(5000),
        "\n".repeat(3000),
        "\t \n".repeat(1000),
        "a".repeat(4000),
        "supercalifragilisticexpialidocious ".repeat(100),
        "0123456789".repeat(300),
        "こんにちは世界".repeat(200),
        "🙂🙃".repeat(300),
        "fn main() { println!(\"hello\"); }\n".repeat(100),
        "<|im_start|>user\n".repeat(100),
    ];
    for text in &texts {
        let tokens = tokenizer.tokenize(text, false).unwrap().len();
        let at_least = tokenizer.min_tokens(text.len());
        assert!(
            tokens >= at_least,
            "{tokens} tokens < lower bound {at_least} for {:?}…",
            &text[..20.min(text.len())]
        );
    }
}
