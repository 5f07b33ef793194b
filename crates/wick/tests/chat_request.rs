//! The one typed chat request, over the stub backend: tool schemas must be JSON schema objects
//! (checked once, by the library, whatever the caller), and what a request renders to is what
//! it is answered with.

use wick::{ChatRequest, Error, GenerateOptions, Llm, Message, Role, Tool};
use wick_backend::{BackendConfig, StubBackend};

fn llm() -> Llm {
    let backend = StubBackend::new(&BackendConfig::new("stub").with_n_ctx(1024)).expect("stub");
    Llm::from_backend(Box::new(backend), Llm::builder().temperature(0.0)).expect("llm")
}

fn request(parameters: serde_json::Value) -> ChatRequest {
    let mut request = ChatRequest::new(vec![Message::new(Role::User, "Weather?")]);
    request.tools.push(Tool {
        name: "get_weather".into(),
        description: None,
        parameters: Some(parameters),
    });
    request
}

#[test]
fn a_tool_schema_that_is_not_an_object_is_refused_on_every_chat_path() {
    let llm = llm();
    // JSON text where a schema object belongs: once parsed again and again, now refused.
    let bad = request(serde_json::json!(r#"{"type": "object"}"#));
    let options = GenerateOptions::default();
    let refused = |e: Error| matches!(e, Error::Invalid { field: "tools", .. });
    assert!(refused(llm.chat_tokens(&bad, &options).unwrap_err()));
    assert!(refused(llm.chat_text(&bad, &options).unwrap_err()));
    let Err(e) = llm.stream_chat_with(&bad, &options) else {
        panic!("an error")
    };
    assert!(refused(e));
    let good = request(serde_json::json!({"type": "object"}));
    assert!(llm.chat_tokens(&good, &options).is_ok());
}

#[test]
fn the_prompt_text_and_tokens_of_a_request_agree() {
    let llm = llm();
    let options = GenerateOptions::default();
    let request = request(serde_json::json!({"type": "object"}));
    let text = llm.chat_text(&request, &options).expect("text");
    assert!(text.contains("Weather?"), "{text}");
    let tokens = llm.chat_tokens(&request, &options).expect("tokens");
    let answer = llm.stream_chat_with(&request, &options).expect("answer");
    let usage = answer
        .last()
        .expect("items")
        .expect("item")
        .usage
        .expect("usage");
    assert_eq!(usage.prompt_tokens as usize, tokens.len());
}
