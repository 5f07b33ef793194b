//! LoRA adapters: loaded with the model, each with a default scale the server may change;
//! a request runs under the defaults or under its own scales.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use wick_backend::{AdapterId, AdapterSet, Backend};

use crate::{Error, Result};

/// One loaded adapter as [`crate::Llm::lora_adapters`] lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraAdapter {
    /// Its index: the order it was given in ([`crate::LlmBuilder::lora`]), from 0.
    pub id: usize,
    /// The adapter file.
    pub path: PathBuf,
    /// The scale requests run it at when they name no scales of their own (0: off).
    pub scale: f32,
}

/// The adapters of a loaded model, by index.
#[derive(Debug, Default)]
pub(crate) struct Loaded(Vec<(AdapterId, PathBuf)>);

impl Loaded {
    /// Loads every file into `backend` (before its engine starts).
    pub(crate) fn load(backend: &mut dyn Backend, paths: &[PathBuf]) -> Result<Self> {
        paths
            .iter()
            .map(|path| Ok((backend.load_adapter(path)?, path.clone())))
            .collect::<Result<Vec<_>>>()
            .map(Loaded)
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn path(&self, id: usize) -> &Path {
        &self.0[id].1
    }

    /// The set of `scales` (one per adapter, by index).
    pub(crate) fn set(&self, scales: &[f32]) -> AdapterSet {
        AdapterSet::new(self.0.iter().zip(scales).map(|((id, _), &s)| (*id, s)))
    }
}

/// The default scales, shared by every clone of one [`crate::Llm`].
#[derive(Debug, Clone)]
pub(crate) struct Scales(Arc<RwLock<Vec<f32>>>);

impl Scales {
    pub(crate) fn new(scales: Vec<f32>) -> Self {
        Scales(Arc::new(RwLock::new(scales)))
    }

    pub(crate) fn get(&self) -> Vec<f32> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set(&self, scales: Vec<f32>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = scales;
    }
}

/// One scale per adapter from `listed` (id, scale) pairs: an adapter not listed is off, as in
/// llama-server.
///
/// # Errors
///
/// [`Error::Invalid`] (`lora`) for an id beyond the `n` adapters or a scale that is not finite.
pub(crate) fn scales(n: usize, listed: &[(usize, f32)]) -> Result<Vec<f32>> {
    let mut scales = vec![0.0; n];
    for &(id, scale) in listed {
        if id >= n {
            return Err(Error::Invalid {
                field: "lora",
                value: format!("id {id}"),
                allowed: if n == 0 {
                    "none: the model was loaded without LoRA adapters"
                } else {
                    "the id of a loaded adapter (GET /lora-adapters lists them)"
                },
            });
        }
        if !scale.is_finite() {
            return Err(Error::Invalid {
                field: "lora",
                value: format!("scale {scale} for id {id}"),
                allowed: "a finite number (0: off, 1: as trained)",
            });
        }
        scales[id] = scale;
    }
    Ok(scales)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unlisted_adapters_are_off_and_bad_ids_or_scales_are_named() {
        assert_eq!(scales(3, &[(2, 0.5)]).unwrap(), vec![0.0, 0.0, 0.5]);
        assert_eq!(scales(2, &[(0, 0.5), (0, 1.0)]).unwrap(), vec![1.0, 0.0]);
        for bad in [&[(3, 1.0)][..], &[(0, f32::NAN)], &[(1, f32::INFINITY)]] {
            let err = scales(3, bad).unwrap_err();
            assert!(matches!(err, Error::Invalid { field: "lora", .. }), "{err}");
        }
        let err = scales(0, &[(0, 1.0)]).unwrap_err().to_string();
        assert!(err.contains("without LoRA adapters"), "{err}");
    }
}
