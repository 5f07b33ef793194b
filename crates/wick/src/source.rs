//! Turning a [`ModelSource`] into a GGUF file on disk.

use std::path::PathBuf;

use crate::{Error, ModelSource, Result};

/// The model file `source` names.
pub(crate) fn resolve(source: &ModelSource) -> Result<PathBuf> {
    match source {
        ModelSource::Path(path) => Ok(path.clone()),
        ModelSource::Default | ModelSource::Reference(_) => Err(Error::Model {
            reference: format!("{source:?}"),
            reason: "model references are resolved by wick-models (pending)".into(),
        }),
    }
}
