//! The router over the stub backend, driven with `oneshot`: every endpoint, the SSE framing,
//! and every error path's status and OpenAI error body.

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use common::{post, post_json, send, stub_state};
use serde_json::{json, Value};
use tower::ServiceExt;
use wick_server::{router, AppState, ServerConfig};

fn state(config: ServerConfig, n_ctx: u32) -> AppState {
    stub_state(config, n_ctx, 24, &["stub-alias"])
}

fn app() -> Router {
    router(state(ServerConfig::default(), 512))
}

fn chat_body(extra: &Value) -> Value {
    let mut body = json!({
        "model": "stub",
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "temperature": 0,
        "seed": 7,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// The `data:` payloads of an SSE body, checking the framing of every event.
fn sse_events(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("data: [DONE]\n\n"),
        "no [DONE] at the end: {body:?}"
    );
    let events: Vec<String> = body
        .split_terminator("\n\n")
        .map(|e| {
            assert!(e.starts_with("data: "), "bad frame {e:?}");
            assert!(!e.contains('\n'), "multi-line frame {e:?}");
            e["data: ".len()..].to_owned()
        })
        .collect();
    assert_eq!(events.last().unwrap(), "[DONE]");
    events
}

fn assert_error(body: &Value, param: Option<&str>) {
    let error = &body["error"];
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(error["type"].is_string(), "{body}");
    assert!(error.get("code").is_some(), "{body}");
    if let Some(param) = param {
        assert_eq!(error["param"], param, "{body}");
    }
}

#[tokio::test]
async fn chat_completion_is_an_openai_object_with_usage() {
    let (status, body) = post_json(app(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(body["model"], "stub");
    let choice = &body["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"]["content"].is_string());
    assert!(["stop", "length"].contains(&choice["finish_reason"].as_str().unwrap()));
    let usage = &body["usage"];
    let (p, c) = (
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["completion_tokens"].as_u64().unwrap(),
    );
    assert!(p > 0 && c > 0 && c <= 24);
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), p + c);
}

#[tokio::test]
async fn the_stream_accumulates_to_the_whole_answer() {
    let app = app();
    let (_, whole) = post_json(app.clone(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    let req = post(
        "/v1/chat/completions",
        chat_body(&json!({"stream": true})).to_string(),
    );
    let (status, headers, body) = send(app, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    let events = sse_events(&body);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let id = &chunks[0]["id"];
    let mut content = String::new();
    for c in &chunks {
        assert_eq!(&c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert!(c.get("usage").is_none(), "usage without include_usage: {c}");
        content.push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
    }
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(
        last["choices"][0]["finish_reason"],
        whole["choices"][0]["finish_reason"]
    );
    assert_eq!(
        content,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
}

#[tokio::test]
async fn include_usage_adds_a_final_usage_chunk() {
    let body = chat_body(&json!({"stream": true, "stream_options": {"include_usage": true}}));
    let (_, _, text) = send(app(), post("/v1/chat/completions", body.to_string())).await;
    let events = sse_events(&text);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    assert!(rest.iter().all(|c| c["usage"].is_null()));
}

#[tokio::test]
async fn content_parts_and_developer_messages_are_accepted() {
    let body = chat_body(&json!({"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}
    ]}));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn bad_input_gets_a_400_naming_the_field() {
    let cases = [
        (json!({"temperature": 5}), "temperature"),
        (json!({"top_p": 1.5}), "top_p"),
        (json!({"n": 2}), "n"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (
            json!({"max_completion_tokens": -1}),
            "max_completion_tokens",
        ),
        (json!({"frequency_penalty": 3}), "frequency_penalty"),
        (json!({"logit_bias": {"abc": 1}}), "logit_bias"),
        (json!({"logit_bias": {"5": 500}}), "logit_bias"),
        (json!({"top_logprobs": 2}), "top_logprobs"),
        (
            json!({"logprobs": false, "top_logprobs": 0}),
            "top_logprobs",
        ),
        (
            json!({"logprobs": true, "top_logprobs": 21}),
            "top_logprobs",
        ),
        (
            json!({"logprobs": true, "top_logprobs": -1}),
            "top_logprobs",
        ),
        (json!({"messages": []}), "messages"),
        (
            json!({"messages": [{"role": "wizard", "content": "x"}]}),
            "messages[0]",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            "messages[0].content[0]",
        ),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image_url",
                "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}),
            "messages",
        ),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": {"type": "function", "function": {"name": "g"}}}),
            "tool_choice",
        ),
        (
            json!({"response_format": {"type": "yaml"}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "response_format",
        ),
        (json!({"stop": ["a", ""]}), "stop"),
        (json!({"reasoning_effort": "extreme"}), "reasoning_effort"),
    ];
    for (extra, param) in cases {
        let (status, body) = post_json(app(), "/v1/chat/completions", &chat_body(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_error(&body, Some(param));
    }
}

#[tokio::test]
async fn malformed_json_and_wrong_types_are_400s() {
    for raw in [
        "{not json",
        "[1, 2]",
        r#"{"messages": 5}"#,
        r#"{"messages": [{"content": "x"}]}"#,
        r#"{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}"#,
        "",
    ] {
        let (status, _, text) = send(app(), post("/v1/chat/completions", raw)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw}: {text}");
        assert_error(&serde_json::from_str(&text).unwrap(), None);
    }
}

#[tokio::test]
async fn an_unknown_model_is_a_404_listing_the_served_ones() {
    let strict = || {
        router(state(
            ServerConfig {
                strict_model_names: true,
                ..ServerConfig::default()
            },
            512,
        ))
    };
    let (status, body) = post_json(
        strict(),
        "/v1/chat/completions",
        &chat_body(&json!({"model": "gpt-9"})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&body, Some("model"));
    assert_eq!(body["error"]["code"], "model_not_found");
    assert!(body["error"]["message"].as_str().unwrap().contains("stub"));
    let (status, _) = post_json(
        strict(),
        "/v1/chat/completions",
        &chat_body(&json!({"model": "stub-alias"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn one_served_model_answers_any_model_name_unless_names_are_strict() {
    for path in ["/v1/chat/completions", "/chat/completions"] {
        let body = chat_body(&json!({"model": "gpt-4o-mini"}));
        let (status, body) = post_json(app(), path, &body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert_eq!(
            body["model"], "stub",
            "the answer names the model that answered"
        );
    }
}

#[tokio::test]
async fn a_prompt_over_the_context_names_both_numbers() {
    let app = router(state(ServerConfig::default(), 64));
    let long = "word ".repeat(400);
    let body = chat_body(&json!({"messages": [{"role": "user", "content": long}]}));
    let (status, body) = post_json(app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(" 64"), "{message}");
    assert!(
        message.chars().filter(char::is_ascii_digit).count() >= 4,
        "{message}"
    );
}

#[tokio::test]
async fn issue_15_a_bad_grammar_says_what_and_where_under_grammar() {
    let body = chat_body(&json!({"grammar": "root ::= \"yes\" | answer"}));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["param"], "grammar", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("line 1, column 18") && message.contains("`answer`"),
        "{message}"
    );
    assert!(!message.contains("null"), "{message}");
}

#[tokio::test]
async fn llama_server_schemas_top_level_and_beside_json_object_are_checked_and_held() {
    for (extra, param) in [
        (json!({"json_schema": 123}), "json_schema"),
        (json!({"json_schema": {"type": "hiccup"}}), "json_schema"),
        (
            json!({"json_schema": {"const": "42"}, "grammar": "root ::= \"a\""}),
            "json_schema",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": 123}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": {"type": 123}}}),
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_object"}, "json_schema": {"const": "1"}}),
            "response_format",
        ),
    ] {
        let (status, body) = post_json(app(), "/v1/chat/completions", &chat_body(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_eq!(body["error"]["param"], param, "{extra}: {body}");
    }
    // The stub holds answers to enum schemas only.
    for extra in [
        json!({"json_schema": {"enum": ["a", "b"]}}),
        json!({"response_format": {"type": "json_object", "schema": {"enum": ["a", "b"]}}}),
    ] {
        let (status, body) = post_json(app(), "/v1/chat/completions", &chat_body(&extra)).await;
        assert_eq!(status, StatusCode::OK, "{extra}: {body}");
        let content = body["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(["\"a\"", "\"b\""].contains(&content), "{extra}: {body}");
    }
}

#[tokio::test]
async fn issue_15_a_wrong_type_names_its_field() {
    let body = chat_body(&json!({"max_tokens": "ten"}));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["param"], "max_tokens", "{body}");
    let body = chat_body(&json!({"messages": [{"role": "user", "content": 5}]}));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["param"], "messages[0].content", "{body}");
}

#[tokio::test]
async fn issue_15_cancel_all_ends_streams_with_an_error_and_done_and_answers_503() {
    let state = stub_state(ServerConfig::default(), 512, 400, &[]);
    let body = chat_body(&json!({"stream": true, "max_tokens": 400, "logit_bias": {"0": -100}}));
    let response = router(state.clone())
        .oneshot(post("/v1/chat/completions", body.to_string()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    state.cancel_all();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let events = sse_events(&text);
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(error["error"]["code"], "server_shutting_down", "{text}");
    // Requests after that are 503s.
    let (status, body) = post_json(
        router(state),
        "/v1/chat/completions",
        &chat_body(&json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "server_shutting_down", "{body}");
}

#[tokio::test]
async fn issue_15_json_endpoints_refuse_other_media_types_and_foreign_hosts() {
    let req = Request::post("/v1/chat/completions")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(chat_body(&json!({})).to_string()))
        .unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{text}");
    let req = Request::get("/v1/models")
        .header(header::HOST, "rebound.example:8080")
        .body(Body::empty())
        .unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    let req = Request::get("/v1/models")
        .header(header::HOST, "localhost:8080")
        .body(Body::empty())
        .unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

#[tokio::test]
async fn issue_15_a_prompt_far_over_the_context_is_refused_untokenized() {
    let app = router(state(ServerConfig::default(), 64));
    let long = "word ".repeat(200_000);
    let body = chat_body(&json!({"messages": [{"role": "user", "content": long}]}));
    let (status, body) = post_json(app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("at least"), "{message}");
}

#[tokio::test]
async fn issue_15_sampling_limits_are_the_samplers_own() {
    // top_p 0 used to pass the server and fail in llama.cpp.
    for (field, value) in [
        ("top_p", json!(0)),
        ("temperature", json!(2.5)),
        ("min_p", json!(-1)),
    ] {
        let body = chat_body(&json!({ field: value }));
        let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["param"], field, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("allowed"), "{message}");
    }
    let body = chat_body(&json!({"temperature": 2.0, "top_p": 0.01}));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn an_oversized_body_is_a_413() {
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let app = router(state(config, 512));
    let body = chat_body(&json!({"messages": [{"role": "user", "content": "x".repeat(4096)}]}));
    let (status, body) = post_json(app, "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_error(&body, None);
}

#[tokio::test]
async fn loading_is_a_503_with_retry_after() {
    let state = AppState::new(ServerConfig::default());
    let (status, headers, _) = send(
        router(state.clone()),
        Request::get("/health").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers.contains_key(header::RETRY_AFTER));
    let (status, headers, text) = send(
        router(state),
        post("/v1/chat/completions", chat_body(&json!({})).to_string()),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(headers.contains_key(header::RETRY_AFTER));
    let (status, _, text) = send(app(), Request::get("/health").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "{text}");
}

#[tokio::test]
async fn unknown_routes_and_methods_get_openai_errors() {
    let (status, _, text) =
        send(app(), Request::get("/v1/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_error(&serde_json::from_str(&text).unwrap(), None);
    let (status, _, text) = send(
        app(),
        Request::get("/v1/chat/completions")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_error(&serde_json::from_str(&text).unwrap(), None);
}

#[tokio::test]
async fn the_api_key_guards_every_route_but_health() {
    let config = ServerConfig {
        api_key: Some("s3cret".into()),
        ..ServerConfig::default()
    };
    let app = router(state(config, 512));
    let get = |path: &str, auth: Option<&str>| {
        let mut b = Request::get(path);
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(Body::empty()).unwrap()
    };
    let (status, _, text) = send(app.clone(), get("/v1/models", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let error = serde_json::from_str::<Value>(&text).unwrap();
    assert_eq!(error["error"]["code"], "invalid_api_key");
    // llama-server's type for a 401 (OpenAI clients map the status itself).
    assert_eq!(error["error"]["type"], "authentication_error");
    let (status, _, _) = send(app.clone(), get("/v1/models", Some("Bearer wrong"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(app.clone(), get("/metrics", Some("s3cret"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = send(app.clone(), get("/v1/models", Some("Bearer s3cret"))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(app, get("/health", None)).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn cors_is_off_unless_an_origin_is_given() {
    let req = || {
        Request::get("/v1/models")
            .header(header::ORIGIN, "http://example.test")
            .body(Body::empty())
            .unwrap()
    };
    let (_, headers, _) = send(app(), req()).await;
    assert!(!headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    let config = ServerConfig {
        cors_origin: Some("http://example.test".into()),
        ..ServerConfig::default()
    };
    let (_, headers, _) = send(router(state(config, 512)), req()).await;
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "http://example.test"
    );
}

/// A preflight for `origin` to `/completions` asking for `Authorization`.
fn preflight(origin: &str) -> Request<Body> {
    Request::builder()
        .method("OPTIONS")
        .uri("/completions")
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "Authorization")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn cors_answers_as_llama_server_reflecting_allowed_origins_with_credentials() {
    let app = |origins: &str| {
        let config = ServerConfig {
            cors_origin: Some(origins.into()),
            api_key: Some("k".into()),
            ..ServerConfig::default()
        };
        router(state(config, 512))
    };
    // `*`: any origin, reflected; the preflight needs no key.
    let (status, headers, _) = send(app("*"), preflight("http://web.mydomain.fr")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "http://web.mydomain.fr"
    );
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_METHODS],
        "GET, POST, DELETE, OPTIONS"
    );
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_HEADERS],
        "Authorization"
    );
    // `localhost`: loopback pages only; others get a 200 without an allowed origin.
    for origin in [
        "http://localhost:8080",
        "http://127.0.0.1",
        "http://[::1]:3000",
    ] {
        let (status, headers, _) = send(app("localhost"), preflight(origin)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], origin);
    }
    for origin in ["http://evil.com", "http://localhost.evil.com"] {
        let (status, headers, _) = send(app("localhost"), preflight(origin)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            !headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
            "{origin}"
        );
    }
    // A list; a real request (here a 401) carries the headers too.
    let list = "https://a.example,https://b.example";
    let req = Request::get("/v1/models")
        .header(header::ORIGIN, "https://b.example")
        .body(Body::empty())
        .unwrap();
    let (status, headers, _) = send(app(list), req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://b.example"
    );
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    let (_, headers, _) = send(app(list), preflight("https://c.example")).await;
    assert!(!headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
}

#[tokio::test]
async fn completions_whole_and_streamed_agree() {
    let app = app();
    let body = json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0});
    let (status, whole) = post_json(app.clone(), "/v1/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["object"], "text_completion");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, _, text) = send(app.clone(), post("/v1/completions", streamed.to_string())).await;
    let events = sse_events(&text);
    let joined: String = events[..events.len() - 1]
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(e).unwrap()["choices"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(joined, whole["choices"][0]["text"].as_str().unwrap());
    let tokens = json!({"prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0});
    let (status, body) = post_json(app.clone(), "/v1/completions", &tokens).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // A batch: one choice per prompt, by index, each the answer its prompt gets alone.
    let batch =
        json!({"prompt": ["Once upon a time", [1, 2, 3]], "max_tokens": 4, "temperature": 0});
    let (status, answers) = post_json(app.clone(), "/v1/completions", &batch).await;
    assert_eq!(status, StatusCode::OK, "{answers}");
    assert_eq!(answers["choices"][0]["index"], 0);
    assert_eq!(answers["choices"][1]["index"], 1);
    assert_eq!(answers["choices"][1]["text"], body["choices"][0]["text"]);
    let mut streamed = batch.clone();
    streamed["stream"] = json!(true);
    let (status, body) = post_json(app, "/v1/completions", &streamed).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, Some("stream"));
}

#[tokio::test]
async fn embeddings_as_floats_and_base64() {
    let app = app();
    let (status, body) = post_json(
        app.clone(),
        "/v1/embeddings",
        &json!({"input": ["hello", "world"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = body["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let floats = data[0]["embedding"].as_array().unwrap();
    assert!(!floats.is_empty());
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    let (_, b64) = post_json(
        app.clone(),
        "/v1/embeddings",
        &json!({"input": "hello", "encoding_format": "base64"}),
    )
    .await;
    let text = b64["data"][0]["embedding"].as_str().unwrap();
    assert_eq!(text.len(), (floats.len() * 4).div_ceil(3) * 4);
    let (status, body) = post_json(app, "/v1/embeddings", &json!({"input": []})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_error(&body, Some("input"));
}

#[tokio::test]
async fn models_tokenize_detokenize_and_metrics() {
    let app = app();
    let (status, _, text) = send(
        app.clone(),
        Request::get("/v1/models").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["id"], "stub");
    let (status, _, _) = send(
        app.clone(),
        Request::get("/v1/models/stub").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(
        app.clone(),
        Request::get("/v1/models/nope").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, tokens) =
        post_json(app.clone(), "/tokenize", &json!({"content": "Hello world"})).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let (status, text) = post_json(
        app.clone(),
        "/detokenize",
        &json!({"tokens": tokens["tokens"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(text["content"], "Hello world");
    let (status, body) = post_json(app.clone(), "/detokenize", &json!({"tokens": [-1]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = post_json(
        app.clone(),
        "/detokenize",
        &json!({"tokens": [999_999_999]}),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    post_json(app.clone(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    let (status, _, metrics) =
        send(app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    for name in [
        "wick_requests_total",
        "wick_prompt_tokens_total",
        "wick_completion_tokens_total",
        "wick_prompt_tokens_cached_total",
        "wick_queue_depth",
        "wick_live_sequences",
        "wick_time_to_first_token_seconds_bucket",
        "wick_time_per_output_token_seconds_count",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    let line = metrics
        .lines()
        .find(|l| l.starts_with("wick_completion_tokens_total "))
        .unwrap();
    assert_ne!(line, "wick_completion_tokens_total 0");
}

#[tokio::test]
async fn tool_turns_and_template_options_are_accepted() {
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let body = chat_body(&json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
        ],
        "tools": tools,
        "tool_choice": "none",
        "parallel_tool_calls": false,
        "reasoning_effort": "low",
        "chat_template_kwargs": {"enable_thinking": false},
    }));
    let (status, body) = post_json(app(), "/v1/chat/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["choices"][0]["message"].get("tool_calls").is_none(),
        "{body}"
    );
}

#[tokio::test]
async fn a_long_completion_prompt_names_the_prompt_field() {
    let app = router(state(ServerConfig::default(), 64));
    let body = json!({"prompt": "word ".repeat(400), "max_tokens": 4});
    let (status, body) = post_json(app, "/v1/completions", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_error(&body, Some("prompt"));
    assert_eq!(body["error"]["code"], "context_length_exceeded");
}

/// The `logprobs.content` entries of a chat answer, checked for OpenAI's shape.
fn content_entries(logprobs: &Value, top: usize) -> Vec<Value> {
    assert_eq!(logprobs["refusal"], Value::Null, "{logprobs}");
    let entries = logprobs["content"].as_array().expect("content[]").clone();
    for e in &entries {
        let token = e["token"].as_str().expect("token");
        let bytes: Vec<u8> = serde_json::from_value(e["bytes"].clone()).expect("bytes");
        assert_eq!(String::from_utf8_lossy(&bytes), token);
        assert!(e["logprob"].as_f64().expect("logprob") <= 0.0);
        let alts = e["top_logprobs"].as_array().expect("top_logprobs[]");
        assert_eq!(alts.len(), top, "{e}");
        for a in alts {
            assert!(a["token"].is_string() && a["bytes"].is_array(), "{a}");
            assert!(a["logprob"].as_f64().expect("logprob") <= 0.0);
        }
        if top > 0 {
            // Greedy (temperature 0, no bias): the token is the most likely one.
            assert_eq!(alts[0]["token"], e["token"], "{e}");
            assert_eq!(alts[0]["logprob"], e["logprob"], "{e}");
        }
    }
    entries
}

#[tokio::test]
async fn chat_logprobs_whole_and_streamed_agree() {
    let app = app();
    let extra = json!({"logprobs": true, "top_logprobs": 3});
    let (status, whole) = post_json(app.clone(), "/v1/chat/completions", &chat_body(&extra)).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let choice = &whole["choices"][0];
    let entries = content_entries(&choice["logprobs"], 3);
    assert!(!entries.is_empty());
    let joined: String = entries
        .iter()
        .map(|e| e["token"].as_str().unwrap())
        .collect();
    assert_eq!(joined, choice["message"]["content"].as_str().unwrap());

    let mut streamed_body = chat_body(&extra);
    streamed_body["stream"] = json!(true);
    let (_, _, text) = send(
        app.clone(),
        post("/v1/chat/completions", streamed_body.to_string()),
    )
    .await;
    let events = sse_events(&text);
    let mut streamed = Vec::new();
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        let logprobs = &chunk["choices"][0]["logprobs"];
        if !logprobs.is_null() {
            streamed.extend(content_entries(logprobs, 3));
        }
    }
    assert_eq!(streamed, entries, "the stream reports the same tokens");

    // Without logprobs, `logprobs` stays null; `top_logprobs: 0` gives entries without
    // alternatives.
    let (_, plain) = post_json(app.clone(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    assert_eq!(plain["choices"][0]["logprobs"], Value::Null);
    let zero = json!({"logprobs": true, "top_logprobs": 0});
    let (_, body) = post_json(app, "/v1/chat/completions", &chat_body(&zero)).await;
    assert_eq!(
        content_entries(&body["choices"][0]["logprobs"], 0).len(),
        entries.len()
    );
}

/// The legacy `logprobs` object, checked for its shape; returns its tokens.
fn legacy_tokens(logprobs: &Value, top: usize) -> Vec<String> {
    let tokens: Vec<String> = serde_json::from_value(logprobs["tokens"].clone()).expect("tokens");
    let n = tokens.len();
    assert_eq!(logprobs["token_logprobs"].as_array().unwrap().len(), n);
    assert_eq!(logprobs["text_offset"].as_array().unwrap().len(), n);
    let tops = logprobs["top_logprobs"].as_array().unwrap();
    assert_eq!(tops.len(), n);
    for (i, t) in tops.iter().enumerate() {
        let t = t.as_object().expect("a token → logprob object");
        assert!(t.len() <= top, "{t:?}");
        if top > 0 {
            assert!(
                t.contains_key(&tokens[i]),
                "greedy picks a top token: {t:?}"
            );
        }
    }
    tokens
}

#[tokio::test]
async fn completion_logprobs_are_the_legacy_arrays() {
    let app = app();
    let body = json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0,
                      "logprobs": 2});
    let (status, whole) = post_json(app.clone(), "/v1/completions", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let choice = &whole["choices"][0];
    let tokens = legacy_tokens(&choice["logprobs"], 2);
    assert_eq!(tokens.concat(), choice["text"].as_str().unwrap());
    let offsets: Vec<usize> =
        serde_json::from_value(choice["logprobs"]["text_offset"].clone()).unwrap();
    let mut expected = 0;
    for (token, offset) in tokens.iter().zip(&offsets) {
        assert_eq!(*offset, expected);
        expected += token.chars().count();
    }

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, _, text) = send(app.clone(), post("/v1/completions", streamed.to_string())).await;
    let events = sse_events(&text);
    let mut streamed_tokens = Vec::new();
    let mut streamed_offsets: Vec<usize> = Vec::new();
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).unwrap();
        let logprobs = &chunk["choices"][0]["logprobs"];
        streamed_tokens.extend(legacy_tokens(logprobs, 2));
        streamed_offsets
            .extend(serde_json::from_value::<Vec<usize>>(logprobs["text_offset"].clone()).unwrap());
    }
    assert_eq!(streamed_tokens, tokens);
    assert_eq!(streamed_offsets, offsets);

    for bad in [json!(6), json!(-1), json!(true), json!("2")] {
        let body = json!({"prompt": "x", "logprobs": bad});
        let (status, body) = post_json(app.clone(), "/v1/completions", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_error(&body, Some("logprobs"));
    }
}

#[tokio::test]
async fn llama_server_route_names_without_v1_answer_as_the_v1_ones() {
    let (status, v1) = post_json(app(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{v1}");
    let (status, bare) = post_json(app(), "/chat/completions", &chat_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{bare}");
    assert_eq!(
        bare["choices"][0]["message"], v1["choices"][0]["message"],
        "the same seeded request, the same answer"
    );
    for path in ["/models", "/v1/health"] {
        let req = Request::get(path).body(Body::empty()).unwrap();
        let (status, _, text) = send(app(), req).await;
        assert_eq!(status, StatusCode::OK, "{path}: {text}");
    }
    let req = Request::get("/models").body(Body::empty()).unwrap();
    let (_, _, text) = send(app(), req).await;
    let models: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(models["data"][0]["id"], "stub");
}

#[tokio::test]
async fn tokenize_with_pieces_gives_each_tokens_text() {
    let body = json!({"content": "Hello world", "with_pieces": true});
    let (status, pieces) = post_json(app(), "/tokenize", &body).await;
    assert_eq!(status, StatusCode::OK, "{pieces}");
    let (_, plain) = post_json(app(), "/tokenize", &json!({"content": "Hello world"})).await;
    let pieces = pieces["tokens"].as_array().unwrap();
    let ids: Vec<&Value> = pieces.iter().map(|p| &p["id"]).collect();
    assert_eq!(
        ids,
        plain["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>()
    );
    let text: String = pieces
        .iter()
        .map(|p| p["piece"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Hello world", "the pieces spell the text");
}

#[tokio::test]
async fn native_completion_answers_in_llama_servers_shape_whole_and_streamed() {
    let app = app();
    let body = json!({"prompt": "Once upon a time", "n_predict": 6, "temperature": 0, "seed": 3,
                      "return_tokens": true, "cache_prompt": true});
    let (status, whole) = post_json(app.clone(), "/completion", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["stop"], true, "{whole}");
    assert!(whole["content"].is_string(), "{whole}");
    assert_eq!(whole["tokens"].as_array().unwrap().len(), 6, "{whole}");
    assert_eq!(whole["tokens_predicted"], 6, "{whole}");
    assert_eq!(whole["timings"]["predicted_n"], 6, "{whole}");
    assert_eq!(whole["stop_type"], "limit", "{whole}");
    assert_eq!(whole["truncated"], false);
    assert!(whole["has_new_line"].is_boolean());
    assert_eq!(whole["generation_settings"]["n_predict"], 6);
    assert_eq!(whole["generation_settings"]["seed"], 3);
    let evaluated = whole["tokens_evaluated"].as_u64().unwrap();
    let computed = whole["timings"]["prompt_n"].as_u64().unwrap();
    let cached = whole["timings"]["cache_n"].as_u64().unwrap();
    assert!(evaluated > 0 && computed + cached == evaluated, "{whole}");

    // `/completions` is the same native route, as in llama-server; `-1` means the default.
    let mut plain = body.clone();
    plain["return_tokens"] = json!(false);
    let (status, again) = post_json(app.clone(), "/completions", &plain).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["content"], whole["content"]);
    assert_eq!(again["tokens"], json!([]));

    let mut streamed = plain.clone();
    streamed["stream"] = json!(true);
    let (status, _, text) = send(app.clone(), post("/completion", streamed.to_string())).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let chunks: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let (last, parts) = chunks.split_last().unwrap();
    assert_eq!(last["stop"], true, "{text}");
    assert_eq!(last["stop_type"], "limit", "{text}");
    assert_eq!(last["timings"]["predicted_n"], 6, "{text}");
    let mut content = String::new();
    for part in parts {
        assert_eq!(part["stop"], false, "{text}");
        assert!(!part["tokens"].as_array().unwrap().is_empty(), "{text}");
        content.push_str(part["content"].as_str().unwrap());
    }
    assert_eq!(
        content,
        whole["content"].as_str().unwrap(),
        "streamed = whole"
    );
    assert!(
        !text.contains("[DONE]"),
        "llama-server ends this stream without [DONE]"
    );

    let (status, err) = post_json(app, "/completion", &json!({"n_predict": 4})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
}

#[tokio::test]
async fn native_completion_takes_llama_servers_logit_bias_and_ignore_eos() {
    let app = app();
    let body = json!({"prompt": "Hello", "n_predict": 4, "temperature": 0});
    let (status, plain) = post_json(app.clone(), "/completion", &body).await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(plain["generation_settings"]["logit_bias"], json!([]));
    // ignore_eos bans every end-of-generation token, echoed as null (-inf) biases.
    let mut eos = body.clone();
    eos["ignore_eos"] = json!(true);
    let (status, answer) = post_json(app.clone(), "/completion", &eos).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let biases = answer["generation_settings"]["logit_bias"]
        .as_array()
        .unwrap();
    assert!(!biases.is_empty(), "{answer}");
    assert!(biases.iter().all(|b| b["bias"].is_null()), "{answer}");
    // Banning the tokens the plain answer began with changes it; the three spellings agree.
    let first = &plain["content"];
    let (_, tokens) = post_json(app.clone(), "/tokenize", &json!({"content": first})).await;
    let ids: Vec<u64> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let mut answers = Vec::new();
    for bias in [
        json!(ids.iter().map(|id| json!([id, false])).collect::<Vec<_>>()),
        json!(ids
            .iter()
            .map(|id| (id.to_string(), json!(-100)))
            .collect::<serde_json::Map<_, _>>()),
        json!([[first, false]]),
    ] {
        let mut banned = body.clone();
        banned["logit_bias"] = bias.clone();
        let (status, answer) = post_json(app.clone(), "/completion", &banned).await;
        assert_eq!(status, StatusCode::OK, "{bias}: {answer}");
        assert_ne!(answer["content"], *first, "{bias}: {answer}");
        answers.push(answer["content"].clone());
    }
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    for bad in [
        json!([[1]]),
        json!([["x", "y"]]),
        json!("x"),
        json!([[u32::MAX, 1]]),
    ] {
        let mut request = body.clone();
        request["logit_bias"] = bad.clone();
        let (status, err) = post_json(app.clone(), "/completion", &request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {err}");
        assert_eq!(err["error"]["param"], "logit_bias", "{bad}: {err}");
    }
}

#[tokio::test]
async fn native_completion_lists_n_probs_per_token_whole_and_streamed() {
    let app = app();
    let body = json!({"prompt": "Once upon a time", "n_predict": 4, "temperature": 0,
                      "n_probs": 3});
    let (status, whole) = post_json(app.clone(), "/completion", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let probs = whole["completion_probabilities"].as_array().unwrap();
    assert_eq!(probs.len(), 4, "{whole}");
    for tok in probs {
        assert!(tok["id"].is_u64() && tok["token"].is_string(), "{tok}");
        assert!(tok["logprob"].as_f64().unwrap() <= 0.0, "{tok}");
        assert!(tok["bytes"].is_array(), "{tok}");
        let top = tok["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{tok}");
        assert!(top
            .iter()
            .all(|t| t["id"].is_u64() && t["bytes"].is_array()));
    }
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (_, _, text) = send(app.clone(), post("/completion", streamed.to_string())).await;
    let parts: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter(|c| c["stop"] == false)
        .collect();
    let listed: Vec<Value> = parts
        .iter()
        .flat_map(|p| p["completion_probabilities"].as_array().unwrap().clone())
        .collect();
    assert_eq!(&listed, probs, "streamed = whole");
    // Without n_probs none are listed; out of range is a 400 naming it.
    let (_, plain) = post_json(
        app.clone(),
        "/completion",
        &json!({"prompt": "Hi", "n_predict": 2}),
    )
    .await;
    assert!(plain.get("completion_probabilities").is_none(), "{plain}");
    let (status, err) =
        post_json(app, "/completion", &json!({"prompt": "Hi", "n_probs": 21})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["error"]["param"], "n_probs");
}

#[tokio::test]
async fn llama_server_props_slots_apply_template_and_input_tokens() {
    let app = app();
    let req = Request::get("/props").body(Body::empty()).unwrap();
    let (status, _, text) = send(app.clone(), req).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let props: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(props["model_alias"], "stub");
    let slots = props["total_slots"].as_u64().unwrap();
    assert!(slots >= 1, "{props}");
    let n_ctx = &props["default_generation_settings"]["n_ctx"];
    assert_eq!(*n_ctx, 512, "{props}");
    // The defaults a request without sampling fields really gets (validation's, not the
    // library builder's), the seed fresh for each request as llama-server's "random" seed.
    let params = &props["default_generation_settings"]["params"];
    assert_eq!(params["seed"], u32::MAX, "{props}");
    assert!(
        (params["temperature"].as_f64().unwrap() - 0.8).abs() < 1e-6,
        "{props}"
    );
    assert_eq!(params["top_k"], 40, "{props}");

    let req = Request::get("/slots").body(Body::empty()).unwrap();
    let (status, _, text) = send(app.clone(), req).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list.as_array().unwrap().len() as u64, slots);
    assert_eq!(list[0]["n_ctx"], *n_ctx);
    assert!(list[0].get("params").is_none());

    let chat = json!({"messages": [{"role": "system", "content": "You are a test."},
                                    {"role": "user", "content": "Hi there"}]});
    let (status, body) = post_json(app.clone(), "/apply-template", &chat).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let prompt = body["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("You are a test.") && prompt.contains("Hi there"),
        "{prompt}"
    );

    // The count is the prompt an answer computes: the same as the answer's usage.
    let (status, count) = post_json(app.clone(), "/chat/completions/input_tokens", &chat).await;
    assert_eq!(status, StatusCode::OK, "{count}");
    let mut answer = chat.clone();
    answer["max_tokens"] = json!(2);
    let (_, answered) = post_json(app.clone(), "/v1/chat/completions", &answer).await;
    assert_eq!(
        count["input_tokens"], answered["usage"]["prompt_tokens"],
        "{answered}"
    );
    let (status, _) = post_json(app, "/v1/chat/completions/input_tokens", &chat).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn llama_servers_own_embeddings_list_each_inputs_vector() {
    let (status, v1) = post_json(app(), "/v1/embeddings", &json!({"input": "sea"})).await;
    assert_eq!(status, StatusCode::OK, "{v1}");
    for path in ["/embeddings", "/embedding"] {
        let body = json!({"input": ["sea", "sky"]});
        let (status, native) = post_json(app(), path, &body).await;
        assert_eq!(status, StatusCode::OK, "{path}: {native}");
        let list = native.as_array().unwrap();
        assert_eq!(list.len(), 2, "{native}");
        assert_eq!(list[1]["index"], 1);
        assert_eq!(
            list[0]["embedding"][0], v1["data"][0]["embedding"],
            "{path}"
        );
    }
    let (status, old) = post_json(app(), "/embedding", &json!({"content": "sea"})).await;
    assert_eq!(status, StatusCode::OK, "{old}");
    assert_eq!(old[0]["embedding"][0], v1["data"][0]["embedding"]);
}

#[tokio::test]
async fn rerank_is_refused_clearly_for_a_generative_model() {
    let body = json!({"query": "sea", "documents": ["a", "b"]});
    for path in ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"] {
        let (status, err) = post_json(app(), path, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cannot rerank"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn return_progress_and_timings_per_token_follow_llama_server() {
    let app = app();
    let body = chat_body(
        &json!({"stream": true, "return_progress": true, "max_tokens": 6,
        "timings_per_token": true, "stream_options": {"include_usage": true}}),
    );
    let (_, _, text) = send(app.clone(), post("/v1/chat/completions", body.to_string())).await;
    let events = sse_events(&text);
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    // Progress chunks first: the role and no content, counts up to the whole prompt.
    let progress: Vec<&Value> = chunks
        .iter()
        .take_while(|c| c.get("prompt_progress").is_some())
        .collect();
    assert!(!progress.is_empty(), "{chunks:?}");
    let first = &progress[0]["prompt_progress"];
    assert_eq!(first["cache"], first["processed"]);
    let last = &progress.last().unwrap()["prompt_progress"];
    assert_eq!(last["processed"], last["total"]);
    assert!(last["total"].as_u64().unwrap() > 0 && last["time_ms"].is_u64());
    assert_eq!(
        progress[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": null})
    );
    let rest = &chunks[progress.len()..];
    assert!(rest.iter().all(|c| c.get("prompt_progress").is_none()));
    // Timings on every chunk after them, the whole answer's with the usage.
    assert!(rest
        .iter()
        .all(|c| c["timings"]["predicted_per_second"].is_f64()));
    let (usage, _) = rest.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["timings"]["predicted_n"],
        usage["usage"]["completion_tokens"]
    );
    // The first token's time is recorded once, at the first token, not at a progress report.
    let (_, _, metrics) = send(
        app.clone(),
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await;
    assert!(
        metrics.contains("wick_time_to_first_token_seconds_count 1\n"),
        "{metrics}"
    );
    // The request's own logprobs stay off: timings counting tokens does not show them.
    assert!(rest.iter().all(|c| c["choices"]
        .as_array()
        .unwrap()
        .iter()
        .all(|ch| ch["logprobs"].is_null())));

    // Without asking: no progress, no per-token timings; a whole answer has its timings.
    let body = chat_body(&json!({"stream": true}));
    let (_, _, text) = send(app.clone(), post("/v1/chat/completions", body.to_string())).await;
    assert!(!text.contains("prompt_progress") && !text.contains("timings"));
    let (_, whole) = post_json(app.clone(), "/v1/chat/completions", &chat_body(&json!({}))).await;
    assert!(whole["timings"]["prompt_per_second"].is_f64(), "{whole}");

    // The native route and Responses report progress too.
    let body =
        json!({"prompt": "Once upon", "n_predict": 4, "stream": true, "return_progress": true});
    let (_, _, text) = send(app.clone(), post("/completion", body.to_string())).await;
    let first: Value = serde_json::from_str(
        text.split("\n\n")
            .next()
            .unwrap()
            .trim_start_matches("data: "),
    )
    .unwrap();
    assert_eq!(first["content"], "");
    assert_eq!(
        first["prompt_progress"]["cache"],
        first["prompt_progress"]["processed"]
    );
    let body = json!({"model": "stub", "input": "Hello", "stream": true, "max_output_tokens": 4,
        "return_progress": true, "timings_per_token": true});
    let (_, _, text) = send(app, post("/v1/responses", body.to_string())).await;
    let events: Vec<Value> = text
        .split_terminator("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let reports: Vec<&Value> = events
        .iter()
        .filter(|e| e.get("prompt_progress").is_some())
        .collect();
    assert!(!reports.is_empty());
    assert!(reports.iter().all(|e| e["type"] == "response.in_progress"));
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta");
    assert!(deltas.clone().count() > 0);
    assert!(deltas
        .into_iter()
        .all(|e| e["timings"]["prompt_per_second"].is_f64()));
    let end = events.last().unwrap();
    assert!(end["type"].as_str().unwrap().starts_with("response."));
    assert!(end["timings"]["predicted_n"].as_u64().unwrap() > 0, "{end}");
}
