//! Ollama's API on the same port: `/api/chat` and `/api/generate` (whole, or NDJSON lines,
//! Ollama's default), `/api/embed` and `/api/embeddings`, and the model routes (`/api/tags`,
//! `/api/show`, `/api/ps`, `/api/pull`, `/api/delete`, `/api/version`). A chat or a templated
//! generate is converted into the chat pipeline's request (`convert`), validated by the checks
//! every chat API shares, and answered by the same engine, template, tool-call parser and
//! prompt cache as `/v1/chat/completions`; only the shapes differ, and errors take Ollama's
//! shape (`{"error": "message"}`, `ApiError::response_in`).

mod answer;
mod convert;
mod embed;
mod fim;
mod models;
mod time;
mod wire;

use std::time::Instant;

use axum::extract::State;
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;
use wick::PromptInput;

use crate::chat::{begin_held, Begun};
use crate::error::Dialect;
use crate::extract::ApiJson;
use crate::{ApiError, AppState, ServedModel};
use crate::{KeepAlive, SamplingDefaults};
use answer::{Answer, Items, Piece, Shape, Timing};
use convert::{Ask, Checked};
pub(crate) use models::root;
use wire::{ChatRequest, GenerateRequest};

/// The Ollama routes, added to `router`.
pub(crate) fn routes(router: Router<AppState>) -> Router<AppState> {
    router
        .route("/api/chat", post(chat))
        .route("/api/generate", post(generate))
        .route("/api/embed", post(embed::embed))
        .route("/api/embeddings", post(embed::embeddings))
        .route("/api/tags", get(models::tags))
        .route("/api/show", post(models::show))
        .route("/api/ps", get(models::ps))
        .route("/api/pull", post(models::pull))
        .route("/api/delete", delete(models::remove))
        .route("/api/version", get(models::version))
}

/// Checks a request body the way `POST /api/chat` (`generate`: `/api/generate`) does.
pub(crate) fn check(body: &[u8], generate: bool) -> Result<(), ApiError> {
    if generate {
        convert::generate(crate::extract::parse(body)?, &SamplingDefaults::default()).map(drop)
    } else {
        convert::chat(crate::extract::parse(body)?, &SamplingDefaults::default()).map(drop)
    }
}

/// `POST /api/chat`.
async fn chat(
    State(state): State<AppState>,
    body: Result<ApiJson<ChatRequest>, ApiError>,
) -> Response {
    let received = Instant::now();
    let answer = async {
        let ApiJson(req) = body?;
        let checked = convert::chat(req, &state.config().sampling)?;
        respond(state, checked, Shape::Chat, received).await
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

/// `POST /api/generate`.
async fn generate(
    State(state): State<AppState>,
    body: Result<ApiJson<GenerateRequest>, ApiError>,
) -> Response {
    let received = Instant::now();
    let answer = async {
        let ApiJson(req) = body?;
        let checked = convert::generate(req, &state.config().sampling)?;
        respond(state, checked, Shape::Generate, received).await
    };
    answer
        .await
        .unwrap_or_else(|e| e.response_in(Dialect::Ollama))
}

/// The model `name` selects, the way every API selects it, loaded and held; Ollama's implicit
/// `:latest` tag may be left out or added. `keep_alive`: the request's.
pub(crate) async fn resolve(
    state: &AppState,
    name: Option<&str>,
    keep_alive: Option<KeepAlive>,
) -> Result<ServedModel, ApiError> {
    match state.model_kept(name, keep_alive).await {
        Err(ApiError::ModelNotFound { .. }) if name.is_some_and(|n| n.ends_with(":latest")) => {
            let bare = name.and_then(|n| n.strip_suffix(":latest"));
            state
                .model_kept(bare, keep_alive)
                .await
                .map_err(|e| match e {
                    ApiError::ModelNotFound { served, .. } => ApiError::ModelNotFound {
                        model: name.unwrap_or_default().to_owned(),
                        served,
                    },
                    other => other,
                })
        }
        other => other,
    }
}

/// A 400 when `options.num_ctx` asks for more context than the server holds.
fn check_context(served: &ServedModel, num_ctx: Option<u64>) -> Result<(), ApiError> {
    let n_ctx = served.llm.metadata().context_window;
    match num_ctx {
        Some(asked) if asked > u64::from(n_ctx) => Err(ApiError::bad(
            "options.num_ctx",
            format!(
                "options.num_ctx = {asked} is more than this server's context window of \
                 {n_ctx} tokens; start the server with a larger --ctx-size"
            ),
        )),
        _ => Ok(()),
    }
}

async fn respond(
    state: AppState,
    checked: Checked,
    shape: Shape,
    received: Instant,
) -> Result<Response, ApiError> {
    let model = match &checked.ask {
        Ask::Load { model } => model.as_deref(),
        Ask::Chat(valid) => valid.model.as_deref(),
        Ask::Raw(raw) => raw.model.as_deref(),
    };
    if matches!(checked.ask, Ask::Load { .. })
        && checked.keep_alive == Some(KeepAlive::For(std::time::Duration::ZERO))
    {
        // Ollama's way to unload a model: an empty prompt with `keep_alive: 0`.
        // The id alone: a listing holds the model, which must be let go to unload.
        let id = state.model_named(model.or(Some("")))?.id;
        state.unload_model(&id).or_else(|e| match e {
            // A model loaded at start stays; the answer says it was asked to unload.
            ApiError::BadRequest { .. } => Ok(false),
            other => Err(other),
        })?;
        return Ok(answer::unloaded(shape, &id));
    }
    let served = resolve(&state, model, checked.keep_alive).await?;
    check_context(&served, checked.num_ctx)?;
    let submitted = Instant::now();
    let (items, first, live) = match checked.ask {
        Ask::Load { .. } => return Ok(answer::loaded(shape, &served.id)),
        Ask::Chat(valid) => {
            let Begun {
                stream,
                first,
                live,
                ..
            } = begin_held(&state, served.clone(), valid.chat, &valid.options).await?;
            (Items::Chat(Box::new(stream)), Piece::from_chat(first), live)
        }
        Ask::Raw(raw) => {
            let input = match (&raw.suffix, raw.input) {
                (Some(suffix), PromptInput::Text { text, .. }) => {
                    fim::prompt(&served, &text, suffix).await?
                }
                (_, input) => input,
            };
            let live = state.metrics().live();
            let mut stream = served
                .llm
                .astream_complete_with(input, &raw.options)
                .await
                .map_err(|e| ApiError::from(e).too_long_in("prompt"))?;
            let first = match stream.next().await {
                Some(item) => item.map_err(|e| ApiError::from(e).too_long_in("prompt"))?,
                None => return Err(ApiError::Internal),
            };
            state.metrics().first_token(submitted.elapsed());
            (Items::Raw(Box::new(stream)), Piece::from_raw(first), live)
        }
    };
    let answer = Answer {
        state,
        shape,
        model: served.id,
        items,
        first,
        timing: Timing {
            received,
            submitted,
            first: Instant::now(),
        },
        live,
    };
    if checked.stream {
        Ok(answer.stream())
    } else {
        answer.whole().await
    }
}
