//! The model's projector through llama.cpp's multimodal library (libmtmd): an image (or a
//! sound, for an audio projector) becomes positions of the prompt. Encoding runs on the thread
//! that renders the prompt (it decodes the file and preprocesses its pixels); the positions are
//! evaluated on the model's thread when a step reaches them (the projector's encoder, then the
//! embeddings through the text model).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::mtmd::{
    mtmd_default_marker, MtmdBitmap, MtmdContext, MtmdContextParams, MtmdInputChunkType,
    MtmdInputChunks, MtmdInputText,
};
use wick_backend::media::{check, MediaTable};
use wick_backend::{BackendError, EncodedMedia, MediaEncoder, Result};
use wick_types::{Media, MediaKind, TokenId};

/// A loaded projector. Its libmtmd context is given up ([`Projector::close`]) before the text
/// model it was made for is freed; encoding after that is an error, never a use of freed memory.
pub(crate) struct Projector {
    path: PathBuf,
    ctx: Mutex<Option<MtmdContext>>,
    vision: bool,
    audio: bool,
    table: MediaTable,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector")
            .field("path", &self.path)
            .field("vision", &self.vision)
            .field("audio", &self.audio)
            .finish_non_exhaustive()
    }
}

/// What a medium keeps for its evaluation: libmtmd's chunk of it (the preprocessed pixels or
/// audio frames).
struct Chunk(MtmdInputChunks);

impl Projector {
    /// Loads the projector at `path` for `model`, encoding with `n_threads` CPU threads.
    ///
    /// # Errors
    ///
    /// [`BackendError::Load`] for a file that is not a projector for this model (another
    /// embedding width) or one whose positions wick cannot place (M-RoPE).
    pub(crate) fn load(path: &Path, model: &LlamaModel, n_threads: i32) -> Result<Self> {
        let load_err = |reason: String| BackendError::Load {
            path: path.to_path_buf(),
            reason,
        };
        crate::gguf::check_gguf(path)?;
        let text = path
            .to_str()
            .ok_or_else(|| load_err("the path is not UTF-8".into()))?;
        let params = MtmdContextParams {
            n_threads,
            print_timings: false,
            ..MtmdContextParams::default()
        };
        let ctx = MtmdContext::init_from_file(text, model, &params).map_err(|e| {
            load_err(format!(
                "llama.cpp's multimodal library could not load it as a projector ({e}): is it \
                 a projector (mmproj) GGUF made for this model? Its output width must be the \
                 model's embedding width ({})",
                model.n_embd()
            ))
        })?;
        if ctx.decode_use_mrope() {
            return Err(load_err(
                "the projector places its positions with M-RoPE (Qwen2-VL and kin), which \
                 wick's prompt positions do not follow yet"
                    .into(),
            ));
        }
        Ok(Projector {
            path: path.to_path_buf(),
            vision: ctx.support_vision(),
            audio: ctx.support_audio(),
            ctx: Mutex::new(Some(ctx)),
            table: MediaTable::default(),
        })
    }

    /// Frees the libmtmd context: called before the text model is freed.
    pub(crate) fn close(&self) {
        *self.ctx.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Checks that every media id in `tokens` is a whole run some request holds.
    pub(crate) fn check(&self, tokens: &[TokenId]) -> Result<()> {
        self.table.check_runs(tokens)
    }

    /// Evaluates the medium whose run starts with `first` into sequence `seq` at positions
    /// from `n_past` (its encoder, then its embeddings through the model, in batches of at most
    /// `n_batch`); returns how many positions it took.
    pub(crate) fn eval(
        &self,
        first: TokenId,
        llama: &mut LlamaContext<'_>,
        n_past: usize,
        seq: i32,
        n_batch: usize,
    ) -> Result<usize> {
        let run = self.table.find(first).ok_or_else(|| BackendError::Media {
            reason: format!("token {first} stands for no medium the projector holds"),
        })?;
        let chunk = run
            .data
            .downcast_ref::<Chunk>()
            .ok_or_else(|| BackendError::Media {
                reason: "the medium was not encoded by this projector".into(),
            })?;
        let mut guard = self.ctx.lock().unwrap_or_else(PoisonError::into_inner);
        let mtmd = guard.as_mut().ok_or(BackendError::ContextGone)?;
        let decode_err = |e: &dyn std::fmt::Display| BackendError::Decode {
            reason: format!("evaluating a {}: {e}", run.kind.as_str()),
        };
        chunk
            .0
            .eval_chunks(
                mtmd,
                llama,
                i32::try_from(n_past).map_err(|e| decode_err(&e))?,
                seq,
                i32::try_from(n_batch.max(1)).map_err(|e| decode_err(&e))?,
                false,
            )
            .map_err(|e| decode_err(&e))?;
        Ok(run.tokens.len())
    }
}

impl MediaEncoder for Projector {
    fn accepts(&self, kind: MediaKind) -> bool {
        match kind {
            MediaKind::Image => self.vision,
            MediaKind::Audio => self.audio,
        }
    }

    fn encode(&self, media: &Media) -> Result<Arc<EncodedMedia>> {
        let format = check(self, media)?;
        let kind = media.kind.as_str();
        let digest = xxhash_rust::xxh3::xxh3_128(&media.bytes);
        self.table.register(digest, |hash| {
            let guard = self.ctx.lock().unwrap_or_else(PoisonError::into_inner);
            let ctx = guard.as_ref().ok_or(BackendError::ContextGone)?;
            let bitmap = MtmdBitmap::from_buffer(ctx, &media.bytes, false).map_err(|_| {
                BackendError::Media {
                    reason: format!(
                        "the {format} {kind} could not be decoded: corrupt or truncated"
                    ),
                }
            })?;
            let text = MtmdInputText {
                text: mtmd_default_marker().to_owned(),
                add_special: false,
                parse_special: true,
            };
            let chunks = ctx
                .tokenize(text, &[&bitmap])
                .map_err(|e| BackendError::Media {
                    reason: format!("the projector could not take the {format} {kind}: {e}"),
                })?;
            let positions = (0..chunks.len())
                .filter_map(|i| chunks.get(i))
                .filter(|c| c.chunk_type() != MtmdInputChunkType::Text)
                .map(|c| c.n_tokens())
                .sum::<usize>();
            let only_media = (0..chunks.len())
                .filter_map(|i| chunks.get(i))
                .all(|c| c.chunk_type() != MtmdInputChunkType::Text);
            if positions == 0 || !only_media {
                return Err(BackendError::Media {
                    reason: format!(
                        "the projector made {positions} positions of the {kind} and text \
                         around it, which wick does not place yet"
                    ),
                });
            }
            Ok(EncodedMedia {
                kind: media.kind,
                tokens: (0..positions).map(|i| TokenId::media(hash, i)).collect(),
                digest,
                data: Box::new(Chunk(chunks)),
            })
        })
    }
}
