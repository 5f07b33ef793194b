//! Engine settings.

use crate::{DiskCacheConfig, EngineError};

/// How the scheduler shares the model between requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// Requests generating at once; at most the backend's `n_seq_max`. Default: all of them.
    pub max_live: Option<usize>,
    /// Requests waiting behind the live ones before new ones get [`EngineError::Busy`].
    /// Default 64.
    pub queue_capacity: usize,
    /// Prompt tokens one sequence prefills per step, so a long prompt is interleaved with
    /// the decode steps of running sequences. Prompts are prefilled in blocks of this size
    /// aligned to position 0, and the prompt cache reuses whole blocks only, which keeps a
    /// warm answer equal to the cold one. Default 64.
    pub prefill_chunk: usize,
    /// Prompt tokens all sequences together prefill per step. Default 512.
    pub prefill_budget: usize,
    /// The disk tier of the prompt cache; `None` (the default): RAM only.
    pub disk_cache: Option<DiskCacheConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_live: None,
            queue_capacity: 64,
            prefill_chunk: 64,
            prefill_budget: 512,
            disk_cache: None,
        }
    }
}

impl EngineConfig {
    /// Checks every value.
    ///
    /// # Errors
    ///
    /// [`EngineError::InvalidRequest`] naming the field, its value and the allowed range.
    pub fn validate(&self) -> Result<(), EngineError> {
        let check = |field, value: usize| {
            if value == 0 {
                Err(EngineError::InvalidRequest {
                    field,
                    value: value.to_string(),
                    allowed: "1 or more",
                })
            } else {
                Ok(())
            }
        };
        if let Some(live) = self.max_live {
            check("max_live", live)?;
        }
        check("prefill_chunk", self.prefill_chunk)?;
        check("prefill_budget", self.prefill_budget)
    }
}
