//! XML-style calls with one element per parameter and schema-typed raw values: Qwen3-Coder,
//! Seed-OSS, MiniMax M2, GLM 4.5 and DeepSeek DSML, each described by a [`Dialect`].

use super::THINK;
use crate::engine::{Block, Cx, Open, Reasoning, Step, Syntax};
use crate::ids::IdStyle;
use crate::scan::{lit, scan, Hit, Lit};
use crate::seq::{skip_until, until, Until};
use crate::typed_args::TypedArgs;
use crate::Format;

/// The markup of one XML dialect.
#[derive(Debug, Clone, Copy)]
struct Dialect {
    /// Before the name (empty: the name follows the opener directly).
    call_open: &'static str,
    /// After the name; `<` ends it without being consumed.
    name_end: &'static [&'static str],
    param_open: &'static str,
    key_end: &'static str,
    /// Attributes (`string="true"`) follow the key up to `>`.
    attrs: bool,
    value_open: &'static str,
    value_close: &'static str,
    call_close: &'static str,
    block_close: &'static [&'static str],
    /// Exactly one newline after the opening tag and before the closing one are delimiters.
    strip_nl: bool,
}

const QWEN: Dialect = Dialect {
    call_open: "<function=",
    name_end: &[">"],
    param_open: "<parameter=",
    key_end: ">",
    attrs: false,
    value_open: "",
    value_close: "</parameter>",
    call_close: "</function>",
    block_close: &["</tool_call>"],
    strip_nl: true,
};

const SEED: Dialect = Dialect {
    block_close: &["</seed:tool_call>"],
    strip_nl: false,
    ..QWEN
};

const MINIMAX: Dialect = Dialect {
    call_open: "<invoke name=\"",
    name_end: &["\">"],
    param_open: "<parameter name=\"",
    key_end: "\">",
    attrs: false,
    value_open: "",
    value_close: "</parameter>",
    call_close: "</invoke>",
    block_close: &["</minimax:tool_call>"],
    strip_nl: false,
};

const DSML: Dialect = Dialect {
    call_open: "<｜DSML｜invoke name=\"",
    name_end: &["\">"],
    param_open: "<｜DSML｜parameter name=\"",
    key_end: "\"",
    attrs: true,
    value_open: "",
    value_close: "</｜DSML｜parameter>",
    call_close: "</｜DSML｜invoke>",
    block_close: &["</｜DSML｜function_calls>", "</｜DSML｜tool_calls>"],
    strip_nl: false,
};

const GLM: Dialect = Dialect {
    call_open: "",
    name_end: &["\n", "<"],
    param_open: "<arg_key>",
    key_end: "</arg_key>",
    attrs: false,
    value_open: "<arg_value>",
    value_close: "</arg_value>",
    call_close: "</tool_call>",
    block_close: &[],
    strip_nl: false,
};

fn syn(
    reasoning: Reasoning,
    openers: &'static [&'static str],
    make: crate::engine::MakeBlock,
) -> Syntax {
    Syntax {
        reasoning: Some(reasoning),
        drop: &[],
        verbatim: &[],
        openers,
        start: false,
        make,
        ids: IdStyle::Call,
    }
}

pub(super) fn syntax(f: Format) -> Syntax {
    match f {
        Format::Qwen3CoderXml => syn(THINK, &["<tool_call>", "<function="], |open| {
            Box::new(XmlBlock::new(QWEN, open == Open::Marker(1)))
        }),
        Format::SeedOss => syn(
            Reasoning {
                open: &["<seed:think>"],
                close: &["</seed:think>"],
                interleaved: false,
            },
            &["<seed:tool_call>"],
            |_| Box::new(XmlBlock::new(SEED, false)),
        ),
        Format::MinimaxM2 => syn(THINK, &["<minimax:tool_call>"], |_| {
            Box::new(XmlBlock::new(MINIMAX, false))
        }),
        Format::DeepseekDsml => syn(
            THINK,
            &["<｜DSML｜function_calls>", "<｜DSML｜tool_calls>"],
            |_| Box::new(XmlBlock::new(DSML, false)),
        ),
        Format::Glm45 => syn(
            Reasoning {
                interleaved: true,
                ..THINK
            },
            &["<tool_call>"],
            |_| Box::new(XmlBlock::new(GLM, true)),
        ),
        _ => unreachable!("not an XML format: {f}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    CallOpen,
    Name,
    AfterName,
    Key,
    Attrs,
    ValueOpen,
    ValueStart,
    Value,
    AfterParam,
    AfterCall,
    Skip,
}

#[derive(Debug)]
struct XmlBlock {
    d: Dialect,
    st: St,
    name: String,
    key: String,
    string: Option<bool>,
    args: Option<TypedArgs>,
    calls: usize,
}

fn key_char(c: char) -> bool {
    c != '<' && c != '\n' && c != '>'
}

fn name_char(c: char) -> bool {
    c != '<' && c != '\n' && c != '>' && c != '"'
}

impl XmlBlock {
    fn new(d: Dialect, in_call: bool) -> Self {
        XmlBlock {
            d,
            st: if in_call { St::Name } else { St::CallOpen },
            name: String::new(),
            key: String::new(),
            string: None,
            args: None,
            calls: 0,
        }
    }

    fn stop(&self, i: usize) -> Step {
        if self.calls > 0 {
            Step::Done(i)
        } else {
            Step::Diverged
        }
    }

    fn end_call(&mut self, cx: &mut Cx<'_>) {
        if let Some(mut a) = self.args.take() {
            a.close(cx);
        }
        self.calls += 1;
    }

    #[allow(clippy::too_many_lines)]
    fn step_once(&mut self, rest: &str, eof: bool, cx: &mut Cx<'_>) -> Result<usize, Step> {
        let d = self.d;
        match self.st {
            St::CallOpen => {
                let alts: Vec<&str> = std::iter::once(d.call_open)
                    .chain(d.block_close.iter().copied())
                    .collect();
                match lit(rest, &alts, true, eof) {
                    Lit::Match { idx: 0, len } => {
                        self.st = St::Name;
                        Ok(len)
                    }
                    Lit::Match { len, .. } => Err(Step::Done(len)),
                    Lit::Partial => Err(Step::Need(0)),
                    Lit::No => Err(self.stop(0)),
                }
            }
            St::Name => match until(rest, d.name_end, name_char, eof) {
                Until::Found { len, idx, end } if !rest[..len].trim().is_empty() => {
                    rest[..len].trim().clone_into(&mut self.name);
                    self.st = St::AfterName;
                    Ok(if d.name_end[idx] == "<" { len } else { end })
                }
                Until::Need => Err(Step::Need(0)),
                _ => Err(self.stop(0)),
            },
            St::AfterName | St::AfterParam => {
                match lit(rest, &[d.param_open, d.call_close], true, eof) {
                    Lit::Match { idx, len } => {
                        if self.st == St::AfterName {
                            cx.out.start_call(&self.name, None);
                            self.args = Some(TypedArgs::open(&self.name, cx));
                        }
                        if idx == 0 {
                            self.st = St::Key;
                        } else {
                            self.end_call(cx);
                            self.st = St::AfterCall;
                        }
                        Ok(len)
                    }
                    Lit::Partial => Err(Step::Need(0)),
                    Lit::No if self.st == St::AfterName => Err(self.stop(0)),
                    Lit::No => {
                        self.end_call(cx);
                        self.st = St::Skip;
                        Ok(0)
                    }
                }
            }
            St::Key => match until(rest, &[d.key_end], key_char, eof) {
                Until::Found { len, end, .. } => {
                    rest[..len].trim().clone_into(&mut self.key);
                    self.string = None;
                    self.st = if d.attrs {
                        St::Attrs
                    } else if d.value_open.is_empty() {
                        St::ValueStart
                    } else {
                        St::ValueOpen
                    };
                    Ok(end)
                }
                Until::Need => Err(Step::Need(0)),
                Until::Bad => self.invalid(cx),
            },
            St::Attrs => match until(rest, &[">"], key_char, eof) {
                Until::Found { len, end, .. } => {
                    let attrs = &rest[..len];
                    if attrs.contains("string=\"true\"") {
                        self.string = Some(true);
                    } else if attrs.contains("string=\"false\"") {
                        self.string = Some(false);
                    }
                    self.st = St::ValueStart;
                    Ok(end)
                }
                Until::Need => Err(Step::Need(0)),
                Until::Bad => self.invalid(cx),
            },
            St::ValueOpen => match lit(rest, &[d.value_open], true, eof) {
                Lit::Match { len, .. } => {
                    self.st = St::ValueStart;
                    Ok(len)
                }
                Lit::Partial => Err(Step::Need(0)),
                Lit::No => self.invalid(cx),
            },
            St::ValueStart => {
                if d.strip_nl && rest.is_empty() && !eof {
                    return Err(Step::Need(0));
                }
                let key = std::mem::take(&mut self.key);
                if let Some(a) = &mut self.args {
                    a.begin(&key, self.string, cx);
                }
                self.st = St::Value;
                Ok(usize::from(d.strip_nl && rest.starts_with('\n')))
            }
            St::Value => {
                let (emit, consumed, done) = match scan(rest, &[d.value_close], false) {
                    Hit::Full { at, .. } => (at, at + d.value_close.len(), true),
                    Hit::Partial { at } => (at, at, false),
                    Hit::None => (rest.len(), rest.len(), false),
                };
                let mut text = &rest[..emit];
                let mut consumed = consumed;
                if d.strip_nl && text.ends_with('\n') {
                    text = &text[..text.len() - 1];
                    if !done {
                        consumed -= 1;
                    }
                }
                if let Some(a) = &mut self.args {
                    a.chunk(text, cx);
                    if done {
                        a.end(cx);
                    }
                }
                if done {
                    self.st = St::AfterParam;
                    Ok(consumed)
                } else {
                    Err(Step::Need(consumed))
                }
            }
            St::AfterCall => {
                let mut alts: Vec<&str> = d.block_close.to_vec();
                if !d.call_open.is_empty() {
                    alts.push(d.call_open);
                }
                match lit(rest, &alts, true, eof) {
                    Lit::Match { idx, len } if idx < d.block_close.len() => Err(Step::Done(len)),
                    Lit::Match { len, .. } => {
                        self.st = St::Name;
                        Ok(len)
                    }
                    Lit::Partial => Err(Step::Need(0)),
                    Lit::No => Err(Step::Done(0)),
                }
            }
            St::Skip => match skip_until(rest, &[d.call_close], eof, 0, true) {
                Step::Done(n) => {
                    self.st = St::AfterCall;
                    Ok(n)
                }
                other => Err(other),
            },
        }
    }

    /// Invalid markup after commit: close the call, skip to its end (L10).
    #[allow(clippy::unnecessary_wraps)] // keeps the call sites uniform with `step_once`
    fn invalid(&mut self, cx: &mut Cx<'_>) -> Result<usize, Step> {
        self.end_call(cx);
        self.st = St::Skip;
        Ok(0)
    }
}

impl Block for XmlBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            match self.step_once(&input[i..], eof, cx) {
                Ok(n) => i += n,
                Err(Step::Need(n)) => return Step::Need(i + n),
                Err(Step::Done(n)) => return Step::Done(i + n),
                Err(Step::Diverged) => return Step::Diverged,
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.args.is_some() {
            self.end_call(cx);
        } else if matches!(self.st, St::AfterName) && self.calls == 0 {
            return false;
        }
        self.calls > 0
    }

    fn committed(&self) -> bool {
        self.calls > 0 || self.args.is_some()
    }
}
