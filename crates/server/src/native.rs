//! llama-server's native completion API: `POST /completion` (and `POST /completions`, which
//! llama-server routes to the same handler): a raw prompt continued, answered in llama-server's
//! own shape (`content`, `tokens`, `stop`, `stop_type`, `timings`, …), whole or streamed as
//! `data:` lines whose last one has `"stop": true`. The request goes through the same checks
//! and pipeline as `POST /v1/completions`.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use wick::{AsyncCompletionStream, CompletionResponse, FinishReason};

use crate::extract::ApiJson;
use crate::metrics::LiveGuard;
use crate::telemetry::Clock;
use crate::wire::{CompletionRequest, Prompt, Stop, WireSampling};
use crate::{sse, ApiError, AppState};

/// `POST /completion`'s body: llama-server's field names.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NativeRequest {
    model: Option<String>,
    prompt: Option<Prompt>,
    /// Tokens to generate; `-1` (llama-server's "until the end"): the server's default.
    n_predict: Option<i64>,
    max_tokens: Option<i64>,
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    seed: Option<i64>,
    stop: Option<Stop>,
    repeat_penalty: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    grammar: Option<String>,
    json_schema: Option<serde_json::Value>,
    /// llama-server's logit bias: `[[token id or text, bias], …]` or `{"id or text": bias}`;
    /// a bias of `false` bans the token, text stands for each of its tokens.
    logit_bias: Option<Value>,
    /// Bans every end-of-generation token: the answer runs to `n_predict`.
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    /// Whether the answer lists its token ids (`tokens`).
    return_tokens: Option<bool>,
    /// The most likely tokens to list at each generated position (0–20), with the sampled
    /// one: `completion_probabilities`.
    n_probs: Option<i64>,
    /// With `n_probs`: list the probabilities of the distribution each token was drawn from
    /// (after the samplers: `prob`, `top_probs`) instead of the model's raw log-probabilities.
    post_sampling_probs: Option<bool>,
    /// A stream reports the prompt's progress (`prompt_progress`) before its first token.
    return_progress: Option<bool>,
    /// Accepted: wick always reuses cached prompt prefixes (they give the cold answer).
    cache_prompt: Option<bool>,
    /// LoRA adapter scales (`[{"id", "scale"}]`; adapters left out are off).
    lora: Option<Value>,
}

impl NativeRequest {
    /// The same request in the OpenAI completion shape, for the one validation.
    fn completion(&self) -> (CompletionRequest, Settings) {
        let n_predict = self
            .n_predict
            .filter(|&n| n >= 0)
            .or(self.max_tokens.filter(|&n| n >= 0));
        let sampling = WireSampling {
            stop: self.stop.clone(),
            max_tokens: n_predict,
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed: self.seed,
            grammar: self.grammar.clone(),
            json_schema: self.json_schema.clone(),
            lora: self.lora.clone(),
            ignore_eos: self.ignore_eos,
            ..WireSampling::default()
        };
        let request = CompletionRequest {
            model: self.model.clone(),
            prompt: self.prompt.clone(),
            sampling,
            echo: None,
            logprobs: None,
            stream: self.stream,
            stream_options: None,
        };
        let settings = Settings {
            n_predict,
            seed: self.seed,
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            stream: self.stream.unwrap_or(false),
            cache_prompt: self.cache_prompt.unwrap_or(true),
        };
        (request, settings)
    }
}

/// llama-server's `logit_bias` as token biases: pairs `[token id or text, bias]` in a list, or
/// an object from token id (or text) to bias; `false` bans (-inf); text is tokenized and each
/// of its tokens gets the bias.
async fn native_bias(
    llm: &wick::Llm,
    value: &Value,
) -> Result<Vec<(wick::TokenId, f32)>, ApiError> {
    let bad = |m: String| ApiError::bad("logit_bias", m);
    let pairs: Vec<(Value, Value)> = match value {
        Value::Array(items) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                Some([key, bias]) => Ok((key.clone(), bias.clone())),
                _ => Err(bad(format!("logit_bias entry {item} is not [token, bias]"))),
            })
            .collect::<Result<_, _>>()?,
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v.clone()))
            .collect(),
        Value::Null => Vec::new(),
        other => {
            return Err(bad(format!(
                "logit_bias {other} is not a list or an object"
            )))
        }
    };
    let n_vocab = llm.model_info().n_vocab;
    let mut out = Vec::new();
    for (key, bias) in pairs {
        #[allow(clippy::cast_possible_truncation)]
        let bias = match &bias {
            Value::Bool(false) => f32::NEG_INFINITY,
            Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => {
                n.as_f64().unwrap_or(0.0) as f32
            }
            other => {
                return Err(bad(format!(
                    "logit_bias bias {other} is not a number or false"
                )))
            }
        };
        let tokens = match &key {
            Value::Number(n) => vec![n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(format!("logit_bias token {n} is not a token id")))?],
            Value::String(s) => match s.parse::<u32>() {
                Ok(id) => vec![id],
                Err(_) => llm.atokenize(s, false).await?.iter().map(|t| t.0).collect(),
            },
            other => {
                return Err(bad(format!(
                    "logit_bias token {other} is not an id or text"
                )))
            }
        };
        for id in tokens {
            if id >= n_vocab {
                return Err(bad(format!(
                    "logit_bias token {id} is out of the vocabulary (0 to {})",
                    n_vocab - 1
                )));
            }
            out.push((wick::TokenId(id), bias));
        }
    }
    Ok(out)
}

/// What the answer echoes back as `generation_settings`.
#[derive(Debug, Clone, Copy)]
struct Settings {
    n_predict: Option<i64>,
    seed: Option<i64>,
    temperature: Option<f64>,
    top_k: Option<i64>,
    top_p: Option<f64>,
    min_p: Option<f64>,
    stream: bool,
    cache_prompt: bool,
}

/// The native completion handler.
pub(crate) async fn handler(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<NativeRequest>,
) -> Result<Response, ApiError> {
    let return_tokens = req.return_tokens.unwrap_or(false);
    let n_probs = match req.n_probs {
        Some(n) if !(0..=20).contains(&n) => {
            return Err(ApiError::bad(
                "n_probs",
                format!("n_probs = {n} is out of range (allowed: 0 to 20)"),
            ))
        }
        Some(n) if n > 0 => u8::try_from(n).ok(),
        _ => None,
    };
    let (request, settings) = req.completion();
    let valid = crate::completions::valid(request, &state.config().sampling)?;
    let served = state.model(valid.model()).await?;
    let mut options = valid.options().clone();
    let mut bias = match &req.logit_bias {
        Some(value) => native_bias(&served.llm, value).await?,
        None => Vec::new(),
    };
    if let Some(sampling) = options.sampling.as_mut() {
        sampling.logit_bias.extend(bias.iter().copied());
    }
    if options.ignore_eos {
        // Banned by the library (`GenerateOptions::ignore_eos`); echoed as llama-server does.
        let eog = &served.llm.model_info().special.eog;
        bias.extend(eog.iter().map(|&t| (t, f32::NEG_INFINITY)));
    }
    // Token ids come with the engine's per-token reports (top 0: no alternatives).
    let streamed = settings.stream;
    if streamed || return_tokens || n_probs.is_some() {
        options.logprobs = Some(n_probs.unwrap_or(0));
    }
    let post_sampling = n_probs.is_some() && req.post_sampling_probs == Some(true);
    options.logprobs_after_sampling = post_sampling;
    options.progress = streamed && req.return_progress == Some(true);
    let n_predict = i64::from(
        options
            .max_tokens
            .unwrap_or_else(|| served.llm.metadata().num_output),
    );
    let answer = Answer {
        model: served.id.clone(),
        settings: Settings {
            n_predict: Some(n_predict),
            ..settings
        },
        n_probs: n_probs.is_some(),
        post_sampling,
        logit_bias: bias,
    };
    let inputs = valid.inputs().to_vec();
    if !streamed {
        let body = whole_bodies(
            &state,
            &served.llm,
            inputs,
            &options,
            &answer,
            return_tokens,
        )
        .await?;
        return Ok(axum::Json(body).into_response());
    }
    let item = crate::completions::only_one(inputs)?;
    let started = crate::completions::start(&state, &served.llm, item, &options).await?;
    let shutdown = state.shutdown_token();
    let run = StreamRun {
        _live: state.metrics().live(),
        state,
        answer,
        stream: started.stream,
        clock: started.clock,
        content: String::new(),
        done: false,
    };
    Ok(sse::response(
        sse::frames(run),
        shutdown,
        crate::error::Dialect::OpenAi,
    ))
}

/// The whole answers to `inputs`, generated side by side: one prompt's object, or a batch's
/// objects in order.
async fn whole_bodies(
    state: &AppState,
    llm: &wick::Llm,
    inputs: Vec<crate::prompts::Item>,
    options: &wick::GenerateOptions,
    answer: &Answer,
    return_tokens: bool,
) -> Result<Value, ApiError> {
    let mut bodies = futures_util::future::try_join_all(inputs.into_iter().map(|item| async {
        let (mut last, started) = crate::completions::whole(state, llm, item, options).await?;
        // The last item carries the whole text, assembled once by the library.
        let text = std::mem::take(&mut last.text);
        let ids: Vec<u32> = if return_tokens {
            last.logprobs.iter().map(|t| t.token.0).collect()
        } else {
            Vec::new()
        };
        let mut body = answer.last(&text, &ids, &last, &started.clock);
        if answer.n_probs {
            body["completion_probabilities"] =
                crate::logprobs::native(&last.logprobs, answer.post_sampling);
        }
        Ok::<_, ApiError>(body)
    }))
    .await?;
    Ok(if bodies.len() == 1 {
        bodies.remove(0)
    } else {
        Value::Array(bodies)
    })
}

/// What every part of one answer shares.
struct Answer {
    model: String,
    settings: Settings,
    /// Whether each part lists `completion_probabilities` (`n_probs` > 0).
    n_probs: bool,
    /// Whether they are probabilities after the samplers (`post_sampling_probs`).
    post_sampling: bool,
    /// The biases `logit_bias` and `ignore_eos` added, echoed in `generation_settings`.
    logit_bias: Vec<(wick::TokenId, f32)>,
}

impl Answer {
    /// The final object: the whole `content` (empty when streamed: the chunks carried it), the
    /// counts, how it stopped, and the timings `clock` kept.
    fn last(
        &self,
        content: &str,
        tokens: &[u32],
        last: &CompletionResponse,
        clock: &Clock,
    ) -> Value {
        let usage = last.usage.unwrap_or_default();
        let (stop_type, word) = stop_type(last.finish_reason, last.stop_sequence.as_deref());
        json!({
            "index": 0,
            "content": content,
            "tokens": tokens,
            "id_slot": 0,
            "stop": true,
            "model": self.model,
            "tokens_predicted": usage.completion_tokens,
            "tokens_evaluated": usage.prompt_tokens,
            "tokens_cached": usage.cached_tokens,
            "generation_settings": self.generation_settings(),
            "has_new_line": content.contains('\n'),
            "truncated": false,
            "stop_type": stop_type,
            "stopping_word": word,
            "timings": clock.timings(Some(&usage)),
        })
    }

    fn generation_settings(&self) -> Value {
        let s = self.settings;
        json!({
            "n_predict": s.n_predict,
            "seed": s.seed,
            "temperature": s.temperature,
            "top_k": s.top_k,
            "top_p": s.top_p,
            "min_p": s.min_p,
            "stream": s.stream,
            "cache_prompt": s.cache_prompt,
            // A ban (-inf) is `null`, as llama-server writes it.
            "logit_bias": self.logit_bias.iter().map(|(t, b)| json!({
                "token": t.0,
                "bias": b.is_finite().then_some(*b),
            })).collect::<Vec<_>>(),
        })
    }
}

/// llama-server's `stop_type` and `stopping_word`: `limit` (the token budget), `word` (a stop
/// string), `eos` (the model ended it).
fn stop_type(reason: Option<FinishReason>, word: Option<&str>) -> (&'static str, &str) {
    match (reason, word) {
        (Some(FinishReason::Length), _) => ("limit", ""),
        (_, Some(word)) => ("word", word),
        _ => ("eos", ""),
    }
}

/// A streamed answer: one `data:` line per item with its text and tokens, the last one the
/// final object with `"stop": true` (llama-server sends no `[DONE]` on this route).
struct StreamRun {
    state: AppState,
    stream: sse::Resumed<AsyncCompletionStream>,
    answer: Answer,
    clock: Clock,
    content: String,
    done: bool,
    _live: LiveGuard,
}

impl sse::Run for StreamRun {
    fn next_frames(&mut self) -> impl std::future::Future<Output = Option<Vec<Bytes>>> + Send {
        self.step()
    }
}

impl StreamRun {
    async fn step(&mut self) -> Option<Vec<Bytes>> {
        if self.done {
            return None;
        }
        let item = futures_util::StreamExt::next(&mut self.stream).await;
        let mut frames = Vec::new();
        match item {
            Some(Ok(item)) if item.progress.is_some() => {
                let progress = item.progress.unwrap_or_default();
                frames.push(sse::event(&json!({
                    "index": 0,
                    "content": "",
                    "tokens": [],
                    "stop": false,
                    "id_slot": 0,
                    "tokens_predicted": 0,
                    "tokens_evaluated": progress.total,
                    "prompt_progress": self.clock.progress(&progress),
                })));
            }
            Some(Ok(item)) => {
                self.clock.answered(&self.state, 0);
                let ids: Vec<u32> = item.logprobs.iter().map(|t| t.token.0).collect();
                if !item.delta.is_empty() || !ids.is_empty() {
                    self.content.push_str(&item.delta);
                    let mut chunk = json!({
                        "index": 0,
                        "content": item.delta,
                        "tokens": ids,
                        "stop": false,
                        "id_slot": 0,
                    });
                    if self.answer.n_probs {
                        chunk["completion_probabilities"] =
                            crate::logprobs::native(&item.logprobs, self.answer.post_sampling);
                    }
                    frames.push(sse::event(&chunk));
                }
                if item.finish_reason.is_some() {
                    self.done = true;
                    if let Some(u) = &item.usage {
                        self.state.metrics().usage(u);
                    }
                    let mut last = self.answer.last("", &[], &item, &self.clock);
                    last["has_new_line"] = json!(self.content.contains('\n'));
                    frames.push(sse::event(&last));
                }
            }
            Some(Err(e)) => {
                self.done = true;
                let e = ApiError::from(e);
                self.state.metrics().error();
                frames.push(sse::event(&e.body()));
            }
            None => self.done = true,
        }
        Some(frames)
    }
}

/// `GET /props`: the served model as llama-server describes it: its file, the sequences that
/// generate at once (`total_slots`), each one's context and default sampling, the chat template.
/// A server of models loaded on demand (llama-server's router mode) answers, without a
/// `model` query, with its own role and limits.
pub(crate) async fn props(
    State(state): State<AppState>,
    axum::extract::Query(query): axum::extract::Query<PropsQuery>,
) -> Result<Response, ApiError> {
    if state.config().router && query.model.is_none() {
        let pool = state.pool_config();
        let body = json!({
            "role": "router",
            "max_instances": pool.max_loaded,
            "models_autoload": pool.autoload,
            "build_info": format!("build wick {}", env!("CARGO_PKG_VERSION")),
            "models": state.listings().len(),
        });
        return Ok(axum::Json(body).into_response());
    }
    let served = state.model(query.model.as_deref()).await?;
    let meta = served.llm.metadata();
    let info = served.llm.model_info();
    let body = json!({
        "model_alias": served.id,
        "model_path": served.llm.model_path().map(|p| p.display().to_string()),
        "total_slots": info.n_seq_max,
        "default_generation_settings": {
            "id": 0,
            "n_ctx": meta.context_window,
            "is_processing": false,
            "params": default_params(&served.llm, &state.config().sampling),
        },
        "chat_template": info.chat_template.clone().unwrap_or_default(),
        "modalities": {"vision": false, "audio": false},
        "build_info": meta.build,
        // Whether greedy answers are bit-identical warm, cold and concurrent: the CPU's
        // deterministic kernels on every layer (false with fast kernels or GPU layers).
        "deterministic": meta.deterministic,
        "is_sleeping": false,
    });
    Ok(axum::Json(body).into_response())
}

/// `GET /props`' query: `?model=NAME` describes that model.
#[derive(Debug, Deserialize)]
pub(crate) struct PropsQuery {
    model: Option<String>,
}

/// `GET /slots`: one entry per sequence that generates at once, with its context size.
pub(crate) async fn slots(State(state): State<AppState>) -> Result<Response, ApiError> {
    let served = state.model(None).await?;
    let meta = served.llm.metadata();
    let slots: Vec<Value> = (0..served.llm.model_info().n_seq_max)
        .map(|id| json!({"id": id, "n_ctx": meta.context_window, "is_processing": false}))
        .collect();
    Ok(axum::Json(slots).into_response())
}

/// The sampling a request gets when it sets nothing: the server's defaults, the seed fixed by
/// `--seed` or fresh for each request (llama-server's "random" seed, `u32::MAX`).
fn default_params(llm: &wick::Llm, defaults: &crate::SamplingDefaults) -> Value {
    let s = &defaults.sampling;
    json!({
        "n_predict": llm.metadata().num_output,
        "seed": defaults.seed.unwrap_or(i64::from(u32::MAX)),
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "repeat_penalty": s.repetition_penalty,
    })
}

/// `POST /apply-template`: `{"messages", "tools"?, …}` (a chat request) → `{"prompt"}`, the text
/// the chat template renders for it, exactly as an answer would be prompted.
pub(crate) async fn apply_template(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<crate::wire::ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let valid = crate::validate::chat(req, &state.config().sampling)?;
    let served = state.model(valid.model.as_deref()).await?;
    let prompt = served.llm.chat_text(&valid.chat, &valid.options)?;
    Ok(axum::Json(json!({ "prompt": prompt })).into_response())
}

/// `POST /chat/completions/input_tokens`: `{"input_tokens"}`, the prompt tokens a chat request
/// renders to, counted without generating.
pub(crate) async fn input_tokens(
    State(state): State<AppState>,
    ApiJson(req): ApiJson<crate::wire::ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    let valid = crate::validate::chat(req, &state.config().sampling)?;
    let served = state.model(valid.model.as_deref()).await?;
    let tokens = served.llm.chat_tokens(&valid.chat, &valid.options)?;
    Ok(axum::Json(json!({ "input_tokens": tokens.len() })).into_response())
}

/// `POST /v1/rerank` (and llama-server's other spellings): a clear refusal, since the models
/// wick serves are generative, not rerankers.
pub(crate) async fn rerank(State(state): State<AppState>) -> Result<Response, ApiError> {
    let served = state.model(None).await?;
    Err(ApiError::Unsupported {
        message: format!(
            "{} is a generative model and cannot rerank: serve a reranking model for /rerank",
            served.id
        ),
        param: "model",
    })
}
