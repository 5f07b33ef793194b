//! The one typed chat request, over the stub backend: tool schemas must be JSON schema objects
//! (checked once, by the library, whatever the caller), and what a request renders to is what
//! it is answered with.

use wick::{ChatRequest, Error, GenerateOptions, Llm, Message, Role, Tool};
use wick_backend::{BackendConfig, StubBackend};

fn llm() -> Llm {
    stub(Llm::builder().temperature(0.0))
}

/// An `Llm` over the stub backend with `builder`'s settings.
fn stub(builder: wick::LlmBuilder) -> Llm {
    let backend = StubBackend::new(&BackendConfig::new("stub").with_n_ctx(1024)).expect("stub");
    Llm::from_backend(Box::new(backend), builder).expect("llm")
}

/// The prompt tokens the answer to `request` reports in its usage.
fn answered_prompt_tokens(llm: &Llm, request: &ChatRequest, options: &GenerateOptions) -> usize {
    let answer = llm.stream_chat_with(request, options).expect("answer");
    let usage = answer
        .last()
        .expect("items")
        .expect("item")
        .usage
        .expect("usage");
    usage.prompt_tokens as usize
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
    let Err(streamed) = llm.stream_chat_with(&bad, &options) else {
        panic!("a stream over a bad schema");
    };
    assert!(refused(streamed));
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
    assert_eq!(
        answered_prompt_tokens(&llm, &request, &options),
        tokens.len()
    );
}

/// A template that shows the variables the library fills in.
const SHOWS_VARIABLES: &str = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}\
    thinking={{ enable_thinking }} date={{ date_string }} datetime={{ datetime }} \
    effort={{ reasoning_effort }}";

fn llm_with(builder: wick::LlmBuilder) -> Llm {
    stub(builder.chat_template(SHOWS_VARIABLES))
}

fn shown(llm: &Llm, request: &ChatRequest) -> String {
    llm.chat_text(request, &GenerateOptions::default())
        .expect("text")
}

#[test]
fn template_variables_default_from_the_settings_and_the_request_wins() {
    let hi = ChatRequest::new(vec![Message::new(Role::User, "hi")]);
    let today = wick_template::DateTime::now_utc();
    // Auto: a template that reads enable_thinking gets true; today's date in both forms.
    let text = shown(&llm_with(Llm::builder()), &hi);
    assert!(text.contains("thinking=True"), "{text}");
    assert!(
        text.contains(&format!("date={}", today.strftime("%d %b %Y"))),
        "{text}"
    );
    assert!(
        text.contains(&format!("datetime={}", today.strftime("%b %d %Y"))),
        "{text}"
    );
    // Off, no date, server-wide kwargs.
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("reasoning_effort".into(), "low".into());
    let quiet = llm_with(
        Llm::builder()
            .reasoning(wick::Reasoning::Off)
            .template_date(false)
            .template_kwargs(kwargs),
    );
    let text = shown(&quiet, &hi);
    assert!(text.contains("thinking=False"), "{text}");
    assert!(text.contains("date= datetime= "), "{text}");
    assert!(text.contains("effort=low"), "{text}");
    // The request's own variables win over every default.
    let mut own = hi.clone();
    own.extra_context
        .insert("enable_thinking".into(), true.into());
    own.extra_context
        .insert("reasoning_effort".into(), "high".into());
    own.extra_context
        .insert("date_string".into(), "1 Jan 2000".into());
    let text = shown(&quiet, &own);
    assert!(text.contains("thinking=True"), "{text}");
    assert!(text.contains("effort=high"), "{text}");
    assert!(text.contains("date=1 Jan 2000"), "{text}");
}

#[test]
fn an_answer_continues_the_last_message_and_adds_only_new_text() {
    let llm = llm();
    let options = GenerateOptions::default();
    let mut request = ChatRequest::new(vec![
        Message::new(Role::User, "Count"),
        Message::new(Role::Assistant, "one two"),
    ]);
    let closed = llm.chat_text(&request, &options).expect("closed");
    request.add_generation_prompt = false;
    request.continue_final_message = true;
    let open = llm.chat_text(&request, &options).expect("open");
    assert!(open.ends_with("one two"), "{open}");
    assert!(
        closed.starts_with(&open) && closed.len() > open.len(),
        "{closed}"
    );
    let tokens = llm.chat_tokens(&request, &options).expect("tokens");
    assert_eq!(
        answered_prompt_tokens(&llm, &request, &options),
        tokens.len()
    );
}
