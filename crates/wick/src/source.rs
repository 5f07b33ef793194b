//! Turning a [`ModelSource`] into a GGUF file on disk, through wick-models (the store, the
//! Hugging Face cache, verified downloads).

use std::path::PathBuf;

use wick_models::{ModelRef, ModelStore, Settings};

use crate::{Error, ModelSource, Result};

/// The model file `source` names, downloading it when needed.
pub(crate) fn resolve(source: &ModelSource) -> Result<PathBuf> {
    let (reference, text) = match source {
        ModelSource::Default => (ModelRef::Default, "the default model".to_owned()),
        ModelSource::Path(path) => (ModelRef::Path(path.clone()), path.display().to_string()),
        ModelSource::Reference(text) => (
            text.parse::<ModelRef>()
                .map_err(|e| model_error(text, &e))?,
            text.clone(),
        ),
    };
    let store = ModelStore::new(Settings::from_env()).map_err(|e| model_error(&text, &e))?;
    store
        .resolve(&reference)
        .map_err(|e| model_error(&text, &e))
}

fn model_error(reference: &str, e: &wick_models::ModelError) -> Error {
    Error::Model {
        reference: reference.to_owned(),
        reason: e.to_string(),
    }
}
