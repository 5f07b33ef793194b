//! Evaluating tokens of many sequences in as few forward passes as the batch size allows.

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::token::LlamaToken;
use wick_backend::BackendError;

/// Which outputs of a pass are needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outputs {
    /// None: the tokens only go into the KV cache.
    None,
    /// The last token's (to sample the next one).
    Last,
    /// Every token's (to verify candidates).
    All,
}

/// Tokens of one sequence, placed at positions `start..start + tokens.len()`.
#[derive(Debug)]
pub(crate) struct Pass {
    pub(crate) seq: i32,
    pub(crate) start: usize,
    pub(crate) tokens: Vec<LlamaToken>,
    pub(crate) outputs: Outputs,
}

/// Evaluates every pass, filling batches of at most `n_batch` tokens. After each forward pass,
/// `on_output(ctx, pass, offset, batch_index)` runs for each requested output in that batch,
/// while its logits are valid.
///
/// On failure every pass's new KV cells are removed again, so the cache holds what it held before.
pub(crate) fn eval(
    ctx: &mut LlamaContext<'_>,
    n_batch: usize,
    projector: Option<&crate::media::Projector>,
    passes: &[Pass],
    mut on_output: impl FnMut(&LlamaContext<'_>, usize, usize, i32) -> Result<(), BackendError>,
) -> Result<(), BackendError> {
    let total: usize = passes.iter().map(|p| p.tokens.len()).sum();
    if total == 0 {
        return Ok(());
    }
    let mut batch = LlamaBatch::new(total.min(n_batch), 1);
    let mut pending: Vec<(usize, usize, i32)> = Vec::new();
    let result = (|| {
        for (p, pass) in passes.iter().enumerate() {
            let mut skip = 0;
            for (i, &token) in pass.tokens.iter().enumerate() {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                let id = crate::vocab::from_llama(token);
                if id.is_media() {
                    // A medium's run, whole (checked when the op was planned): the batch so
                    // far goes first, then the projector's embeddings at their positions.
                    let (Some(projector), true) = (projector, id.starts_media()) else {
                        return Err(decode_err(&"a media position outside a whole run"));
                    };
                    flush(ctx, &mut batch, &mut pending, &mut on_output)?;
                    let n = projector.eval(id, ctx, pass.start + i, pass.seq, n_batch)?;
                    let last = i + n == pass.tokens.len();
                    if pass.outputs == Outputs::All || (pass.outputs == Outputs::Last && last) {
                        return Err(BackendError::Media {
                            reason: "a prompt ends with text, not with an image: an image's \
                                     positions give no next-token probabilities"
                                .into(),
                        });
                    }
                    skip = n - 1;
                    continue;
                }
                let want = match pass.outputs {
                    Outputs::None => false,
                    Outputs::Last => i + 1 == pass.tokens.len(),
                    Outputs::All => true,
                };
                if want {
                    pending.push((p, i, batch.n_tokens()));
                }
                let pos = i32::try_from(pass.start + i).expect("invariant: positions fit in n_ctx");
                batch
                    .add(token, pos, &[pass.seq], want)
                    .map_err(|e| decode_err(&e))?;
                if usize::try_from(batch.n_tokens()).unwrap_or(0) == n_batch {
                    flush(ctx, &mut batch, &mut pending, &mut on_output)?;
                }
            }
        }
        flush(ctx, &mut batch, &mut pending, &mut on_output)
    })();
    if result.is_err() {
        for pass in passes {
            let start = u32::try_from(pass.start).unwrap_or(u32::MAX);
            let _ = ctx.clear_kv_cache_seq(
                Some(u32::try_from(pass.seq).unwrap_or(0)),
                Some(start),
                None,
            );
        }
    }
    result
}

fn flush(
    ctx: &mut LlamaContext<'_>,
    batch: &mut LlamaBatch<'_>,
    pending: &mut Vec<(usize, usize, i32)>,
    on_output: &mut impl FnMut(&LlamaContext<'_>, usize, usize, i32) -> Result<(), BackendError>,
) -> Result<(), BackendError> {
    if batch.n_tokens() == 0 {
        return Ok(());
    }
    ctx.decode(batch).map_err(|e| decode_err(&e))?;
    for (p, i, idx) in pending.drain(..) {
        on_output(ctx, p, i, idx)?;
    }
    batch.clear();
    Ok(())
}

fn decode_err(e: &dyn std::fmt::Display) -> BackendError {
    BackendError::Decode {
        reason: e.to_string(),
    }
}
