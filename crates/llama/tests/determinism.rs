//! Batch-invariant kernels on the real model: with `KernelMode::Deterministic` a sequence's
//! logits are bit-identical however its tokens reach the KV cache (one batch, chunks of any
//! size, decoded one by one), whatever else shares the step, and whatever the thread count.
//!
//! Logits are compared through the log-probabilities of the 20 most likely tokens, bit for bit.

use wick_backend::{Backend, BackendConfig, CacheType, KernelMode, StepOp, StepResult};
use wick_llama::LlamaBackend;
use wick_types::{SeqId, TokenId};

/// The top-20 log-probabilities at the next position of `seq`, as bits: a fingerprint of the
/// logits. The sequence gets the greedy token appended.
type Fingerprint = Vec<(TokenId, u32)>;

fn backend(threads: u32, kernels: KernelMode) -> LlamaBackend {
    backend_with(threads, kernels, [CacheType::F16; 2])
}

fn backend_with(threads: u32, kernels: KernelMode, cache_types: [CacheType; 2]) -> LlamaBackend {
    let config = BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(2)
        .with_n_threads(Some(threads))
        .with_kernels(kernels)
        .with_cache_types(cache_types);
    LlamaBackend::load(&config).expect("the test model loads")
}

fn fingerprint_of(result: &StepResult) -> Fingerprint {
    let logprobs = result.logprobs().expect("logprobs were asked for");
    logprobs
        .top
        .iter()
        .map(|t| (t.token, t.logprob.to_bits()))
        .collect()
}

fn next(backend: &mut dyn Backend, seq: SeqId) -> Fingerprint {
    let results = backend
        .step(&[(
            seq,
            StepOp::DecodeLogprobs {
                sampler: None,
                top: 20,
                after_sampling: false,
            },
        )])
        .expect("decode");
    fingerprint_of(&results[0].1)
}

fn prompt(backend: &dyn Backend) -> Vec<TokenId> {
    let text = "The history of the lighthouse begins with fires lit on hills to guide ships. \
                Later, towers of stone carried lamps of oil, and lenses made by Fresnel sent \
                their beams far over the sea. Keepers lived beside them and tended the light \
                through storms; today most lights are automatic, watched from far away.";
    let tokens = backend
        .tokenize_prompt(&format!("{text} {text}"), false)
        .expect("tokenize");
    assert!(tokens.len() > 64, "a prompt longer than one chunk");
    tokens
}

fn prefill_in_chunks(backend: &mut dyn Backend, seq: SeqId, tokens: &[TokenId], chunk: usize) {
    backend.seq_rm(seq).expect("clear");
    for part in tokens.chunks(chunk) {
        backend.prefill(seq, part).expect("prefill");
    }
}

#[test]
fn the_reference_kernels_are_reported_and_keyed() {
    let det = backend(2, KernelMode::Deterministic);
    assert!(
        det.info().deterministic,
        "a CPU build gets the reference kernels"
    );
    assert!(
        det.info().build.contains("deterministic"),
        "{}",
        det.info().build
    );
    let fast = backend(2, KernelMode::Fast);
    assert!(!fast.info().deterministic);
    assert!(fast.info().build.contains("fast"), "{}", fast.info().build);
    // A snapshot of one mode is foreign to the other: its floats came from other kernels.
    let mut det = det;
    let mut fast = fast;
    let tokens = prompt(&det);
    det.prefill(SeqId(0), &tokens).expect("prefill");
    let snapshot = det.kv_pack(SeqId(0)).expect("pack");
    assert!(fast.kv_unpack(SeqId(0), &snapshot).is_err());
    // Nor is one of another KV cache type: its cells are other bytes.
    let mut quantized = backend_with(2, KernelMode::Deterministic, [CacheType::Q8_0; 2]);
    assert!(quantized.kv_unpack(SeqId(0), &snapshot).is_err());
}

#[test]
fn logits_do_not_depend_on_chunking_co_batching_decoding_or_threads() {
    batch_invariance([CacheType::F16; 2]);
}

/// Every other KV cache type (wick's attention reads each), batch-invariant too.
#[test]
fn every_kv_cache_type_is_batch_invariant_too() {
    batch_invariance([CacheType::Q8_0; 2]);
    batch_invariance([CacheType::Q4_0, CacheType::F16]);
    batch_invariance([CacheType::Q5_1, CacheType::F32]);
    batch_invariance([CacheType::Q4_1, CacheType::Q5_0]);
    batch_invariance([CacheType::IQ4_NL, CacheType::BF16]);
}

/// A sequence's logits with KV cache types `cache_types` are the same bits in one batch, in
/// chunks, with the last chunk and a decode in one op, beside another sequence, decoded or
/// prefilled, and on one thread or two.
fn batch_invariance(cache_types: [CacheType; 2]) {
    let mut b = backend_with(2, KernelMode::Deterministic, cache_types);
    let attention = b.info().cpu_kernels.as_ref().map(|k| k.attention.clone());
    assert_eq!(attention.as_deref(), Some("wick"), "{cache_types:?}");
    let tokens = prompt(&b);
    let s0 = SeqId(0);
    let s1 = SeqId(1);

    // One batch.
    prefill_in_chunks(&mut b, s0, &tokens, tokens.len());
    let reference = next(&mut b, s0);

    // Chunks of 64, 17 and 1 tokens.
    for chunk in [64, 17, 1] {
        prefill_in_chunks(&mut b, s0, &tokens, chunk);
        assert_eq!(next(&mut b, s0), reference, "chunks of {chunk}");
    }

    // The last chunk and the first decode in one op, as the engine runs a prompt's end.
    b.seq_rm(s0).expect("clear");
    let (head, tail) = tokens.split_at(50);
    b.prefill(s0, head).expect("prefill");
    let results = b
        .step(&[(
            s0,
            StepOp::PrefillDecode(
                tail.to_vec(),
                Box::new(StepOp::DecodeLogprobs {
                    sampler: None,
                    top: 20,
                    after_sampling: false,
                }),
            ),
        )])
        .expect("prefill and decode");
    assert_eq!(
        fingerprint_of(&results[0].1),
        reference,
        "prefill + decode in one op"
    );

    // Beside another sequence: its prompt prefilled in the same batch, then both decoding.
    b.seq_rm(s0).expect("clear");
    b.seq_rm(s1).expect("clear");
    let other = b
        .tokenize_prompt("A different text about rivers and the sea.", false)
        .expect("tokenize");
    let results = b
        .step(&[
            (s1, StepOp::Prefill(other)),
            (s0, StepOp::Prefill(tokens.clone())),
        ])
        .expect("prefill both");
    assert_eq!(results.len(), 2);
    let results = b
        .step(&[
            (
                s0,
                StepOp::DecodeLogprobs {
                    sampler: None,
                    top: 20,
                    after_sampling: false,
                },
            ),
            (s1, StepOp::Decode(None)),
        ])
        .expect("decode both");
    assert_eq!(fingerprint_of(&results[0].1), reference, "co-batched");

    // Decoded tokens are worth their cold prefill: decode 12 tokens alone, then compare the
    // next position with a fresh prefill of the prompt and those tokens.
    prefill_in_chunks(&mut b, s0, &tokens, tokens.len());
    for _ in 0..12 {
        b.decode_one(s0, None).expect("decode");
    }
    let decoded = next(&mut b, s0);
    let history = b.seq_tokens(s0).expect("tokens");
    prefill_in_chunks(&mut b, s1, &history[..history.len() - 1], 512);
    assert_eq!(
        next(&mut b, s1),
        decoded,
        "decoded cells equal prefilled ones"
    );

    // Restored from a snapshot of its cells.
    prefill_in_chunks(&mut b, s0, &tokens, tokens.len());
    let snapshot = b.kv_pack(s0).expect("pack");
    b.seq_rm(s1).expect("clear");
    b.kv_unpack(s1, &snapshot).expect("unpack");
    assert_eq!(next(&mut b, s1), reference, "restored from a snapshot");

    // One thread instead of two.
    let mut one = backend_with(1, KernelMode::Deterministic, cache_types);
    prefill_in_chunks(&mut one, s0, &tokens, 17);
    assert_eq!(next(&mut one, s0), reference, "one thread");
}

#[test]
fn logits_are_the_same_bits_at_every_cpu_level() {
    use wick_kernels::cpu;
    // The cap is process-wide: other tests running now may run at a lower level for a while,
    // which changes their speed, never their bits (what this test shows).
    let levels = cpu::available();
    // The default cache, and quantized ones (wick's attention reads their blocks too).
    let caches = [
        [CacheType::F16; 2],
        [CacheType::Q8_0, CacheType::Q4_0],
        [CacheType::Q5_1, CacheType::IQ4_NL],
    ];
    let mut seen = Vec::new();
    for level in &levels {
        cpu::set_cap(*level).expect("an available level");
        let mut fingerprints = Vec::new();
        for cache_types in caches {
            let mut b = backend_with(2, KernelMode::Deterministic, cache_types);
            assert_eq!(
                b.info().cpu_kernels.as_ref().map(|k| k.level.clone()),
                Some(level.to_string())
            );
            let tokens = prompt(&b);
            prefill_in_chunks(&mut b, SeqId(0), &tokens[..40], 40);
            fingerprints.push(next(&mut b, SeqId(0)));
            for _ in 0..4 {
                fingerprints.push(next(&mut b, SeqId(0)));
            }
        }
        seen.push((*level, fingerprints));
    }
    cpu::set_cap(cpu::best()).expect("the build's best");
    eprintln!(
        "levels compared: {}",
        levels
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(levels.len() >= 2, "the scalar level and at least one other");
    for (level, fingerprints) in &seen[1..] {
        assert_eq!(fingerprints, &seen[0].1, "{level} against {}", seen[0].0);
    }
}
