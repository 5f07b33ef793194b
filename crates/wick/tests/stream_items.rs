//! Stream items carry deltas and events only; the last item carries the whole answer, the
//! same as the whole (non-streamed) response. Over the stub backend: no model, milliseconds.

use wick::{
    ChatResponse, CompletionResponse, Event, FinishReason, GenerateOptions, Llm, Message,
    ParsedMessage, PromptInput, Role, SamplerOpts, TokenId,
};
use wick_backend::{BackendConfig, StubBackend};

/// Tokens in the long answer: the stub's control tokens (end of generation included) are
/// banned, so it runs to the budget.
const LONG: u32 = 400;

fn llm() -> Llm {
    let backend = StubBackend::new(&BackendConfig::new("stub").with_n_ctx(1024)).expect("stub");
    let builder = Llm::builder()
        .temperature(0.0)
        .max_new_tokens(LONG)
        .generate_kwargs(SamplerOpts {
            logit_bias: (0..7).map(|t| (TokenId(t), f32::NEG_INFINITY)).collect(),
            ..SamplerOpts::greedy()
        });
    Llm::from_backend(Box::new(backend), builder).expect("llm")
}

fn text_options() -> GenerateOptions {
    GenerateOptions {
        logprobs: Some(2),
        ..GenerateOptions::default()
    }
}

fn prompt() -> PromptInput {
    PromptInput::Text {
        text: "Once upon a time".into(),
        formatted: true,
    }
}

#[test]
fn completion_items_carry_their_delta_and_the_last_the_whole_text() {
    let llm = llm();
    let items: Vec<CompletionResponse> = llm
        .stream_complete_with(prompt(), &text_options())
        .expect("stream")
        .map(|item| item.expect("item"))
        .collect();
    let (last, rest) = items.split_last().expect("items");
    assert!(rest.len() > 100, "a long answer: {} items", rest.len());
    let mut deltas = String::new();
    for item in rest {
        assert!(item.text.is_empty(), "no text so far on an item: {item:?}");
        assert!(item.finish_reason.is_none() && item.usage.is_none());
        deltas.push_str(&item.delta);
    }
    assert_eq!(last.finish_reason, Some(FinishReason::Length));
    assert_eq!(last.usage.expect("usage").completion_tokens, LONG);
    assert_eq!(last.text, deltas, "the last item carries the whole text");
    assert!(last.delta.is_empty());
    // Linear: all the items together carry the text twice (deltas, then the whole), where
    // items carrying the text so far would carry it about `items / 2` times.
    let carried: usize = items.iter().map(|i| i.delta.len() + i.text.len()).sum();
    assert_eq!(carried, 2 * last.text.len());
    // Each item brings its own tokens' log-probabilities, every token once.
    let tokens: usize = items.iter().map(|i| i.logprobs.len()).sum();
    assert_eq!(tokens, LONG as usize);
}

#[test]
fn streamed_completion_equals_the_whole_one() {
    let llm = llm();
    let whole = llm.complete("Once upon a time", true).expect("complete");
    let last = llm
        .stream_complete("Once upon a time", true)
        .expect("stream")
        .last()
        .expect("items")
        .expect("ok");
    // The second request finds its prompt cached; everything else is the same response.
    let usage = last.usage.expect("usage");
    assert_eq!(usage.cached_tokens, usage.prompt_tokens);
    let last = wick::CompletionResponse {
        usage: whole.usage,
        ..last
    };
    assert_eq!(whole, last, "no log-probabilities asked: the same response");
    assert_eq!(whole.text.len(), {
        let mut n = 0;
        for item in llm
            .stream_complete("Once upon a time", true)
            .expect("stream")
        {
            n += item.expect("item").delta.len();
        }
        n
    });
}

#[test]
fn chat_items_carry_events_and_the_last_the_whole_message() {
    let llm = llm();
    let messages = [Message::new(Role::User, "Tell me a long story.")];
    let items: Vec<ChatResponse> = llm
        .stream_chat(&messages)
        .expect("stream")
        .map(|item| item.expect("item"))
        .collect();
    let (last, rest) = items.split_last().expect("items");
    assert!(rest.len() > 100, "a long answer: {} items", rest.len());
    let mut accumulated = ParsedMessage::default();
    for item in rest {
        assert_eq!(
            item.message,
            ParsedMessage::default(),
            "events only: {item:?}"
        );
        assert!(item.finish_reason.is_none() && item.usage.is_none());
        accumulated.extend(&item.events);
    }
    accumulated.extend(&last.events);
    assert!(
        matches!(last.events.last(), Some(Event::End { .. })),
        "{last:?}"
    );
    assert_eq!(
        last.message, accumulated,
        "the last item carries the whole message"
    );
    assert!(last.message.content.len() > 100);
    assert_eq!(last.finish_reason, Some(FinishReason::Length));

    // The whole answer to the same request is the same message.
    let whole = llm.chat(&messages).expect("chat");
    assert_eq!(whole.message, last.message);
    assert!(whole.events.is_empty());
    let (w, l) = (whole.usage.expect("usage"), last.usage.expect("usage"));
    assert_eq!(
        (w.prompt_tokens, w.completion_tokens),
        (l.prompt_tokens, l.completion_tokens)
    );
    assert_eq!(
        w.cached_tokens, w.prompt_tokens,
        "the second time, all cached"
    );
}

#[tokio::test]
async fn async_streams_carry_deltas_and_the_last_item_the_whole_answer() {
    let llm = llm();
    let mut stream = llm
        .astream_complete("Once upon a time", true)
        .await
        .expect("stream");
    let (mut deltas, mut last) = (String::new(), None);
    while let Some(item) = stream.next().await {
        let item = item.expect("item");
        deltas.push_str(&item.delta);
        if item.finish_reason.is_none() {
            assert!(item.text.is_empty(), "{item:?}");
        }
        last = Some(item);
    }
    assert_eq!(last.expect("items").text, deltas);
    let whole = llm
        .acomplete("Once upon a time", true)
        .await
        .expect("acomplete");
    assert_eq!(whole.text, deltas);

    let messages = [Message::new(Role::User, "Tell me a long story.")];
    let mut stream = llm.astream_chat(&messages).await.expect("stream");
    let (mut content, mut last) = (String::new(), None);
    while let Some(item) = stream.next().await {
        let item = item.expect("item");
        for event in &item.events {
            if let Event::Content(text) = event {
                content.push_str(text);
            }
        }
        if item.finish_reason.is_none() {
            assert_eq!(item.message, ParsedMessage::default());
        }
        last = Some(item);
    }
    assert_eq!(last.expect("items").text(), content);
    assert_eq!(llm.achat(&messages).await.expect("achat").text(), content);
}
