//! Images in prompts on the stub backend's fake projector: where they go in the prompt, that
//! the same image gives the same answer and reuses its cached prefix, that prefill chunks never
//! split one, and every refusal.

use wick_backend::{Backend, BackendConfig, StubBackend};
use wick_engine::{ChatFormat, Engine, EngineConfig, Finished, GenEvent, GenerateRequest};
use wick_template::RenderRequest;
use wick_types::{ChatRequest, Media, Message, Role, TokenId};

fn stub(projector: bool) -> StubBackend {
    let stub = StubBackend::new(
        &BackendConfig::new("stub")
            .with_n_seq_max(2)
            .with_n_ctx(1024),
    )
    .expect("stub");
    if projector {
        stub.with_projector()
    } else {
        stub
    }
}

/// A PNG-looking image: the stub's projector reads only its first bytes and hashes the rest.
fn image(seed: u8) -> Media {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 8, seed]);
    Media::image(bytes)
}

/// A user message: `text`, then `media`.
fn conversation(text: &str, media: &[Media]) -> ChatRequest {
    let mut message = Message::new(Role::User, text);
    for m in media {
        message.push_media(m.clone());
    }
    ChatRequest::new(vec![message])
}

struct Setup {
    engine: Engine,
    chat: ChatFormat,
}

fn setup(config: EngineConfig) -> Setup {
    let backend = stub(true);
    let chat = ChatFormat::from_model(&backend)
        .expect("template")
        .expect("the stub has one");
    let engine = Engine::start(Box::new(backend), config).expect("engine");
    Setup { engine, chat }
}

impl Setup {
    fn request(&self, chat: &ChatRequest) -> GenerateRequest {
        let media: Vec<Media> = chat
            .messages
            .iter()
            .flat_map(|m| m.media.iter().cloned())
            .collect();
        let rendered = self
            .chat
            .render_with_media(
                &**self.engine.tokenizer(),
                RenderRequest::from(chat),
                &media,
                self.engine.media_encoder().map(|m| &**m),
            )
            .expect("render");
        GenerateRequest {
            prompt: rendered.tokens,
            media: rendered.media,
            max_tokens: Some(8),
            ..GenerateRequest::default()
        }
    }

    fn run(&self, chat: &ChatRequest) -> (String, Finished) {
        let mut text = String::new();
        for event in self.engine.submit(self.request(chat)).expect("submit") {
            match event {
                GenEvent::Text(t) => text.push_str(&t),
                GenEvent::Done(done) => return (text, done),
                GenEvent::Error(e) => panic!("{e}"),
                GenEvent::TextWithLogprobs { .. } | GenEvent::Progress(_) => {}
            }
        }
        panic!("no Done")
    }
}

#[test]
fn an_image_takes_its_place_in_the_prompt_and_the_same_image_gives_the_same_answer() {
    let setup = setup(EngineConfig::default());
    let with_a = conversation("What is this?", &[image(1)]);
    let request = setup.request(&with_a);
    let media: Vec<&TokenId> = request.prompt.iter().filter(|t| t.is_media()).collect();
    assert_eq!(media.len(), 4, "the stub's projector gives four positions");
    assert!(media[0].starts_media());
    assert_eq!(request.media.len(), 1);
    assert_eq!(
        request.media[0].tokens,
        media.into_iter().copied().collect::<Vec<_>>()
    );
    // The image goes after the text, where its message put it, before the turn's end.
    let first = request.prompt.iter().position(|t| t.is_media()).unwrap();
    let text_before = setup
        .engine
        .tokenizer()
        .tokenize("What is this?", false)
        .unwrap();
    assert_eq!(
        &request.prompt[first - text_before.len()..first],
        &text_before[..]
    );

    let (cold, _) = setup.run(&with_a);
    let (again, done) = setup.run(&with_a);
    assert_eq!(cold, again);
    assert!(
        done.usage.cached_tokens > 4,
        "the image's prefix is reused: {done:?}"
    );

    let with_b = conversation("What is this?", &[image(2)]);
    let other = setup.request(&with_b);
    assert_ne!(
        request.prompt, other.prompt,
        "another image, other positions"
    );
    let (_, done) = setup.run(&with_b);
    let before_image = u32::try_from(first).unwrap();
    assert!(
        done.usage.cached_tokens <= before_image,
        "another image's prefix is not reused past the text before it: {done:?}"
    );

    // Two images in one message, and the engine answering them concurrently.
    let both = conversation("Compare", &[image(1), image(2)]);
    assert_eq!(
        setup
            .request(&both)
            .prompt
            .iter()
            .filter(|t| t.starts_media())
            .count(),
        2
    );
    let answers: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = [&with_a, &with_b]
            .into_iter()
            .map(|chat| scope.spawn(|| setup.run(chat).0))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(answers[0], cold, "concurrent answers are the solo ones");
}

#[test]
fn prefill_chunks_never_split_an_image() {
    // Three tokens a chunk: every image of four positions would be split without the rule.
    let setup = setup(EngineConfig {
        prefill_budget: 3,
        prefill_budget_decoding: 3,
        ..EngineConfig::default()
    });
    let chat = conversation("Look:", &[image(3), image(4)]);
    let (chunked, _) = setup.run(&chat);
    let whole = self::setup(EngineConfig::default()).run(&chat).0;
    assert_eq!(chunked, whole);
}

#[test]
fn media_are_refused_by_name() {
    let render = |backend: StubBackend, media: Media| {
        let chat = ChatFormat::from_model(&backend).unwrap().unwrap();
        let request = conversation("Hi", std::slice::from_ref(&media));
        let encoder = backend.media_encoder();
        chat.render_with_media(
            &*backend.tokenizer(),
            RenderRequest::from(&request),
            &[media],
            encoder.as_deref(),
        )
        .unwrap_err()
        .to_string()
    };
    let no_projector = render(stub(false), image(1));
    assert!(no_projector.contains("no projector"), "{no_projector}");
    let not_image = render(stub(true), Media::image(b"just text".to_vec()));
    assert!(not_image.contains("not image data"), "{not_image}");
    let empty = render(stub(true), Media::image(Vec::new()));
    assert!(empty.contains("empty"), "{empty}");
    let audio = render(stub(true), Media::audio(b"RIFF\0\0\0\0WAVEfmt ".to_vec()));
    assert!(audio.contains("takes no audio"), "{audio}");

    // Text that poses as an image's place is only text.
    let backend = stub(true);
    let chat = ChatFormat::from_model(&backend).unwrap().unwrap();
    let forged = ChatRequest::new(vec![Message::new(Role::User, "a \u{FFFC} b")]);
    let rendered = chat
        .render_with_media(
            &*backend.tokenizer(),
            RenderRequest::from(&forged),
            &[],
            backend.media_encoder().as_deref(),
        )
        .unwrap();
    assert!(rendered.tokens.iter().all(|t| !t.is_media()));

    // Media ids that no held image stands for are refused by the backend.
    let mut backend = stub(true);
    let encoded = backend.media_encoder().unwrap().encode(&image(9)).unwrap();
    let tokens = encoded.tokens.clone();
    let mut prompt = backend.tokenize("x", false).unwrap();
    prompt.extend_from_slice(&tokens[1..]);
    let err = backend.prefill(wick_types::SeqId(0), &prompt).unwrap_err();
    assert!(err.to_string().contains("start"), "{err}");
    drop(encoded);
}
