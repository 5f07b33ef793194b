//! Builds the arguments JSON object of untyped encodings (XML-style parameters) member by
//! member, typing each raw value by the tool's schema (README L12). String-typed values are
//! streamed as they arrive; other values are held until complete, then written as JSON when
//! valid (verbatim, keeping the model's text) or as a string.

use serde_json::Value;

use crate::engine::Cx;
use crate::json_stream::escape_into;
use crate::tools::{fits_other_type, ParamKind};

#[derive(Debug, Clone)]
struct Param {
    key: String,
    kind: ParamKind,
    types: Vec<String>,
    started: bool,
    raw: String,
}

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypedArgs {
    tool: String,
    members: usize,
    cur: Option<Param>,
}

impl TypedArgs {
    /// Opens the object of a call to `tool`.
    pub(crate) fn open(tool: &str, cx: &mut Cx<'_>) -> Self {
        cx.out.args("{");
        TypedArgs {
            tool: tool.to_owned(),
            members: 0,
            cur: None,
        }
    }

    /// Starts parameter `key`; `string` overrides the schema (DSML's `string="…"`).
    pub(crate) fn begin(&mut self, key: &str, string: Option<bool>, cx: &Cx<'_>) {
        let kind = match string {
            Some(true) => ParamKind::String,
            Some(false) => ParamKind::Json,
            None => cx.tools.kind(&self.tool, key),
        };
        self.cur = Some(Param {
            key: key.to_owned(),
            kind,
            types: cx.tools.types(&self.tool, key).to_vec(),
            started: false,
            raw: String::new(),
        });
    }

    fn prefix(&mut self, out: &mut String, key: &str) {
        if self.members > 0 {
            out.push_str(", ");
        }
        out.push('"');
        escape_into(key, out);
        out.push_str("\": ");
        self.members += 1;
    }

    /// Appends raw value text.
    pub(crate) fn chunk(&mut self, text: &str, cx: &mut Cx<'_>) {
        let Some(mut p) = self.cur.take() else { return };
        if p.kind == ParamKind::String {
            if text.is_empty() {
                self.cur = Some(p);
                return;
            }
            let mut out = String::new();
            if !p.started {
                self.prefix(&mut out, &p.key);
                out.push('"');
                p.started = true;
            }
            escape_into(text, &mut out);
            cx.out.args(&out);
        } else {
            p.raw.push_str(text);
        }
        self.cur = Some(p);
    }

    /// Ends the current value.
    pub(crate) fn end(&mut self, cx: &mut Cx<'_>) {
        let Some(p) = self.cur.take() else { return };
        let mut out = String::new();
        if p.kind == ParamKind::String {
            if !p.started {
                self.prefix(&mut out, &p.key);
                out.push('"');
            }
            out.push('"');
        } else {
            self.prefix(&mut out, &p.key);
            typed_value(&p, &mut out);
        }
        cx.out.args(&out);
    }

    /// Closes the object (after an end of output: the current value is kept when it has
    /// started, H2/H6).
    pub(crate) fn close(&mut self, cx: &mut Cx<'_>) {
        if let Some(p) = &self.cur {
            if p.started || !p.raw.is_empty() {
                self.end(cx);
            }
            self.cur = None;
        }
        cx.out.args("}");
    }
}

fn typed_value(p: &Param, out: &mut String) {
    let trimmed = p.raw.trim();
    let json = serde_json::from_str::<Value>(trimmed).ok();
    let as_json = match (p.kind, &json) {
        (_, None) | (ParamKind::String, _) => false,
        (ParamKind::Union, Some(v)) => fits_other_type(v, &p.types),
        (ParamKind::Json | ParamKind::Undeclared, Some(_)) => true,
    };
    if as_json {
        out.push_str(trimmed);
    } else {
        out.push('"');
        escape_into(&p.raw, out);
        out.push('"');
    }
}
