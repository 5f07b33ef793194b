//! `wick serve` as a real process on the real model, driven over HTTP: answers, SSE framing,
//! every error path, auth, 16 concurrent streams, clients that vanish, graceful shutdown.

mod serve_util;

use std::io::{BufRead, BufReader, Read};

use serde_json::{json, Value};
use serve_util::{accumulate, client, sse_events, Server};

fn chat(prompt: &str, extra: &Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": prompt}], "max_tokens": 24});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn post(server: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = client().post(server.url(path)).json(body).send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap())
}

fn stream_text(server: &Server, body: &Value) -> String {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    r.text().unwrap()
}

#[test]
fn streamed_and_whole_answers_agree_for_a_seeded_request() {
    let server = Server::start(&[]);
    for extra in [
        json!({"temperature": 0}),
        json!({"temperature": 0.9, "seed": 1234}),
    ] {
        let body = chat("Write one sentence about the sea.", &extra);
        let (status, whole) = post(&server, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{whole}");
        let events = sse_events(&stream_text(&server, &body));
        let (content, finish) = accumulate(&events);
        assert_eq!(
            content,
            whole["choices"][0]["message"]["content"].as_str().unwrap()
        );
        assert_eq!(finish, whole["choices"][0]["finish_reason"]);
        assert!(!content.is_empty());
    }
}

#[test]
fn health_models_completions_embeddings_tokenize_metrics() {
    let server = Server::start(&[]);
    let c = client();
    assert_eq!(
        c.get(server.url("/health"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let models: Value = c
        .get(server.url("/v1/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = models["data"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(id, "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(
        c.get(server.url(&format!("/v1/models/{id}")))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let (status, body) = post(
        &server,
        "/v1/completions",
        &json!({"model": id, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body["choices"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{body}"
    );
    let (status, body) = post(&server, "/v1/embeddings", &json!({"input": ["cat", "dog"]}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"][0]["embedding"].as_array().unwrap().len(), 576);
    let (_, tokens) = post(&server, "/tokenize", &json!({"content": "Hello world"}));
    let (_, text) = post(&server, "/detokenize", &json!({"tokens": tokens["tokens"]}));
    assert_eq!(text["content"], "Hello world");
    let metrics = c
        .get(server.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("wick_completion_tokens_total"),
        "{metrics}"
    );
}

#[test]
fn every_error_is_an_openai_error_with_the_right_status() {
    let server = Server::start(&[
        "-c",
        "256",
        "--max-body-size",
        "4096",
        "--strict-model-names",
    ]);
    let c = client();
    let send_raw = |body: &str| {
        let r = c
            .post(server.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap();
        let status = r.status().as_u16();
        let retry = r.headers().get("retry-after").is_some();
        (status, retry, r.json::<Value>().unwrap())
    };
    let cases: Vec<(String, u16, &str)> = vec![
        ("{oops".into(), 400, ""),
        (r#"{"messages": "hi"}"#.into(), 400, ""),
        (
            chat("hi", &json!({"temperature": 9})).to_string(),
            400,
            "temperature",
        ),
        (chat("hi", &json!({"n": 3})).to_string(), 400, "n"),
        (
            chat("hi", &json!({"top_logprobs": 3})).to_string(),
            400,
            "top_logprobs",
        ),
        (
            chat("hi", &json!({"logprobs": true, "top_logprobs": 21})).to_string(),
            400,
            "top_logprobs",
        ),
        (
            chat("hi", &json!({"model": "nope"})).to_string(),
            404,
            "model",
        ),
        (chat(&"x".repeat(5000), &json!({})).to_string(), 413, ""),
        (
            chat(&"tree ".repeat(300), &json!({})).to_string(),
            400,
            "messages",
        ),
    ];
    for (body, status, param) in cases {
        let (got, _, json) = send_raw(&body);
        assert_eq!(got, status, "{}: {json}", &body[..body.len().min(80)]);
        let error = &json["error"];
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{json}"
        );
        assert!(error["type"].is_string(), "{json}");
        if !param.is_empty() {
            assert_eq!(error["param"], param, "{json}");
        }
    }
    let (_, _, json) = send_raw(&chat(&"tree ".repeat(300), &json!({})).to_string());
    let message = json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("256"),
        "the context size is named: {message}"
    );
}

#[test]
fn the_api_key_is_required_everywhere_but_health() {
    let server = Server::start(&["--api-key", "k3y"]);
    let c = client();
    assert_eq!(
        c.get(server.url("/health"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        c.get(server.url("/v1/models"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let ok = c
        .get(server.url("/v1/models"))
        .bearer_auth("k3y")
        .send()
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    let bad = c
        .post(server.url("/v1/chat/completions"))
        .bearer_auth("nope")
        .json(&chat("hi", &json!({})))
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 401);
}

const PROMPTS: [&str; 16] = [
    "Name a fruit.",
    "Name a color.",
    "Name an animal.",
    "Name a country.",
    "Name a planet.",
    "Name a tree.",
    "Name a river.",
    "Name a city.",
    "Name a tool.",
    "Name a sport.",
    "Name a metal.",
    "Name a flower.",
    "Name a bird.",
    "Name a fish.",
    "Name a drink.",
    "Name a game.",
];

/// Streams `PROMPTS` greedily, all at once; each stream's content.
fn concurrent(server: &Server, body: &dyn Fn(&str) -> Value) -> Vec<String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = PROMPTS
            .iter()
            .map(|p| {
                let body = body(p);
                s.spawn(move || {
                    let (content, finish) = accumulate(&sse_events(&stream_text(server, &body)));
                    assert!(!finish.is_null(), "no finish_reason for {p}");
                    content
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn greedy(p: &str) -> Value {
    chat(p, &json!({"temperature": 0, "max_tokens": 16}))
}

#[test]
fn sixteen_concurrent_streams_all_complete() {
    let server = Server::start(&["--parallel", "4"]);
    let together = concurrent(&server, &greedy);
    assert_eq!(together.len(), 16);
    assert!(together.iter().all(|c| !c.is_empty()), "{together:?}");
}

/// Fails today: llama.cpp's unified KV cache makes a sequence's attention sums depend on the
/// batch it runs in (the KV view's length), so greedy near-ties can flip under load.
#[test]
fn sixteen_concurrent_streams_each_get_their_solo_answer() {
    let server = Server::start(&["--parallel", "4"]);
    let alone: Vec<String> = PROMPTS
        .iter()
        .map(|p| accumulate(&sse_events(&stream_text(&server, &greedy(p)))).0)
        .collect();
    let together = concurrent(&server, &greedy);
    for ((p, a), t) in PROMPTS.iter().zip(&alone).zip(&together) {
        assert_eq!(a, t, "{p}: alone vs concurrent");
    }
}

#[test]
fn clients_that_disconnect_mid_stream_leave_the_server_serving() {
    let server = Server::start(&["--parallel", "2"]);
    for _ in 0..6 {
        let mut body = chat(
            "Tell me a long story about a dragon.",
            &json!({"max_tokens": 400, "temperature": 0}),
        );
        body["stream"] = json!(true);
        let r = client()
            .post(server.url("/v1/chat/completions"))
            .json(&body)
            .send()
            .unwrap();
        let mut reader = BufReader::new(r);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("data: "), "{line}");
        drop(reader);
    }
    // The freed sequences let a fresh request through to its end.
    let (status, whole) = post(
        &server,
        "/v1/chat/completions",
        &chat("Name a fruit.", &json!({"temperature": 0})),
    );
    assert_eq!(status, 200, "{whole}");
    // The server notices a vanished client at its next write; wait for it (bounded).
    let metrics = server
        .metrics_when(|m| m.contains("wick_open_streams 0") && m.contains("wick_live_sequences 0"));
    assert!(metrics.contains("wick_open_streams 0"), "{metrics}");
    assert!(metrics.contains("wick_live_sequences 0"), "{metrics}");
}

#[test]
fn sigterm_lets_a_stream_in_flight_finish() {
    // A generous grace period: on a loaded machine 48 tokens may take a while.
    let mut server = Server::start(&["--shutdown-timeout", "300"]);
    let mut body = chat(
        "Count from one to twenty.",
        &json!({"max_tokens": 48, "temperature": 0}),
    );
    body["stream"] = json!(true);
    let r = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .unwrap();
    let mut reader = BufReader::new(r);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
    assert!(server.wait().success());
}

#[test]
fn several_models_are_chosen_by_the_model_field() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("second-model.gguf");
    std::os::unix::fs::symlink(wick_testutil::model_path(), &other).unwrap();
    let server = Server::start(&["-m", other.to_str().unwrap()]);
    let models: Value = client()
        .get(server.url("/v1/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["SmolLM2-135M-Instruct.Q4_1", "second-model"]);
    for id in ids {
        let (status, body) = post(
            &server,
            "/v1/chat/completions",
            &chat("Hi", &json!({"model": id, "max_tokens": 4})),
        );
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["model"], id);
    }
}

#[test]
fn stop_strings_end_the_answer_before_them() {
    let server = Server::start(&[]);
    let body = json!({"prompt": "The capital of France is", "max_tokens": 16, "temperature": 0});
    let (_, free) = post(&server, "/v1/completions", &body);
    assert!(
        free["choices"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{free}"
    );
    let mut stopped = body.clone();
    stopped["stop"] = json!(["Paris"]);
    let (status, out) = post(&server, "/v1/completions", &stopped);
    assert_eq!(status, 200, "{out}");
    assert!(
        !out["choices"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{out}"
    );
    assert_eq!(out["choices"][0]["finish_reason"], "stop");
}

#[test]
fn serve_help_names_every_flag() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--model",
        "--host",
        "--port",
        "--api-key",
        "WICK_API_KEY",
        "--cors-origin",
        "--parallel",
        "--queue-size",
        "--ctx-size",
        "--max-tokens",
        "--max-body-size",
        "--output-format",
        "--shutdown-timeout",
        "--threads",
        "--gpu-layers",
        "--rpc",
        "--kv-cache-dir",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

/// A hybrid model with a recurrent state (the test model as LFM2: short convolutions beside
/// attention) on the real binary: `meta` says so; a follow-up turn reuses the whole first
/// conversation; the first prompt again reuses all of it (the state checkpointed at its end);
/// a prompt that leaves it earlier reuses nothing (no checkpoint there); four prompts at once
/// each get their solo answer; every answer is a fresh server's, bit for bit.
#[test]
fn a_recurrent_model_reuses_whole_conversations_and_answers_as_a_fresh_server() {
    let model = serve_util::as_architecture("lfm2");
    let server = Server::start_model(&model, &["--parallel", "4"]);
    let models = serve_util::get_json(&server, "/v1/models");
    assert_eq!(models["data"][0]["meta"]["recurrent"], true, "{models}");
    let (status, tokenized) = post(
        &server,
        "/tokenize",
        &json!({"content": "The three primary colours are"}),
    );
    assert_eq!(status, 200, "{tokenized}");
    let question: Vec<u64> = serde_json::from_value(tokenized["tokens"].clone()).unwrap();
    // Token ids in and out, so that the next turn holds exactly the tokens generated.
    let complete = |server: &Server, prompt: &[u64]| {
        let body = json!({"prompt": prompt, "n_predict": 8, "temperature": 0,
                          "ignore_eos": true, "return_tokens": true});
        let (status, out) = post(server, "/completion", &body);
        assert_eq!(status, 200, "{out}");
        let tokens: Vec<u64> = serde_json::from_value(out["tokens"].clone()).unwrap();
        assert_eq!(tokens.len(), 8, "{out}");
        (tokens, out["tokens_cached"].as_u64().unwrap())
    };
    let (answer, cached) = complete(&server, &question);
    assert_eq!(cached, 0);
    let mut next = question.clone();
    next.extend(&answer);
    next.extend(&question);
    let (warm, cached) = complete(&server, &next);
    assert_eq!(
        usize::try_from(cached).unwrap(),
        question.len() + answer.len(),
        "the question and all of its answer"
    );
    let (again, cached) = complete(&server, &question);
    assert_eq!(
        usize::try_from(cached).unwrap(),
        question.len(),
        "a cut back to the question's checkpoint"
    );
    assert_eq!(again, answer);
    let early = [&question[..question.len() - 2], &answer[..3]].concat();
    let (early_answer, cached) = complete(&server, &early);
    assert_eq!(
        cached, 0,
        "no checkpoint two tokens before the question's end"
    );
    // Four prompts at once (their recurrent states in one batch), each its solo answer.
    let prompts = [
        question.clone(),
        next.clone(),
        next[..next.len() - 3].to_vec(),
        [&question[..], &answer[..2]].concat(),
        early,
    ];
    let together: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| s.spawn(|| complete(&server, p).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(server);
    let fresh = Server::start_model(&model, &[]);
    assert_eq!(
        complete(&fresh, &next),
        (warm, 0),
        "a fresh server's answer"
    );
    drop(fresh);
    assert_eq!(together[4], early_answer, "alone and in a batch");
    for (prompt, answer) in prompts.iter().zip(together) {
        let fresh = Server::start_model(&model, &[]);
        assert_eq!(complete(&fresh, prompt).0, answer, "in a batch of four");
    }
}

/// The LFM2-style model over the chat API: a second conversation with the same system prompt
/// and another question starts at the checkpoint where the first one's question began, and
/// answers as a fresh server does, bit for bit.
#[test]
fn a_recurrent_model_reuses_a_shared_system_prompt_up_to_the_question() {
    let model = serve_util::as_architecture("lfm2");
    let chat = |question: &str| {
        json!({"messages": [
            {"role": "system", "content": "You are a terse assistant. Answer in one line."},
            {"role": "user", "content": question}],
            "max_tokens": 8, "temperature": 0})
    };
    let usage = |out: &Value| {
        let usage = &out["usage"];
        (
            usage["prompt_tokens"].as_u64().unwrap(),
            usage["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
        )
    };
    let server = Server::start_model(&model, &[]);
    let (status, first) = post(&server, "/v1/chat/completions", &chat("Name a colour."));
    assert_eq!(status, 200, "{first}");
    assert_eq!(usage(&first).1, 0);
    let (status, second) = post(&server, "/v1/chat/completions", &chat("Name a fruit."));
    assert_eq!(status, 200, "{second}");
    let (prompt, cached) = usage(&second);
    assert!(
        cached > 10 && cached + 4 < prompt,
        "the system prompt and the user's role text, not the question: {cached} of {prompt}"
    );
    drop(server);
    let fresh = Server::start_model(&model, &[]);
    let (status, cold) = post(&fresh, "/v1/chat/completions", &chat("Name a fruit."));
    assert_eq!(status, 200, "{cold}");
    assert_eq!(usage(&cold), (prompt, 0));
    assert_eq!(
        second["choices"][0]["message"]["content"],
        cold["choices"][0]["message"]["content"]
    );
}

#[test]
fn a_restarted_server_restores_the_prompt_from_its_disk_cache() {
    let home = tempfile::tempdir().expect("tmp");
    let body = json!({
        "messages": [
            {"role": "system", "content": "You are a careful assistant. ".repeat(12)},
            {"role": "user", "content": "Name one colour."}
        ],
        "max_tokens": 8,
        "temperature": 0
    });
    let first = Server::start_in(home.path(), &[]);
    let (status, cold) = post(&first, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{cold}");
    assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    drop(first);

    let second = Server::start_in(home.path(), &[]);
    let (status, warm) = post(&second, "/v1/chat/completions", &body);
    assert_eq!(status, 200, "{warm}");
    let prompt = cold["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 64, "long enough to be saved: {prompt}");
    assert_eq!(
        warm["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some(prompt),
        "the whole prompt is restored: {warm}"
    );
    assert_eq!(
        warm["choices"][0]["message"]["content"],
        cold["choices"][0]["message"]["content"]
    );
    let metrics = client()
        .get(second.url("/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("wick_prompt_cache_hits_disk_total{model=") && metrics.contains("} 1\n"),
        "{metrics}"
    );
    drop(second);

    let wick = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
            .env("WICK_HOME", home.path())
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = wick(&["cache", "ls"]);
    assert!(
        listed.contains("FILES") && listed.contains("total"),
        "{listed}"
    );
    let cleared = wick(&["cache", "clear"]);
    assert!(
        cleared.starts_with("removed ") && !cleared.starts_with("removed 0 "),
        "{cleared}"
    );
    assert!(wick(&["cache", "ls"]).starts_with("no prompt-cache snapshots"));
}

/// The `logprobs.content` entries of a chat answer or chunk (none when `null`).
fn entries(choice: &Value) -> Vec<Value> {
    match &choice["logprobs"] {
        Value::Null => Vec::new(),
        logprobs => logprobs["content"].as_array().unwrap().clone(),
    }
}

#[test]
fn greedy_logprobs_name_the_top_token_and_agree_when_streamed() {
    let server = Server::start(&[]);
    for prompt in ["Write one sentence about the sea.", "Name three colors."] {
        let body = chat(
            prompt,
            &json!({"temperature": 0, "logprobs": true, "top_logprobs": 3}),
        );
        let (status, whole) = post(&server, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{whole}");
        let choice = &whole["choices"][0];
        let content = entries(choice);
        assert!(!content.is_empty(), "{whole}");
        for e in &content {
            let top = e["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), 3, "{e}");
            assert_eq!(
                top[0]["token"], e["token"],
                "greedy takes the top token: {e}"
            );
            assert_eq!(top[0]["logprob"], e["logprob"], "{e}");
            assert!(e["logprob"].as_f64().unwrap() <= 0.0);
            let logprobs: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().unwrap()).collect();
            assert!(logprobs.windows(2).all(|w| w[0] >= w[1]), "{e}");
            let bytes: Vec<u8> = serde_json::from_value(e["bytes"].clone()).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                e["token"].as_str().unwrap()
            );
        }
        let joined: String = content
            .iter()
            .map(|e| e["token"].as_str().unwrap())
            .collect();
        assert_eq!(joined, choice["message"]["content"].as_str().unwrap());

        let events = sse_events(&stream_text(&server, &body));
        let streamed: Vec<Value> = events[..events.len() - 1]
            .iter()
            .flat_map(|e| {
                let chunk: Value = serde_json::from_str(e).unwrap();
                entries(&chunk["choices"][0])
            })
            .collect();
        assert_eq!(
            streamed, content,
            "streamed entries equal the whole answer's"
        );
    }
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    let server = Server::start(&["--parallel", "1", "--queue-size", "1"]);
    // A completion that cannot end early: end-of-generation tokens are banned.
    let long = json!({"prompt": "Tell me a very long story.", "max_tokens": 3000,
                      "temperature": 0, "stream": true,
                      "logit_bias": {"0": -100, "1": -100, "2": -100}});
    let mut live = BufReader::new(
        client()
            .post(server.url("/v1/completions"))
            .json(&long)
            .send()
            .unwrap(),
    );
    let mut first = String::new();
    live.read_line(&mut first).unwrap();
    assert!(
        first.starts_with("data: "),
        "the first request generates: {first}"
    );
    // The second waits in the queue (its answer starts only when the first ends).
    let queued_url = server.url("/v1/completions");
    let queued_body = long.clone();
    std::thread::spawn(move || {
        let _ = client().post(queued_url).json(&queued_body).send();
    });
    let metrics = server.metrics_when(|m| m.contains("wick_queue_depth 1"));
    assert!(metrics.contains("wick_queue_depth 1"), "{metrics}");
    // The third finds the queue full.
    let r = client()
        .post(server.url("/v1/chat/completions"))
        .json(&chat("hi", &json!({})))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let retry = r.headers()["retry-after"].to_str().unwrap().to_owned();
    assert!(retry.parse::<u64>().is_ok_and(|s| s > 0), "{retry}");
    let body: Value = r.json().unwrap();
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert!(
        error.get("param").is_some() && error.get("code").is_some(),
        "{body}"
    );
    drop(live);
}

#[test]
fn a_chat_template_file_replaces_the_models_template() {
    // The model's own template adds a system prompt; this one sends the last message alone.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bare.jinja");
    std::fs::write(&file, "{{ messages[-1].content }}").unwrap();
    let body = chat("Hello", &json!({"max_tokens": 1}));
    let prompt_tokens = |server: &Server| {
        let (status, answer) = post(server, "/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        answer["usage"]["prompt_tokens"].as_u64().unwrap()
    };
    let bare = prompt_tokens(&Server::start(&[
        "--chat-template-file",
        file.to_str().unwrap(),
    ]));
    let own = prompt_tokens(&Server::start(&[]));
    assert!(bare <= 2 && own > 10, "bare {bare}, own {own}");
    // A template that does not compile stops the server with the reason.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["serve", "--port", "0", "--chat-template", "{% if %}", "-m"])
        .arg(wick_testutil::model_path())
        .env("WICK_HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("chat_template"), "{stderr}");
}

#[test]
fn aliases_name_the_model_and_one_model_answers_any_name_unless_strict() {
    let server = Server::start(&["--alias", "smol", "--alias", "tiny"]);
    let r = client().get(server.url("/v1/models")).send().unwrap();
    let models: Value = r.json().unwrap();
    assert_eq!(models["data"][0]["id"], "smol", "{models}");
    for name in ["smol", "tiny", "gpt-4o-mini"] {
        let (status, body) = post(
            &server,
            "/v1/chat/completions",
            &chat("Hi", &json!({"model": name, "max_tokens": 2})),
        );
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(body["model"], "smol", "{name}: {body}");
    }
    let r = client()
        .get(server.url("/v1/models/gpt-4o-mini"))
        .send()
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        404,
        "describing a model takes its own name"
    );
    drop(server);
    let strict = Server::start(&["--alias", "smol", "--strict-model-names"]);
    let (status, body) = post(
        &strict,
        "/v1/chat/completions",
        &chat("Hi", &json!({"model": "gpt-4o-mini"})),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
}

#[test]
fn several_host_addresses_serve_on_one_port() {
    // llama-server's `--host 127.0.0.1,::1`, also as repeated flags.
    for hosts in [
        &["--host", "127.0.0.1,::1"][..],
        &["--host", "127.0.0.1", "--host", "::1"],
    ] {
        let server = Server::start(hosts);
        let port = server.base.rsplit(':').next().unwrap().to_owned();
        for host in ["127.0.0.1", "[::1]"] {
            let r = client()
                .get(format!("http://{host}:{port}/health"))
                .send()
                .unwrap();
            assert_eq!(r.status().as_u16(), 200, "{host}");
            let r = client()
                .post(format!("http://{host}:{port}/v1/completions"))
                .json(&json!({"prompt": "Hi", "max_tokens": 2}))
                .send()
                .unwrap();
            assert_eq!(r.status().as_u16(), 200, "{host}");
        }
    }
}

#[test]
fn server_wide_sampling_defaults_apply_to_every_request_that_sets_none() {
    // llama-server's flags: requests without a temperature are greedy here.
    let server = Server::start(&["--temp", "0", "--seed", "7", "--top-k", "1"]);
    let props: Value = client()
        .get(server.url("/props"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let params = &props["default_generation_settings"]["params"];
    assert_eq!(
        (&params["temperature"], &params["seed"], &params["top_k"]),
        (&json!(0.0), &json!(7), &json!(1)),
        "{params}"
    );
    let answer = |extra: Value| {
        let (status, whole) = post(
            &server,
            "/v1/chat/completions",
            &chat("Write one line about rivers.", &extra),
        );
        assert_eq!(status, 200, "{whole}");
        whole["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let defaulted = answer(json!({"max_tokens": 24}));
    assert_eq!(
        defaulted,
        answer(json!({"max_tokens": 24, "temperature": 0}))
    );
    // The request's own value still wins.
    let sampled = answer(json!({"max_tokens": 24, "temperature": 1.5, "top_k": 0, "seed": 3}));
    assert_ne!(sampled, defaulted);
    // Ollama's API takes the same defaults.
    let (status, generated) = post(
        &server,
        "/api/generate",
        &json!({"prompt": "Write one line about rivers.", "stream": false,
                "options": {"num_predict": 24}}),
    );
    assert_eq!(status, 200, "{generated}");
    let (_, greedy) = post(
        &server,
        "/api/generate",
        &json!({"prompt": "Write one line about rivers.", "stream": false,
                "options": {"num_predict": 24, "temperature": 0}}),
    );
    assert_eq!(generated["response"], greedy["response"]);
}

#[test]
fn a_sampling_default_out_of_range_is_refused_before_loading() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wick"))
        .args(["serve", "--port", "0", "--temp", "3"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--temp 3 is out of range"), "{stderr}");
}
