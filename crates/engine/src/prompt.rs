//! Prompts as tokens: a chat template bound to a model's tokenizer, where template text is
//! tokenized with special-token parsing on and message content with it off.

use std::sync::Arc;

use wick_backend::{Backend, BackendError, EncodedMedia, MediaEncoder, Tokenizer};
use wick_parse::Format;
use wick_template::{ChatTemplate, JinjaTemplate, RenderRequest, SegmentKind, Segments};
use wick_types::{Media, TokenId, MEDIA_MARKER};

use crate::EngineError;

/// Texts that open a reasoning block; a prompt ending with one forces the output to start
/// inside reasoning.
const REASONING_OPENERS: &[&str] = &[
    "<think>",
    "<seed:think>",
    "<|START_THINKING|>",
    "<|inner_prefix|>",
    "[THINK]",
];

/// A chat template with the model's BOS/EOS texts, stop strings and output format.
#[derive(Debug)]
pub struct ChatFormat {
    template: ChatTemplate,
    bos_token: Option<String>,
    eos_token: Option<String>,
    stops: Vec<String>,
    format: Format,
    /// The context window, when known: far larger prompts are refused before tokenizing.
    n_ctx: Option<usize>,
}

/// A rendered, tokenized prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedPrompt {
    /// The prompt's tokens (BOS first when the model wants one).
    pub tokens: Vec<TokenId>,
    /// Whether the prompt ends inside an open reasoning block (`<think>\n` …).
    pub thinking_forced_open: bool,
    /// The images (or sounds) whose positions `tokens` holds, in order, as the model's
    /// projector encoded them.
    pub media: Vec<Arc<EncodedMedia>>,
    /// Where the last message's text starts (the conversation's last content), for
    /// [`crate::GenerateRequest::checkpoint`]; `None` for a prompt without one.
    pub checkpoint: Option<usize>,
}

impl ChatFormat {
    /// `template` for the model `backend` holds (its BOS/EOS texts fill the template's
    /// `bos_token` / `eos_token`).
    ///
    /// # Errors
    ///
    /// The backend cannot detokenize its own special tokens.
    pub fn new<T: Tokenizer + ?Sized>(
        template: ChatTemplate,
        tokenizer: &T,
    ) -> Result<Self, EngineError> {
        let (bos_token, eos_token) = special_texts(tokenizer)?;
        let stops = template.stops();
        let format = match &template {
            ChatTemplate::Jinja(jinja) => Format::detect(jinja.source()),
            _ => Format::ContentOnly,
        };
        Ok(ChatFormat {
            template,
            bos_token,
            eos_token,
            stops,
            format,
            n_ctx: None,
        })
    }

    /// The model's own Jinja chat template, if its metadata has one.
    ///
    /// # Errors
    ///
    /// The template does not compile.
    pub fn from_model(backend: &dyn Backend) -> Result<Option<Self>, EngineError> {
        let Some(source) = backend.info().chat_template.clone() else {
            return Ok(None);
        };
        let template = ChatTemplate::Jinja(JinjaTemplate::new(&source)?);
        ChatFormat::new(template, backend).map(Some)
    }

    /// Refuses prompts whose text alone is too long for a context window of `n_ctx` tokens
    /// before tokenizing them ([`check_size`]).
    #[must_use]
    pub fn with_context_window(mut self, n_ctx: usize) -> Self {
        self.n_ctx = Some(n_ctx);
        self
    }

    /// The context window set by [`ChatFormat::with_context_window`].
    pub fn context_window(&self) -> Option<usize> {
        self.n_ctx
    }

    /// The template.
    pub fn template(&self) -> &ChatTemplate {
        &self.template
    }

    /// The output format of the template (reasoning and tool-call syntax).
    pub fn format(&self) -> Format {
        self.format
    }

    /// Uses `format` for the output instead of the detected one.
    #[must_use]
    pub fn with_format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    /// End-of-turn strings of the template: generation stops before them.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// Renders `request` (its BOS/EOS texts default to the model's) and tokenizes it, on the
    /// caller's thread.
    ///
    /// # Errors
    ///
    /// The template's own error, or a tokenizer failure.
    pub fn render<T: Tokenizer + ?Sized>(
        &self,
        tokenizer: &T,
        request: RenderRequest,
    ) -> Result<RenderedPrompt, EngineError> {
        self.render_with_media(tokenizer, request, &[], None)
    }

    /// [`ChatFormat::render`] for a conversation holding `media`: each [`MEDIA_MARKER`] of the
    /// rendered prompt (one per medium, where its message put it) becomes the positions
    /// `encoder` (the model's projector) gives that medium.
    ///
    /// # Errors
    ///
    /// As [`ChatFormat::render`]; [`BackendError::Media`] for a medium the projector refuses,
    /// a model without a projector, or a template that dropped or repeated a medium.
    pub fn render_with_media<T: Tokenizer + ?Sized>(
        &self,
        tokenizer: &T,
        mut request: RenderRequest,
        media: &[Media],
        encoder: Option<&dyn MediaEncoder>,
    ) -> Result<RenderedPrompt, EngineError> {
        self.fill_special(&mut request);
        let segments = self.template.render_segments(&request)?;
        let text = segments.text();
        if let Some(n_ctx) = self.n_ctx {
            check_size(tokenizer, text.len(), n_ctx)?;
        }
        let tail = text.trim_end();
        let thinking_forced_open = REASONING_OPENERS.iter().any(|o| tail.ends_with(o));
        if media.is_empty() {
            let kinds = segment_tokens(tokenizer, &segments)?;
            let checkpoint = last_content_start(&kinds);
            return Ok(RenderedPrompt {
                tokens: kinds.into_iter().map(|(t, _)| t).collect(),
                thinking_forced_open,
                media: Vec::new(),
                checkpoint,
            });
        }
        let Some(encoder) = encoder else {
            return Err(BackendError::Media {
                reason: format!(
                    "the model reads text only: it has no projector for the {} in the \
                     conversation (give one with --mmproj)",
                    media[0].kind.as_str()
                ),
            }
            .into());
        };
        let (tokens, media) = media_tokens(tokenizer, &segments, media, encoder)?;
        Ok(RenderedPrompt {
            tokens,
            thinking_forced_open,
            media,
            checkpoint: None,
        })
    }
}

impl ChatFormat {
    /// The prompt text `request` renders to, exactly as [`ChatFormat::render`] renders it
    /// before tokenizing (for showing a prompt, as llama-server's `/apply-template` does).
    ///
    /// # Errors
    ///
    /// The template's own error.
    pub fn render_text(&self, mut request: RenderRequest) -> Result<String, EngineError> {
        self.fill_special(&mut request);
        Ok(self.template.render_segments(&request)?.text())
    }

    /// The model's BOS/EOS texts, where the request does not set its own.
    fn fill_special(&self, request: &mut RenderRequest) {
        if request.bos_token.is_none() {
            request.bos_token.clone_from(&self.bos_token);
        }
        if request.eos_token.is_none() {
            request.eos_token.clone_from(&self.eos_token);
        }
    }
}

/// Refuses a prompt of `bytes` bytes of text when even a lower bound on its tokens
/// ([`Tokenizer::min_tokens`]) leaves no room in a context window of `n_ctx` tokens, so a
/// megabytes-long prompt costs no tokenizing.
///
/// # Errors
///
/// [`EngineError::PromptTooLarge`].
pub fn check_size<T: Tokenizer + ?Sized>(
    tokenizer: &T,
    bytes: usize,
    n_ctx: usize,
) -> Result<(), EngineError> {
    let min_tokens = tokenizer.min_tokens(bytes);
    if min_tokens >= n_ctx {
        return Err(EngineError::PromptTooLarge {
            bytes,
            min_tokens,
            n_ctx,
        });
    }
    Ok(())
}

/// The texts of the model's BOS and EOS tokens (what templates get as `bos_token` and
/// `eos_token`).
///
/// # Errors
///
/// The backend cannot detokenize its own special tokens.
pub fn special_texts<T: Tokenizer + ?Sized>(
    tokenizer: &T,
) -> Result<(Option<String>, Option<String>), EngineError> {
    let special = tokenizer.special();
    let text = |t: Option<TokenId>| -> Result<Option<String>, EngineError> {
        Ok(match t {
            Some(t) => Some(String::from_utf8_lossy(&tokenizer.detokenize(&[t])?).into_owned()),
            None => None,
        })
    };
    Ok((text(special.bos)?, text(special.eos)?))
}

/// Tokenizes `segments` as [`segment_tokens`] does, each [`MEDIA_MARKER`] replaced by the
/// positions `encoder` gives the next of `media`; also returns the encodings, in order.
fn media_tokens<T: Tokenizer + ?Sized>(
    tokenizer: &T,
    segments: &Segments,
    media: &[Media],
    encoder: &dyn MediaEncoder,
) -> Result<(Vec<TokenId>, Vec<Arc<EncodedMedia>>), EngineError> {
    let mut tokens = Vec::new();
    let mut runs = Vec::with_capacity(media.len());
    let mut next = media.iter();
    let misplaced = |places: usize| BackendError::Media {
        reason: format!(
            "the chat template put {places} media places in the prompt for the {} the \
             conversation holds: it dropped or repeated a message with an image",
            media.len()
        ),
    };
    let mut places = 0;
    for segment in segments.as_slice() {
        let special = segment.kind == SegmentKind::Control;
        for (i, piece) in segment.text.split(MEDIA_MARKER).enumerate() {
            if i > 0 {
                places += 1;
                let medium = next.next().ok_or_else(|| misplaced(places))?;
                let run = encoder.encode(medium)?;
                tokens.extend_from_slice(&run.tokens);
                runs.push(run);
            }
            if !piece.is_empty() {
                tokens.extend(tokenizer.tokenize(piece, special)?);
            }
        }
    }
    if next.next().is_some() {
        return Err(misplaced(places).into());
    }
    let special = tokenizer.special();
    if let (true, Some(bos)) = (special.add_bos, special.bos) {
        if tokens.first() != Some(&bos) {
            tokens.insert(0, bos);
        }
    }
    Ok((tokens, runs))
}

/// The position of the first token of the last run of content tokens: where the
/// conversation's last message text starts (after its role's control text).
fn last_content_start(tokens: &[(TokenId, SegmentKind)]) -> Option<usize> {
    let last = tokens
        .iter()
        .rposition(|(_, kind)| *kind == SegmentKind::Content)?;
    let start = tokens[..last]
        .iter()
        .rposition(|(_, kind)| *kind != SegmentKind::Content)
        .map_or(0, |i| i + 1);
    (start > 0).then_some(start)
}

/// Tokenizes `segments` (control text with special-token parsing on, content with it off) and
/// adds the model's BOS token when the model wants one and the template did not write it.
///
/// # Errors
///
/// A tokenizer failure.
pub fn segment_tokens<T: Tokenizer + ?Sized>(
    tokenizer: &T,
    segments: &Segments,
) -> Result<Vec<(TokenId, SegmentKind)>, EngineError> {
    let mut tokens = segments.tokenize(|text, special| tokenizer.tokenize(text, special))?;
    let special = tokenizer.special();
    if let (true, Some(bos)) = (special.add_bos, special.bos) {
        if tokens.first().map(|t| t.0) != Some(bos) {
            tokens.insert(0, (bos, SegmentKind::Control));
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_is_where_the_last_run_of_content_starts() {
        use SegmentKind::{Content as X, Control as C};
        let tokens = |kinds: &[SegmentKind]| -> Vec<(TokenId, SegmentKind)> {
            (0u32..).map(TokenId).zip(kinds.iter().copied()).collect()
        };
        // BOS, system header, system text, user header, question, assistant header.
        let chat = tokens(&[C, C, X, X, C, C, X, X, X, C, C]);
        assert_eq!(last_content_start(&chat), Some(6));
        assert_eq!(last_content_start(&tokens(&[C, X, X])), Some(1));
        // No content, or content from the first token: nothing before it to keep.
        assert_eq!(last_content_start(&tokens(&[C, C])), None);
        assert_eq!(last_content_start(&tokens(&[X, X, C])), None);
        assert_eq!(last_content_start(&[]), None);
    }
}
