//! Log-probabilities through the engine (stub backend): one entry per generated token, in
//! order, lined up with the text events, none for text a stop string cut off.

use wick_backend::{BackendConfig, StubBackend};
use wick_engine::{Engine, EngineConfig, Finished, GenEvent, GenerateRequest, ScoredToken};
use wick_types::{FinishReason, Grammar, SamplerOpts};

fn engine() -> Engine {
    let config = BackendConfig::new("stub").with_n_seq_max(2);
    let backend = StubBackend::new(&config).expect("stub");
    Engine::start(Box::new(backend), EngineConfig::default()).expect("engine")
}

fn request(engine: &Engine, text: &str, top: u8) -> GenerateRequest {
    let text = text.to_owned();
    GenerateRequest {
        prompt: engine
            .with_backend(move |b| b.tokenize(&text, false))
            .expect("engine alive")
            .expect("tokenize"),
        max_tokens: Some(40),
        logprobs: Some(top),
        ..GenerateRequest::default()
    }
}

/// Every text event with its tokens, and how the generation ended.
fn collect(events: impl Iterator<Item = GenEvent>) -> (Vec<(String, Vec<ScoredToken>)>, Finished) {
    let mut out = Vec::new();
    for event in events {
        match event {
            GenEvent::TextWithLogprobs { text, tokens } => {
                assert!(
                    !text.is_empty() || !tokens.is_empty(),
                    "events carry something"
                );
                out.push((text, tokens));
            }
            GenEvent::Text(t) => panic!("a logprobs request got a plain text event {t:?}"),
            GenEvent::Progress(_) => panic!("no progress was asked for"),
            GenEvent::Done(done) => return (out, done),
            GenEvent::Error(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the stream ended without Done")
}

fn text_of(events: &[(String, Vec<ScoredToken>)]) -> String {
    events.iter().map(|(t, _)| t.as_str()).collect()
}

fn bytes_of(tokens: &[ScoredToken]) -> Vec<u8> {
    tokens
        .iter()
        .flat_map(|t| t.bytes.iter().copied())
        .collect()
}

#[test]
fn every_token_is_reported_once_with_its_greedy_top_alternative() {
    let engine = engine();
    for prompt in ["The quick brown fox", "Once upon a time", "Is it?"] {
        let (events, done) = collect(engine.submit(request(&engine, prompt, 3)).expect("submit"));
        let tokens: Vec<ScoredToken> = events.iter().flat_map(|(_, t)| t.clone()).collect();
        assert_eq!(bytes_of(&tokens), text_of(&events).as_bytes());
        // The end-of-generation token is not part of the answer.
        let eog = u32::from(done.finish_reason == FinishReason::Stop);
        assert_eq!(
            u32::try_from(tokens.len()).unwrap() + eog,
            done.usage.completion_tokens
        );
        for t in &tokens {
            assert_eq!(t.top.len(), 3);
            assert_eq!(
                t.top[0].token, t.token,
                "greedy picks the most likely token"
            );
            assert_eq!(t.top[0].logprob.to_bits(), t.logprob.to_bits());
            assert_eq!(t.top[0].bytes, t.bytes);
            assert!(t.top.windows(2).all(|w| w[0].logprob >= w[1].logprob));
            assert!(t.top.iter().all(|a| a.logprob <= 0.0));
        }
        // Each event's tokens end inside the text handed out so far.
        let mut text_len = 0;
        let mut token_len = 0;
        for (text, tokens) in &events {
            text_len += text.len();
            token_len += bytes_of(tokens).len();
            assert!(token_len <= text_len, "a token came before its text");
        }
    }
}

#[test]
fn logprobs_change_no_token_and_zero_alternatives_is_allowed() {
    let engine = engine();
    let plain = GenerateRequest {
        logprobs: None,
        ..request(&engine, "The quick brown fox", 0)
    };
    let mut text = String::new();
    for event in engine.submit(plain).expect("submit") {
        match event {
            GenEvent::Text(t) => text.push_str(&t),
            GenEvent::Done(_) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    let (events, _) = collect(
        engine
            .submit(request(&engine, "The quick brown fox", 0))
            .expect("submit"),
    );
    assert_eq!(text_of(&events), text);
    assert!(events.iter().flat_map(|(_, t)| t).all(|t| t.top.is_empty()));
}

#[test]
fn tokens_cut_off_by_a_stop_string_are_not_reported() {
    // A grammar makes the stub spell the answer; the stop string ends it midway.
    let engine = engine();
    let answer = "alpha beta STOP gamma";
    let grammar = Grammar::Gbnf(format!("root ::= \"{answer}\""));
    let req = GenerateRequest {
        sampler: SamplerOpts {
            grammar: Some(grammar),
            ..SamplerOpts::greedy()
        },
        stop: vec!["STOP".to_owned()],
        ..request(&engine, "Say it", 5)
    };
    let (events, done) = collect(engine.submit(req).expect("submit"));
    assert_eq!(done.stop.as_deref(), Some("STOP"));
    let text = text_of(&events);
    assert_eq!(text, "alpha beta ");
    let tokens: Vec<ScoredToken> = events.iter().flat_map(|(_, t)| t.clone()).collect();
    let bytes = bytes_of(&tokens);
    // Every reported token begins inside the answer, and together they cover it.
    assert!(bytes.starts_with(text.as_bytes()), "{bytes:?}");
    let without_last = bytes.len() - tokens.last().expect("tokens").bytes.len();
    assert!(without_last < text.len());
}

#[test]
fn after_sampling_reports_the_draws_distribution_and_changes_no_token() {
    let engine = engine();
    let sampler = SamplerOpts {
        temperature: 0.7,
        top_k: 4,
        seed: 11,
        ..SamplerOpts::greedy()
    };
    let raw = GenerateRequest {
        sampler: sampler.clone(),
        ..request(&engine, "The weather today is", 10)
    };
    let after = GenerateRequest {
        logprobs_after_sampling: true,
        ..raw.clone()
    };
    let (raw, _) = collect(engine.submit(raw).expect("submit"));
    let (after, _) = collect(engine.submit(after).expect("submit"));
    assert_eq!(text_of(&raw), text_of(&after), "the same seeded draws");
    let tokens: Vec<&ScoredToken> = after.iter().flat_map(|(_, t)| t).collect();
    assert!(!tokens.is_empty());
    for t in tokens {
        assert!(
            (1..=4).contains(&t.top.len()),
            "a top-4 draw has at most 4 candidates: {:?}",
            t.top
        );
        let mass: f64 = t.top.iter().map(|a| f64::from(a.logprob).exp()).sum();
        assert!((mass - 1.0).abs() < 1e-4, "the candidates hold {mass}");
        assert!(t
            .top
            .iter()
            .any(|a| a.token == t.token && a.logprob.to_bits() == t.logprob.to_bits()));
    }
    let raw_tokens: Vec<&ScoredToken> = raw.iter().flat_map(|(_, t)| t).collect();
    assert!(
        raw_tokens.iter().any(|t| t.top.len() == 10),
        "raw log-probabilities list every asked alternative"
    );
}
