//! The OpenAI Responses routes over the stub backend, driven with `oneshot`: the response and
//! item shapes, string and item inputs, the numbered event stream (and that it equals the
//! whole response), `store` with `GET`/`DELETE` and `previous_response_id`, and the 400s and
//! 404s with the field they name.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use common::{json_of, stub_state};
use serde_json::{json, Value};
use tower::ServiceExt;
use wick_server::{router, AppState, ServerConfig};

fn state_with(n_ctx: u32, max_new_tokens: u32) -> AppState {
    stub_state(ServerConfig::default(), n_ctx, max_new_tokens, &[])
}

fn app() -> Router {
    router(state_with(1024, 24))
}

async fn send(app: Router, req: Request<Body>) -> (StatusCode, String) {
    let (status, _, text) = common::send(app, req).await;
    (status, text)
}

fn post(path: &str, body: &Value) -> Request<Body> {
    common::post(path, body.to_string())
}

async fn create(app: Router, body: &Value) -> (StatusCode, Value) {
    let (status, text) = send(app, post("/v1/responses", body)).await;
    (status, json_of(&text))
}

async fn call(app: Router, method: &str, path: &str) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    let (status, text) = send(app, req).await;
    (status, json_of(&text))
}

fn body(extra: &Value) -> Value {
    let mut body = json!({
        "model": "stub",
        "input": "Tell me about the sea.",
        "temperature": 0,
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// Asserts an OpenAI error body naming `param`.
fn assert_error(body: &Value, param: Option<&str>) {
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"].as_str(), param, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

/// The `(event, data)` pairs of a Responses SSE body, checking that each frame is one
/// `event:` line and one `data:` line whose `type` is the event's name, and that the
/// `sequence_number`s count up from 0.
fn events(body: &str) -> Vec<(String, Value)> {
    let events: Vec<(String, Value)> = body
        .split_terminator("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').expect("two lines");
            let name = event.strip_prefix("event: ").expect("an event line");
            let data = data.strip_prefix("data: ").expect("a data line");
            assert!(!data.contains('\n'), "multi-line data {frame:?}");
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], name, "{frame}");
            (name.to_owned(), data)
        })
        .collect();
    for (n, (_, data)) in events.iter().enumerate() {
        assert_eq!(data["sequence_number"], json!(n), "{data}");
    }
    events
}

/// The output a stream accumulates to, checking the event order on the way: each item
/// added, its part added, deltas, the text's and part's `.done`, the item's `.done` equal
/// to what the deltas built.
fn accumulate(events: &[(String, Value)]) -> Vec<Value> {
    let mut output: Vec<Value> = Vec::new();
    let mut open: Option<usize> = None;
    for (name, data) in events {
        let index = data["output_index"]
            .as_u64()
            .map(|i| usize::try_from(i).unwrap());
        if let Some(i) = index {
            if name != "response.output_item.added" {
                assert_eq!(open, Some(i), "{name} outside its item");
                assert_eq!(
                    data.get("item_id").unwrap_or(&output[i]["id"]),
                    &output[i]["id"]
                );
            }
        }
        match name.as_str() {
            "response.output_item.added" => {
                assert_eq!(open, None, "an item opened inside another");
                assert_eq!(index, Some(output.len()), "items are numbered in order");
                open = index;
                output.push(data["item"].clone());
            }
            "response.content_part.added" => {
                let item = &mut output[open.unwrap()];
                assert_eq!(data["content_index"], 0);
                item["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(data["part"].clone());
            }
            "response.output_text.delta" | "response.reasoning_text.delta" => {
                let part = &mut output[open.unwrap()]["content"][0];
                let so_far = part["text"].as_str().unwrap().to_owned();
                part["text"] = Value::String(so_far + data["delta"].as_str().unwrap());
            }
            "response.function_call_arguments.delta" => {
                let item = &mut output[open.unwrap()];
                let so_far = item["arguments"].as_str().unwrap().to_owned();
                item["arguments"] = Value::String(so_far + data["delta"].as_str().unwrap());
            }
            "response.output_text.done" | "response.reasoning_text.done" => {
                assert_eq!(data["text"], output[open.unwrap()]["content"][0]["text"]);
            }
            "response.content_part.done" => {
                assert_eq!(data["part"], output[open.unwrap()]["content"][0]);
            }
            "response.function_call_arguments.done" => {
                output[open.unwrap()]["arguments"] = data["arguments"].clone();
            }
            "response.output_item.done" => {
                let mut built = output[open.unwrap()].clone();
                built["status"] = data["item"]["status"].clone();
                assert_eq!(data["item"], built);
                output[open.unwrap()] = built;
                open = None;
            }
            "response.created"
            | "response.in_progress"
            | "response.completed"
            | "response.incomplete" => {}
            other => panic!("unexpected event {other}"),
        }
    }
    assert_eq!(open, None, "an item was left open");
    output
}

/// A response without its ids, creation time and cached-token count (the second of two
/// equal prompts is served from the prompt cache), to compare two answers.
fn without_ids(mut response: Value) -> Value {
    response["id"] = Value::Null;
    response["created_at"] = Value::Null;
    response["usage"]["input_tokens_details"]["cached_tokens"] = Value::Null;
    for item in response["output"].as_array_mut().into_iter().flatten() {
        item["id"] = Value::Null;
    }
    response
}

fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "message")
        .flat_map(|i| i["content"].as_array().unwrap().iter())
        .map(|p| p["text"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_string_input_gets_a_response_object_with_usage_and_the_settings() {
    let (status, r) = create(app(), &body(&json!({"metadata": {"k": "v"}, "user": "u1"}))).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert!(r["id"].as_str().unwrap().starts_with("resp_"), "{r}");
    assert_eq!(r["object"], "response");
    assert!(r["created_at"].as_u64().unwrap() > 0);
    assert_eq!(r["model"], "stub");
    assert_eq!(r["error"], Value::Null);
    let message = &r["output"][0];
    assert_eq!(message["type"], "message", "{r}");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["content"][0]["type"], "output_text");
    assert_eq!(message["content"][0]["annotations"], json!([]));
    assert!(!output_text(&r).is_empty());
    let usage = &r["usage"];
    let (input, output) = (
        usage["input_tokens"].as_u64().unwrap(),
        usage["output_tokens"].as_u64().unwrap(),
    );
    assert!(input > 0 && output > 0, "{usage}");
    assert_eq!(usage["total_tokens"], json!(input + output));
    assert!(usage["input_tokens_details"]["cached_tokens"].is_u64());
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    // The settings, as the SDK's `Response` reads them.
    assert_eq!(r["tool_choice"], "auto");
    assert_eq!(r["tools"], json!([]));
    assert_eq!(r["parallel_tool_calls"], true);
    assert_eq!(r["store"], true);
    assert_eq!(r["text"], json!({"format": {"type": "text"}}));
    assert_eq!(r["temperature"], 0.0);
    assert_eq!(r["top_p"], 0.95, "the default, as written");
    assert_eq!(r["metadata"], json!({"k": "v"}));
    assert_eq!(r["user"], "u1");
    assert_eq!(r["previous_response_id"], Value::Null);
    if r["status"] == "completed" {
        assert_eq!(r["incomplete_details"], Value::Null);
    } else {
        assert_eq!(r["status"], "incomplete", "{r}");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    }
}

#[tokio::test]
async fn items_instructions_and_a_function_call_round_trip_are_read() {
    let plain = body(&json!({"input": [{"role": "user", "content": "Weather in Paris?"}]}));
    let (status, short) = create(app(), &plain).await;
    assert_eq!(status, StatusCode::OK, "{short}");
    let round_trip = body(&json!({
        "instructions": "Answer briefly.",
        "input": [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Call it."}]},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
             "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {"role": "developer", "content": "Mind the units."},
        ],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                   "strict": true}],
        "tool_choice": "auto",
        "reasoning": {"effort": "low"},
        "some_future_field": {"x": 1},
    }));
    let (status, long) = create(app(), &round_trip).await;
    assert_eq!(status, StatusCode::OK, "{long}");
    assert_eq!(long["instructions"], "Answer briefly.");
    assert_eq!(long["tools"][0]["name"], "get_weather");
    assert_eq!(long["tools"][0]["type"], "function");
    assert_eq!(long["reasoning"]["effort"], "low");
    // Every item reached the prompt: the instructions, the call, its output and the rest.
    let tokens = |r: &Value| r["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        tokens(&long) > tokens(&short) + 20,
        "{} vs {}",
        tokens(&long),
        tokens(&short)
    );
}

#[tokio::test]
async fn the_stream_is_numbered_in_order_and_equals_the_whole_response() {
    let app = app();
    let (status, whole) = create(app.clone(), &body(&json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    let (status, text) = send(app, post("/v1/responses", &body(&json!({"stream": true})))).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let events = events(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..2],
        ["response.created", "response.in_progress"],
        "{names:?}"
    );
    let last = names.last().unwrap();
    assert!(
        *last == "response.completed" || *last == "response.incomplete",
        "{names:?}"
    );
    let created = &events[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["output"], json!([]));
    let final_response = events.last().unwrap().1["response"].clone();
    assert_eq!(created["id"], final_response["id"]);
    let output = accumulate(&events);
    assert_eq!(output, final_response["output"].as_array().unwrap().clone());
    assert_eq!(without_ids(final_response), without_ids(whole));
}

#[tokio::test]
async fn a_response_cut_at_max_output_tokens_is_incomplete_whole_and_streamed() {
    let app = app();
    let cut = body(&json!({"max_output_tokens": 2}));
    let (status, whole) = create(app.clone(), &cut).await;
    assert_eq!(status, StatusCode::OK, "{whole}");
    assert_eq!(whole["status"], "incomplete", "{whole}");
    assert_eq!(
        whole["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(whole["max_output_tokens"], 2);
    assert_eq!(whole["output"][0]["status"], "incomplete");
    let mut streamed = cut.clone();
    streamed["stream"] = json!(true);
    let (_, text) = send(app, post("/v1/responses", &streamed)).await;
    let events = events(&text);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "response.incomplete");
    assert_eq!(without_ids(last["response"].clone()), without_ids(whole));
}

#[tokio::test]
async fn store_get_delete_and_previous_response_id_continue_the_conversation() {
    let app = app();
    let (status, first) = create(app.clone(), &body(&json!({"instructions": "Be kind."}))).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let id = first["id"].as_str().unwrap();
    let (status, got) = call(app.clone(), "GET", &format!("/v1/responses/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got, first);
    // The continuation's prompt holds the first's input and output, then the new input
    // (and not the first's instructions, as in OpenAI's API).
    let next = body(&json!({"input": "And the mountains?", "previous_response_id": id}));
    let (status, second) = create(app.clone(), &next).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(second["previous_response_id"], id);
    assert_eq!(second["instructions"], Value::Null);
    let tokens = |r: &Value, k: &str| r["usage"][k].as_u64().unwrap();
    assert!(
        tokens(&second, "input_tokens") > tokens(&first, "output_tokens") + 5,
        "{second}"
    );
    // A chain of three: the third sees the first two turns.
    let second_id = second["id"].as_str().unwrap();
    let third = body(&json!({"input": "And rivers?", "previous_response_id": second_id}));
    let (status, third) = create(app.clone(), &third).await;
    assert_eq!(status, StatusCode::OK, "{third}");
    assert!(
        tokens(&third, "input_tokens")
            > tokens(&second, "input_tokens") + tokens(&second, "output_tokens")
    );
    // DELETE, then every use of the id is a 404.
    let (status, deleted) = call(app.clone(), "DELETE", &format!("/v1/responses/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(
        deleted,
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    for method in ["GET", "DELETE"] {
        let (status, body) = call(app.clone(), method, &format!("/v1/responses/{id}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method}: {body}");
        assert_error(&body, None);
        assert_eq!(body["error"]["code"], "not_found");
    }
    let (status, body) = create(app, &next).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_error(&body, Some("previous_response_id"));
    assert_eq!(body["error"]["code"], "previous_response_not_found");
}

#[tokio::test]
async fn input_items_lists_what_a_response_was_given_newest_first_in_pages() {
    let app = app();
    let (_, first) = create(app.clone(), &body(&json!({}))).await;
    let first_id = first["id"].as_str().unwrap();
    let next = body(
        &json!({"input": [{"role": "user", "content": "And the mountains?"}],
                            "previous_response_id": first_id}),
    );
    let (status, second) = create(app.clone(), &next).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let id = second["id"].as_str().unwrap();
    let path = format!("/v1/responses/{id}/input_items");
    // The first's input, its output message, then the new input: newest first.
    let (status, list) = call(app.clone(), "GET", &path).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["object"], "list");
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 3, "{list}");
    assert_eq!(
        data[0]["content"][0],
        json!({"type": "input_text", "text": "And the mountains?"})
    );
    assert_eq!(data[1]["id"], first["output"][0]["id"]);
    assert_eq!(data[2]["type"], "message");
    assert_eq!(data[2]["content"][0]["text"], "Tell me about the sea.");
    assert_eq!(list["first_id"], data[0]["id"]);
    assert_eq!(list["last_id"], data[2]["id"]);
    assert_eq!(list["has_more"], false);
    // The same ids on every call, so `after` pages.
    let (_, page) = call(app.clone(), "GET", &format!("{path}?order=asc&limit=2")).await;
    assert_eq!(page["has_more"], true, "{page}");
    assert_eq!(page["data"][0]["id"], data[2]["id"]);
    let after = page["last_id"].as_str().unwrap();
    let (_, rest) = call(
        app.clone(),
        "GET",
        &format!("{path}?order=asc&after={after}"),
    )
    .await;
    assert_eq!(rest["data"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest["data"][0]["id"], data[0]["id"]);
    // Bad queries name the parameter; an unknown response is a 404.
    let (status, bad) = call(app.clone(), "GET", &format!("{path}?limit=0")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    assert_error(&bad, Some("limit"));
    let (status, bad) = call(app.clone(), "GET", &format!("{path}?limit=many")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, missing) = call(app, "GET", "/v1/responses/resp_nope/input_items").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["error"]["code"], "not_found");
}

#[tokio::test]
async fn store_false_keeps_nothing_and_streams_are_stored_too() {
    let app = app();
    let (_, unstored) = create(app.clone(), &body(&json!({"store": false}))).await;
    assert_eq!(unstored["store"], false);
    let id = unstored["id"].as_str().unwrap();
    let (status, _) = call(app.clone(), "GET", &format!("/v1/responses/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, text) = send(
        app.clone(),
        post("/responses", &body(&json!({"stream": true}))),
    )
    .await;
    let events = events(&text);
    let last = &events.last().unwrap().1["response"];
    let id = last["id"].as_str().unwrap();
    let (status, got) = call(app, "GET", &format!("/v1/responses/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(&got, last);
}

#[tokio::test]
async fn text_format_json_schema_holds_the_answer_to_the_schema() {
    let format = json!({"format": {"type": "json_schema", "name": "answer",
                                   "schema": {"enum": ["yes", "no"]}, "strict": true}});
    let (status, r) = create(app(), &body(&json!({"text": format}))).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    let text = output_text(&r);
    assert!(text == "\"yes\"" || text == "\"no\"", "{text}");
    assert_eq!(r["text"], format);
}

#[tokio::test]
async fn bad_requests_are_400s_naming_the_field() {
    let tools = json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}]);
    let cases = [
        (json!({"input": null}), "input"),
        (json!({"input": 5}), "input"),
        (json!({"input": []}), "input"),
        (
            json!({"input": [{"type": "item_reference", "id": "x"}]}),
            "input[0]",
        ),
        (
            json!({"input": [{"role": "tool", "content": "x"}]}),
            "input[0]",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input[0]",
        ),
        (
            json!({"input": ["hi", {"type": "function_call_output", "output": "x"}]}),
            "input[0]",
        ),
        (
            json!({"input": [{"type": "function_call", "name": "f"}]}),
            "input[0]",
        ),
        (json!({"max_output_tokens": 0}), "max_output_tokens"),
        (json!({"temperature": 7}), "temperature"),
        (json!({"top_p": 3}), "top_p"),
        (
            json!({"text": {"format": {"type": "json_schema"}}}),
            "text.format",
        ),
        (json!({"text": {"format": {"type": "xml"}}}), "text.format"),
        (
            json!({"reasoning": {"effort": "extreme"}}),
            "reasoning.effort",
        ),
        (json!({"tools": [{"type": "web_search"}]}), "tools"),
        (json!({"tools": [{"type": "function"}]}), "tools"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "f"}}]}),
            "tools",
        ),
        (json!({"tool_choice": "sometimes"}), "tool_choice"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": tools, "tool_choice": {"type": "function", "name": "g"}}),
            "tool_choice",
        ),
        (
            json!({"tools": tools, "tool_choice": {"type": "allowed_tools"}}),
            "tool_choice",
        ),
    ];
    for (extra, param) in cases {
        let (status, r) = create(app(), &body(&extra)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{extra}: {r}");
        assert_error(&r, Some(param));
    }
    // A prompt over the context names `input`.
    let long = body(&json!({"input": "sea ".repeat(3000)}));
    let (status, r) = create(app(), &long).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{r}");
    assert_eq!(r["error"]["param"], "input", "{r}");
    assert_eq!(r["error"]["code"], "context_length_exceeded", "{r}");
}

#[tokio::test]
async fn a_named_tool_choice_and_its_tools_are_accepted_and_echoed() {
    let tools = json!([{"type": "function", "name": "get_weather",
                        "parameters": {"type": "object"}}]);
    for choice in [json!("none"), json!("auto")] {
        let (status, r) = create(
            app(),
            &body(&json!({"tools": tools, "tool_choice": choice, "parallel_tool_calls": false})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{r}");
        assert_eq!(r["tool_choice"], choice);
        assert_eq!(r["parallel_tool_calls"], false);
        assert_eq!(r["tools"][0]["name"], "get_weather");
    }
}

#[tokio::test]
async fn a_stream_cut_by_shutdown_ends_with_a_numbered_error_event() {
    let state = state_with(1024, 400);
    let response = router(state.clone())
        .oneshot(post("/v1/responses", &body(&json!({"stream": true}))))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    state.cancel_all();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let events = events(&text);
    let (name, last) = events.last().unwrap();
    assert_eq!(name, "error", "{text}");
    assert_eq!(last["code"], "server_shutting_down", "{last}");
    assert!(last["message"].as_str().is_some_and(|m| !m.is_empty()));
}

#[test]
fn check_request_checks_responses_bodies_as_the_route_does() {
    let ok =
        body(&json!({"tools": [{"type": "function", "name": "f"}], "tool_choice": "required"}));
    assert_eq!(
        wick_server::check_request("/v1/responses", ok.to_string().as_bytes()),
        Ok(())
    );
    for (bad, param) in [
        (&b"{\"input\": 5}"[..], Some("input")),
        (b"{\"input\": [{\"type\": \"nope\"}]}", Some("input[0]")),
        (b"not json", None),
    ] {
        let e = wick_server::check_request("/v1/responses", bad).unwrap_err();
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["param"].as_str(), param, "{e:?}");
    }
}
