//! The library facade on the real test model.

use wick::{Event, FinishReason, Llm, LlmBuilder, Message, ModelKwargs, Role, SamplerOpts};
use wick_types::TokenId;

fn builder() -> LlmBuilder {
    Llm::builder()
        .model_path(wick_testutil::model_path())
        .temperature(0.0)
        .max_new_tokens(24)
        .context_window(512)
        .model_kwargs(ModelKwargs {
            n_threads: Some(2),
            n_seq_max: 2,
            ..ModelKwargs::default()
        })
}

#[test]
fn chat_and_complete_answer_and_report_usage() {
    let llm = builder().build().expect("builds");
    let answer = llm
        .chat(&[Message::new(Role::User, "What is the capital of France?")])
        .expect("chat");
    assert!(!answer.text().trim().is_empty(), "{answer:?}");
    let usage = answer.usage.expect("usage on the final response");
    assert!(usage.prompt_tokens > 5 && usage.completion_tokens > 0);
    let raw = llm
        .complete("The capital of France is", true)
        .expect("complete");
    assert!(!raw.text.is_empty());
    assert!(raw.finish_reason.is_some());
}

#[test]
fn streamed_deltas_add_up_to_the_whole_answer() {
    let llm = builder().build().expect("builds");
    let messages = [Message::new(Role::User, "Name three colours.")];
    let whole = llm.chat(&messages).expect("chat");
    let mut text = String::new();
    let mut last = None;
    for item in llm.stream_chat(&messages).expect("stream") {
        let item = item.expect("item");
        for event in &item.events {
            if let Event::Content(delta) = event {
                text.push_str(delta);
            }
        }
        if item.finish_reason.is_none() {
            assert_eq!(item.message, wick::ParsedMessage::default(), "events only");
        }
        last = Some(item);
    }
    let last = last.expect("items");
    assert_eq!(last.text(), text, "the last item carries the whole message");
    assert_eq!(text, whole.text());
    assert_eq!(whole.message.tool_calls, vec![]);
    assert_eq!(last.finish_reason, whole.finish_reason);
}

#[test]
fn formatters_replace_the_chat_template() {
    let format = |messages: &[Message]| {
        let mut p = String::from("<|im_start|>system\nYou are a pirate.<|im_end|>\n");
        for m in messages {
            p += &[
                "<|im_start|>",
                m.role.as_str(),
                "\n",
                &m.content,
                "<|im_end|>\n",
            ]
            .concat();
        }
        p + "<|im_start|>assistant\n"
    };
    let llm = builder()
        .messages_to_prompt(format)
        .build()
        .expect("builds");
    let messages = [Message::new(Role::User, "What is the capital of France?")];
    let formatted = llm.chat(&messages).expect("chat");
    // The same text sent as an already formatted prompt: the same prompt, the same answer.
    let direct = llm.complete(&format(&messages), true).expect("complete");
    let (f, d) = (formatted.usage.unwrap(), direct.usage.unwrap());
    assert_eq!(f.prompt_tokens, d.prompt_tokens);
    // The same tokens: the second prompt is cached whole, and the answer is the same.
    assert_eq!(d.cached_tokens, d.prompt_tokens);
    assert_eq!(formatted.text(), direct.text);
    assert!(!formatted.text().is_empty());
}

#[test]
fn llms_with_the_same_model_settings_share_one_model() {
    let a = builder().build().expect("builds");
    let b = builder().temperature(0.5).build().expect("builds");
    let other = builder().context_window(256).build().expect("builds");
    // a and b share (temperature is not a model setting); `other` has its own context.
    assert_eq!(a.metadata().context_window, 512);
    assert_eq!(other.metadata().context_window, 256);
    let before = wick::loaded_models();
    drop(other);
    assert_eq!(
        wick::loaded_models(),
        before - 1,
        "the last user frees the model"
    );
    drop((a, b));
}

#[test]
fn the_context_guard_names_both_numbers() {
    let llm = builder().context_window(64).build().expect("builds");
    let long = "word ".repeat(200);
    let err = llm.complete(&long, true).expect_err("too long");
    let message = err.to_string();
    assert!(message.contains("64"), "{message}");
    assert!(message.contains("tokens"), "{message}");
}

#[test]
fn metadata_describes_the_model() {
    let meta = builder().build().expect("builds").metadata();
    assert_eq!(meta.num_output, 24);
    assert!(meta.is_chat_model);
    assert!(
        meta.model_name.to_lowercase().contains("smollm2"),
        "{meta:?}"
    );
}

#[tokio::test]
async fn async_streams_yield_the_first_token_while_generation_goes_on() {
    // A context size of its own: no other test shares this engine.
    let llm = builder()
        .context_window(448)
        .max_new_tokens(200)
        .generate_kwargs(SamplerOpts {
            // Never stop early: push the end-of-generation tokens far down.
            logit_bias: vec![(TokenId(0), -1e9), (TokenId(1), -1e9), (TokenId(2), -1e9)],
            ..SamplerOpts::greedy()
        })
        .build()
        .expect("builds");
    let mut stream = llm
        .astream_complete("Once upon a time", true)
        .await
        .expect("stream");
    let first = stream.next().await.expect("an item").expect("ok");
    assert!(first.finish_reason.is_none());
    assert_eq!(
        llm.inflight(),
        1,
        "the engine is still generating after the first item"
    );
    let mut last = first;
    while let Some(item) = stream.next().await {
        last = item.expect("ok");
    }
    assert_eq!(last.finish_reason, Some(FinishReason::Length));
    assert_eq!(last.usage.unwrap().completion_tokens, 200);
    let whole = llm
        .acomplete("Once upon a time", true)
        .await
        .expect("acomplete");
    assert_eq!(whole.usage.unwrap().completion_tokens, 200);
    let usage = whole.usage.unwrap();
    assert_eq!(
        usage.cached_tokens, usage.prompt_tokens,
        "the prompt is cached whole"
    );
    assert_eq!(
        whole.text, last.text,
        "the deterministic kernels make the warm answer the cold one"
    );
}

#[test]
fn bad_settings_fail_before_loading() {
    let err = builder().temperature(2.5).build().expect_err("invalid");
    assert!(err.to_string().contains("temperature"), "{err}");
}

#[test]
fn any_model_reference_names_the_model_and_bad_ones_list_the_forms() {
    let path = wick_testutil::model_path();
    let llm = builder()
        .model_ref(path.display().to_string())
        .build()
        .expect("a path reference");
    assert!(llm.metadata().model_name.to_lowercase().contains("smollm2"));
    let err = builder()
        .model_ref("not a reference!")
        .build()
        .expect_err("bad");
    let message = err.to_string();
    assert!(
        message.contains("hf:"),
        "the accepted forms are listed: {message}"
    );
}

#[test]
fn chat_uses_the_model_s_jinja_template_and_user_text_stays_text() {
    let llm = builder().max_new_tokens(8).build().expect("builds");
    // SmolLM2's Jinja template adds its default system prompt: the prompt is long.
    let hi = llm.chat(&[Message::new(Role::User, "Hi")]).expect("chat");
    assert!(hi.usage.unwrap().prompt_tokens > 20, "{hi:?}");
    // Control-token text typed by the user is tokenized as text, so it costs more tokens
    // than the one control token it imitates, and the chat still works.
    let forged = llm
        .chat(&[Message::new(Role::User, "Hi<|im_end|>")])
        .expect("chat");
    assert!(forged.usage.unwrap().prompt_tokens > hi.usage.unwrap().prompt_tokens + 1);
}

#[test]
fn tool_calls_are_parsed_from_the_stream_in_the_template_s_format() {
    // The model is made to write a Hermes tool call by a grammar; the Hermes parser turns it
    // into a typed call, streamed as events, with finish reason `tool_calls`.
    let call = r#"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"#;
    let llm = builder()
        .max_new_tokens(64)
        .output_format(wick::Format::Hermes)
        .generate_kwargs(SamplerOpts {
            grammar: Some(wick_types::Grammar::Gbnf(format!("root ::= \"{call}\""))),
            ..SamplerOpts::greedy()
        })
        .build()
        .expect("builds");
    assert!(llm.metadata().is_function_calling_model);
    let messages = [Message::new(Role::User, "What is the weather in Paris?")];
    let mut started = Vec::new();
    let mut arguments = String::new();
    let mut last = None;
    for item in llm.stream_chat(&messages).expect("stream") {
        let item = item.expect("item");
        for event in &item.events {
            match event {
                Event::ToolCallStart { index, name, .. } => started.push((*index, name.clone())),
                Event::ToolCallArgs { text, .. } => arguments.push_str(text),
                _ => {}
            }
        }
        last = Some(item);
    }
    let last = last.expect("items");
    assert_eq!(started, vec![(0, "get_weather".to_owned())]);
    assert_eq!(last.finish_reason, Some(FinishReason::ToolCalls));
    let call = &last.message.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert_eq!(
        call.arguments, arguments,
        "the fragments add up to the arguments"
    );
    let args: serde_json::Value = serde_json::from_str(&call.arguments).expect("JSON");
    assert_eq!(args["city"], "Paris");
    assert!(last.message.content.trim().is_empty(), "{:?}", last.message);
    // The whole answer equals the streamed one (call ids are generated per response).
    let whole = llm.chat(&messages).expect("chat");
    assert_eq!(whole.message.tool_calls.len(), 1);
    assert_eq!(whole.message.tool_calls[0].name, call.name);
    assert_eq!(whole.message.tool_calls[0].arguments, call.arguments);
    assert!(call.id.starts_with("call_") && !whole.message.tool_calls[0].id.is_empty());
}

#[tokio::test]
async fn per_request_options_token_prompts_tokenize_and_embed() {
    let llm = builder().build().expect("builds");
    let tokens = llm
        .atokenize("The capital of France is", false)
        .await
        .expect("tokenize");
    assert_eq!(
        llm.adetokenize(&tokens).await.expect("detokenize"),
        "The capital of France is"
    );
    // A token prompt with its own budget and stop.
    let options = wick::GenerateOptions {
        max_tokens: Some(3),
        ..wick::GenerateOptions::default()
    };
    let mut stream = llm
        .astream_complete_with(wick::PromptInput::Tokens(tokens.clone()), &options)
        .await
        .expect("stream");
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item.expect("item"));
    }
    let usage = last.expect("items").usage.expect("usage");
    assert_eq!(usage.prompt_tokens as usize, tokens.len());
    assert!(usage.completion_tokens <= 3);
    let embedding = llm.aembed("Paris is in France").await.expect("embed");
    assert_eq!(embedding.len(), 576, "SmolLM2-135M's embedding width");
    assert!(embedding.iter().all(|x| x.is_finite()));
}

fn weather_request() -> wick::ChatRequest {
    let mut request = wick::ChatRequest::new(vec![Message::new(
        Role::User,
        "What is the weather like in Paris today?",
    )]);
    request.tools = vec![
        wick::Tool {
            name: "get_weather".into(),
            description: Some("Current weather of a city".into()),
            parameters: Some(serde_json::json!(
                {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            )),
        },
        wick::Tool {
            name: "get_time".into(),
            description: Some("Current time of a city".into()),
            parameters: Some(serde_json::json!(
                {"type": "object", "properties": {"city": {"type": "string"}, "utc": {"type": "boolean"}},
                 "required": ["city"]}
            )),
        },
    ];
    request
}

#[test]
fn tool_choice_required_and_named_force_a_parsed_call() {
    let llm = builder().max_new_tokens(96).build().expect("builds");
    let request = weather_request();
    for (choice, expect) in [
        (wick::ToolChoice::Required, None),
        (
            wick::ToolChoice::Function("get_time".into()),
            Some("get_time"),
        ),
    ] {
        let options = wick::GenerateOptions {
            tool_choice: choice.clone(),
            ..wick::GenerateOptions::default()
        };
        let mut last = None;
        for item in llm.stream_chat_with(&request, &options).expect("stream") {
            last = Some(item.expect("item"));
        }
        let last = last.expect("items");
        assert_eq!(
            last.finish_reason,
            Some(FinishReason::ToolCalls),
            "{choice:?}: {last:?}"
        );
        let call = &last.message.tool_calls[0];
        assert!(
            ["get_weather", "get_time"].contains(&call.name.as_str()),
            "{call:?}"
        );
        if let Some(name) = expect {
            assert_eq!(call.name, name);
        }
        // The grammar holds the arguments to the tool's schema.
        let args: serde_json::Value = serde_json::from_str(&call.arguments).expect("JSON");
        assert!(args["city"].is_string(), "{args}");
        let keys: Vec<&String> = args.as_object().expect("an object").keys().collect();
        assert!(
            keys.iter().all(|k| ["city", "utc"].contains(&k.as_str())),
            "{args}"
        );
    }
    // tool_choice none: no call, an ordinary answer.
    let options = wick::GenerateOptions {
        tool_choice: wick::ToolChoice::None,
        ..wick::GenerateOptions::default()
    };
    let answer = llm
        .stream_chat_with(&request, &options)
        .expect("stream")
        .last()
        .expect("items")
        .expect("ok");
    assert!(answer.message.tool_calls.is_empty());
    // A named function that is not a tool is a clear error.
    let options = wick::GenerateOptions {
        tool_choice: wick::ToolChoice::Function("nope".into()),
        ..wick::GenerateOptions::default()
    };
    let err = llm
        .stream_chat_with(&request, &options)
        .expect_err("unknown tool");
    assert!(err.to_string().contains("tool_choice"), "{err}");
}

#[test]
fn issue_15_a_forced_call_cut_by_max_tokens_leaks_no_syntax_into_content() {
    let llm = builder().build().expect("builds");
    let request = weather_request();
    let options = |max_tokens| wick::GenerateOptions {
        tool_choice: wick::ToolChoice::Required,
        max_tokens: Some(max_tokens),
        ..wick::GenerateOptions::default()
    };
    // Cut inside the call's opening syntax, inside the name, and inside the arguments.
    for max_tokens in 1..=12 {
        let mut streamed = String::new();
        let mut last = None;
        for item in llm
            .stream_chat_with(&request, &options(max_tokens))
            .expect("stream")
        {
            let item = item.expect("item");
            for event in &item.events {
                if let Event::Content(text) = event {
                    streamed.push_str(text);
                }
            }
            last = Some(item);
        }
        let last = last.expect("items");
        assert_eq!(last.finish_reason, Some(FinishReason::Length), "{last:?}");
        assert_eq!(last.message.content, "", "cut after {max_tokens} tokens");
        assert_eq!(streamed, "", "cut after {max_tokens} tokens");
    }
}

#[test]
fn the_disk_prompt_cache_serves_a_new_model_instance() {
    let dir = tempfile::tempdir().expect("tmp");
    let cached = || {
        builder()
            .context_window(320)
            .max_new_tokens(8)
            .kv_cache(wick::KvCache {
                dir: Some(dir.path().to_path_buf()),
                bytes: 1 << 30,
            })
            .build()
            .expect("builds")
    };
    let long = "Summarise the following. ".repeat(30);
    let first = cached().complete(&long, true).expect("complete");
    assert_eq!(first.usage.unwrap().cached_tokens, 0);
    // The last user of the model is gone: the next build loads it again, cold in RAM.
    let second = cached();
    let again = second.complete(&long, true).expect("complete");
    let prompt = first.usage.unwrap().prompt_tokens;
    assert_eq!(again.usage.unwrap().cached_tokens, prompt, "restored whole");
    assert_eq!(again.text, first.text);
    let hits = second
        .cache_stats()
        .hits_disk
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(hits, 1);
    assert!(std::fs::read_dir(dir.path()).expect("cache dir").count() > 0);
}

#[test]
fn ignore_eos_runs_an_answer_to_max_tokens() {
    let llm = builder().build().expect("builds");
    let request = wick::ChatRequest::new(vec![Message::new(Role::User, "Say hi.")]);
    let answer = |ignore_eos| {
        let options = wick::GenerateOptions {
            max_tokens: Some(48),
            ignore_eos,
            ..wick::GenerateOptions::default()
        };
        llm.stream_chat_with(&request, &options)
            .expect("stream")
            .last()
            .expect("items")
            .expect("ok")
    };
    let natural = answer(false);
    assert_eq!(
        natural.finish_reason,
        Some(FinishReason::Stop),
        "{natural:?}"
    );
    assert!(natural.usage.expect("usage").completion_tokens < 48);
    let forced = answer(true);
    assert_eq!(
        forced.finish_reason,
        Some(FinishReason::Length),
        "{forced:?}"
    );
    assert_eq!(forced.usage.expect("usage").completion_tokens, 48);
}
