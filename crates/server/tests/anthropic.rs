//! The Anthropic Messages routes over the stub backend, driven with `oneshot`: the message
//! and stream shapes, Anthropic's event order, streamed = whole, `count_tokens`, and every
//! error path's status and Anthropic error body.

mod common;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use common::{post, post_json, send, stub_state};
use serde_json::{json, Value};
use tower::ServiceExt;
use wick_server::{router, AppState, ServerConfig};

fn state_with(config: ServerConfig, n_ctx: u32, max_new_tokens: u32) -> AppState {
    stub_state(config, n_ctx, max_new_tokens, &[])
}

fn app() -> Router {
    router(state_with(ServerConfig::default(), 512, 24))
}

fn message_body(extra: &Value) -> Value {
    let mut body = json!({
        "model": "stub",
        "max_tokens": 24,
        "messages": [{"role": "user", "content": "Tell me about the sea."}],
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Asserts an Anthropic error body of `kind`.
fn assert_anthropic_error(body: &Value, kind: &str) {
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

/// The `(event, data)` pairs of an Anthropic SSE body, checking that each frame is one
/// `event:` line and one `data:` line whose `type` is the event's name.
fn events(body: &str) -> Vec<(String, Value)> {
    body.split_terminator("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').expect("two lines");
            let name = event.strip_prefix("event: ").expect("an event line");
            let data = data.strip_prefix("data: ").expect("a data line");
            assert!(!data.contains('\n'), "multi-line data {frame:?}");
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{frame}");
            (name.to_owned(), data)
        })
        .collect()
}

fn index_of(data: &Value) -> usize {
    usize::try_from(data["index"].as_u64().unwrap()).unwrap()
}

/// The whole message a stream accumulates to, checking Anthropic's event order and the
/// blocks' numbering on the way.
fn accumulate(events: &[(String, Value)]) -> Value {
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[0], "message_start", "{names:?}");
    assert_eq!(names[1], "ping", "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let mut message = events[0].1["message"].clone();
    assert_eq!(message["content"], json!([]));
    // The prompt's size is known when the answer starts (the cache split comes at the end).
    assert!(
        message["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "{message}"
    );
    let mut open: Option<usize> = None;
    for (name, data) in &events[2..events.len() - 2] {
        let content = message["content"].as_array_mut().unwrap();
        match name.as_str() {
            "content_block_start" => {
                assert_eq!(open, None, "a block opened inside another");
                let index = index_of(data);
                assert_eq!(index, content.len(), "blocks are numbered in order");
                content.push(data["content_block"].clone());
                open = Some(index);
            }
            "content_block_delta" => {
                let index = index_of(data);
                assert_eq!(open, Some(index));
                let block = &mut content[index];
                let delta = &data["delta"];
                let (field, piece) = match delta["type"].as_str().unwrap() {
                    "text_delta" => ("text", &delta["text"]),
                    "thinking_delta" => ("thinking", &delta["thinking"]),
                    "input_json_delta" => ("partial_json", &delta["partial_json"]),
                    other => panic!("unknown delta {other}"),
                };
                let so_far = block[field].as_str().unwrap_or("").to_owned();
                block[field] = Value::String(so_far + piece.as_str().unwrap());
            }
            "content_block_stop" => {
                let index = index_of(data);
                assert_eq!(open, Some(index));
                let block = &mut content[index];
                if let Some(json) = block.as_object_mut().unwrap().remove("partial_json") {
                    block["input"] = serde_json::from_str(json.as_str().unwrap()).unwrap();
                }
                open = None;
            }
            "ping" => {}
            other => panic!("unexpected event {other} between blocks"),
        }
    }
    assert_eq!(open, None, "a block was left open");
    let delta = &events[events.len() - 2].1;
    message["stop_reason"] = delta["delta"]["stop_reason"].clone();
    message["stop_sequence"] = delta["delta"]["stop_sequence"].clone();
    for (k, v) in delta["usage"].as_object().unwrap() {
        message["usage"][k] = v.clone();
    }
    message
}

#[tokio::test]
async fn a_message_is_an_anthropic_message_with_usage() {
    let (status, body) = post_json(app(), "/v1/messages", &message_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("msg_"), "{body}");
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "stub");
    let content = body["content"].as_array().unwrap();
    assert!(!content.is_empty(), "{body}");
    assert!(content.iter().all(|b| b["type"] == "text"), "{body}");
    assert!(["end_turn", "max_tokens"].contains(&body["stop_reason"].as_str().unwrap()));
    assert!(body["stop_sequence"].is_null());
    let usage = &body["usage"];
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{body}");
    let out = usage["output_tokens"].as_u64().unwrap();
    assert!(out > 0 && out <= 24, "{body}");
    assert!(usage["cache_read_input_tokens"].is_u64(), "{body}");
}

#[tokio::test]
async fn the_stream_follows_anthropics_event_order_and_equals_the_whole_answer() {
    let app = app();
    let (status, whole) = post_json(app.clone(), "/v1/messages", &message_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let req = post(
        "/v1/messages",
        message_body(&json!({"stream": true})).to_string(),
    );
    let (status, headers, text) = send(app, req).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(headers[header::CONTENT_TYPE], "text/event-stream");
    let streamed = accumulate(&events(&text));
    assert!(streamed["id"].as_str().unwrap().starts_with("msg_"));
    for field in [
        "type",
        "role",
        "model",
        "content",
        "stop_reason",
        "stop_sequence",
    ] {
        assert_eq!(streamed[field], whole[field], "{field}: {text}");
    }
    // The second request reads its prompt from the cache: the split differs, the sum not.
    let total = |m: &Value| {
        m["usage"]["input_tokens"].as_u64().unwrap()
            + m["usage"]["cache_read_input_tokens"].as_u64().unwrap()
    };
    assert_eq!(total(&streamed), total(&whole));
    assert_eq!(
        streamed["usage"]["output_tokens"],
        whole["usage"]["output_tokens"]
    );
}

#[tokio::test]
async fn a_query_string_and_unknown_fields_are_accepted() {
    let body = message_body(&json!({
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}, "citations": null}]}],
        "metadata": {"user_id": "someone"},
        "top_k": 5,
        "top_p": 0.9,
        "stop_sequences": ["\n\nHuman:"],
        "thinking": {"type": "disabled"},
        "service_tier": "auto",
        "a_field_from_the_future": {"x": 1},
    }));
    let (status, body) = post_json(app(), "/v1/messages?beta=true", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "message");
}

#[tokio::test]
async fn a_tool_round_trip_is_answered() {
    let body = message_body(&json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should call it.", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny",
                 "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [{"name": "get_weather", "description": "Weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                   "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "auto"},
    }));
    let (status, body) = post_json(app(), "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "message");
}

#[tokio::test]
async fn tool_choice_by_name_must_name_one_of_the_tools() {
    let tools = json!([{"name": "get_weather", "input_schema": {"type": "object"}}]);
    let body = message_body(&json!({
        "tools": tools, "tool_choice": {"type": "tool", "name": "get_time"}}));
    let (status, body) = post_json(app(), "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_anthropic_error(&body, "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("get_time"), "{message}");
}

#[tokio::test]
async fn count_tokens_counts_the_prompt_an_answer_renders() {
    let app = app();
    let request = message_body(&json!({"system": "Be brief."}));
    let (status, count) = post_json(app.clone(), "/v1/messages/count_tokens", &request).await;
    assert_eq!(status, StatusCode::OK, "{count}");
    assert_eq!(count.as_object().unwrap().len(), 1, "{count}");
    let n = count["input_tokens"].as_u64().unwrap();
    let (_, answer) = post_json(app.clone(), "/v1/messages", &request).await;
    let usage = &answer["usage"];
    assert_eq!(
        n,
        usage["input_tokens"].as_u64().unwrap()
            + usage["cache_read_input_tokens"].as_u64().unwrap(),
        "{answer}"
    );
    // No max_tokens needed; a longer conversation counts more.
    let mut longer = request.clone();
    longer.as_object_mut().unwrap().remove("max_tokens");
    longer["messages"] = json!([
        {"role": "user", "content": "Tell me about the sea."},
        {"role": "assistant", "content": "It is wide."},
        {"role": "user", "content": "And deep?"}
    ]);
    let (status, more) = post_json(app, "/v1/messages/count_tokens", &longer).await;
    assert_eq!(status, StatusCode::OK, "{more}");
    assert!(
        more["input_tokens"].as_u64().unwrap() > n,
        "{more} vs {count}"
    );
}

#[tokio::test]
async fn count_tokens_counts_a_prompt_too_long_to_answer() {
    let app = router(state_with(ServerConfig::default(), 64, 24));
    let body = message_body(&json!({"messages": [{"role": "user", "content": "sea ".repeat(80)}]}));
    let (status, answer) = post_json(app.clone(), "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_anthropic_error(&answer, "invalid_request_error");
    let (status, count) = post_json(app, "/v1/messages/count_tokens", &body).await;
    assert_eq!(status, StatusCode::OK, "{count}");
    assert!(count["input_tokens"].as_u64().unwrap() > 64, "{count}");
}

#[tokio::test]
async fn bad_requests_are_anthropic_400s_that_say_why() {
    let cases = [
        (json!({"max_tokens": null}), "max_tokens"),
        (json!({"max_tokens": 0}), "max_tokens"),
        (json!({"temperature": 5}), "temperature"),
        (json!({"messages": []}), "messages"),
        (
            json!({"messages": [{"role": "user", "content": [{"type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}),
            "has no projector",
        ),
        (json!({"messages": "Hi"}), "messages"),
        (
            json!({"tool_choice": {"type": "any"}}),
            "needs at least one tool",
        ),
        (json!({"thinking": {"type": "sometimes"}}), "thinking"),
    ];
    for (extra, want) in cases {
        let (status, body) = post_json(app(), "/v1/messages", &message_body(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {body}");
        assert_anthropic_error(&body, "invalid_request_error");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(want), "{extra}: {message}");
    }
    let (status, _, text) = send(app(), post("/v1/messages", "{not json")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_anthropic_error(
        &serde_json::from_str(&text).unwrap(),
        "invalid_request_error",
    );
}

#[tokio::test]
async fn every_error_status_has_its_anthropic_type() {
    // 404: an unknown model, an unknown route under /v1/messages.
    let body = message_body(&json!({"model": "claude-nope"}));
    let (status, body) = post_json(
        router(state_with(
            ServerConfig {
                strict_model_names: true,
                ..ServerConfig::default()
            },
            512,
            24,
        )),
        "/v1/messages",
        &body,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_anthropic_error(&body, "not_found_error");
    let (status, body) = post_json(app(), "/v1/messages/batches", &json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_anthropic_error(&body, "not_found_error");
    // 405.
    let req = Request::get("/v1/messages").body(Body::empty()).unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{text}");
    assert_anthropic_error(
        &serde_json::from_str(&text).unwrap(),
        "invalid_request_error",
    );
    // 413.
    let config = ServerConfig {
        max_body_bytes: 1024,
        ..ServerConfig::default()
    };
    let big = message_body(&json!({"messages": [{"role": "user", "content": "x".repeat(4096)}]}));
    let (status, body) = post_json(router(state_with(config, 512, 24)), "/v1/messages", &big).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_anthropic_error(&body, "request_too_large");
    // 403: a foreign Host.
    let req = Request::post("/v1/messages")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::HOST, "rebound.example")
        .body(Body::from(message_body(&json!({})).to_string()))
        .unwrap();
    let (status, _, text) = send(app(), req).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    assert_anthropic_error(&serde_json::from_str(&text).unwrap(), "permission_error");
    // 503 while loading: overloaded, with Retry-After.
    let loading = AppState::new(ServerConfig::default());
    let req = post("/v1/messages", message_body(&json!({})).to_string());
    let (status, headers, text) = send(router(loading), req).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert_anthropic_error(&serde_json::from_str(&text).unwrap(), "overloaded_error");
    // The OpenAI routes keep OpenAI's shape.
    let (status, body) = post_json(app(), "/v1/chat/completions", &json!({"model": "x"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["param"].is_string(), "{body}");
    assert!(body.get("type").is_none(), "{body}");
}

#[tokio::test]
async fn the_api_key_is_taken_from_x_api_key_or_bearer() {
    let config = ServerConfig {
        api_key: Some("s3cret".into()),
        ..ServerConfig::default()
    };
    let app = router(state_with(config, 512, 24));
    let with = |auth: Option<(&str, &str)>| {
        let mut b = Request::post("/v1/messages").header(header::CONTENT_TYPE, "application/json");
        if let Some((name, value)) = auth {
            b = b.header(name, value);
        }
        b.body(Body::from(message_body(&json!({})).to_string()))
            .unwrap()
    };
    for auth in [
        None,
        Some(("x-api-key", "wrong")),
        Some(("authorization", "Bearer nope")),
    ] {
        let (status, _, text) = send(app.clone(), with(auth)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}: {text}");
        assert_anthropic_error(
            &serde_json::from_str(&text).unwrap(),
            "authentication_error",
        );
    }
    for auth in [("x-api-key", "s3cret"), ("authorization", "Bearer s3cret")] {
        let (status, _, text) = send(app.clone(), with(Some(auth))).await;
        assert_eq!(status, StatusCode::OK, "{auth:?}: {text}");
    }
}

#[tokio::test]
async fn a_stream_cut_by_shutdown_ends_with_an_error_event() {
    let state = state_with(ServerConfig::default(), 512, 400);
    let body = message_body(&json!({"stream": true, "max_tokens": 400}));
    let response = router(state.clone())
        .oneshot(post("/v1/messages", body.to_string()))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // Cut before the body is read: the stream is the error event alone.
    state.cancel_all();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let events = events(&text);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "error", "{text}");
    assert_anthropic_error(last, "overloaded_error");
    // Requests after that are Anthropic 503s.
    let (status, body) = post_json(router(state), "/v1/messages", &message_body(&json!({}))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_anthropic_error(&body, "overloaded_error");
}

#[tokio::test]
async fn a_stop_sequence_is_named_with_stop_reason_stop_sequence_whole_and_streamed() {
    let app = app();
    let (status, plain) = post_json(app.clone(), "/v1/messages", &message_body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert_eq!(plain["stop_sequence"], Value::Null, "{plain}");
    let text = plain["content"][0]["text"].as_str().unwrap().to_owned();
    // A piece of the greedy answer's middle: the same request with it as a stop sequence ends
    // there.
    let chars: Vec<char> = text.chars().collect();
    assert!(chars.len() > 8, "{text}");
    let stop: String = chars[4..7].iter().collect();
    let body = message_body(&json!({"stop_sequences": [stop]}));
    let (status, whole) = post_json(app.clone(), "/v1/messages", &body).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["stop_reason"], "stop_sequence", "{whole}");
    assert_eq!(whole["stop_sequence"], stop.as_str(), "{whole}");
    let cut = whole["content"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.starts_with(cut) && !cut.contains(&stop),
        "{cut:?} of {text:?}"
    );
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let (_, _, sse) = send(app, post("/v1/messages", streamed_body.to_string())).await;
    let streamed = accumulate(&events(&sse));
    assert_eq!(streamed["stop_reason"], "stop_sequence", "{sse}");
    assert_eq!(streamed["stop_sequence"], stop.as_str(), "{sse}");
}
