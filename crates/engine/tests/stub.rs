//! The engine against the stub backend: batching, reuse, stops, cancellation, limits.

use std::time::Duration;

use wick_backend::{AdapterId, AdapterSet, Backend, BackendConfig, Decoded, StubBackend};
use wick_engine::{
    Engine, EngineConfig, EngineError, Finished, GenEvent, GenerateRequest, PromptProgress,
};
use wick_types::{FinishReason, SamplerOpts, SeqId, TokenId};

fn stub(n_seq: u32, n_ctx: u32) -> StubBackend {
    let config = BackendConfig::new("stub")
        .with_n_seq_max(n_seq)
        .with_n_ctx(n_ctx);
    StubBackend::new(&config).expect("stub")
}

fn engine(n_seq: u32, config: EngineConfig) -> Engine {
    Engine::start(Box::new(stub(n_seq, 512)), config).expect("engine")
}

fn prompt(text: &str) -> Vec<TokenId> {
    stub(1, 512).tokenize(text, false).expect("tokenize")
}

/// Holds the engine's thread in a job until `release` is sent (or dropped): nothing is admitted
/// or stepped meanwhile. Join the handle after releasing.
fn hold(
    engine: &Engine,
) -> (
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<Result<(), EngineError>>,
) {
    let (started_tx, started) = std::sync::mpsc::channel();
    let (release, gate) = std::sync::mpsc::channel::<()>();
    let holder = engine.clone();
    let blocker = std::thread::spawn(move || {
        holder.with_backend(move |_| {
            started_tx.send(()).expect("test alive");
            let _ = gate.recv();
        })
    });
    started.recv().expect("the engine runs the job");
    (release, blocker)
}

fn request(text: &str, max_tokens: u32) -> GenerateRequest {
    GenerateRequest {
        prompt: prompt(text),
        max_tokens: Some(max_tokens),
        ..GenerateRequest::default()
    }
}

/// All text of a generation and how it ended.
fn collect(events: impl Iterator<Item = GenEvent>) -> (String, Finished) {
    let mut text = String::new();
    for event in events {
        match event {
            GenEvent::Text(t) => {
                assert!(!t.is_empty(), "text events are never empty");
                text.push_str(&t);
            }
            GenEvent::Done(done) => return (text, done),
            GenEvent::Error(e) => panic!("generation failed: {e}"),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
        }
    }
    panic!("the stream ended without Done")
}

/// Greedy decoding on a fresh stub, one sequence, no engine: the reference answer.
fn alone(text: &str, max_tokens: u32) -> (String, FinishReason) {
    alone_with(text, max_tokens, &SamplerOpts::greedy())
}

fn alone_with(text: &str, max_tokens: u32, opts: &SamplerOpts) -> (String, FinishReason) {
    let mut b = stub(1, 512);
    let tokens = prompt(text);
    b.prefill(SeqId(0), &tokens).expect("prefill");
    let sampler = (*opts != SamplerOpts::greedy()).then(|| b.sampler_new(opts).expect("sampler"));
    let mut out = Vec::new();
    for _ in 0..max_tokens {
        match b.decode_one(SeqId(0), sampler).expect("decode") {
            Decoded::Token(t) => out.push(t),
            Decoded::Eog(_) => {
                let bytes = b.detokenize(&out).expect("detokenize");
                return (String::from_utf8_lossy(&bytes).into(), FinishReason::Stop);
            }
        }
    }
    let bytes = b.detokenize(&out).expect("detokenize");
    (String::from_utf8_lossy(&bytes).into(), FinishReason::Length)
}

/// Greedy, but the end-of-generation tokens are pushed far down: generation never ends early.
fn no_eog() -> SamplerOpts {
    SamplerOpts {
        logit_bias: vec![(TokenId(0), -1e9), (TokenId(2), -1e9)],
        ..SamplerOpts::greedy()
    }
}

const PROMPTS: [&str; 6] = [
    "The quick brown fox",
    "Tell me about the sea",
    "1 2 3 4",
    "Unicode: 東京 ✓",
    "a",
    "What is the answer to everything?",
];

#[test]
fn one_request_gives_exactly_the_backend_s_own_greedy_answer() {
    let engine = engine(4, EngineConfig::default());
    for p in PROMPTS {
        let (text, done) = collect(engine.submit(request(p, 40)).expect("submit"));
        let (want, reason) = alone(p, 40);
        assert_eq!(text, want, "prompt {p:?}");
        assert_eq!(done.finish_reason, reason);
        assert_eq!(done.usage.prompt_tokens as usize, prompt(p).len());
    }
}

#[test]
fn concurrent_streams_each_equal_the_same_request_alone() {
    let engine = engine(4, EngineConfig::default());
    let streams: Vec<_> = PROMPTS
        .iter()
        .map(|p| engine.submit(request(p, 60)).expect("submit"))
        .collect();
    for (p, stream) in PROMPTS.iter().zip(streams) {
        let (text, done) = collect(stream);
        let (want, reason) = alone(p, 60);
        assert_eq!(text, want, "prompt {p:?}");
        assert_eq!(done.finish_reason, reason);
    }
}

#[test]
fn beyond_live_plus_queue_requests_are_busy() {
    let config = EngineConfig {
        queue_capacity: 2,
        ..EngineConfig::default()
    };
    let engine = engine(2, config);
    // Hold the engine's thread: the stub generates so fast that a held stream could
    // otherwise finish (and free its place) before the fifth request is submitted.
    let (release, blocker) = hold(&engine);
    let held: Vec<_> = (0..4)
        .map(|_| engine.submit(request("hold", 500)).expect("within bounds"))
        .collect();
    match engine.submit(request("one more", 5)) {
        Err(EngineError::Busy { live, queued }) => assert_eq!((live, queued), (2, 2)),
        other => panic!("expected Busy, got {other:?}"),
    }
    drop(held);
    release.send(()).expect("engine alive");
    blocker.join().expect("blocker").expect("engine alive");
    // Dropped streams are reaped at the next steps: capacity comes back.
    let mut admitted = None;
    for _ in 0..200 {
        if let Ok(g) = engine.submit(request("one more", 5)) {
            admitted = Some(g);
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (_, done) = collect(admitted.expect("capacity returns after the streams are dropped"));
    assert!(done.usage.completion_tokens <= 5);
}

#[test]
fn a_dropped_stream_frees_its_sequence_for_the_queued_request() {
    let config = EngineConfig {
        max_live: Some(1),
        ..EngineConfig::default()
    };
    let engine = engine(1, config);
    let mut first = engine
        .submit(GenerateRequest {
            max_tokens: None,
            ..request("never ending", 1)
        })
        .expect("submit");
    let second = engine.submit(request("queued", 10)).expect("submit");
    // The first is generating; the second waits for its sequence.
    assert!(matches!(
        first.next(),
        Some(GenEvent::Text(_) | GenEvent::Done(_))
    ));
    drop(first);
    let (text, _) = collect(second);
    assert_eq!(text, alone("queued", 10).0);
}

#[test]
fn a_request_cancelled_while_queued_frees_its_queue_slot_at_once() {
    let config = EngineConfig {
        max_live: Some(1),
        queue_capacity: 1,
        ..EngineConfig::default()
    };
    let engine = engine(1, config);
    // Hold the engine's thread so nothing is admitted or stepped meanwhile.
    let (release, blocker) = hold(&engine);

    let live = engine.submit(request("first", 5)).expect("submit");
    let queued = engine.submit(request("second", 5)).expect("submit");
    assert!(matches!(
        engine.submit(request("third", 5)),
        Err(EngineError::Busy { live: 1, queued: 1 })
    ));
    assert_eq!(engine.inflight(), 2);
    // The engine is still blocked: the slot comes back from the drop itself.
    drop(queued);
    assert_eq!(engine.inflight(), 1);
    let third = engine
        .submit(request("third", 5))
        .expect("the slot is free");

    release.send(()).expect("engine alive");
    blocker.join().expect("blocker").expect("engine alive");
    let (text, _) = collect(live);
    assert_eq!(text, alone("first", 5).0);
    let (text, _) = collect(third);
    assert_eq!(text, alone("third", 5).0);
    // Runs after the step that finished both: nothing is counted twice.
    engine.with_backend(|_| ()).expect("engine alive");
    assert_eq!(engine.inflight(), 0);
}

#[test]
fn a_reused_prefix_is_reported_and_changes_nothing() {
    // Reuse is token-granular: every shared prompt token, and the answer's tokens too.
    let engine = engine(2, EngineConfig::default());
    let base = "A long shared conversation prefix that repeats";
    let (_, first) = collect(engine.submit(request(base, 8)).expect("submit"));
    assert_eq!(first.usage.cached_tokens, 0);
    let longer = format!("{base} and then goes on");
    let shared = prompt(base)
        .iter()
        .zip(prompt(&longer))
        .take_while(|(a, b)| **a == *b)
        .count();
    let (text, done) = collect(engine.submit(request(&longer, 30)).expect("submit"));
    assert_eq!(
        done.usage.cached_tokens as usize, shared,
        "every shared prompt token is reused"
    );
    assert_eq!(
        text,
        alone(&longer, 30).0,
        "reuse must not change the output"
    );
    // The same prompt again: all of it is cached, and the answer is the same.
    let (again, done) = collect(engine.submit(request(&longer, 30)).expect("submit"));
    assert_eq!(again, text);
    assert_eq!(done.usage.cached_tokens as usize, prompt(&longer).len());
}

#[test]
fn a_follow_up_turn_reuses_the_previous_answer() {
    let engine = engine(1, EngineConfig::default());
    let question = prompt("Tell me a story");
    let (answer, first) = collect(
        engine
            .submit(GenerateRequest {
                prompt: question.clone(),
                max_tokens: Some(12),
                sampler: no_eog(),
                ..GenerateRequest::default()
            })
            .expect("submit"),
    );
    assert_eq!(first.usage.completion_tokens, 12);
    // The next turn's prompt holds the question, the answer's tokens and a new question.
    let mut next = question.clone();
    let answer_tokens = prompt(&answer);
    next.extend(&answer_tokens);
    next.extend(prompt(" and then?"));
    let (text, done) = collect(
        engine
            .submit(GenerateRequest {
                prompt: next.clone(),
                max_tokens: Some(12),
                sampler: no_eog(),
                ..GenerateRequest::default()
            })
            .expect("submit"),
    );
    assert!(
        done.usage.cached_tokens as usize > question.len(),
        "generated tokens are reused too: {} cached of {}",
        done.usage.cached_tokens,
        next.len()
    );
    let cold = engine_cold_answer(&next, 12);
    assert_eq!(text, cold, "reuse must not change the output");
}

/// The answer of a fresh engine to `prompt`, greedy without end-of-generation tokens.
fn engine_cold_answer(prompt: &[TokenId], max_tokens: u32) -> String {
    let engine = engine(1, EngineConfig::default());
    let (text, done) = collect(
        engine
            .submit(GenerateRequest {
                prompt: prompt.to_vec(),
                max_tokens: Some(max_tokens),
                sampler: no_eog(),
                ..GenerateRequest::default()
            })
            .expect("submit"),
    );
    assert_eq!(done.usage.cached_tokens, 0);
    text
}

#[test]
fn a_prefix_pushed_out_of_every_sequence_comes_back_from_the_ram_tier() {
    let engine = engine(1, EngineConfig::default());
    let long = "A long system prompt that many later requests share, word for word, \
                again and again, so it is worth keeping in memory between them";
    let (_, first) = collect(engine.submit(request(long, 4)).expect("submit"));
    assert_eq!(first.usage.cached_tokens, 0);
    // An unrelated request takes the only sequence: the long prefix is parked in RAM.
    let (_, other) = collect(
        engine
            .submit(request("Something else entirely", 4))
            .expect("submit"),
    );
    assert_eq!(other.usage.cached_tokens, 0);
    let follow = format!("{long} and a question");
    let (text, done) = collect(engine.submit(request(&follow, 12)).expect("submit"));
    let shared = prompt(long)
        .iter()
        .zip(prompt(&follow))
        .take_while(|(a, b)| **a == *b)
        .count();
    assert_eq!(done.usage.cached_tokens as usize, shared);
    let stats = engine.cache_stats();
    assert_eq!(
        stats.hits_host.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert!(stats.host_bytes.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert_eq!(text, alone(&follow, 12).0, "a restore changes nothing");
}

#[test]
fn a_long_sequence_that_loses_only_a_short_tail_is_not_parked() {
    let engine = Engine::start(Box::new(stub(1, 2048)), EngineConfig::default()).expect("engine");
    let words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    let long = prompt(&words.join(" "));
    assert!(long.len() > 16 * 48, "{} tokens", long.len());
    let ask = |tokens: &[TokenId]| GenerateRequest {
        prompt: tokens.to_vec(),
        max_tokens: Some(40),
        sampler: no_eog(),
        ..GenerateRequest::default()
    };
    collect(engine.submit(ask(&long)).expect("submit"));
    // The same prompt but its last token: the sequence loses that token and the 40 generated,
    // under 1/16 of what it holds, so it is cut without a copy of its whole state.
    let (_, done) = collect(engine.submit(ask(&long[..long.len() - 1])).expect("submit"));
    assert_eq!(done.usage.cached_tokens as usize, long.len() - 1);
    let stats = engine.cache_stats();
    assert_eq!(
        stats.host_parked.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn stop_strings_that_span_tokens_end_generation_and_are_never_emitted() {
    let engine = engine(1, EngineConfig::default());
    let (full, _) = alone_with("Tell me about the sea", 60, &no_eog());
    // A stop string from the middle of the output, long enough to span several tokens.
    let chars: Vec<char> = full.chars().collect();
    assert!(
        chars.len() > 20,
        "the stub's answer is long enough: {full:?}"
    );
    let start = chars.len() / 2;
    let stop: String = chars[start..start + 6].iter().collect();
    let cut = full.find(&stop).expect("stop is in the text");
    let req = GenerateRequest {
        stop: vec![stop.clone()],
        sampler: no_eog(),
        ..request("Tell me about the sea", 60)
    };
    let (text, done) = collect(engine.submit(req).expect("submit"));
    assert_eq!(text, full[..cut]);
    assert_eq!(done.finish_reason, FinishReason::Stop);
    assert_eq!(done.stop.as_deref(), Some(stop.as_str()));
}

#[test]
fn max_tokens_ends_with_length() {
    let engine = engine(1, EngineConfig::default());
    let (_, done) = collect(
        engine
            .submit(request("The quick brown fox", 3))
            .expect("submit"),
    );
    if done.finish_reason == FinishReason::Length {
        assert_eq!(done.usage.completion_tokens, 3);
    } else {
        assert!(done.usage.completion_tokens <= 3);
    }
}

#[test]
fn the_context_window_guards_prompts_and_generation() {
    let engine = Engine::start(Box::new(stub(1, 16)), EngineConfig::default()).expect("engine");
    let long = vec![TokenId(100); 16];
    match engine.submit(GenerateRequest {
        prompt: long,
        ..GenerateRequest::default()
    }) {
        Err(EngineError::PromptTooLong {
            prompt_tokens,
            n_ctx,
        }) => assert_eq!((prompt_tokens, n_ctx), (16, 16)),
        other => panic!("expected PromptTooLong, got {other:?}"),
    }
    let (_, done) = collect(
        engine
            .submit(GenerateRequest {
                prompt: vec![TokenId(100); 10],
                max_tokens: None,
                sampler: no_eog(),
                ..GenerateRequest::default()
            })
            .expect("submit"),
    );
    assert_eq!(done.finish_reason, FinishReason::Length);
    assert_eq!(
        done.usage.completion_tokens, 6,
        "10 prompt + 6 generated = 16"
    );
}

#[test]
fn invalid_requests_name_the_field() {
    let engine = engine(1, EngineConfig::default());
    let err = engine
        .submit(GenerateRequest::default())
        .expect_err("empty prompt");
    assert!(err.to_string().contains("prompt"), "{err}");
    let err = engine.submit(request("hi", 0)).expect_err("max_tokens 0");
    assert!(err.to_string().contains("max_tokens"), "{err}");
    let bad = EngineConfig {
        prefill_budget: 0,
        ..EngineConfig::default()
    };
    let err = Engine::start(Box::new(stub(1, 64)), bad).expect_err("bad config");
    assert!(err.to_string().contains("prefill_budget"), "{err}");
}

#[tokio::test]
async fn async_streams_yield_events_as_they_come() {
    let engine = engine(2, EngineConfig::default());
    let mut generation = engine
        .submit(request("The quick brown fox", 40))
        .expect("submit");
    let mut text = String::new();
    let mut done = None;
    while let Some(event) = generation.recv().await {
        match event {
            GenEvent::Text(t) => text.push_str(&t),
            GenEvent::Done(d) => done = Some(d),
            GenEvent::Error(e) => panic!("{e}"),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
        }
    }
    assert!(done.is_some());
    assert_eq!(text, alone("The quick brown fox", 40).0);
}

#[test]
fn with_backend_runs_on_the_engine_thread() {
    let engine = engine(1, EngineConfig::default());
    let tokens = engine
        .with_backend(|b| b.tokenize("hello", false))
        .expect("engine alive")
        .expect("tokenize");
    assert_eq!(tokens, prompt("hello"));
}

#[test]
fn multibyte_characters_split_across_tokens_are_never_split_in_the_text() {
    // The stub spells text it has no word piece for byte by byte: "東京 ✓" is 9 byte tokens
    // for the three multi-byte characters. A grammar makes the stub write exactly that.
    let engine = engine(1, EngineConfig::default());
    let answer = "東京 ✓ é";
    let request = GenerateRequest {
        sampler: SamplerOpts {
            grammar: Some(wick_types::Grammar::Gbnf(format!("root ::= \"{answer}\""))),
            ..SamplerOpts::greedy()
        },
        ..request("Where?", 40)
    };
    let generation = engine.submit(request).expect("submit");
    let mut pieces = Vec::new();
    let mut done = None;
    for event in generation {
        match event {
            GenEvent::Text(t) => pieces.push(t),
            GenEvent::Done(d) => done = Some(d),
            GenEvent::Error(e) => panic!("{e}"),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
        }
    }
    let done = done.expect("done");
    assert!(
        done.usage.completion_tokens as usize > answer.chars().count(),
        "the answer took more tokens than characters: {done:?}"
    );
    assert_eq!(pieces.concat(), answer);
    assert!(pieces.iter().all(|p| !p.contains('\u{fffd}')), "{pieces:?}");
}

/// The stub's cold answer to `prompt` (a fresh sequence, greedy, no end-of-generation tokens).
fn cold_tokens_answer(prompt: &[TokenId], max_tokens: u32) -> String {
    let mut b = stub(1, 512);
    b.prefill(SeqId(0), prompt).expect("prefill");
    let sampler = b.sampler_new(&no_eog()).expect("sampler");
    let mut out = Vec::new();
    for _ in 0..max_tokens {
        out.push(
            b.decode_one(SeqId(0), Some(sampler))
                .expect("decode")
                .token(),
        );
    }
    String::from_utf8_lossy(&b.detokenize(&out).expect("detokenize")).into_owned()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever the order of requests, whatever their prompts share, and however the
    /// sequences, the RAM tier (tiny, so it evicts) and the copies between sequences are used,
    /// every answer is the cold one and never reuses more than its prompt.
    #[test]
    fn every_answer_is_the_cold_one_whatever_was_cached_before(
        prompts in proptest::collection::vec(
            (0usize..3, proptest::collection::vec(60u32..64, 0..40)),
            1..10,
        ),
        n_seq in 1u32..3,
        ram in proptest::sample::select(vec![0u64, 40_000, 1 << 30]),
    ) {
        // Three shared stems of different lengths, each request extending one of them.
        let stems: [Vec<TokenId>; 3] = [
            (0..40).map(|i| TokenId(100 + i)).collect(),
            (0..40).map(|i| TokenId(100 + i)).chain((0..30).map(|i| TokenId(200 + i))).collect(),
            (0..5).map(|i| TokenId(240 + i)).collect(),
        ];
        let engine = engine(
            n_seq,
            EngineConfig { ram_cache_bytes: ram, ..EngineConfig::default() },
        );
        for (stem, tail) in prompts {
            let mut prompt = stems[stem].clone();
            prompt.extend(tail.into_iter().map(TokenId));
            let request = GenerateRequest {
                prompt: prompt.clone(),
                max_tokens: Some(6),
                sampler: no_eog(),
                ..GenerateRequest::default()
            };
            let (text, done) = collect(engine.submit(request).expect("submit"));
            proptest::prop_assert!(done.usage.cached_tokens as usize <= prompt.len());
            proptest::prop_assert_eq!(text, cold_tokens_answer(&prompt, 6));
        }
    }
}

#[test]
fn speculation_drafts_from_repeats_and_changes_no_answer_or_budget() {
    let spec = engine(
        2,
        EngineConfig {
            spec_max: 6,
            ..EngineConfig::default()
        },
    );
    let plain = engine(2, EngineConfig::default());
    // Repeated words: the prompt's last tokens occur earlier, so there is always a draft.
    let text = "the cat sat on the mat and the cat sat on the mat and the cat sat on the";
    for max_tokens in [1, 2, 7, 40] {
        let a = collect(spec.submit(request(text, max_tokens)).expect("submit"));
        let b = collect(plain.submit(request(text, max_tokens)).expect("submit"));
        assert_eq!(a.0, b.0, "max_tokens {max_tokens}");
        assert_eq!(a.1, b.1, "max_tokens {max_tokens}");
        assert!(a.1.usage.completion_tokens <= max_tokens);
    }
    // A per-request 0 turns it off on a speculating engine; a sampled request never drafts.
    let drafted = || {
        spec.cache_stats()
            .spec_drafted
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let before = drafted();
    assert!(before > 0, "repeats were drafted");
    let mut off = request(text, 20);
    off.spec_max = Some(0);
    collect(spec.submit(off).expect("submit"));
    let mut sampled = request(text, 20);
    sampled.sampler = SamplerOpts {
        temperature: 0.8,
        seed: 7,
        ..SamplerOpts::default()
    };
    collect(spec.submit(sampled).expect("submit"));
    assert_eq!(drafted(), before);
    assert!(
        plain
            .cache_stats()
            .spec_drafted
            .load(std::sync::atomic::Ordering::Relaxed)
            == 0,
        "spec_max 0 (the engine default) never drafts"
    );
}

/// A model whose state cannot be cut back (`ModelInfo::recurrent`: Mamba, RWKV, LFM2, …):
/// a prompt starts from a sequence where it extends all of it or at the end of one of its
/// prompts (the backend's checkpoints), a speculating engine does not draft, so the backend
/// never evaluates kept tokens again — and every answer is still the one of a fresh engine.
#[test]
fn on_a_recurrent_model_only_whole_sequences_are_reused_and_nothing_is_evaluated_twice() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let rebuilt = std::sync::Arc::new(AtomicU64::new(0));
    let recurrent = stub(1, 512).with_recurrent(std::sync::Arc::clone(&rebuilt));
    assert!(recurrent.info().recurrent);
    let config = EngineConfig {
        spec_max: 6,
        ram_cache_bytes: 1 << 20,
        ..EngineConfig::default()
    };
    let engine = Engine::start(Box::new(recurrent), config).expect("engine");
    let generate = |prompt: &[TokenId]| {
        collect(
            engine
                .submit(GenerateRequest {
                    prompt: prompt.to_vec(),
                    max_tokens: Some(12),
                    sampler: no_eog(),
                    ..GenerateRequest::default()
                })
                .expect("submit"),
        )
    };
    // Repeats, so a speculating engine would draft.
    let question = prompt("the cat sat on the mat and the cat sat on the");
    let (answer, first) = generate(&question);
    assert_eq!(first.usage.cached_tokens, 0);
    // The next turn extends the question and its answer: all of them are reused.
    let mut next = question.clone();
    next.extend(prompt(&answer));
    next.extend(prompt(" and then?"));
    let (text, done) = generate(&next);
    assert_eq!(
        done.usage.cached_tokens as usize,
        question.len() + 12,
        "the whole sequence: the question and the answer's tokens"
    );
    assert_eq!(text, engine_cold_answer(&next, 12));
    // The question again: the sequence is cut back to the end of its first prompt, which the
    // backend checkpointed.
    let (again, done) = generate(&question);
    assert_eq!(done.usage.cached_tokens as usize, question.len());
    assert_eq!(again, answer);
    // A prompt that leaves the question three tokens before its end: no checkpoint there, so
    // nothing is reused (a cut would evaluate the question's start again, in one piece).
    let mut other = question[..question.len() - 3].to_vec();
    other.extend(prompt(" a dog"));
    let (text_other, done) = generate(&other);
    assert_eq!(done.usage.cached_tokens, 0);
    assert_eq!(text_other, engine_cold_answer(&other, 12));
    // The next turn again: the question and its answer, parked in RAM when the other prompt
    // took the sequence, are all of a prefix of it (the longer conversation parked before
    // would need a cut).
    let (again, done) = generate(&next);
    assert_eq!(done.usage.cached_tokens as usize, question.len() + 12);
    assert_eq!(again, text);
    assert_eq!(
        rebuilt.load(Ordering::Relaxed),
        0,
        "no cut made the backend evaluate kept tokens again"
    );
    assert_eq!(engine.cache_stats().spec_drafted.load(Ordering::Relaxed), 0);
}

/// On a recurrent model a chat's prompt is computed in a chunk that ends where its last
/// message's text starts (`RenderedPrompt::checkpoint`), which the backend checkpoints: another
/// question after the same system prompt starts there, with nothing evaluated twice, and
/// answers as a fresh engine does.
#[test]
fn on_a_recurrent_model_another_question_after_the_same_system_prompt_starts_at_its_checkpoint() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use wick_types::{ChatRequest, Message, Role};
    let rebuilt = std::sync::Arc::new(AtomicU64::new(0));
    let recurrent = stub(1, 512).with_recurrent(std::sync::Arc::clone(&rebuilt));
    let chat = wick_engine::ChatFormat::from_model(&recurrent)
        .expect("template")
        .expect("the stub has one");
    let engine = Engine::start(Box::new(recurrent), EngineConfig::default()).expect("engine");
    let system = "You answer in one short sentence, and you always name the city first.";
    let render = |question: &str| {
        let conversation = ChatRequest::new(vec![
            Message::new(Role::System, system),
            Message::new(Role::User, question),
        ]);
        chat.render(
            &**engine.tokenizer(),
            wick_template::RenderRequest::from(&conversation),
        )
        .expect("render")
    };
    let (first, second) = (
        render("Where is the tower?"),
        render("Which river runs there?"),
    );
    let at = first.checkpoint.expect("a chat prompt has a last message");
    assert_eq!(
        second.checkpoint,
        Some(at),
        "the same system prompt and role text"
    );
    assert_eq!(first.tokens[..at], second.tokens[..at]);
    let generate = |rendered: &wick_engine::RenderedPrompt| {
        collect(
            engine
                .submit(GenerateRequest {
                    prompt: rendered.tokens.clone(),
                    checkpoint: rendered.checkpoint,
                    max_tokens: Some(12),
                    sampler: no_eog(),
                    ..GenerateRequest::default()
                })
                .expect("submit"),
        )
    };
    let (_, done) = generate(&first);
    assert_eq!(done.usage.cached_tokens, 0);
    let (text, done) = generate(&second);
    assert_eq!(
        done.usage.cached_tokens as usize, at,
        "up to the last message's text"
    );
    assert_eq!(text, engine_cold_answer(&second.tokens, 12));
    assert_eq!(
        rebuilt.load(Ordering::Relaxed),
        0,
        "nothing evaluated twice"
    );
}

/// Two adapters loaded into `backend` (the stub only checks that their files exist); the ids
/// are the same for every stub that loads them in this order.
fn with_adapters(backend: &mut StubBackend, dir: &std::path::Path) -> (AdapterId, AdapterId) {
    let mut load = |name: &str| {
        let path = dir.join(name);
        std::fs::write(&path, b"stub adapter").expect("write");
        backend.load_adapter(&path).expect("load")
    };
    (load("a.gguf"), load("b.gguf"))
}

/// Greedy decoding under `adapters` on a fresh stub, no engine, no end-of-generation tokens.
fn alone_under(text: &str, max_tokens: u32, adapters: &AdapterSet) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = stub(1, 512);
    with_adapters(&mut b, dir.path());
    b.apply_adapters(adapters.as_slice()).expect("apply");
    b.prefill(SeqId(0), &prompt(text)).expect("prefill");
    let sampler = b.sampler_new(&no_eog()).expect("sampler");
    let out: Vec<TokenId> = (0..max_tokens)
        .map(|_| {
            b.decode_one(SeqId(0), Some(sampler))
                .expect("decode")
                .token()
        })
        .collect();
    String::from_utf8_lossy(&b.detokenize(&out).expect("detokenize")).into()
}

fn under(text: &str, max_tokens: u32, adapters: &AdapterSet) -> GenerateRequest {
    GenerateRequest {
        sampler: no_eog(),
        adapters: adapters.clone(),
        ..request(text, max_tokens)
    }
}

#[test]
fn requests_under_different_adapter_sets_at_once_each_get_their_solo_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut backend = stub(4, 512);
    let (a, b) = with_adapters(&mut backend, dir.path());
    let engine = Engine::start(Box::new(backend), EngineConfig::default()).expect("engine");
    let sets = [
        AdapterSet::default(),
        AdapterSet::new([(a, 1.0)]),
        AdapterSet::new([(a, 0.5)]),
        AdapterSet::new([(a, 0.5), (b, 0.25)]),
        AdapterSet::new([(b, 1.0)]),
    ];
    let p = "The same prompt under every adapter set";
    let answers: Vec<String> = sets.iter().map(|s| alone_under(p, 30, s)).collect();
    for (i, x) in answers.iter().enumerate() {
        for y in &answers[i + 1..] {
            assert_ne!(x, y, "each set changes the stub's answer");
        }
    }
    // Held so that all five are admitted together and their steps interleave.
    let (release, blocker) = hold(&engine);
    let streams: Vec<_> = sets
        .iter()
        .map(|s| engine.submit(under(p, 30, s)).expect("submit"))
        .collect();
    drop(release);
    blocker.join().expect("holder").expect("job ran");
    for ((set, stream), want) in sets.iter().zip(streams).zip(&answers) {
        let (text, _) = collect(stream);
        assert_eq!(&text, want, "adapters {set:?}");
    }
}

#[test]
fn a_prefix_computed_under_one_adapter_set_is_never_reused_under_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut backend = stub(2, 512);
    let (a, _) = with_adapters(&mut backend, dir.path());
    let engine = Engine::start(Box::new(backend), EngineConfig::default()).expect("engine");
    let lora = AdapterSet::new([(a, 0.75)]);
    let base = AdapterSet::default();
    let long = "A long system prompt that many later requests share, word for word, \
                again and again, so it is worth keeping in memory between them";
    let run = |set: &AdapterSet| collect(engine.submit(under(long, 8, set)).expect("submit"));

    let (text, done) = run(&lora);
    assert_eq!(
        (text.as_str(), done.usage.cached_tokens),
        (alone_under(long, 8, &lora).as_str(), 0)
    );
    // The other sequence is free and the first holds the whole prompt, but under the adapter.
    let (text, done) = run(&base);
    assert_eq!(
        done.usage.cached_tokens, 0,
        "no prefix of the adapter's is reused"
    );
    assert_eq!(text, alone_under(long, 8, &base));
    // An adapter at scale 0 is the base model: its cells are shared with it.
    let (text, done) = run(&AdapterSet::new([(a, 0.0)]));
    assert!(done.usage.cached_tokens > 0);
    assert_eq!(text, alone_under(long, 8, &base));
    // Under the adapter again, its own prefix is reused and the answer is unchanged.
    let (text, done) = run(&lora);
    assert!(done.usage.cached_tokens > 0);
    assert_eq!(text, alone_under(long, 8, &lora));
    // Both sequences taken by unrelated base prompts: the adapter's prefix goes to the RAM
    // tier and comes back from it for the adapter alone.
    for other in [
        "Something else entirely, first",
        "Something else entirely, second",
    ] {
        let (release, blocker) = hold(&engine);
        let one = engine.submit(under(other, 4, &base)).expect("submit");
        let two = engine
            .submit(under(&format!("{other}!"), 4, &base))
            .expect("submit");
        drop(release);
        blocker.join().expect("holder").expect("job ran");
        collect(one);
        collect(two);
    }
    let (text, done) = run(&lora);
    assert!(
        done.usage.cached_tokens > 0,
        "restored from RAM for the adapter"
    );
    assert_eq!(text, alone_under(long, 8, &lora));
}

#[test]
fn an_unknown_adapter_fails_its_request_and_the_stub_runs_two_at_once() {
    let mut backend = stub(1, 512);
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = with_adapters(&mut backend, dir.path());
    let engine = Engine::start(Box::new(backend), EngineConfig::default()).expect("engine");
    // The stub runs any number; an unknown adapter fails the request, not the engine.
    let unknown = AdapterSet::new([(AdapterId(99), 1.0)]);
    let mut events = engine.submit(under("x", 4, &unknown)).expect("submit");
    assert!(matches!(events.next(), Some(GenEvent::Error(_))));
    let (text, _) = collect(
        engine
            .submit(under("x", 4, &AdapterSet::new([(a, 1.0), (b, 1.0)])))
            .expect("submit"),
    );
    assert_eq!(
        text,
        alone_under("x", 4, &AdapterSet::new([(a, 1.0), (b, 1.0)]))
    );
}

#[test]
fn a_draft_model_proposes_and_the_answers_stay_the_plain_ones() {
    let config = EngineConfig {
        spec_max: 5,
        ..EngineConfig::default()
    };
    // The stub as its own draft: every draft token is the greedy one, so all are accepted.
    let spec = Engine::start_with_draft(
        Box::new(stub(4, 512)),
        Some(Box::new(stub(4, 512))),
        config.clone(),
    )
    .expect("engine");
    let stats = || {
        let s = spec.cache_stats();
        let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        (load(&s.spec_drafted), load(&s.spec_accepted))
    };
    for round in 0..2 {
        // Held so that several requests draft in the same batched step of the draft model;
        // the second round starts from what the draft sequences already hold.
        let (release, blocker) = hold(&spec);
        let streams: Vec<_> = PROMPTS
            .iter()
            .map(|p| spec.submit(request(p, 23)))
            .collect();
        drop(release);
        blocker.join().expect("holder").expect("job ran");
        for (p, stream) in PROMPTS.iter().zip(streams) {
            let (text, done) = collect(stream.expect("submit"));
            let (want, reason) = alone(p, 23);
            assert_eq!(text, want, "round {round}, {p:?}");
            assert_eq!(done.finish_reason, reason);
        }
    }
    let (drafted, accepted) = stats();
    assert!(drafted > 0);
    assert_eq!(
        accepted, drafted,
        "the same model drafts exactly its greedy tokens"
    );
    // A sampled request never drafts.
    let sampled = GenerateRequest {
        sampler: SamplerOpts {
            temperature: 0.8,
            seed: 7,
            ..SamplerOpts::default()
        },
        ..request("x", 10)
    };
    collect(spec.submit(sampled).expect("submit"));
    assert_eq!(stats(), (drafted, accepted));
}

#[test]
fn a_draft_model_with_a_smaller_context_is_refused_by_name() {
    let err = Engine::start_with_draft(
        Box::new(stub(4, 512)),
        Some(Box::new(stub(2, 512))),
        EngineConfig::default(),
    )
    .expect_err("two sequences cannot twin four");
    assert!(err.to_string().contains("model_draft"), "{err}");
}

#[test]
fn a_recurrent_draft_model_or_a_recurrent_model_with_a_draft_is_refused_by_name() {
    let recurrent = || {
        let rebuilt = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        stub(4, 512).with_recurrent(rebuilt)
    };
    let err = Engine::start_with_draft(
        Box::new(stub(4, 512)),
        Some(Box::new(recurrent())),
        EngineConfig::default(),
    )
    .expect_err("a recurrent draft would be cut back at every rejected draft");
    assert!(
        err.to_string().contains("model_draft") && err.to_string().contains("recurrent"),
        "{err}"
    );
    let err = Engine::start_with_draft(
        Box::new(recurrent()),
        Some(Box::new(stub(4, 512))),
        EngineConfig::default(),
    )
    .expect_err("a recurrent model does not speculate");
    assert!(err.to_string().contains("recurrent state"), "{err}");
}

/// Every progress report of a generation, in order, and whether text came before the last.
fn progress_reports(events: impl Iterator<Item = GenEvent>) -> (Vec<PromptProgress>, bool) {
    let (mut reports, mut text_first) = (Vec::new(), false);
    for event in events {
        match event {
            GenEvent::Progress(p) => reports.push(p),
            GenEvent::Text(_) => text_first |= reports.last().is_none_or(|p| p.processed < p.total),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Done(_) => return (reports, text_first),
            GenEvent::Error(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the stream ended without Done")
}

#[test]
fn progress_reports_start_at_the_cache_and_end_at_the_whole_prompt_before_any_text() {
    let config = EngineConfig {
        prefill_budget: 16,
        prefill_budget_decoding: 16,
        ..EngineConfig::default()
    };
    let engine = engine(1, config);
    let long = "a prompt long enough for several prefill chunks of sixteen tokens each, ".repeat(2);
    let ask = |text: &str| GenerateRequest {
        progress: true,
        ..request(text, 4)
    };
    let (cold, text_first) = progress_reports(engine.submit(ask(&long)).expect("submit"));
    assert!(!text_first, "the prompt is done before the first text");
    let total = u32::try_from(prompt(&long).len()).unwrap();
    assert!(cold.len() >= 3, "a start and a report per chunk: {cold:?}");
    assert_eq!(cold[0].cached, 0);
    assert_eq!(cold[0].processed, 0);
    assert!(cold.iter().all(|p| p.total == total && p.cached == 0));
    assert!(
        cold.windows(2)
            .all(|w| w[0].processed < w[1].processed && w[1].processed - w[0].processed <= 16),
        "one report per chunk of at most the budget: {cold:?}"
    );
    assert_eq!(cold.last().unwrap().processed, total);

    // The same prompt again: it starts from the cache (all but the last token, which the
    // first token's step computes) and finishes in one step.
    let (warm, _) = progress_reports(engine.submit(ask(&long)).expect("submit"));
    assert_eq!(warm.len(), 2, "{warm:?}");
    assert_eq!((warm[0].cached, warm[0].processed), (total - 1, total - 1));
    assert_eq!((warm[1].cached, warm[1].processed), (total - 1, total));

    // Without asking, none.
    let (none, _) = progress_reports(engine.submit(request(&long, 4)).expect("submit"));
    assert!(none.is_empty());
}
