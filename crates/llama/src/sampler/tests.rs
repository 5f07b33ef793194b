//! The constrained pick on the real model, against the old full mask: a chain with the grammar
//! inside, run by llama.cpp's own `llama_sampler_sample`, which masks every token at every step.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use wick_backend::{BackendConfig, BackendError};
use wick_types::{Grammar, SamplerOpts, TokenId};

use llama_cpp_2::token::data::LlamaTokenData;

use super::{argmax, best_allowed, stages, Samplers, Stages};
use crate::eval::{eval, Outputs, Pass};
use crate::vocab::{detokenize, from_llama, to_llama, tokenize};

const PICK: &str = r#"{"type":"object","properties":{"colour":{"enum":["red","green","blue"]},"size":{"type":"integer"}},"required":["colour","size"],"additionalProperties":false}"#;
const PERSON: &str = r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"hobbies":{"type":"array","items":{"type":"string"},"maxItems":3},"married":{"type":"boolean"}},"required":["name","age","hobbies","married"],"additionalProperties":false}"#;

fn config() -> BackendConfig {
    BackendConfig::new(wick_testutil::model_path())
        .with_n_ctx(512)
        .with_n_seq_max(1)
        .with_n_threads(Some(2))
}

/// Runs `test` with the test model and a one-sequence context.
fn with_model(test: impl FnOnce(&LlamaModel, &mut LlamaContext<'_>)) {
    let config = config();
    let model = crate::load::load_model(&config)
        .expect("the test model loads")
        .model;
    let params = crate::load::context_params(&config, 512);
    let mut ctx = model
        .new_context(crate::load::runtime().expect("llama.cpp starts"), params)
        .expect("a context");
    test(&model, &mut ctx);
}

/// Up to `max` tokens after `prompt`, each from `pick`, stopping after an end-of-generation token.
fn generate(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    prompt: &str,
    max: usize,
    mut pick: impl FnMut(&LlamaContext<'_>, i32) -> Result<LlamaToken, BackendError>,
) -> Vec<TokenId> {
    ctx.clear_kv_cache();
    let mut feed: Vec<LlamaToken> = tokenize(model, prompt, false)
        .into_iter()
        .map(to_llama)
        .collect();
    let mut start = 0;
    let mut out = Vec::new();
    while out.len() < max {
        let pass = Pass {
            seq: 0,
            start,
            tokens: feed,
            outputs: Outputs::Last,
        };
        let mut next = None;
        eval(
            ctx,
            512,
            None,
            std::slice::from_ref(&pass),
            |ctx, _, _, idx| {
                next = Some(pick(ctx, idx)?);
                Ok(())
            },
        )
        .expect("the pass evaluates");
        let token = next.expect("one output per pass");
        out.push(from_llama(token));
        if model.vocab().is_eog(token) {
            break;
        }
        start += pass.tokens.len();
        feed = vec![token];
    }
    out
}

/// The pre-split sampler: llama.cpp's order with the grammar inside the chain.
fn full_mask(model: &LlamaModel, opts: &SamplerOpts) -> LlamaSampler {
    let Stages {
        bias,
        grammar,
        rest,
    } = stages(model, opts).expect("valid options");
    LlamaSampler::chain_simple(bias.into_iter().chain(grammar).chain(rest))
}

/// The answer under `opts` twice, with the split sampler and with the full mask.
fn both(
    model: &LlamaModel,
    ctx: &mut LlamaContext<'_>,
    prompt: &str,
    opts: &SamplerOpts,
) -> (Vec<TokenId>, Vec<TokenId>) {
    let mut samplers = Samplers::new();
    let id = samplers.create(model, opts).expect("valid options");
    let fast = generate(model, ctx, prompt, 48, |ctx, idx| {
        samplers.sample(Some(id), ctx, idx)
    });
    let mut reference = full_mask(model, opts);
    let masked = generate(model, ctx, prompt, 48, |ctx, idx| {
        Ok(reference.sample(ctx, idx))
    });

    (fast, masked)
}

/// The tokens of the digits 0 to 9, in that order (one token each in this vocabulary).
fn digit_tokens(model: &LlamaModel) -> Vec<TokenId> {
    (0..=9)
        .map(|d| {
            let tokens = tokenize(model, &d.to_string(), false);
            assert_eq!(tokens.len(), 1, "{d} is one token");
            tokens[0]
        })
        .collect()
}

fn text(model: &LlamaModel, tokens: &[TokenId]) -> String {
    String::from_utf8_lossy(&detokenize(model, tokens)).into_owned()
}

fn constrained(grammar: Grammar) -> SamplerOpts {
    SamplerOpts {
        grammar: Some(grammar),
        ..SamplerOpts::greedy()
    }
}

#[test]
fn greedy_with_a_grammar_picks_what_the_full_mask_picks() {
    let cases = [
        (
            "Describe a fictional person in JSON.",
            constrained(Grammar::JsonSchema(PERSON.to_owned())),
        ),
        (
            "What colour is the sky?",
            constrained(Grammar::Gbnf(
                r#"root ::= "red" | "green" | "blue" | "grey""#.to_owned(),
            )),
        ),
        (
            "How many legs does a spider have?",
            constrained(Grammar::Gbnf(r"root ::= [0-9]+".to_owned())),
        ),
        (
            "List three fruits.",
            SamplerOpts {
                repetition_penalty: 1.3,
                presence_penalty: 0.5,
                logit_bias: vec![(TokenId(28), -2.0), (TokenId(30), 3.0)],
                ..constrained(Grammar::Gbnf(
                    r#"root ::= item ("," " "? item)*
item ::= [a-z]+"#
                        .to_owned(),
                ))
            },
        ),
    ];
    with_model(|model, ctx| {
        // Digits pushed below the head of the ranking: the full mask, not the walk, finds them.
        let digits = digit_tokens(model);
        let buried = SamplerOpts {
            logit_bias: digits.iter().map(|&t| (t, -40.0)).collect(),
            ..constrained(Grammar::Gbnf(r"root ::= [0-9]+".to_owned()))
        };
        let buried = ("How many legs does a spider have?", buried);
        for (prompt, opts) in cases.iter().chain([&buried]) {
            let (fast, masked) = both(model, ctx, prompt, opts);
            assert_eq!(
                fast,
                masked,
                "{prompt:?}: {:?} against {:?}",
                text(model, &fast),
                text(model, &masked)
            );
            let free = generate(model, ctx, prompt, fast.len(), |ctx, idx| {
                Ok(LlamaSampler::greedy().sample(ctx, idx))
            });
            assert_ne!(fast, free, "{prompt:?}: the grammar never had to act");
        }
    });
}

#[test]
fn argmax_picks_what_llama_cpp_s_greedy_sampler_picks() {
    assert_eq!(
        argmax(&[1.0, 3.0, 3.0, -2.0]),
        LlamaToken::new(1),
        "ties: the lowest id"
    );
    assert_eq!(argmax(&[f32::NEG_INFINITY, -5.0]), LlamaToken::new(1));
    with_model(|model, ctx| {
        for prompt in ["The capital of France is", "Write a haiku about rain."] {
            let ours = generate(model, ctx, prompt, 24, |ctx, idx| {
                Ok(argmax(ctx.get_logits_ith(idx)))
            });
            let theirs = generate(model, ctx, prompt, 24, |ctx, idx| {
                Ok(LlamaSampler::greedy().sample(ctx, idx))
            });
            assert_eq!(ours, theirs, "{prompt:?}");
        }
    });
}

#[test]
fn an_end_of_generation_token_the_grammar_does_not_allow_yet_is_rejected() {
    with_model(|model, ctx| {
        let eog = model.vocab().eos();
        let opts = SamplerOpts {
            logit_bias: vec![(from_llama(eog), 100.0)],
            ..constrained(Grammar::Gbnf(r#"root ::= "yes" | "no""#.to_owned()))
        };
        let (fast, masked) = both(model, ctx, "Is water wet?", &opts);
        assert_eq!(fast, masked);
        let (last, answer) = fast.split_last().expect("some tokens");
        assert_eq!(*last, from_llama(eog), "the grammar completes, then ends");
        let answer = text(model, answer);
        assert!(answer == "yes" || answer == "no", "{answer:?}");
    });
}

#[test]
fn a_complete_grammar_ends_generation_even_when_the_chain_wants_more() {
    with_model(|model, ctx| {
        let eog: Vec<_> = crate::vocab::special_tokens(model).eog;
        let opts = SamplerOpts {
            logit_bias: eog.iter().map(|&t| (t, -30.0)).collect(),
            ..constrained(Grammar::Gbnf(r#"root ::= "Paris""#.to_owned()))
        };
        let (fast, masked) = both(model, ctx, "The capital of France is", &opts);
        assert_eq!(fast, masked);
        let (last, answer) = fast.split_last().expect("some tokens");
        assert!(eog.contains(last), "{fast:?} does not end");
        assert_eq!(text(model, answer), "Paris");
    });
}

#[test]
fn draws_follow_the_grammar_and_repeat_after_clear() {
    with_model(|model, ctx| {
        let opts = SamplerOpts {
            temperature: 1.0,
            top_k: 40,
            seed: 7,
            ..constrained(Grammar::JsonSchema(PICK.to_owned()))
        };
        let mut samplers = Samplers::new();
        let id = samplers.create(model, &opts).expect("valid options");
        let mut run = |ctx: &mut LlamaContext<'_>| {
            let out = generate(model, ctx, "A person as JSON:", 96, |ctx, idx| {
                samplers.sample(Some(id), ctx, idx)
            });
            samplers.clear(id).expect("the sampler exists");
            out
        };
        let first = run(ctx);
        assert_eq!(run(ctx), first, "same seed after clear, different tokens");
        let (last, json) = first.split_last().expect("some tokens");
        assert!(
            model.vocab().is_eog(to_llama(*last)),
            "{first:?} does not end"
        );
        let json = text(model, json);
        assert!(
            json.trim_start().starts_with('{') && json.trim_end().ends_with('}'),
            "{json:?}"
        );
    });
}

#[test]
fn a_bias_that_bans_everything_the_grammar_allows_is_an_error() {
    with_model(|model, ctx| {
        let digits = digit_tokens(model);
        let opts = SamplerOpts {
            logit_bias: digits.iter().map(|&t| (t, f32::NEG_INFINITY)).collect(),
            ..constrained(Grammar::Gbnf(r"root ::= [0-9]".to_owned()))
        };
        let mut samplers = Samplers::new();
        let id = samplers.create(model, &opts).expect("valid options");
        let mut error = None;
        generate(model, ctx, "Pick a digit:", 1, |ctx, idx| {
            samplers.sample(Some(id), ctx, idx).or_else(|e| {
                error = Some(e);
                Ok(LlamaToken(0))
            })
        });
        assert!(
            matches!(error, Some(BackendError::Grammar { .. })),
            "{error:?}"
        );
    });
}

#[test]
fn a_greedy_walk_takes_the_best_allowed_token_and_the_lowest_id_on_a_tie() {
    with_model(|model, _| {
        let mut grammar =
            LlamaSampler::grammar(model, "root ::= [0-9]+", "root").expect("a grammar");
        let digits = digit_tokens(model);
        let word = tokenize(model, "Hello", false)[0];
        let n_vocab = model.vocab().n_tokens();
        let mut scored: Vec<LlamaTokenData> = (0..n_vocab)
            .map(|id| LlamaTokenData::new(LlamaToken(id), 0.0, 0.0))
            .collect();
        let mut set = |t: TokenId, logit: f32| scored[t.0 as usize].set_logit(logit);
        set(word, 9.0);
        set(digits[7], 5.0);
        set(digits[3], 5.0);
        set(digits[1], 4.0);
        let best = best_allowed(&mut grammar, &scored, 64).map(from_llama);
        assert_eq!(best, Some(digits[3].min(digits[7])));
        assert_eq!(
            best_allowed(&mut grammar, &scored, 1),
            None,
            "only the word is in a head of one"
        );
    });
}

#[test]
fn a_bias_of_plus_infinity_or_nan_is_refused() {
    for bias in [f32::INFINITY, f32::NAN] {
        let opts = SamplerOpts {
            logit_bias: vec![(TokenId(1), bias)],
            ..SamplerOpts::default()
        };
        assert!(matches!(
            super::check_opts(&opts),
            Err(BackendError::SamplerOption {
                field: "logit_bias",
                ..
            })
        ));
    }
}
