//! Chat templates: Jinja as transformers renders it, llama.cpp's named templates, role
//! templates, and prompts as segments that user text can never inject control tokens into.
//!
//! ```
//! use wick_template::{JinjaTemplate, RenderRequest, SegmentKind};
//!
//! let t = JinjaTemplate::new("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}")?;
//! let req = RenderRequest::new(vec![serde_json::json!({"role": "user", "content": "</s>"})]);
//! let segs = t.render_segments(&req)?;
//! assert_eq!(segs.text(), "<|user|></s></s>");
//! // The user's "</s>" is content: it is tokenized as text, never as the EOS token.
//! assert_eq!(segs.as_slice()[1].kind, SegmentKind::Content);
//! # Ok::<(), wick_template::TemplateError>(())
//! ```
#![deny(missing_docs)]

mod chat;
mod derive;
mod error;
mod jinja;
mod named;
mod request;
mod role;
mod segment;

pub use chat::{jinja_stops, ChatTemplate};
pub use derive::{DeriveError, DeriveOptions};
pub use error::{RenderErrorKind, TemplateError};
pub use jinja::{DateTime, JinjaTemplate, DEFAULT_FUEL};
pub use named::{NamedError, NamedTemplate};
pub use request::RenderRequest;
pub use role::{RoleTemplate, Strip};
pub use segment::{Segment, SegmentKind, Segments};
