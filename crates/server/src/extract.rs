//! `ApiJson<T>`: a JSON body whose every rejection (not JSON by its media type, too large,
//! too slow, not JSON, wrong types) is an OpenAI-shaped error naming what to change.

use std::fmt::Write as _;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{ApiError, AppState};

/// A request body parsed as JSON into `T`.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        check_media_type(req.headers())?;
        let limit = state.config().max_body_bytes;
        let deadline = state.config().body_timeout;
        let read = tokio::time::timeout(deadline, Bytes::from_request(req, state));
        let bytes = read
            .await
            .map_err(|_| ApiError::RequestTimeout {
                seconds: deadline.as_secs(),
            })?
            .map_err(|e| {
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge { limit }
                } else {
                    ApiError::BadRequest {
                        message: format!("cannot read the request body: {e}"),
                        param: None,
                    }
                }
            })?;
        match &state.config().media_urls {
            // Images given by URL are fetched and put in the body as data, where the APIs'
            // own readers take them.
            Some(urls) if crate::media::mentions_url(&bytes) => {
                let mut value: Value = parse(&bytes)?;
                crate::media::fetch_urls(&mut value, urls).await?;
                serde_json::from_value(value)
                    .map(ApiJson)
                    .map_err(|e| ApiError::BadRequest {
                        message: format!("invalid request body: {e}"),
                        param: None,
                    })
            }
            _ => parse(&bytes).map(ApiJson),
        }
    }
}

/// JSON endpoints take `application/json` (or a `+json` type) only: a browser page may send
/// `text/plain` (or no type) to any origin without a CORS preflight, so accepting it would let
/// any web page run generations on a server without a key.
fn check_media_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let essence = given
        .as_deref()
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some("application/json") => Ok(()),
        Some(e) if e.starts_with("application/") && e.ends_with("+json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType {
            given: given.unwrap_or_else(|| "none".to_owned()),
        }),
    }
}

/// Parses and validates a request body the way the handler of `path` does, without running
/// it: the fuzz targets' door into the server's untrusted-input path.
///
/// # Errors
///
/// The [`ApiError`] the route would answer; [`ApiError::NotFound`] for a path without a JSON
/// body.
#[doc(hidden)]
pub fn check_request(path: &str, body: &[u8]) -> Result<(), ApiError> {
    use crate::wire::{ChatCompletionRequest, CompletionRequest, EmbeddingRequest};
    let defaults = crate::SamplingDefaults::default();
    match path {
        "/v1/chat/completions" => {
            crate::validate::chat(parse::<ChatCompletionRequest>(body)?, &defaults).map(drop)
        }
        "/v1/completions" => {
            crate::completions::valid(parse::<CompletionRequest>(body)?, &defaults).map(drop)
        }
        "/v1/embeddings" => {
            crate::prompts::items(parse::<EmbeddingRequest>(body)?.input, "input").map(drop)
        }
        "/v1/messages" => crate::anthropic::check(parse(body)?, false),
        "/v1/messages/count_tokens" => crate::anthropic::check(parse(body)?, true),
        "/v1/responses" => crate::responses::check(parse(body)?),
        "/api/chat" => crate::ollama::check(body, false),
        "/api/generate" => crate::ollama::check(body, true),
        "/lora-adapters" => crate::validate::lora(&parse::<Value>(body)?).map(drop),
        _ => Err(ApiError::NotFound {
            method: "POST".into(),
            path: path.to_owned(),
        }),
    }
}

/// Parses `bytes` as `T`: not JSON and JSON of the wrong shape are told apart, and a value of
/// the wrong shape is named by its path (`messages[0].content`).
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest {
        message: format!("the request body is not valid JSON: {e}"),
        param: None,
    })?;
    let e = match serde_path_to_error::deserialize::<_, T>(&value) {
        Ok(parsed) => return Ok(parsed),
        Err(e) => e,
    };
    let mut steps: Vec<Step> = e.path().iter().filter_map(Step::of).collect();
    let message = e.into_inner().to_string();
    if bytes.len() <= LOCATE_LIMIT {
        locate::<T>(&value, &message, &mut steps);
    }
    let mut path = String::new();
    for step in &steps {
        match step {
            Step::Key(k) if path.is_empty() => path.push_str(k),
            Step::Key(k) => {
                path.push('.');
                path.push_str(k);
            }
            Step::Index(i) => {
                let _ = write!(path, "[{i}]");
            }
        }
    }
    if path.is_empty() {
        // A missing field names itself in the message.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next());
        return Err(ApiError::BadRequest {
            message: format!("invalid request: {message}"),
            param: missing.map(str::to_owned),
        });
    }
    Err(ApiError::BadRequest {
        message: format!("invalid `{path}`: {message}"),
        param: Some(path),
    })
}

/// Bodies up to this size get the offending field searched for when serde cannot say where
/// it is (inside `#[serde(flatten)]`, which buffers the fields and loses their path).
const LOCATE_LIMIT: usize = 256 << 10;

/// One step of a path into a JSON value.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

impl Step {
    fn of(segment: &serde_path_to_error::Segment) -> Option<Step> {
        match segment {
            serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
            _ => None,
        }
    }
}

fn at<'v>(value: &'v mut Value, steps: &[Step]) -> Option<&'v mut Value> {
    steps.iter().try_fold(value, |v, step| match step {
        Step::Key(k) => v.get_mut(k.as_str()),
        Step::Index(i) => v.get_mut(*i),
    })
}

/// Extends `steps` down to the member whose removal changes or cures the error `message`:
/// the member at fault.
fn locate<T: DeserializeOwned>(value: &Value, message: &str, steps: &mut Vec<Step>) {
    let fails_the_same = |candidate: &Value| match serde_json::from_value::<T>(candidate.clone()) {
        Ok(_) => false,
        Err(e) => e.to_string() == message,
    };
    loop {
        let mut probe = value.clone();
        let children: Vec<Step> = match at(&mut probe, steps) {
            Some(Value::Object(map)) => map.keys().cloned().map(Step::Key).collect(),
            Some(Value::Array(items)) => (0..items.len()).map(Step::Index).collect(),
            _ => return,
        };
        let culprit = children.into_iter().find(|child| {
            let mut candidate = value.clone();
            match (at(&mut candidate, steps), child) {
                (Some(Value::Object(map)), Step::Key(k)) => {
                    map.remove(k);
                }
                (Some(Value::Array(items)), Step::Index(i)) => {
                    items.remove(*i);
                }
                _ => return false,
            }
            !fails_the_same(&candidate)
        });
        match culprit {
            Some(child) => steps.push(child),
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_type(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(v) = value {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn json_media_types_pass_and_others_are_415s() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+json",
        ] {
            assert!(check_media_type(&with_type(Some(ok))).is_ok(), "{ok}");
        }
        for bad in [
            Some("text/plain"),
            Some("text/plain;charset=UTF-8"),
            Some("application/x-www-form-urlencoded"),
            Some("multipart/form-data; boundary=x"),
            None,
        ] {
            let e = check_media_type(&with_type(bad)).unwrap_err();
            assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad:?}");
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Shape {
        max_tokens: Option<i64>,
        messages: Vec<Message>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Message {
        content: String,
    }

    #[test]
    fn a_wrong_type_names_its_field() {
        let e = parse::<Shape>(br#"{"max_tokens": "ten", "messages": []}"#).unwrap_err();
        assert_eq!(e.body()["error"]["param"], "max_tokens");
        let e = parse::<Shape>(br#"{"messages": [{"content": 1}]}"#).unwrap_err();
        assert_eq!(e.body()["error"]["param"], "messages[0].content");
        let message = e.to_string();
        assert!(message.contains("messages[0].content"), "{message}");
    }
}
