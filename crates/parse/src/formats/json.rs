//! JSON-call formats: the call (or an array of calls) is JSON after a marker, or the whole
//! output is JSON (`generic`, `llama3x`).

use super::THINK;
use crate::call_json::{
    optional_close, skip_to, CallArray, CallKeys, CallObject, CoStep, NAME_ARGS,
};
use crate::engine::{Block, Cx, Reasoning, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::{JsonStep, JsonStream, StrDecoder, StrStep};
use crate::scan::{lit, ws_len, Lit};
use crate::Format;

const NO_REASONING: Option<Reasoning> = None;

fn base(openers: &'static [&'static str], make: crate::engine::MakeBlock) -> Syntax {
    Syntax {
        reasoning: Some(THINK),
        drop: &[],
        verbatim: &[],
        openers,
        start: false,
        make,
        ids: IdStyle::Call,
    }
}

#[allow(clippy::too_many_lines)] // one arm per format, a flat table
pub(super) fn syntax(f: Format) -> Syntax {
    match f {
        Format::ContentOnly => base(&[], |_| unreachable!("content_only has no openers")),
        Format::Hermes => base(&["<tool_call>"], |_| {
            Box::new(ObjBlock::new(NAME_ARGS, &["</tool_call>"], false))
        }),
        Format::GigachatV3 => Syntax {
            reasoning: NO_REASONING,
            ..base(
                &[
                    "<|message_sep|>\n\nfunction call<|role_sep|>",
                    "<|function_call|>",
                ],
                |_| Box::new(ObjBlock::new(NAME_ARGS, &[], false)),
            )
        },
        Format::Llama3x => Syntax {
            reasoning: NO_REASONING,
            start: true,
            ..base(&[], |_| Box::new(ObjBlock::new(NAME_ARGS, &[], true)))
        },
        Format::Generic => Syntax {
            reasoning: NO_REASONING,
            start: true,
            ..base(&[], |_| Box::new(GenericBlock::default()))
        },
        Format::MistralNemo => Syntax {
            reasoning: NO_REASONING,
            ids: IdStyle::Mistral,
            ..base(&["[TOOL_CALLS]"], |_| {
                Box::new(ArrBlock(CallArray::new(NAME_ARGS, &[], false)))
            })
        },
        Format::Magistral => Syntax {
            reasoning: Some(Reasoning {
                open: &["[THINK]"],
                close: &["[/THINK]"],
                interleaved: false,
            }),
            ids: IdStyle::Mistral,
            ..base(&["[TOOL_CALLS]"], |_| {
                Box::new(ArrBlock(CallArray::new(NAME_ARGS, &[], false)))
            })
        },
        Format::FirefunctionV2 => Syntax {
            reasoning: NO_REASONING,
            ..base(&[" functools["], |_| {
                Box::new(ArrBlock(CallArray::new(NAME_ARGS, &[], true)))
            })
        },
        Format::Granite => Syntax {
            drop: &["<response>", "</response>"],
            ..base(&["<|tool_call|>"], |_| {
                Box::new(ArrBlock(CallArray::new(NAME_ARGS, &[], false)))
            })
        },
        Format::NemotronV2 => base(&["<TOOLCALL>"], |_| {
            Box::new(ArrBlock(CallArray::new(NAME_ARGS, &["</TOOLCALL>"], false)))
        }),
        Format::Apriel15 => Syntax {
            reasoning: Some(Reasoning {
                open: &[],
                close: &["[BEGIN FINAL RESPONSE]"],
                interleaved: false,
            }),
            ..base(&["<tool_calls>"], |_| {
                Box::new(ArrBlock(CallArray::new(
                    NAME_ARGS,
                    &["</tool_calls>"],
                    false,
                )))
            })
        },
        Format::Apertus => Syntax {
            reasoning: Some(Reasoning {
                open: &["<|inner_prefix|>"],
                close: &["<|inner_suffix|>"],
                interleaved: false,
            }),
            ..base(&["<|tools_prefix|>"], |_| {
                Box::new(ArrBlock(CallArray::new(
                    SHORT,
                    &["<|tools_suffix|>"],
                    false,
                )))
            })
        },
        Format::CommandR7b => Syntax {
            reasoning: Some(Reasoning {
                open: &["<|START_THINKING|>"],
                close: &["<|END_THINKING|>"],
                interleaved: false,
            }),
            verbatim: &[
                ("<|START_RESPONSE|>", "<|END_RESPONSE|>"),
                ("<|START_TEXT|>", "<|END_TEXT|>"),
            ],
            ..base(&["<|START_ACTION|>"], |_| {
                Box::new(ArrBlock(CallArray::new(COHERE, &["<|END_ACTION|>"], false)))
            })
        },
        _ => unreachable!("not a JSON-family format: {f}"),
    }
}

/// Apertus: `{"NAME": {args}}`.
const SHORT: CallKeys = CallKeys {
    name: &[],
    args: &[],
    id: &[],
    skip: &[],
    short_form: true,
};

/// Command R7B: `{"tool_call_id", "tool_name", "parameters"}`.
const COHERE: CallKeys = CallKeys {
    name: &["tool_name"],
    args: &["parameters"],
    id: &["tool_call_id"],
    skip: &[],
    short_form: false,
};

/// A JSON array block.
#[derive(Debug)]
pub(super) struct ArrBlock(pub(super) CallArray);

impl Block for ArrBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        self.0.step(input, eof, cx)
    }
    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        self.0.finish(cx)
    }
    fn committed(&self) -> bool {
        self.0.committed()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ob {
    Prefix,
    Obj,
    Close,
    Skip,
}

/// One call object, optionally after `<|python_tag|>`, optionally followed by a close marker.
#[derive(Debug)]
pub(super) struct ObjBlock {
    obj: CallObject,
    close: &'static [&'static str],
    st: Ob,
}

impl ObjBlock {
    pub(super) fn new(keys: CallKeys, close: &'static [&'static str], python_tag: bool) -> Self {
        ObjBlock {
            obj: CallObject::new(keys),
            close,
            st: if python_tag { Ob::Prefix } else { Ob::Obj },
        }
    }
}

impl Block for ObjBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                Ob::Prefix => {
                    match lit(rest, &["<|python_tag|>"], true, eof) {
                        Lit::Match { len, .. } => i += len,
                        Lit::Partial => return Step::Need(i),
                        Lit::No => {}
                    }
                    self.st = Ob::Obj;
                }
                Ob::Obj => match self.obj.feed(rest, eof, cx) {
                    CoStep::Need(n) => return Step::Need(i + n),
                    CoStep::Done(n) => {
                        i += n;
                        self.st = Ob::Close;
                    }
                    CoStep::Diverged => return Step::Diverged,
                    CoStep::Invalid(n) => {
                        i += n;
                        self.st = Ob::Skip;
                    }
                },
                Ob::Close => {
                    return optional_close(rest, self.close, eof, i);
                }
                Ob::Skip => return skip_to(rest, self.close, eof, i),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        self.obj.finish(cx)
    }

    fn committed(&self) -> bool {
        self.obj.committed()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Ge {
    #[default]
    Open,
    KeyQuote,
    Key,
    Colon,
    Value,
    Response,
    /// A `response` that is not a string: content once the value is complete, as llama.cpp
    /// writes it (`json::dump(2)`: two-space indent, keys sorted).
    ResponseValue,
    Call,
    Calls,
    After,
    /// Invalid arguments without a terminator: the rest of the output is dropped (L10).
    Drop,
}

/// `generic`: `{"response": "…"}`, `{"tool_call": {…}}` or `{"tool_calls": […]}`.
#[derive(Debug, Default)]
struct GenericBlock {
    st: Ge,
    dec: StrDecoder,
    key: String,
    text: String,
    obj: Option<CallObject>,
    arr: Option<CallArray>,
    value: Option<JsonStream>,
    started: bool,
}

impl GenericBlock {
    /// Streams a non-string `response` value: `Ok` with the bytes it took when the value
    /// ended (its content is out), else the block's step.
    fn response_value(&mut self, rest: &str, cx: &mut Cx<'_>) -> Result<usize, Step> {
        let json = self.value.as_mut().expect("invariant: set in Value");
        match json.feed(rest, &mut self.text) {
            JsonStep::Need => Err(Step::Need(rest.len())),
            JsonStep::Done(n) => {
                cx.out.content(&dump2(&self.text));
                self.value = None;
                self.st = Ge::After;
                Ok(n)
            }
            JsonStep::Invalid(n) => {
                cx.out.content(&dump2(&self.text));
                self.value = None;
                Err(Step::Done(n))
            }
        }
    }
}

impl Block for GenericBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                Ge::Open | Ge::KeyQuote | Ge::Colon | Ge::Value | Ge::After => {
                    let ws = ws_len(rest);
                    let Some(c) = rest[ws..].chars().next() else {
                        return Step::Need(i);
                    };
                    match (self.st, c, self.key.as_str()) {
                        (Ge::Open, '{', _) => self.st = Ge::KeyQuote,
                        (Ge::KeyQuote, '"', _) => self.st = Ge::Key,
                        (Ge::Colon, ':', _) => self.st = Ge::Value,
                        (Ge::Value, '"', "response") => {
                            self.started = true;
                            self.st = Ge::Response;
                        }
                        (Ge::Value, '{' | '[' | '-' | '0'..='9' | 't' | 'f' | 'n', "response") => {
                            self.started = true;
                            self.text.clear();
                            self.value = Some(JsonStream::new());
                            self.st = Ge::ResponseValue;
                            i += ws;
                            continue;
                        }
                        (Ge::Value, '{', "tool_call") => {
                            self.obj = Some(CallObject::new(NAME_ARGS));
                            self.st = Ge::Call;
                            i += ws;
                            continue;
                        }
                        (Ge::Value, '[', "tool_calls") => {
                            self.arr = Some(CallArray::new(NAME_ARGS, &[], false));
                            self.st = Ge::Calls;
                            i += ws;
                            continue;
                        }
                        (Ge::After, _, _) => {
                            return Step::Done(if c == '}' { i + ws + 1 } else { i });
                        }
                        _ if self.committed() => return Step::Done(i),
                        _ => return Step::Diverged,
                    }
                    i += ws + c.len_utf8();
                }
                Ge::Key => match self.dec.feed(rest, &mut self.key) {
                    StrStep::Need => return Step::Need(input.len()),
                    StrStep::Done(n) => {
                        i += n;
                        self.st = Ge::Colon;
                    }
                    StrStep::Invalid(_) => return Step::Diverged,
                },
                Ge::Response => {
                    self.text.clear();
                    let step = self.dec.feed(rest, &mut self.text);
                    cx.out.content(&self.text);
                    match step {
                        StrStep::Need => return Step::Need(input.len()),
                        StrStep::Done(n) => {
                            i += n;
                            self.st = Ge::After;
                        }
                        StrStep::Invalid(n) => return Step::Done(i + n),
                    }
                }
                Ge::ResponseValue => match self.response_value(rest, cx) {
                    Ok(n) => i += n,
                    Err(Step::Need(_)) => return Step::Need(input.len()),
                    Err(Step::Done(n)) => return Step::Done(i + n),
                    Err(step) => return step,
                },
                Ge::Call => {
                    let obj = self.obj.as_mut().expect("invariant: set in Value");
                    match obj.feed(rest, eof, cx) {
                        CoStep::Need(n) => return Step::Need(i + n),
                        CoStep::Done(n) => {
                            i += n;
                            self.st = Ge::After;
                        }
                        CoStep::Diverged => return Step::Diverged,
                        CoStep::Invalid(_) => self.st = Ge::Drop,
                    }
                }
                Ge::Drop => return Step::Need(input.len()),
                Ge::Calls => {
                    let arr = self.arr.as_mut().expect("invariant: set in Value");
                    match arr.step(rest, eof, cx) {
                        Step::Need(n) => return Step::Need(i + n),
                        Step::Done(n) => {
                            i += n;
                            self.st = Ge::After;
                        }
                        Step::Diverged => return Step::Diverged,
                    }
                }
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if let Some(mut json) = self.value.take() {
            // Cut inside the value: closed at its last valid point, like a cut call (H1–H5).
            if json.heal(&mut self.text) {
                cx.out.content(&dump2(&self.text));
            }
        }
        if let Some(obj) = &mut self.obj {
            obj.finish(cx);
        }
        if let Some(arr) = &mut self.arr {
            arr.finish(cx);
        }
        self.committed()
    }

    fn committed(&self) -> bool {
        self.started
            || self.obj.as_ref().is_some_and(CallObject::committed)
            || self.arr.as_ref().is_some_and(CallArray::committed)
    }
}

/// `text` (one JSON value) as nlohmann's `dump(2)` writes it: two-space indent, object keys
/// sorted (its objects are ordered maps); text that is not JSON stays as it is.
fn dump2(text: &str) -> String {
    fn sorted(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(
                    entries.into_iter().map(|(k, v)| (k, sorted(v))).collect(),
                )
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sorted).collect())
            }
            other => other,
        }
    }
    match serde_json::from_str(text) {
        Ok(value) => {
            serde_json::to_string_pretty(&sorted(value)).unwrap_or_else(|_| text.to_owned())
        }
        Err(_) => text.to_owned(),
    }
}
