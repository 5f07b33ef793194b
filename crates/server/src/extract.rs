//! `ApiJson<T>`: a JSON body whose every rejection (not JSON by its media type, too large,
//! too slow, not JSON, wrong types) is an OpenAI-shaped error naming what to change.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

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
        parse(&bytes).map(ApiJson)
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

/// Parses `bytes` as `T`: not JSON and JSON of the wrong shape are told apart, and a value of
/// the wrong shape is named by its path (`messages[0].content`).
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest {
            message: format!("the request body is not valid JSON: {e}"),
            param: None,
        })?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::BadRequest {
                message: format!("invalid request: {inner}"),
                param: None,
            }
        } else {
            ApiError::BadRequest {
                message: format!("invalid `{path}`: {inner}"),
                param: Some(path),
            }
        }
    })
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
