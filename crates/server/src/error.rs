//! One error type for every route, and the one place that turns errors into HTTP statuses and
//! error bodies: OpenAI's (`{"error": {"message", "type", "param", "code"}}`) or, on the
//! Anthropic routes, Anthropic's (`{"type": "error", "error": {"type", "message"}}`), whose
//! `error.type` follows from the same status, or, on the Ollama routes (`/api/*`), Ollama's
//! (`{"error": "message"}`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use wick::{Error as WickError, ErrorClass};

/// An error's HTTP status, OpenAI `error.type`, `param` and `code`.
type Parts = (
    StatusCode,
    &'static str,
    Option<String>,
    Option<&'static str>,
);

/// What a request can fail with, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The request is malformed or a value is out of range.
    #[error("{message}")]
    BadRequest {
        /// What to change.
        message: String,
        /// The offending field, when known.
        param: Option<String>,
    },
    /// The feature is recognised but wick does not do it yet.
    #[error("{message}")]
    Unsupported {
        /// What is unsupported.
        message: String,
        /// The offending field.
        param: &'static str,
    },
    /// No bearer token or a wrong one.
    #[error(
        "invalid or missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`"
    )]
    Unauthorized,
    /// The `model` field names no served model.
    #[error("the model `{model}` does not exist; served models: {served}")]
    ModelNotFound {
        /// The model asked for.
        model: String,
        /// The served model ids, comma-separated.
        served: String,
    },
    /// No such route.
    #[error("no route for {method} {path}")]
    NotFound {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// The body is over the configured limit.
    #[error("the request body is over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The prompt does not fit the context window.
    #[error(
        "the prompt has {}{prompt_tokens} tokens but the context window holds {n_ctx}; \
         shorten the {param} or start the server with a larger --ctx-size",
        if *at_least { "at least " } else { "" }
    )]
    ContextLength {
        /// The field that is too long (`messages`, `prompt`, `input`).
        param: &'static str,
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Whether `prompt_tokens` is a lower bound (the prompt was refused untokenized).
        at_least: bool,
        /// The context window.
        n_ctx: usize,
    },
    /// Every sequence is busy and the queue is full.
    #[error("{message}")]
    Busy {
        /// The engine's message.
        message: String,
    },
    /// The models are still loading.
    #[error("the server is loading its models; retry shortly")]
    Loading,
    /// The model could not be loaded (every request that waited for the load gets this).
    #[error("cannot load the model `{model}`: {reason}")]
    ModelLoad {
        /// The model's id.
        model: String,
        /// Why, as the loader said it.
        reason: String,
    },
    /// The model is not loaded and the server loads models only when asked.
    #[error(
        "the model `{model}` is not loaded, and this server loads models only when asked: \
         POST /models/load {{\"model\": \"{model}\"}} first"
    )]
    ModelNotLoaded {
        /// The model's id.
        model: String,
    },
    /// The server is shutting down and gave up on this request.
    #[error("the server is shutting down; retry on another server or after it restarts")]
    ShuttingDown,
    /// The method is not served on this route.
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed {
        /// The request method.
        method: String,
        /// The request path.
        path: String,
    },
    /// A JSON endpoint got a body of another media type.
    #[error(
        "this endpoint takes a JSON body: send `Content-Type: application/json` (got {given})"
    )]
    UnsupportedMediaType {
        /// The `Content-Type` sent, or `none`.
        given: String,
    },
    /// The `Host` header names a host this server does not answer to.
    #[error(
        "the host `{host}` is not served here; a server bound to loopback answers only to \
         loopback names (start it with --allow-host {host} to add this one)"
    )]
    HostNotAllowed {
        /// The `Host` header's value.
        host: String,
    },
    /// The client took too long to send the body.
    #[error("the request body did not arrive within {seconds} s")]
    RequestTimeout {
        /// The body deadline, in seconds.
        seconds: u64,
    },
    /// No stored response has this id (Responses API: `GET`/`DELETE /v1/responses/{id}`,
    /// or `previous_response_id`).
    #[error(
        "no stored response has the id `{id}`: responses are kept in memory while the server \
         runs (only with `store` true, the least recently used evicted past the store's limits)"
    )]
    ResponseNotFound {
        /// The id asked for.
        id: String,
        /// Whether it came as `previous_response_id`.
        previous: bool,
    },
    /// A model could not be fetched into the store (a download, hub or disk failure).
    #[error("{message}")]
    ModelFetch {
        /// What failed, as the model store says it.
        message: String,
    },
    /// Something failed on the server's side; details are logged, not returned.
    #[error("internal error; see the server log")]
    Internal,
}

impl ApiError {
    /// The same error naming `param` as the field that is too long.
    pub(crate) fn too_long_in(self, param: &'static str) -> Self {
        match self {
            ApiError::ContextLength {
                prompt_tokens,
                at_least,
                n_ctx,
                ..
            } => ApiError::ContextLength {
                param,
                prompt_tokens,
                at_least,
                n_ctx,
            },
            other => other,
        }
    }

    /// A 400 for `param` with `message`.
    pub(crate) fn bad(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    /// The status, OpenAI `error.type`, `param` and `code` of this error.
    fn parts(&self) -> Parts {
        match self {
            ApiError::BadRequest { param, .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                param.clone(),
                None,
            ),
            ApiError::Unsupported { param, .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                Some((*param).to_owned()),
                Some("unsupported_parameter"),
            ),
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                None,
                Some("invalid_api_key"),
            ),
            ApiError::NotFound { .. } => (
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                None,
                Some("not_found"),
            ),
            ApiError::PayloadTooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                None,
                Some("payload_too_large"),
            ),
            // llama-server's type (OpenAI clients go by the status and the code).
            ApiError::ContextLength { param, .. } => (
                StatusCode::BAD_REQUEST,
                "exceed_context_size_error",
                Some((*param).to_owned()),
                Some("context_length_exceeded"),
            ),
            ApiError::Busy { .. } => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_busy",
                None,
                Some("busy"),
            ),
            ApiError::Loading => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_loading",
                None,
                Some("loading"),
            ),
            ApiError::ModelNotFound { .. }
            | ApiError::ModelLoad { .. }
            | ApiError::ModelNotLoaded { .. } => self.model_parts(),
            ApiError::ShuttingDown => (
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                None,
                Some("server_shutting_down"),
            ),
            ApiError::MethodNotAllowed { .. } => (
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                None,
                Some("method_not_allowed"),
            ),
            ApiError::UnsupportedMediaType { .. } => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                None,
                Some("unsupported_media_type"),
            ),
            ApiError::HostNotAllowed { .. } => (
                StatusCode::FORBIDDEN,
                "invalid_request_error",
                None,
                Some("host_not_allowed"),
            ),
            ApiError::RequestTimeout { .. } => (
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                None,
                Some("request_timeout"),
            ),
            ApiError::ResponseNotFound { previous, .. } => response_not_found(*previous),
            ApiError::ModelFetch { .. } => (
                StatusCode::BAD_GATEWAY,
                "server_error",
                None,
                Some("model_fetch_failed"),
            ),
            ApiError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                None,
                None,
            ),
        }
    }

    /// The parts of an error about the requested model: unknown (404), its load failed (500),
    /// or not loaded while requests do not load models (400).
    fn model_parts(&self) -> Parts {
        let param = Some("model".into());
        match self {
            ApiError::ModelLoad { .. } => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                param,
                Some("model_load_failed"),
            ),
            ApiError::ModelNotLoaded { .. } => (
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                param,
                Some("model_not_loaded"),
            ),
            _ => (
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                param,
                Some("model_not_found"),
            ),
        }
    }

    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        self.parts().0
    }

    /// The OpenAI error object (`{"error": {...}}`); a prompt too long for the context also
    /// gives both numbers as llama-server does (`n_prompt_tokens`, `n_ctx`).
    pub fn body(&self) -> serde_json::Value {
        let (_, kind, param, code) = self.parts();
        let mut body = json!({"error": {"message": self.to_string(), "type": kind, "param": param,
                                        "code": code}});
        if let ApiError::ContextLength {
            prompt_tokens,
            n_ctx,
            ..
        } = self
        {
            body["error"]["n_prompt_tokens"] = json!(prompt_tokens);
            body["error"]["n_ctx"] = json!(n_ctx);
        }
        body
    }

    /// The Responses API's streamed `error` event, numbered `sequence`.
    pub(crate) fn responses_event(&self, sequence: u64) -> serde_json::Value {
        let (_, _, param, code) = self.parts();
        json!({"type": "error", "code": code, "message": self.to_string(), "param": param,
               "sequence_number": sequence})
    }
}

/// [`ApiError::ResponseNotFound`]'s parts: `previous_response_id` names its field and has
/// its own code.
fn response_not_found(previous: bool) -> Parts {
    if previous {
        let param = Some("previous_response_id".into());
        let code = Some("previous_response_not_found");
        (StatusCode::NOT_FOUND, "invalid_request_error", param, code)
    } else {
        let code = Some("not_found");
        (StatusCode::NOT_FOUND, "invalid_request_error", None, code)
    }
}

/// Anthropic's error object, fields in Anthropic's order.
#[derive(Debug, serde::Serialize)]
pub(crate) struct AnthropicErrorBody {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicError,
}

/// The `error` of [`AnthropicErrorBody`].
#[derive(Debug, serde::Serialize)]
struct AnthropicError {
    #[serde(rename = "type")]
    kind: &'static str,
    message: String,
}

/// Which API's error shape a response takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
    /// OpenAI's Responses API: OpenAI's error bodies; streamed, numbered `event: <type>` events
    /// ending in an `error` event.
    Responses,
    /// `{"error": "message"}`.
    Ollama,
}

impl Dialect {
    /// The dialect of the route at `path`: the Anthropic routes answer in Anthropic's shape
    /// and the Ollama routes (`/api/*`) in Ollama's (their 401s, 404s and 405s included),
    /// every other route in OpenAI's.
    pub(crate) fn of_path(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Dialect::Anthropic
        } else if path.starts_with("/api/") {
            Dialect::Ollama
        } else {
            Dialect::OpenAi
        }
    }
}

impl ApiError {
    /// Anthropic's `error.type` for this error, from its status (the one status mapping).
    fn anthropic_type(&self) -> &'static str {
        match self.status().as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        }
    }

    /// Anthropic's error object (`{"type": "error", "error": {"type", "message"}}`).
    pub(crate) fn anthropic_body(&self) -> AnthropicErrorBody {
        AnthropicErrorBody {
            kind: "error",
            error: AnthropicError {
                kind: self.anthropic_type(),
                message: self.to_string(),
            },
        }
    }

    /// Ollama's error object (`{"error": "message"}`); an unknown model is said the way
    /// Ollama says it (`model "x" not found`), which clients look for.
    pub(crate) fn ollama_body(&self) -> serde_json::Value {
        let message = match self {
            ApiError::ModelNotFound { model, served } => {
                format!("model \"{model}\" not found; this server serves: {served}")
            }
            other => other.to_string(),
        };
        json!({ "error": message })
    }

    /// The response in `dialect`'s shape; OpenAI's is [`IntoResponse`]'s.
    pub(crate) fn response_in(self, dialect: Dialect) -> Response {
        let status = self.status();
        let mut response = match dialect {
            Dialect::OpenAi | Dialect::Responses => {
                (status, axum::Json(self.body())).into_response()
            }
            Dialect::Anthropic => (status, axum::Json(self.anthropic_body())).into_response(),
            Dialect::Ollama => (status, axum::Json(self.ollama_body())).into_response(),
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"wick\""),
            );
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.response_in(Dialect::OpenAi)
    }
}

impl From<WickError> for ApiError {
    /// The one mapping from a library error to the client's: an exhaustive `match` over its
    /// class, so a new kind of failure cannot fall through a catch-all.
    fn from(e: WickError) -> Self {
        let message = e.to_string();
        match e.class() {
            ErrorClass::Invalid { param } => ApiError::BadRequest {
                message,
                param: param.map(str::to_owned),
            },
            ErrorClass::ContextLength {
                prompt_tokens,
                at_least,
                n_ctx,
            } => ApiError::ContextLength {
                param: "messages",
                prompt_tokens,
                at_least,
                n_ctx,
            },
            ErrorClass::Unsupported { param } => ApiError::Unsupported { message, param },
            ErrorClass::Busy => ApiError::Busy { message },
            ErrorClass::Internal => {
                tracing::error!("internal error: {message}");
                ApiError::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wick::{BackendError, EngineError};

    fn of(e: impl Into<WickError>) -> ApiError {
        ApiError::from(e.into())
    }

    #[test]
    fn busy_is_a_503_with_retry_after() {
        let e = of(EngineError::Busy {
            live: 4,
            queued: 64,
        });
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn a_long_prompt_names_both_numbers() {
        let e = of(EngineError::PromptTooLong {
            prompt_tokens: 5000,
            n_ctx: 4096,
        });
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let body = e.body();
        assert_eq!(body["error"]["code"], "context_length_exceeded");
        assert_eq!(body["error"]["type"], "exceed_context_size_error");
        assert_eq!(body["error"]["n_prompt_tokens"], 5000);
        assert_eq!(body["error"]["n_ctx"], 4096);
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("5000") && message.contains("4096"),
            "{message}"
        );
    }

    #[test]
    fn bad_values_are_400s_naming_the_field_and_failures_are_500s_without_details() {
        let e = of(WickError::Invalid {
            field: "tool_choice",
            value: "x".into(),
            allowed: "a tool's name",
        });
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(e.body()["error"]["param"], "tool_choice");
        let e = of(BackendError::Grammar {
            reason: "bad".into(),
        });
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let e = of(BackendError::Decode {
            reason: "secret internals".into(),
        });
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.body().to_string().contains("secret"));
        assert_eq!(
            of(EngineError::Stopped).status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn anthropic_error_types_follow_the_status() {
        let cases = [
            (ApiError::bad("x", "bad"), "invalid_request_error"),
            (ApiError::Unauthorized, "authentication_error"),
            (
                ApiError::HostNotAllowed { host: "h".into() },
                "permission_error",
            ),
            (
                ApiError::NotFound {
                    method: "GET".into(),
                    path: "/x".into(),
                },
                "not_found_error",
            ),
            (ApiError::PayloadTooLarge { limit: 1 }, "request_too_large"),
            (
                ApiError::Busy {
                    message: "b".into(),
                },
                "overloaded_error",
            ),
            (ApiError::Loading, "overloaded_error"),
            (ApiError::Internal, "api_error"),
            (
                ApiError::MethodNotAllowed {
                    method: "GET".into(),
                    path: "/v1/messages".into(),
                },
                "invalid_request_error",
            ),
        ];
        for (e, kind) in cases {
            let body = serde_json::to_string(&e.anthropic_body()).unwrap();
            let want = format!(
                r#"{{"type":"error","error":{{"type":"{kind}","message":{}}}}}"#,
                serde_json::to_string(&e.to_string()).unwrap()
            );
            assert_eq!(body, want);
        }
    }
}
