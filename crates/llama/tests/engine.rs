//! The engine on the real llama.cpp backend and the real test model (here, beside the backend,
//! so that wick-engine's own tests need no llama.cpp build).

use std::time::Instant;

use wick_backend::BackendConfig;
use wick_engine::{ChatFormat, Engine, EngineConfig, Finished, GenEvent, GenerateRequest};
use wick_llama::LlamaBackend;
use wick_template::RenderRequest;
use wick_types::{ChatRequest, FinishReason, Grammar, Message, Role, SamplerOpts, TokenId};

fn engine(n_seq: u32) -> Engine {
    let config = BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(n_seq)
        .with_n_threads(Some(2));
    let backend = LlamaBackend::load(&config).expect("the test model loads");
    Engine::start(Box::new(backend), EngineConfig::default()).expect("engine")
}

fn chat_prompt(engine: &Engine, user: &str) -> Vec<TokenId> {
    let request = ChatRequest {
        messages: vec![Message::new(Role::User, user)],
        ..ChatRequest::default()
    };
    // The model's own template, rendered and tokenized on this side, as the library does.
    let format = engine
        .with_backend(|b| ChatFormat::from_model(b))
        .expect("engine alive")
        .expect("the template compiles")
        .expect("the model has a chat template");
    format
        .render(&**engine.tokenizer(), RenderRequest::from(&request))
        .expect("renders")
        .tokens
}

fn collect(events: impl Iterator<Item = GenEvent>) -> (String, Finished) {
    let mut text = String::new();
    for event in events {
        match event {
            GenEvent::Text(t) => text.push_str(&t),
            GenEvent::Done(done) => return (text, done),
            GenEvent::Error(e) => panic!("generation failed: {e}"),
            GenEvent::TextWithLogprobs { .. } => panic!("no logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
        }
    }
    panic!("the stream ended without Done")
}

const QUESTIONS: [&str; 8] = [
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about rain.",
    "What is 12 times 12?",
    "Say hello in Spanish.",
    "Why is the sky blue?",
    "List two fruits.",
    "What does a cat say?",
];

#[test]
fn eight_concurrent_greedy_streams_each_equal_the_request_alone() {
    let engine = engine(4);
    let requests: Vec<GenerateRequest> = QUESTIONS
        .iter()
        .map(|q| GenerateRequest {
            prompt: chat_prompt(&engine, q),
            max_tokens: Some(24),
            ..GenerateRequest::default()
        })
        .collect();

    let started = Instant::now();
    let alone: Vec<(String, Finished)> = requests
        .iter()
        .map(|r| collect(engine.submit(r.clone()).expect("submit")))
        .collect();
    let sequential = started.elapsed();

    let started = Instant::now();
    let streams: Vec<_> = requests
        .iter()
        .map(|r| engine.submit(r.clone()).expect("submit"))
        .collect();
    let together: Vec<(String, Finished)> = streams.into_iter().map(collect).collect();
    let concurrent = started.elapsed();

    let tokens: u32 = together
        .iter()
        .map(|(_, d)| d.usage.completion_tokens)
        .sum();
    for ((q, (want, _)), (got, done)) in QUESTIONS.iter().zip(&alone).zip(&together) {
        assert_eq!(got, want, "question {q:?}");
        assert!(!got.is_empty(), "the model answered {q:?}");
        assert_ne!(done.finish_reason, FinishReason::ToolCalls);
    }
    // Reported, not asserted: timing depends on the machine.
    eprintln!(
        "8 streams, {tokens} tokens: one after another {:.2}s ({:.1} tok/s), batched {:.2}s ({:.1} tok/s)",
        sequential.as_secs_f64(),
        f64::from(tokens) / sequential.as_secs_f64(),
        concurrent.as_secs_f64(),
        f64::from(tokens) / concurrent.as_secs_f64(),
    );
}

#[test]
fn a_reused_conversation_prefix_gives_the_cold_answer() {
    let warm = engine(2);
    let first = chat_prompt(
        &warm,
        &format!(
            "{}Tell me a short fact about the moon.",
            "Answer as an astronomer would. ".repeat(20)
        ),
    );
    let (answer, done) = collect(
        warm.submit(GenerateRequest {
            prompt: first.clone(),
            max_tokens: Some(16),
            ..GenerateRequest::default()
        })
        .expect("submit"),
    );
    assert_eq!(done.usage.cached_tokens, 0);
    // The next turn extends the first prompt.
    let mut second = first.clone();
    second.extend(
        warm.with_backend(move |b| b.tokenize(&answer, false))
            .unwrap()
            .unwrap(),
    );
    second.extend(chat_prompt(&warm, "And about the sun?").into_iter().skip(1));
    let request = GenerateRequest {
        prompt: second,
        max_tokens: Some(16),
        ..GenerateRequest::default()
    };
    let (reused, done) = collect(warm.submit(request.clone()).expect("submit"));
    assert!(
        done.usage.cached_tokens as usize >= first.len(),
        "the first prompt and the answer's shared tokens are reused: {} of {}",
        done.usage.cached_tokens,
        first.len()
    );
    let cold = engine(2);
    let (fresh, done) = collect(cold.submit(request).expect("submit"));
    assert_eq!(done.usage.cached_tokens, 0);
    assert_eq!(reused, fresh);
}

#[test]
fn json_schema_output_parses_and_follows_the_schema() {
    let engine = engine(1);
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}"#;
    let request = GenerateRequest {
        prompt: chat_prompt(&engine, "Describe a person as JSON."),
        max_tokens: Some(64),
        sampler: SamplerOpts {
            grammar: Some(Grammar::JsonSchema(schema.to_owned())),
            ..SamplerOpts::greedy()
        },
        ..GenerateRequest::default()
    };
    let (text, done) = collect(engine.submit(request).expect("submit"));
    assert_eq!(done.finish_reason, FinishReason::Stop, "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(value["name"].is_string(), "{value}");
    assert!(value["age"].is_i64(), "{value}");
}

#[test]
fn a_stop_string_on_the_real_model_cuts_the_answer() {
    let engine = engine(1);
    let prompt = chat_prompt(&engine, "Count from one to ten in words.");
    let request = GenerateRequest {
        prompt,
        max_tokens: Some(40),
        ..GenerateRequest::default()
    };
    let (full, _) = collect(engine.submit(request.clone()).expect("submit"));
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 10, "{full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 4].iter().collect();
    let cut = full.find(&stop).expect("stop is in the text");
    let (text, done) = collect(
        engine
            .submit(GenerateRequest {
                stop: vec![stop.clone()],
                ..request
            })
            .expect("submit"),
    );
    assert_eq!(text, full[..cut]);
    assert_eq!(done.stop, Some(stop));
}

#[test]
fn a_restarted_engine_restores_the_prompt_from_disk_and_answers_as_cold() {
    let dir = tempfile::tempdir().expect("tmp");
    let with_disk = || {
        let config = BackendConfig::new(wick_testutil::model_path())
            .with_n_ctx(512)
            .with_n_seq_max(2)
            .with_n_threads(Some(2));
        let backend = LlamaBackend::load(&config).expect("the test model loads");
        let engine_config = EngineConfig {
            disk_cache: Some(wick_engine::DiskCacheConfig {
                dir: dir.path().to_path_buf(),
                budget_bytes: 1 << 30,
                min_tokens: 16,
                model_id: wick_testutil::MODEL_SHA256.into(),
            }),
            ..EngineConfig::default()
        };
        Engine::start(Box::new(backend), engine_config).expect("engine")
    };
    let first = with_disk();
    let question = format!(
        "{}Explain in two sentences why the sky is blue, and mention Rayleigh.",
        "You are a physics teacher. ".repeat(24)
    );
    let prompt = chat_prompt(&first, &question);
    let request = GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: Some(16),
        ..GenerateRequest::default()
    };
    let (cold_text, done) = collect(first.submit(request.clone()).expect("submit"));
    assert_eq!(done.usage.cached_tokens, 0);
    drop(first);

    let second = with_disk();
    let (text, done) = collect(second.submit(request).expect("submit"));
    assert_eq!(
        done.usage.cached_tokens as usize,
        prompt.len(),
        "the whole prompt is restored from disk"
    );
    assert_eq!(
        second
            .cache_stats()
            .hits_disk
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        text, cold_text,
        "greedy output after a disk restore equals the cold run"
    );
}

/// Every generated token of a greedy answer with its log-probability's bits: equal fingerprints
/// mean the logits were bit-identical at every step.
fn fingerprint(events: impl Iterator<Item = GenEvent>) -> (Vec<(u32, u32)>, Finished) {
    let mut out = Vec::new();
    for event in events {
        match event {
            GenEvent::TextWithLogprobs { tokens, .. } => {
                out.extend(tokens.iter().map(|t| (t.token.0, t.logprob.to_bits())));
            }
            GenEvent::Text(_) => panic!("logprobs were asked for"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
            GenEvent::Done(done) => return (out, done),
            GenEvent::Error(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the stream ended without Done")
}

#[test]
fn greedy_answers_are_bit_identical_cold_warm_chunked_and_eight_at_once() {
    let system =
        "You are a careful assistant. Answer in one or two short sentences, plainly. ".repeat(4);
    let with = |n_seq: u32, prefill_budget: usize| {
        let config = BackendConfig::new(wick_testutil::model_path())
            .with_n_ctx(512)
            .with_n_seq_max(n_seq)
            .with_n_threads(Some(2));
        let backend = LlamaBackend::load(&config).expect("the test model loads");
        let engine_config = EngineConfig {
            prefill_budget,
            prefill_budget_decoding: prefill_budget,
            ..EngineConfig::default()
        };
        Engine::start(Box::new(backend), engine_config).expect("engine")
    };
    let cold_engine = with(1, 512);
    let prompts: Vec<Vec<TokenId>> = QUESTIONS
        .iter()
        .map(|q| chat_prompt(&cold_engine, &format!("{system}{q}")))
        .collect();
    let request = |prompt: &Vec<TokenId>| GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: Some(20),
        logprobs: Some(0),
        ..GenerateRequest::default()
    };
    // Cold: each prompt alone on a fresh sequence, in one batch.
    let cold: Vec<_> = prompts
        .iter()
        .map(|p| {
            let engine = with(1, 512);
            let (answer, done) = fingerprint(engine.submit(request(p)).expect("submit"));
            assert_eq!(done.usage.cached_tokens, 0);
            answer
        })
        .collect();
    assert!(cold.iter().all(|a| !a.is_empty()));

    // Warm: one after another on one engine; each reuses the shared system prompt (and more).
    let warm = with(2, 512);
    for (p, want) in prompts.iter().zip(&cold) {
        let (got, done) = fingerprint(warm.submit(request(p)).expect("submit"));
        assert_eq!(&got, want, "warm ({} cached)", done.usage.cached_tokens);
    }
    // The last prompt again: a sequence holds all of it.
    let last = prompts.len() - 1;
    let (again, done) = fingerprint(warm.submit(request(&prompts[last])).expect("submit"));
    assert_eq!(
        done.usage.cached_tokens as usize,
        prompts[last].len(),
        "all cached"
    );
    assert_eq!(again, cold[last], "fully cached");

    // Chunked: prompts prefilled 7 tokens a step.
    let chunked = with(1, 7);
    let (got, _) = fingerprint(chunked.submit(request(&prompts[1])).expect("submit"));
    assert_eq!(got, cold[1], "chunked");

    // Eight at once, batched in every step, reusing each other's prefixes.
    let eight = with(8, 512);
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| eight.submit(request(p)).expect("submit"))
        .collect();
    for (stream, want) in streams.into_iter().zip(&cold) {
        assert_eq!(&fingerprint(stream).0, want, "eight at once");
    }
}

/// A code block to hand back: prompt lookup finds each next line in the prompt.
const EDIT_TASK: &str = "Repeat this Python code exactly, changing nothing:\n\n```python\n\
def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    \
return total / len(values)\n\n\ndef variance(values):\n    m = mean(values)\n    total = 0\n    \
for value in values:\n        total += (value - m) ** 2\n    return total / len(values)\n```";

#[test]
fn speculative_decoding_changes_no_greedy_answer_and_accepts_drafts_on_an_edit_task() {
    let engine = engine(4);
    let prompts = [
        chat_prompt(&engine, EDIT_TASK),
        chat_prompt(&engine, QUESTIONS[2]),
        chat_prompt(&engine, QUESTIONS[5]),
    ];
    let request = |prompt: &Vec<TokenId>, spec_max| GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: Some(96),
        spec_max: Some(spec_max),
        ..GenerateRequest::default()
    };
    let plain: Vec<(String, Finished)> = prompts
        .iter()
        .map(|p| collect(engine.submit(request(p, 0)).expect("submit")))
        .collect();
    assert_eq!(
        engine
            .cache_stats()
            .spec_drafted
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "spec_max 0 drafts nothing"
    );
    // Alone, then all at once (verifies batched beside other sequences' decodes).
    let alone: Vec<(String, Finished)> = prompts
        .iter()
        .map(|p| collect(engine.submit(request(p, 8)).expect("submit")))
        .collect();
    let streams: Vec<_> = prompts
        .iter()
        .map(|p| engine.submit(request(p, 8)).expect("submit"))
        .collect();
    let together: Vec<(String, Finished)> = streams.into_iter().map(collect).collect();
    for ((p, a), t) in plain.iter().zip(&alone).zip(&together) {
        assert_eq!(p.0, a.0, "speculation changed a greedy answer");
        assert_eq!(p.1.usage.completion_tokens, a.1.usage.completion_tokens);
        assert_eq!(p.1.finish_reason, a.1.finish_reason);
        assert_eq!(
            p.0, t.0,
            "speculation beside other streams changed an answer"
        );
    }
    assert!(plain[0].0.contains("def mean(values):"), "{}", plain[0].0);
    // A stop string inside an accepted run: the answer ends there, the rest is taken back.
    let stopped = |spec_max| {
        let mut r = request(&prompts[0], spec_max);
        r.stop = vec!["def variance".into(), "len(values)".into()];
        collect(engine.submit(r).expect("submit"))
    };
    let (a, b) = (stopped(0), stopped(8));
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    // The sequences speculation trimmed are reused as prompt cache: still the cold answer.
    assert_eq!(
        collect(engine.submit(request(&prompts[0], 8)).expect("submit")).0,
        plain[0].0
    );
    let stats = engine.cache_stats();
    let drafted = stats
        .spec_drafted
        .load(std::sync::atomic::Ordering::Relaxed);
    let accepted = stats
        .spec_accepted
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        accepted >= 8 && accepted <= drafted,
        "the edit task's drafts are accepted: {accepted} of {drafted}"
    );
}
