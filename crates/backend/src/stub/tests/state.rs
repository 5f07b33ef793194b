//! Sequence state through the trait: context limits, bad input, snapshots, verify, steps.

use wick_types::{Grammar, SamplerOpts, SeqId, TokenId};

use super::{generate, never_ending, prompt, stub, S0, S1};
use crate::{Backend, BackendConfig, BackendError, StepOp, StepResult, StubBackend};

#[test]
fn context_window_is_enforced_and_errors_change_nothing() {
    let mut b = stub(); // n_ctx = 64
    let err = b.prefill(S0, &[TokenId(40); 65]).unwrap_err();
    assert!(matches!(
        err,
        BackendError::ContextFull {
            needed: 65,
            n_ctx: 64,
            ..
        }
    ));
    assert!(b.seq_tokens(S0).unwrap().is_empty());
    b.prefill(S0, &[TokenId(40); 60]).unwrap();
    assert!(matches!(
        b.prefill(S0, &[TokenId(41); 5]),
        Err(BackendError::ContextFull { needed: 65, .. })
    ));
    assert_eq!(b.seq_tokens(S0).unwrap().len(), 60);
    let s = b.sampler_new(&never_ending()).unwrap();
    for _ in 0..4 {
        b.decode_one(S0, Some(s)).unwrap();
    }
    let full = b.seq_tokens(S0).unwrap();
    assert_eq!(full.len(), 64);
    assert!(matches!(
        b.decode_one(S0, None),
        Err(BackendError::ContextFull { needed: 65, .. })
    ));
    assert!(matches!(
        b.verify(S0, &[TokenId(9)]),
        Err(BackendError::ContextFull { .. })
    ));
    assert_eq!(b.seq_tokens(S0).unwrap(), full);
}

#[test]
fn unknown_sequences_are_errors_for_every_operation() {
    let mut b = stub(); // n_seq_max = 4
    let bad = SeqId(4);
    let unknown = |r: crate::Result<()>| {
        matches!(
            r,
            Err(BackendError::UnknownSequence {
                seq: SeqId(4),
                n_seq_max: 4
            })
        )
    };
    assert!(unknown(b.prefill(bad, &[TokenId(9)])));
    assert!(unknown(b.decode_one(bad, None).map(drop)));
    assert!(unknown(b.seq_tokens(bad).map(drop)));
    assert!(unknown(b.kv_pack(bad).map(drop)));
    assert!(unknown(b.kv_unpack(bad, &[])));
    assert!(unknown(b.verify(bad, &[TokenId(9)]).map(drop)));
    assert!(unknown(b.seq_rm(bad)));
    assert!(unknown(b.seq_rm_last(bad, 1)));
    assert!(unknown(b.seq_copy(S0, bad, 0)));
    assert!(unknown(b.seq_copy(bad, S0, 0)));
    assert!(unknown(b.thinking_signature(bad).map(drop)));
    assert!(unknown(
        b.step(&[(bad, StepOp::Prefill(vec![TokenId(9)]))])
            .map(drop)
    ));
    assert!(matches!(
        b.seq_tokens(SeqId(u32::MAX)),
        Err(BackendError::UnknownSequence {
            seq: SeqId(u32::MAX),
            ..
        })
    ));
}

#[test]
fn out_of_range_and_empty_input_are_errors() {
    let mut b = stub();
    let n = b.info().n_vocab;
    let oob = |r: crate::Result<()>| matches!(r, Err(BackendError::TokenOutOfRange { token, n_vocab }) if token.0 >= n && n_vocab == n);
    assert!(oob(b.prefill(S0, &[TokenId(5), TokenId(n)])));
    assert!(oob(b.detokenize(&[TokenId(u32::MAX)]).map(drop)));
    assert!(oob(b.embed(&[TokenId(n)]).map(drop)));
    let bias = SamplerOpts {
        logit_bias: vec![(TokenId(n), 1.0)],
        ..SamplerOpts::greedy()
    };
    assert!(oob(b.sampler_new(&bias).map(drop)));
    assert!(b.seq_tokens(S0).unwrap().is_empty());
    b.prefill(S0, &[TokenId(9)]).unwrap();
    assert!(oob(b.verify(S0, &[TokenId(n + 7)]).map(drop)));

    let empty = |r: crate::Result<()>| matches!(r, Err(BackendError::EmptyInput { .. }));
    assert!(empty(b.prefill(S0, &[])));
    assert!(empty(b.decode_one(S1, None).map(drop)));
    assert!(empty(b.verify(S0, &[]).map(drop)));
    assert!(empty(b.verify(S1, &[TokenId(9)]).map(drop)));
    assert!(empty(b.embed(&[]).map(drop)));
    assert_eq!(b.seq_tokens(S0).unwrap(), [TokenId(9)]);
}

#[test]
fn snapshots_round_trip_and_corruption_is_rejected() {
    let mut b = stub();
    b.prefill(S0, &prompt(&b, "<|im_start|>user\nsnap<|im_end|>"))
        .unwrap();
    let packed = b.kv_pack(S0).unwrap();
    b.kv_unpack(S1, &packed).unwrap();
    assert_eq!(b.seq_tokens(S1).unwrap(), b.seq_tokens(S0).unwrap());
    assert_eq!(
        generate(&mut b, S0, None, 10),
        generate(&mut b, S1, None, 10)
    );

    // Into another backend with the same layout.
    let mut other = stub();
    other.kv_unpack(SeqId(3), &packed).unwrap();
    assert_eq!(
        other.seq_tokens(SeqId(3)).unwrap(),
        prompt(&b, "<|im_start|>user\nsnap<|im_end|>")
    );

    let mut corrupt = packed.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 1;
    for bad in [&corrupt[..], &packed[..packed.len() - 1], b"junk", &[]] {
        b.prefill(S1, &[TokenId(9)]).unwrap();
        let err = b.kv_unpack(S1, bad).unwrap_err();
        assert!(
            matches!(err, BackendError::InvalidSnapshot { .. }),
            "{err:?}"
        );
        assert!(
            b.seq_tokens(S1).unwrap().is_empty(),
            "left empty after a bad snapshot"
        );
    }

    let mut wide = StubBackend::new(&BackendConfig::new("x").with_n_ctx(128)).unwrap();
    let err = wide.kv_unpack(S0, &packed).unwrap_err();
    assert!(err.to_string().contains("n_ctx=64"), "{err}");

    // A well-formed snapshot of ids outside the vocabulary is rejected too.
    let n = b.info().n_vocab;
    let forged =
        crate::snapshot::encode(&format!("stub:v1:n_vocab={n}:n_ctx=64"), &[TokenId(n)], &[]);
    assert!(matches!(
        b.kv_unpack(S1, &forged),
        Err(BackendError::InvalidSnapshot { .. })
    ));
    let empty = b.kv_pack(SeqId(2)).unwrap();
    b.kv_unpack(S0, &empty).unwrap();
    assert!(b.seq_tokens(S0).unwrap().is_empty());
}

#[test]
fn verify_accepts_the_greedy_prefix_and_appends_the_next_token() {
    let mut b = stub();
    let p = prompt(&b, "Speculate about this");
    b.prefill(S0, &p).unwrap();
    let g = generate(&mut b, S0, None, 5);
    assert!(
        g.len() == 5 && g.iter().all(|t| !b.info().special.is_eog(*t)),
        "this prompt's greedy continuation has no early EOG: {g:?}"
    );
    let wrong = |t: TokenId| TokenId(if t.0 == 100 { 101 } else { 100 });
    let check = |b: &mut StubBackend, cands: &[TokenId], accepted: usize| {
        b.seq_rm(S1).unwrap();
        b.prefill(S1, &p).unwrap();
        let v = b.verify(S1, cands).unwrap();
        assert_eq!(v.accepted, accepted, "{cands:?}");
        // The next token is what greedy decoding gives after the accepted candidates.
        b.seq_copy(S1, SeqId(2), p.len() + accepted).unwrap();
        assert_eq!(v.next, b.decode_one(SeqId(2), None).unwrap());
        let mut expected = p.clone();
        expected.extend_from_slice(&cands[..accepted]);
        expected.push(v.next.token());
        assert_eq!(b.seq_tokens(S1).unwrap(), expected);
    };
    check(&mut b, &[g[0], g[1], wrong(g[2]), g[3]], 2);
    check(&mut b, &[wrong(g[0])], 0);
    check(&mut b, &g[..4], 4);
    assert_eq!(
        b.seq_tokens(S1).unwrap()[p.len()..],
        g,
        "all accepted: next is g[4]"
    );
    check(&mut b, &[g[0], wrong(g[1])], 1);
}

#[test]
fn step_batches_match_one_at_a_time_and_classify_thinking() {
    let mut batched = stub();
    let mut single = stub();
    let p0 = prompt(&batched, "<|im_start|>assistant\n<think>");
    let p1 = prompt(&batched, "plain");
    let results = batched
        .step(&[
            (S0, StepOp::Prefill(p0.clone())),
            (S1, StepOp::Prefill(p1.clone())),
        ])
        .unwrap();
    assert_eq!(
        results,
        [(S0, StepResult::Prefilled), (S1, StepResult::Prefilled)]
    );
    single.prefill(S0, &p0).unwrap();
    single.prefill(S1, &p1).unwrap();
    for _ in 0..5 {
        let r = batched
            .step(&[(S1, StepOp::Decode(None)), (S0, StepOp::Decode(None))])
            .unwrap();
        let t1 = single.decode_one(S1, None).unwrap();
        let t0 = single.decode_one(S0, None).unwrap();
        assert_eq!(r[0], (S1, StepResult::Token(t1)));
        assert_eq!(
            r[1],
            (S0, StepResult::ThinkingToken(t0.token())),
            "inside <think>"
        );
    }
    assert_eq!(
        batched.seq_tokens(S0).unwrap(),
        single.seq_tokens(S0).unwrap()
    );

    // The closing token is reported as such.
    let s = batched
        .sampler_new(&SamplerOpts {
            logit_bias: vec![(TokenId(4), 1000.0)],
            ..SamplerOpts::greedy()
        })
        .unwrap();
    let r = batched.step(&[(S0, StepOp::Decode(Some(s)))]).unwrap();
    assert_eq!(r, [(S0, StepResult::ThinkingEnd(TokenId(4)))]);
    assert_eq!(batched.thinking_signature(S0).unwrap().len(), 64);
}

#[test]
fn a_bad_step_changes_nothing() {
    let mut b = stub();
    b.prefill(S0, &[TokenId(9)]).unwrap();
    let before = |b: &StubBackend| (b.seq_tokens(S0).unwrap(), b.seq_tokens(S1).unwrap());
    let start = before(&b);
    for ops in [
        vec![(S0, StepOp::Decode(None)), (S0, StepOp::Decode(None))],
        vec![
            (S1, StepOp::Prefill(vec![TokenId(9)])),
            (S1, StepOp::Decode(None)),
        ],
        vec![(S0, StepOp::Decode(None)), (S1, StepOp::Prefill(vec![]))],
        vec![(S0, StepOp::Decode(None)), (S1, StepOp::Decode(None))],
        vec![
            (S1, StepOp::Prefill(vec![TokenId(9)])),
            (S0, StepOp::Prefill(vec![TokenId(9); 64])),
        ],
        vec![(S0, StepOp::Decode(None)), (SeqId(9), StepOp::Decode(None))],
    ] {
        assert!(b.step(&ops).is_err(), "{ops:?}");
        assert_eq!(before(&b), start, "{ops:?}");
    }
    let twice = [
        (S1, StepOp::Prefill(vec![TokenId(9)])),
        (S1, StepOp::Prefill(vec![TokenId(9)])),
    ];
    assert!(matches!(
        b.step(&twice),
        Err(BackendError::DuplicateSequence { seq: S1 })
    ));
    assert_eq!(before(&b), start);
    assert!(b.step(&[]).unwrap().is_empty());

    // A sampler that finds no allowed token fails the step after sampling others: still nothing
    // changes, neither sequences nor the other sampler's random stream.
    let hot = SamplerOpts {
        temperature: 1.0,
        seed: 3,
        ..SamplerOpts::greedy()
    };
    let s = b.sampler_new(&hot).unwrap();
    let stuck = b
        .sampler_new(&SamplerOpts {
            grammar: Some(Grammar::Gbnf(r#"root ::= "a""#.to_owned())),
            logit_bias: vec![(TokenId(7 + u32::from(b'a')), f32::NEG_INFINITY)],
            ..SamplerOpts::greedy()
        })
        .unwrap();
    b.prefill(S1, &[TokenId(10)]).unwrap();
    let start = before(&b);
    let ops = [
        (S0, StepOp::Decode(Some(s))),
        (S1, StepOp::Decode(Some(stuck))),
    ];
    assert!(matches!(b.step(&ops), Err(BackendError::Grammar { .. })));
    assert_eq!(before(&b), start);
    let fresh = b.sampler_new(&hot).unwrap();
    let t = b.decode_one(S0, Some(s)).unwrap();
    b.seq_rm_last(S0, 1).unwrap();
    assert_eq!(b.decode_one(S0, Some(fresh)).unwrap(), t);
}

#[test]
fn sequence_editing() {
    let mut b = stub();
    let p = prompt(&b, "one two three four");
    b.prefill(S0, &p).unwrap();
    b.seq_rm_last(S0, 2).unwrap();
    assert_eq!(b.seq_tokens(S0).unwrap(), p[..p.len() - 2]);
    b.seq_rm_last(S0, 1000).unwrap();
    assert!(b.seq_tokens(S0).unwrap().is_empty());

    b.prefill(S0, &p).unwrap();
    b.seq_copy(S0, S1, 3).unwrap();
    assert_eq!(b.seq_tokens(S1).unwrap(), p[..3]);
    assert!(b.seq_copy(S0, S1, p.len() + 1).is_err());
    assert_eq!(
        b.seq_tokens(S1).unwrap(),
        p[..3],
        "a failed copy changes nothing"
    );
    b.seq_copy(S0, S1, p.len()).unwrap();
    assert_eq!(generate(&mut b, S0, None, 8), generate(&mut b, S1, None, 8));
    b.seq_copy(S0, S0, 2).unwrap();
    assert_eq!(b.seq_tokens(S0).unwrap(), p[..2]);

    b.seq_rm(S0).unwrap();
    assert!(b.seq_tokens(S0).unwrap().is_empty());
    assert!(!b.seq_tokens(S1).unwrap().is_empty());
    b.prefill(SeqId(3), &p).unwrap();
    b.seq_clear().unwrap();
    for i in 0..4 {
        assert!(b.seq_tokens(SeqId(i)).unwrap().is_empty());
    }
}
