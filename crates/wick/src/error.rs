//! `wick::Error`: everything the library can report.

use wick_backend::BackendError;
use wick_engine::EngineError;

/// An error of the wick library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range.
    #[error("invalid {field}: {value} (allowed: {allowed})")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: &'static str,
    },
    /// The model could not be found or fetched.
    #[error("{}", model_message(reference, reason))]
    Model {
        /// The model as it was named.
        reference: String,
        /// What went wrong.
        reason: String,
    },
    /// The backend failed (loading, tokenizing, decoding).
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The engine refused or failed a request (busy, prompt too long, stopped).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl Error {
    /// How this error reads to the client ([`wick_types::ErrorClass`]).
    pub fn class(&self) -> wick_types::ErrorClass {
        match self {
            Error::Invalid { field, .. } => wick_types::ErrorClass::Invalid { param: Some(field) },
            Error::Model { .. } => wick_types::ErrorClass::Internal,
            Error::Backend(b) => b.class(),
            Error::Engine(e) => e.class(),
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The reason alone when it already names the model, else both.
fn model_message(reference: &str, reason: &str) -> String {
    if reason.contains(reference) {
        reason.to_owned()
    } else {
        format!("model {reference}: {reason}")
    }
}
