//! `ApiJson<T>`: a JSON body whose every rejection (too large, not JSON, wrong types) is an
//! OpenAI-shaped error.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use crate::{ApiError, AppState};

/// A request body parsed as JSON into `T`.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = state.config().max_body_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
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

/// Parses `bytes` as `T`: not JSON and JSON of the wrong shape are told apart.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::BadRequest {
            message: format!("the request body is not valid JSON: {e}"),
            param: None,
        })?;
    serde_json::from_value(value).map_err(|e| ApiError::BadRequest {
        message: format!("invalid request: {e}"),
        param: None,
    })
}
