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
    /// Prompt tokens all sequences together prefill in a step when no sequence is decoding
    /// (llama.cpp's batch size). Default 512.
    pub prefill_budget: usize,
    /// Prompt tokens all sequences together prefill in a step while others decode: running
    /// streams keep their pace, new prompts still move. Default 128.
    pub prefill_budget_decoding: usize,
    /// Bytes of sequence states kept in RAM for prefixes no sequence holds any more (the
    /// prompt cache's RAM tier, in front of the disk tier); 0 turns it off. Default 2 GiB.
    pub ram_cache_bytes: u64,
    /// The disk tier of the prompt cache; `None` (the default): RAM only.
    pub disk_cache: Option<DiskCacheConfig>,
    /// The most tokens a greedy request drafts per step by prompt lookup (draft-free n-gram
    /// speculation, verified in the batched step; the answer is unchanged); 0 turns it off.
    /// A request may set its own ([`crate::GenerateRequest::spec_max`]). Default 0.
    pub spec_max: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_live: None,
            queue_capacity: 64,
            prefill_budget: 512,
            prefill_budget_decoding: 128,
            ram_cache_bytes: 2 << 30,
            disk_cache: None,
            spec_max: 0,
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
        check("prefill_budget", self.prefill_budget)?;
        check("prefill_budget_decoding", self.prefill_budget_decoding)
    }
}
