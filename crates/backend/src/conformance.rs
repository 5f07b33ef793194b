//! The conformance suite: checks every [`Backend`] must pass, whatever engine is behind it.
//!
//! Each check takes a freshly created backend (`n_seq_max` ≥ 4) and panics with a message that
//! says what broke. [`backend_conformance!`](crate::backend_conformance) turns them into one
//! `#[test]` per check:
//!
//! ```
//! use wick_backend::{BackendConfig, StubBackend};
//!
//! fn make() -> StubBackend {
//!     StubBackend::new(&BackendConfig::new("unused.gguf")).unwrap()
//! }
//! // In a test file: `wick_backend::backend_conformance!(make);`
//! let mut backend = make();
//! wick_backend::conformance::greedy_decode_is_deterministic(&mut backend);
//! ```
// Every check is an assertion: panicking is how it reports, so no `# Panics` sections.
#![allow(clippy::missing_panics_doc)]

use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use crate::{Backend, BackendError, Decoded, Logprobs, StepOp, StepResult};

/// Prompts the checks decode from.
const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village,",
    "def fibonacci(n):",
    "List three colours: red,",
];

fn prompt(backend: &dyn Backend, i: usize) -> Vec<TokenId> {
    backend
        .tokenize_prompt(PROMPTS[i % PROMPTS.len()], false)
        .expect("conformance: tokenizing a plain prompt must work")
}

fn greedy(backend: &mut dyn Backend, seq: SeqId, n: usize) -> Vec<TokenId> {
    (0..n)
        .map(|_| {
            backend
                .decode_one(seq, None)
                .expect("conformance: greedy decode must work")
                .token()
        })
        .collect()
}

fn fresh(backend: &mut dyn Backend, seq: SeqId, tokens: &[TokenId]) {
    backend.seq_rm(seq).expect("conformance: seq_rm must work");
    backend
        .prefill(seq, tokens)
        .expect("conformance: prefill must work");
}

/// Text survives tokenize → detokenize unchanged, with and without special parsing.
pub fn tokenize_round_trips(backend: &mut dyn Backend) {
    let texts = [
        "Hello, world!",
        "naïve café — 東京 🚀 ü",
        "  leading spaces\n\ttabs and\r\nnewlines  ",
        "<|im_start|>user\nhi<|im_end|>",
        "{\"json\": [1, 2.5, null]}",
    ];
    for text in texts {
        for special in [false, true] {
            let tokens = backend.tokenize(text, special).unwrap();
            assert!(!tokens.is_empty(), "{text:?} tokenized to nothing");
            let bytes = backend.detokenize(&tokens).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                text,
                "round trip with special={special} changed the text"
            );
        }
    }
}

/// With `special = false`, the text of every control token stays plain text; with `true` it is
/// that one control token.
pub fn special_false_never_yields_control_tokens(backend: &mut dyn Backend) {
    let info = backend.info().clone();
    assert!(
        !info.special.control.is_empty(),
        "the model reports no control tokens"
    );
    let mut checked = 0;
    for &control in &info.special.control {
        let text = String::from_utf8_lossy(&backend.detokenize(&[control]).unwrap()).into_owned();
        if text.is_empty() || text.contains('\u{fffd}') {
            continue;
        }
        let plain = backend
            .tokenize(&format!("user says {text} here"), false)
            .unwrap();
        assert!(
            plain.iter().all(|t| !info.special.is_control(*t)),
            "special=false turned {text:?} into control tokens: {plain:?}"
        );
        let parsed = backend.tokenize(&text, true).unwrap();
        assert_eq!(parsed, vec![control], "special=true must parse {text:?}");
        checked += 1;
    }
    assert!(checked > 0, "no control token has a text to check");
}

/// The same prompt decodes to the same tokens, in any sequence, every time.
pub fn greedy_decode_is_deterministic(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let first = greedy(backend, SeqId(0), 8);
    fresh(backend, SeqId(0), &p);
    assert_eq!(greedy(backend, SeqId(0), 8), first, "second run differs");
    fresh(backend, SeqId(1), &p);
    assert_eq!(
        greedy(backend, SeqId(1), 8),
        first,
        "another sequence differs"
    );
    let mut history = p.clone();
    history.extend(&first);
    assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), history);
}

/// A batched `step` over four sequences yields, for each, the tokens it yields alone.
pub fn step_matches_solo_decoding(backend: &mut dyn Backend) {
    const N: usize = 6;
    let seqs: Vec<SeqId> = (0..4).map(SeqId).collect();
    let prompts: Vec<Vec<TokenId>> = (0..4).map(|i| prompt(backend, i)).collect();
    let solo: Vec<Vec<TokenId>> = prompts
        .iter()
        .map(|p| {
            fresh(backend, SeqId(0), p);
            greedy(backend, SeqId(0), N)
        })
        .collect();
    backend.seq_clear().unwrap();

    let ops: Vec<(SeqId, StepOp)> = seqs
        .iter()
        .zip(&prompts)
        .map(|(&s, p)| (s, StepOp::Prefill(p.clone())))
        .collect();
    let results = backend.step(&ops).unwrap();
    assert!(results
        .iter()
        .all(|(_, r)| matches!(r, StepResult::Prefilled)));
    let mut batched = vec![Vec::new(); 4];
    for _ in 0..N {
        let ops: Vec<(SeqId, StepOp)> = seqs.iter().map(|&s| (s, StepOp::Decode(None))).collect();
        let results = backend.step(&ops).unwrap();
        assert_eq!(results.len(), 4);
        for (i, (seq, result)) in results.into_iter().enumerate() {
            assert_eq!(seq, seqs[i], "results must come in the order of the ops");
            batched[i].push(result.token().expect("a decode op yields a token"));
        }
    }
    assert_eq!(batched, solo, "batched decoding differs from solo decoding");
}

/// A step may mix a prefill of one sequence with decodes of others.
pub fn step_mixes_prefill_and_decode(backend: &mut dyn Backend) {
    let (p0, p1) = (prompt(backend, 0), prompt(backend, 1));
    fresh(backend, SeqId(1), &p1);
    let alone = greedy(backend, SeqId(1), 3);
    fresh(backend, SeqId(1), &p1);
    backend.seq_rm(SeqId(0)).unwrap();
    let results = backend
        .step(&[
            (SeqId(0), StepOp::Prefill(p0)),
            (SeqId(1), StepOp::Decode(None)),
        ])
        .unwrap();
    assert_eq!(results[0], (SeqId(0), StepResult::Prefilled));
    assert_eq!(results[1].1.token(), Some(alone[0]));
    let more = backend
        .step(&[
            (SeqId(0), StepOp::Decode(None)),
            (SeqId(1), StepOp::Decode(None)),
        ])
        .unwrap();
    assert_eq!(more[1].1.token(), Some(alone[1]));
    let duplicate = backend.step(&[
        (SeqId(1), StepOp::Decode(None)),
        (SeqId(1), StepOp::Decode(None)),
    ]);
    assert!(
        duplicate.is_err(),
        "a sequence twice in one step is an error"
    );
}

/// Checks one position's log-probabilities against the token decoded there.
fn check_logprobs(decoded: Decoded, logprobs: &Logprobs, top: usize, greedy: bool) {
    assert_eq!(logprobs.sampled.token, decoded.token(), "sampled token");
    assert_eq!(logprobs.top.len(), top, "number of alternatives");
    assert!(logprobs.sampled.logprob <= 0.0, "a log-probability is ≤ 0");
    assert!(logprobs.top.iter().all(|t| t.logprob <= 0.0));
    assert!(
        logprobs
            .top
            .windows(2)
            .all(|w| w[0].logprob >= w[1].logprob),
        "alternatives come most likely first: {:?}",
        logprobs.top
    );
    let mass: f64 = logprobs
        .top
        .iter()
        .map(|t| f64::from(t.logprob).exp())
        .sum();
    assert!(mass <= 1.0 + 1e-4, "the top alternatives hold {mass} > 1");
    if greedy {
        assert_eq!(
            logprobs.top[0].token,
            decoded.token(),
            "greedy picks the top"
        );
        assert!(
            (logprobs.top[0].logprob - logprobs.sampled.logprob).abs() < 1e-6,
            "the top-1 log-probability is the sampled one's"
        );
    }
}

/// Log-probabilities: a normalised, sorted distribution whose top token is the greedy one, the
/// same tokens as plain greedy decoding, the same values batched as alone, and of the raw
/// logits (a logit bias changes the pick, not the reported distribution).
pub fn logprobs_match_greedy_decoding(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let plain = greedy(backend, SeqId(0), 5);
    fresh(backend, SeqId(0), &p);
    let mut solo = Vec::new();
    for (i, &expected) in plain.iter().enumerate() {
        let top = if i == 0 { 0 } else { 5 };
        let (decoded, logprobs) = backend
            .decode_one_logprobs(SeqId(0), None, top)
            .expect("conformance: decode_one_logprobs must work");
        assert_eq!(
            decoded.token(),
            expected,
            "logprobs change the decoded token"
        );
        check_logprobs(decoded, &logprobs, usize::from(top), top > 0);
        solo.push(logprobs);
    }
    // Batched, next to a plain decode of another sequence.
    fresh(backend, SeqId(0), &p);
    let other = prompt(backend, 1);
    fresh(backend, SeqId(1), &other);
    for (i, alone) in solo.iter().enumerate() {
        let top = if i == 0 { 0 } else { 5 };
        let results = backend
            .step(&[
                (SeqId(1), StepOp::Decode(None)),
                (
                    SeqId(0),
                    StepOp::DecodeLogprobs {
                        sampler: None,
                        top,
                        after_sampling: false,
                    },
                ),
            ])
            .unwrap();
        assert!(results[0].1.logprobs().is_none(), "a plain decode has none");
        let batched = results[1].1.logprobs().expect("a logprobs decode has them");
        assert_eq!(results[1].1.token(), Some(plain[i]));
        assert_eq!(batched.sampled.token, alone.sampled.token);
        assert!((batched.sampled.logprob - alone.sampled.logprob).abs() < 1e-2);
    }
    // A bias that bans the greedy token: another token is picked, the distribution is the
    // model's own.
    fresh(backend, SeqId(0), &p);
    let banned = SamplerOpts {
        logit_bias: vec![(plain[0], f32::NEG_INFINITY)],
        ..SamplerOpts::greedy()
    };
    let sampler = backend.sampler_new(&banned).unwrap();
    let (decoded, logprobs) = backend
        .decode_one_logprobs(SeqId(0), Some(sampler), 3)
        .unwrap();
    assert_ne!(decoded.token(), plain[0]);
    check_logprobs(decoded, &logprobs, 3, false);
    assert_eq!(
        logprobs.top[0].token, plain[0],
        "the bias is not in the logprobs"
    );
    assert!(logprobs.sampled.logprob <= logprobs.top[0].logprob);
    assert!(
        (logprobs.top[0].logprob - solo[0].sampled.logprob).abs() < 1e-2,
        "the same position has the same distribution"
    );
    backend.sampler_free(sampler).unwrap();
}

/// Log-probabilities after sampling: the distribution the sampler drew from. A banned token is
/// not in it, a greedy pick is its top, and a top-k draw's candidates are at most k and hold
/// all of its mass.
pub fn sampled_logprobs_follow_the_sampler(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let plain = greedy(backend, SeqId(0), 1);
    let after = |backend: &mut dyn Backend, sampler, top| {
        let op = StepOp::DecodeLogprobs {
            sampler: Some(sampler),
            top,
            after_sampling: true,
        };
        let results = backend.step(&[(SeqId(0), op)]).unwrap();
        let decoded = results[0].1.decoded().expect("a decode has a token");
        (decoded, results[0].1.logprobs().expect("logprobs").clone())
    };

    fresh(backend, SeqId(0), &p);
    let banned = SamplerOpts {
        logit_bias: vec![(plain[0], f32::NEG_INFINITY)],
        ..SamplerOpts::greedy()
    };
    let sampler = backend.sampler_new(&banned).unwrap();
    let (decoded, logprobs) = after(backend, sampler, 5);
    check_logprobs(decoded, &logprobs, 5, true);
    assert!(
        logprobs.top.iter().all(|t| t.token != plain[0]),
        "a banned token has no chance after sampling: {:?}",
        logprobs.top
    );
    backend.sampler_free(sampler).unwrap();

    fresh(backend, SeqId(0), &p);
    let top_k = SamplerOpts {
        temperature: 1.0,
        top_k: 3,
        top_p: 1.0,
        min_p: 0.0,
        seed: 7,
        ..SamplerOpts::greedy()
    };
    let sampler = backend.sampler_new(&top_k).unwrap();
    let (decoded, logprobs) = after(backend, sampler, 10);
    assert!(
        (1..=3).contains(&logprobs.top.len()),
        "a top-3 draw has at most 3 candidates: {:?}",
        logprobs.top
    );
    assert!(logprobs.top.iter().any(|t| t.token == decoded.token()));
    let mass: f64 = logprobs
        .top
        .iter()
        .map(|t| f64::from(t.logprob).exp())
        .sum();
    assert!((mass - 1.0).abs() < 1e-3, "the candidates hold {mass}");
    assert!(logprobs.sampled.logprob > f32::NEG_INFINITY);
    backend.sampler_free(sampler).unwrap();
}

/// `kv_pack` then `kv_unpack` into another sequence continues exactly as the original.
pub fn kv_pack_unpack_continues_exactly(backend: &mut dyn Backend) {
    let p = prompt(backend, 1);
    fresh(backend, SeqId(0), &p);
    greedy(backend, SeqId(0), 3);
    let snapshot = backend.kv_pack(SeqId(0)).unwrap();
    let history = backend.seq_tokens(SeqId(0)).unwrap();
    let expected = greedy(backend, SeqId(0), 5);

    backend.seq_rm(SeqId(2)).unwrap();
    backend.kv_unpack(SeqId(2), &snapshot).unwrap();
    assert_eq!(backend.seq_tokens(SeqId(2)).unwrap(), history);
    assert_eq!(
        greedy(backend, SeqId(2), 5),
        expected,
        "restored sequence diverged"
    );

    backend.kv_unpack(SeqId(0), &snapshot).unwrap();
    assert_eq!(
        greedy(backend, SeqId(0), 5),
        expected,
        "restoring over a live sequence diverged"
    );
}

/// A corrupt or foreign snapshot is rejected, never trusted.
pub fn kv_unpack_rejects_bad_snapshots(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let snapshot = backend.kv_pack(SeqId(0)).unwrap();
    let mut corrupt = snapshot.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0xff;
    for bad in [
        &snapshot[..snapshot.len() / 2],
        &corrupt[..],
        b"garbage".as_slice(),
        &[],
    ] {
        let err = backend.kv_unpack(SeqId(1), bad).unwrap_err();
        assert!(
            matches!(err, BackendError::InvalidSnapshot { .. }),
            "expected InvalidSnapshot, got {err}"
        );
    }
    backend.kv_unpack(SeqId(1), &snapshot).unwrap();
    assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), p);
}

/// Removing the last tokens and decoding again reproduces them.
pub fn seq_rm_last_then_redecode_reproduces(backend: &mut dyn Backend) {
    let p = prompt(backend, 2);
    fresh(backend, SeqId(0), &p);
    let tokens = greedy(backend, SeqId(0), 6);
    backend.seq_rm_last(SeqId(0), 3).unwrap();
    let mut history = p.clone();
    history.extend(&tokens[..3]);
    assert_eq!(backend.seq_tokens(SeqId(0)).unwrap(), history);
    assert_eq!(greedy(backend, SeqId(0), 3), tokens[3..]);
    backend.seq_rm_last(SeqId(0), usize::MAX).unwrap();
    assert!(backend.seq_tokens(SeqId(0)).unwrap().is_empty());
}

/// `seq_copy` shares a prefix without recomputing it, and the copy decodes like the source.
pub fn seq_copy_shares_a_prefix(backend: &mut dyn Backend) {
    let p = prompt(backend, 3);
    fresh(backend, SeqId(0), &p);
    let expected = greedy(backend, SeqId(0), 4);
    backend.seq_rm(SeqId(3)).unwrap();
    backend.seq_copy(SeqId(0), SeqId(3), p.len()).unwrap();
    assert_eq!(backend.seq_tokens(SeqId(3)).unwrap(), p);
    assert_eq!(greedy(backend, SeqId(3), 4), expected);
    assert!(backend.seq_copy(SeqId(0), SeqId(3), 10_000).is_err());
}

/// `verify` accepts a greedy continuation fully and rejects a wrong candidate at its index.
pub fn verify_accepts_greedy_and_rejects_wrong(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let g = greedy(backend, SeqId(0), 5);

    fresh(backend, SeqId(1), &p);
    let v = backend.verify(SeqId(1), &g[..4]).unwrap();
    assert_eq!(
        v.accepted, 4,
        "a greedy continuation must be accepted fully"
    );
    assert_eq!(v.next.token(), g[4]);
    let mut history = p.clone();
    history.extend(&g);
    assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), history);

    let n_vocab = backend.info().n_vocab;
    let mut wrong = g[..4].to_vec();
    wrong[2] = TokenId((g[2].0 + 1) % n_vocab);
    fresh(backend, SeqId(1), &p);
    let v = backend.verify(SeqId(1), &wrong).unwrap();
    assert_eq!(
        v.accepted, 2,
        "the wrong candidate at index 2 must stop acceptance"
    );
    assert_eq!(v.next.token(), g[2], "the model's own token replaces it");
    let mut history = p.clone();
    history.extend(&g[..3]);
    assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), history);
    assert_eq!(
        greedy(backend, SeqId(1), 2),
        g[3..5],
        "decoding goes on after verify"
    );
}

/// [`Backend::logits`] gives each position's distribution: its argmax is the greedy token
/// there, the last row's is the next token, and decoding goes on after it.
pub fn logits_follow_greedy_decoding(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let g = greedy(backend, SeqId(0), 4);
    let n_vocab = backend.info().n_vocab as usize;
    let argmax = |row: &[f32]| {
        let best = row
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
            .expect("a row");
        TokenId(u32::try_from(best).expect("a token id"))
    };
    backend
        .seq_rm(SeqId(1))
        .expect("conformance: seq_rm must work");
    let mut rows = Vec::new();
    let mut input = p.clone();
    input.extend(&g[..2]);
    backend
        .logits(SeqId(1), &input, &mut |row| {
            assert_eq!(row.len(), n_vocab, "a row per vocabulary entry");
            rows.push(argmax(row));
        })
        .expect("conformance: logits must work");
    assert_eq!(
        rows.len(),
        input.len(),
        "one row per token of a fresh sequence"
    );
    assert_eq!(
        rows[p.len() - 1..],
        g[..3],
        "each row's argmax is the greedy token"
    );
    // A sequence that held tokens first: the pending one's row comes first.
    let mut more = Vec::new();
    backend
        .logits(SeqId(1), &g[2..3], &mut |row| more.push(argmax(row)))
        .expect("conformance: logits must work");
    assert_eq!(more, g[2..4]);
    assert_eq!(
        greedy(backend, SeqId(1), 1)[0],
        g[3],
        "decoding goes on after it"
    );
    assert!(backend.logits(SeqId(1), &[], &mut |_| {}).is_err());
}

/// [`StepOp::Verify`] inside a batched step, beside other sequences' decodes and prefills:
/// each sequence gets what it gets alone (the verifying one the greedy tokens it accepted, then
/// the model's own), and decoding goes on after it as after plain decoding.
pub fn verify_inside_step_matches_plain_decoding(backend: &mut dyn Backend) {
    let p = prompt(backend, 0);
    let q = prompt(backend, 1);
    fresh(backend, SeqId(0), &p);
    let g = greedy(backend, SeqId(0), 7);
    fresh(backend, SeqId(2), &q);
    let solo = greedy(backend, SeqId(2), 2);

    let n_vocab = backend.info().n_vocab;
    let mut wrong = g[..5].to_vec();
    wrong[3] = TokenId((g[3].0 + 1) % n_vocab);
    for (candidates, accepted) in [(g[..5].to_vec(), 5), (wrong, 3)] {
        fresh(backend, SeqId(1), &p);
        fresh(backend, SeqId(2), &q);
        backend.seq_rm(SeqId(3)).unwrap();
        let results = backend
            .step(&[
                (SeqId(2), StepOp::Decode(None)),
                (SeqId(1), StepOp::Verify(candidates)),
                (SeqId(3), StepOp::Prefill(q.clone())),
            ])
            .unwrap();
        assert_eq!(results[0].1.token(), Some(solo[0]), "the other decode");
        assert_eq!(results[2].1, StepResult::Prefilled);
        let tokens: Vec<TokenId> = results[1]
            .1
            .each()
            .iter()
            .map(|r| r.token().expect("a token"))
            .collect();
        assert_eq!(
            tokens,
            g[..=accepted],
            "the accepted candidates, then the model's own token"
        );
        let mut history = p.clone();
        history.extend(&g[..=accepted]);
        assert_eq!(backend.seq_tokens(SeqId(1)).unwrap(), history);
        assert_eq!(
            greedy(backend, SeqId(1), 6 - accepted),
            g[accepted + 1..],
            "decoding goes on after a verify in a step"
        );
        assert_eq!(greedy(backend, SeqId(2), 1), solo[1..]);
    }
    fresh(backend, SeqId(1), &p);
    assert!(
        backend
            .step(&[(SeqId(1), StepOp::Verify(Vec::new()))])
            .is_err(),
        "a verify without candidates is refused"
    );
}

/// A seeded sampler draws the same tokens for the same seed.
pub fn seeded_sampling_is_reproducible(backend: &mut dyn Backend) {
    let opts = SamplerOpts {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.02,
        repetition_penalty: 1.1,
        seed: 42,
        ..SamplerOpts::default()
    };
    let p = prompt(backend, 1);
    let sampler = backend.sampler_new(&opts).unwrap();
    let mut runs = Vec::new();
    for _ in 0..2 {
        fresh(backend, SeqId(0), &p);
        backend.sampler_clear(sampler).unwrap();
        let tokens: Vec<TokenId> = (0..8)
            .map(|_| backend.decode_one(SeqId(0), Some(sampler)).unwrap().token())
            .collect();
        runs.push(tokens);
    }
    assert_eq!(runs[0], runs[1], "same seed, different tokens");
    backend.sampler_free(sampler).unwrap();
    assert!(matches!(
        backend.decode_one(SeqId(0), Some(sampler)),
        Err(BackendError::UnknownSampler(_))
    ));
}

/// A grammar restricts the output to its language, and ends generation when complete.
pub fn grammar_constrains_output(backend: &mut dyn Backend) {
    let grammar = Grammar::Gbnf(r#"root ::= "yes" | "no""#.to_owned());
    let sampler = backend
        .sampler_new(&SamplerOpts {
            grammar: Some(grammar),
            ..SamplerOpts::default()
        })
        .unwrap();
    let p = prompt(backend, 0);
    fresh(backend, SeqId(0), &p);
    let mut out = Vec::new();
    for _ in 0..8 {
        match backend.decode_one(SeqId(0), Some(sampler)).unwrap() {
            Decoded::Token(t) => out.push(t),
            Decoded::Eog(_) => break,
        }
    }
    let text = String::from_utf8(backend.detokenize(&out).unwrap()).unwrap();
    assert!(
        text == "yes" || text == "no",
        "grammar output {text:?} is not in the language"
    );
    let bad = backend.set_grammar(sampler, Some(&Grammar::Gbnf("root ::= (".to_owned())));
    assert!(matches!(bad, Err(BackendError::Grammar { .. })), "{bad:?}");
    let bad = backend.sampler_new(&SamplerOpts {
        grammar: Some(Grammar::Gbnf("this is not a grammar".to_owned())),
        ..SamplerOpts::default()
    });
    assert!(matches!(bad, Err(BackendError::Grammar { .. })), "{bad:?}");
}

/// Bad input is an error, never a panic or an abort.
pub fn bad_input_is_an_error(backend: &mut dyn Backend) {
    let info = backend.info().clone();
    let unknown = SeqId(info.n_seq_max);
    let p = prompt(backend, 0);
    assert!(matches!(
        backend.prefill(unknown, &p),
        Err(BackendError::UnknownSequence { .. })
    ));
    assert!(matches!(
        backend.decode_one(unknown, None),
        Err(BackendError::UnknownSequence { .. })
    ));
    assert!(backend.kv_pack(unknown).is_err());
    assert!(backend.seq_tokens(unknown).is_err());
    assert!(matches!(
        backend.prefill(SeqId(0), &[TokenId(info.n_vocab)]),
        Err(BackendError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        backend.detokenize(&[TokenId(u32::MAX)]),
        Err(BackendError::TokenOutOfRange { .. })
    ));
    assert!(matches!(
        backend.prefill(SeqId(0), &[]),
        Err(BackendError::EmptyInput { .. })
    ));
    backend.seq_rm(SeqId(0)).unwrap();
    assert!(matches!(
        backend.decode_one(SeqId(0), None),
        Err(BackendError::EmptyInput { .. })
    ));
    assert!(matches!(
        backend.verify(SeqId(0), &[]),
        Err(BackendError::EmptyInput { .. })
    ));
    let too_long = vec![p[0]; info.n_ctx as usize + 1];
    assert!(matches!(
        backend.prefill(SeqId(0), &too_long),
        Err(BackendError::ContextFull { .. })
    ));
    assert!(backend.seq_tokens(SeqId(0)).unwrap().is_empty());
    assert!(matches!(
        backend.load_adapter(std::path::Path::new("/nonexistent/adapter.gguf")),
        Err(BackendError::Adapter { .. })
    ));
    assert!(matches!(
        backend.embed(&[]),
        Err(BackendError::EmptyInput { .. })
    ));
    // The backend still works after all of that.
    fresh(backend, SeqId(0), &p);
    greedy(backend, SeqId(0), 1);
}

/// Embeddings are deterministic, normalised, of the model's width, and tell texts apart.
pub fn embeddings_are_normalised(backend: &mut dyn Backend) {
    let n_embd = backend.info().n_embd as usize;
    let a = prompt(backend, 0);
    let b = prompt(backend, 1);
    let ea = backend.embed(&a).unwrap();
    assert_eq!(ea.len(), n_embd);
    let norm: f32 = ea.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-3, "norm {norm}");
    assert_eq!(backend.embed(&a).unwrap(), ea);
    assert_ne!(backend.embed(&b).unwrap(), ea);
}

/// Metadata is consistent.
pub fn metadata_is_consistent(backend: &mut dyn Backend) {
    let info = backend.info().clone();
    assert!(info.n_vocab > 0 && info.n_ctx > 0 && info.n_layer > 0 && info.n_embd > 0);
    assert!(info.n_seq_max >= 4, "the suite needs n_seq_max >= 4");
    assert!(!info.special.eog.is_empty(), "no end-of-generation token");
    assert!(
        info.special.control.windows(2).all(|w| w[0] < w[1]),
        "control tokens must be sorted and unique"
    );
    for t in info.special.eog.iter().chain(&info.special.control) {
        assert!(t.0 < info.n_vocab);
    }
}

/// Generates one `#[test]` per conformance check, each on a fresh backend from `$make`.
#[macro_export]
macro_rules! backend_conformance {
    ($make:path) => {
        $crate::backend_conformance!(@tests $make;
            tokenize_round_trips,
            special_false_never_yields_control_tokens,
            greedy_decode_is_deterministic,
            step_matches_solo_decoding,
            step_mixes_prefill_and_decode,
            logprobs_match_greedy_decoding,
            sampled_logprobs_follow_the_sampler,
            kv_pack_unpack_continues_exactly,
            kv_unpack_rejects_bad_snapshots,
            seq_rm_last_then_redecode_reproduces,
            seq_copy_shares_a_prefix,
            verify_accepts_greedy_and_rejects_wrong,
            verify_inside_step_matches_plain_decoding,
            logits_follow_greedy_decoding,
            seeded_sampling_is_reproducible,
            grammar_constrains_output,
            bad_input_is_an_error,
            embeddings_are_normalised,
            metadata_is_consistent
        );
    };
    (@tests $make:path; $($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                let mut backend = $make();
                $crate::conformance::$check(&mut backend);
            }
        )*
    };
}
