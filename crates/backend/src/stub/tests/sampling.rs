//! Samplers, grammars and EOG through the trait.

use wick_types::{Grammar, SamplerOpts, TokenId};

use super::{generate, prompt, stub, text, S0, S1};
use crate::{Backend, BackendError, Decoded, StepOp};

#[test]
fn samplers_are_seeded_and_resettable() {
    let mut b = stub();
    let p = prompt(&b, "Once upon a time");
    let hot = |seed| SamplerOpts {
        temperature: 1.5,
        seed,
        ..SamplerOpts::greedy()
    };
    let mut run = |seed| {
        let s = b.sampler_new(&hot(seed)).unwrap();
        b.seq_rm(S0).unwrap();
        b.prefill(S0, &p).unwrap();
        let ban_eog = SamplerOpts {
            logit_bias: vec![
                (TokenId(0), f32::NEG_INFINITY),
                (TokenId(2), f32::NEG_INFINITY),
            ],
            ..hot(seed)
        };
        b.sampler_configure(s, &ban_eog).unwrap();
        let first = generate(&mut b, S0, Some(s), 24);
        b.seq_rm_last(S0, first.len()).unwrap();
        b.sampler_clear(s).unwrap();
        let again = generate(&mut b, S0, Some(s), 24);
        b.sampler_free(s).unwrap();
        assert_eq!(first, again, "sampler_clear resets the random stream");
        assert_eq!(first.len(), 24, "EOG is banned");
        first
    };
    let seven = run(7);
    assert_eq!(run(7), seven);
    assert_ne!(run(8), seven);
}

#[test]
fn sampler_ids_are_checked() {
    let mut b = stub();
    b.prefill(S0, &[TokenId(100)]).unwrap();
    let s = b.sampler_new(&SamplerOpts::greedy()).unwrap();
    let t = b.sampler_new(&SamplerOpts::greedy()).unwrap();
    assert_ne!(s, t);
    b.sampler_free(s).unwrap();
    let unknown =
        |r: crate::Result<()>| matches!(r, Err(BackendError::UnknownSampler(id)) if id == s.0);
    assert!(matches!(
        b.decode_one(S0, Some(s)),
        Err(BackendError::UnknownSampler(_))
    ));
    assert!(unknown(b.sampler_free(s)));
    assert!(unknown(b.sampler_clear(s)));
    assert!(unknown(b.sampler_configure(s, &SamplerOpts::greedy())));
    assert!(unknown(b.set_grammar(s, None)));
    assert!(b.step(&[(S0, StepOp::Decode(Some(s)))]).is_err());
    assert_eq!(
        b.seq_tokens(S0).unwrap(),
        [TokenId(100)],
        "failed decodes append nothing"
    );
    assert!(b.decode_one(S0, Some(t)).is_ok());
}

#[test]
fn a_greedy_sampler_equals_no_sampler() {
    let mut b = stub();
    let p = prompt(&b, "Hello");
    b.prefill(S0, &p).unwrap();
    b.prefill(S1, &p).unwrap();
    let s = b.sampler_new(&SamplerOpts::greedy()).unwrap();
    assert_eq!(
        generate(&mut b, S0, None, 16),
        generate(&mut b, S1, Some(s), 16)
    );
}

#[test]
fn grammars_constrain_output_to_an_alternative_then_eog() {
    let mut b = stub();
    let alternatives = ["yes", "no", "maybe not", "Hello world"];
    let gbnf = Grammar::Gbnf(r#"root ::= "yes" | "no" | "maybe not" | "Hello world""#.to_owned());
    for seed in 0..12 {
        let opts = SamplerOpts {
            temperature: if seed == 0 { 0.0 } else { 2.0 },
            seed,
            ..SamplerOpts::greedy()
        };
        let s = b.sampler_new(&opts).unwrap();
        b.set_grammar(s, Some(&gbnf)).unwrap();
        b.seq_rm(S0).unwrap();
        b.prefill(S0, &prompt(&b, &format!("Question {seed}?")))
            .unwrap();
        let out = generate(&mut b, S0, Some(s), 40);
        let (last, body) = out.split_last().unwrap();
        assert!(b.info().special.is_eog(*last), "ends with EOG: {out:?}");
        let answer = text(&b, body);
        assert!(
            alternatives.contains(&answer.as_str()),
            "seed {seed}: {answer:?}"
        );
        // Once complete, only EOG can follow.
        assert!(b.decode_one(S0, Some(s)).unwrap().is_eog());
    }
}

#[test]
fn grammar_from_opts_and_enum_schema_and_removal() {
    let mut b = stub();
    b.prefill(S0, &prompt(&b, "Pick a colour")).unwrap();
    let schema = Grammar::JsonSchema(r#"{"enum": ["red", "green"]}"#.to_owned());
    let opts = SamplerOpts {
        grammar: Some(schema),
        ..SamplerOpts::greedy()
    };
    let s = b.sampler_new(&opts).unwrap();
    let out = generate(&mut b, S0, Some(s), 20);
    let answer = text(&b, &out[..out.len() - 1]);
    assert!(answer == r#""red""# || answer == r#""green""#, "{answer}");

    b.set_grammar(s, None).unwrap();
    b.seq_rm(S0).unwrap();
    b.prefill(S0, &prompt(&b, "Pick a colour")).unwrap();
    let free = generate(&mut b, S0, Some(s), 20);
    b.seq_rm(S0).unwrap();
    b.prefill(S0, &prompt(&b, "Pick a colour")).unwrap();
    assert_eq!(
        free,
        generate(&mut b, S0, None, 20),
        "no grammar: plain greedy"
    );
}

#[test]
fn bad_grammars_are_rejected_and_change_nothing() {
    let mut b = stub();
    let good = Grammar::Gbnf(r#"root ::= "ok""#.to_owned());
    let s = b.sampler_new(&SamplerOpts::greedy()).unwrap();
    b.set_grammar(s, Some(&good)).unwrap();
    for bad in [
        Grammar::Gbnf(String::new()),
        Grammar::Gbnf(r#"root ::= "unterminated"#.to_owned()),
        Grammar::Gbnf("root ::= item+\nitem ::= [a-z]".to_owned()),
        Grammar::JsonSchema(r#"{"type": "object", "properties": {}}"#.to_owned()),
    ] {
        let err = b.set_grammar(s, Some(&bad)).unwrap_err();
        let BackendError::Grammar { reason } = &err else {
            panic!("{bad:?}: {err:?}");
        };
        assert!(reason.contains("stub backend"), "{reason}");
        let opts = SamplerOpts {
            grammar: Some(bad),
            ..SamplerOpts::greedy()
        };
        assert!(matches!(
            b.sampler_new(&opts),
            Err(BackendError::Grammar { .. })
        ));
    }
    b.prefill(S0, &prompt(&b, "Say ok")).unwrap();
    let out = generate(&mut b, S0, Some(s), 10);
    assert_eq!(
        text(&b, &out[..out.len() - 1]),
        "ok",
        "the good grammar is still set"
    );
}

#[test]
fn eog_tokens_decode_as_eog() {
    let mut b = stub();
    b.prefill(S0, &[TokenId(50)]).unwrap();
    let force = |t: u32| SamplerOpts {
        logit_bias: vec![(TokenId(t), 1000.0)],
        ..SamplerOpts::greedy()
    };
    let s = b.sampler_new(&force(2)).unwrap();
    assert_eq!(b.decode_one(S0, Some(s)).unwrap(), Decoded::Eog(TokenId(2)));
    b.sampler_configure(s, &force(0)).unwrap();
    assert_eq!(b.decode_one(S0, Some(s)).unwrap(), Decoded::Eog(TokenId(0)));
    b.sampler_configure(s, &force(1)).unwrap();
    assert_eq!(
        b.decode_one(S0, Some(s)).unwrap(),
        Decoded::Token(TokenId(1))
    );
    assert_eq!(b.seq_tokens(S0).unwrap(), [50, 2, 0, 1].map(TokenId));
}
