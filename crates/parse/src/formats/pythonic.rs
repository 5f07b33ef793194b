//! Python-style calls: LFM2's `<|tool_call_start|>[NAME(k=v, …), …]<|tool_call_end|>` (and
//! its older JSON list) and Llama 3.x built-in tools `<|python_tag|>NAME.call(k=v)` (custom
//! tools as JSON, as in `llama3x`).

use super::THINK;
use crate::call_json::{optional_close, CallArray, CallObject, CoStep, NAME_ARGS};
use crate::engine::{Block, Cx, Open, Step, Syntax};
use crate::ids::IdStyle;
use crate::literal::{ConvStep, LitArgs, LitConv};
use crate::scan::{lit, Lit};
use crate::seq::{name_char, peek, until, Until};
use crate::Format;

const LFM_CLOSE: &[&str] = &["<|tool_call_end|>"];

pub(super) fn syntax(f: Format) -> Syntax {
    if f == Format::Lfm2 {
        Syntax {
            reasoning: Some(THINK),
            drop: &[],
            verbatim: &[],
            openers: &["<|tool_call_start|>"],
            start: false,
            make: |_| Box::new(PyBlock::new(St::ListOpen, &["("])),
            ids: IdStyle::Call,
        }
    } else {
        Syntax {
            reasoning: None,
            drop: &[],
            verbatim: &[],
            openers: &["<|python_tag|>"],
            start: true,
            make: |open| {
                let st = if open == Open::Start {
                    St::Prefix
                } else {
                    St::Head
                };
                Box::new(PyBlock::new(st, &[".call("]))
            },
            ids: IdStyle::Call,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Prefix,
    Head,
    ListOpen,
    ListItem,
    Name,
    Args,
    Obj,
    Arr,
    AfterCall,
    Close,
    /// Invalid arguments without a terminator: the rest of the output is dropped (L10).
    Drop,
}

#[derive(Debug)]
struct PyBlock {
    st: St,
    open_paren: &'static [&'static str],
    in_list: bool,
    args: Option<LitArgs>,
    obj: Option<CallObject>,
    arr: Option<CallArray>,
    calls: usize,
}

impl PyBlock {
    fn new(st: St, open_paren: &'static [&'static str]) -> Self {
        PyBlock {
            st,
            open_paren,
            in_list: st == St::ListOpen,
            args: None,
            obj: None,
            arr: None,
            calls: 0,
        }
    }

    fn stop(&self, i: usize) -> Step {
        if self.committed() {
            Step::Done(i)
        } else {
            Step::Diverged
        }
    }
}

impl Block for PyBlock {
    #[allow(clippy::too_many_lines)]
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::Prefix => match lit(rest, &["<|python_tag|>"], true, eof) {
                    Lit::Match { len, .. } => {
                        i += len;
                        self.st = St::Head;
                    }
                    Lit::Partial => return Step::Need(i),
                    Lit::No => self.st = St::Head,
                },
                St::Head | St::ListItem => match peek(rest) {
                    Some((ws, '{')) if self.st == St::Head => {
                        i += ws;
                        self.obj = Some(CallObject::new(NAME_ARGS));
                        self.st = St::Obj;
                    }
                    Some((ws, '{')) if self.calls == 0 => {
                        i += ws;
                        self.arr = Some(CallArray::new(NAME_ARGS, LFM_CLOSE, true));
                        self.st = St::Arr;
                    }
                    Some((ws, _)) => {
                        i += ws;
                        self.st = St::Name;
                    }
                    None if !eof => return Step::Need(i),
                    None => return self.stop(i),
                },
                St::ListOpen => match lit(rest, &["["], true, eof) {
                    Lit::Match { len, .. } => {
                        i += len;
                        self.st = St::ListItem;
                    }
                    Lit::Partial => return Step::Need(i),
                    Lit::No => return Step::Diverged,
                },
                St::Name => match until(rest, self.open_paren, name_char, eof) {
                    Until::Found { len, end, .. } if len > 0 => {
                        cx.out.start_call(&rest[..len], None);
                        self.args = Some(LitArgs::start(LitConv::kwargs(), cx));
                        i += end;
                        self.st = St::Args;
                    }
                    Until::Need => return Step::Need(i),
                    _ => return self.stop(i),
                },
                St::Args => {
                    let args = self.args.as_mut().expect("invariant: set in Name");
                    match args.feed(rest, cx) {
                        ConvStep::Need(n) => return Step::Need(i + n),
                        ConvStep::Done(n) => {
                            self.args = None;
                            self.calls += 1;
                            i += n;
                            if !self.in_list {
                                return Step::Done(i);
                            }
                            self.st = St::AfterCall;
                        }
                    }
                }
                St::Obj => {
                    let obj = self.obj.as_mut().expect("invariant: set in Head");
                    match obj.feed(rest, eof, cx) {
                        CoStep::Need(n) => return Step::Need(i + n),
                        CoStep::Done(n) => return Step::Done(i + n),
                        CoStep::Diverged => return Step::Diverged,
                        CoStep::Invalid(_) => self.st = St::Drop,
                    }
                }
                St::Drop => return Step::Need(input.len()),
                St::Arr => {
                    let arr = self.arr.as_mut().expect("invariant: set in ListItem");
                    return match arr.step(rest, eof, cx) {
                        Step::Need(n) => Step::Need(i + n),
                        Step::Done(n) => Step::Done(i + n),
                        Step::Diverged => Step::Diverged,
                    };
                }
                St::AfterCall => match peek(rest) {
                    Some((ws, ',')) => {
                        i += ws + 1;
                        self.st = St::ListItem;
                    }
                    Some((ws, ']')) => {
                        i += ws + 1;
                        self.st = St::Close;
                    }
                    None if !eof => return Step::Need(i),
                    _ => return Step::Done(i),
                },
                St::Close => return optional_close(rest, LFM_CLOSE, eof, i),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if let Some(a) = &mut self.args {
            a.finish(cx);
            self.args = None;
            self.calls += 1;
        }
        if let Some(o) = &mut self.obj {
            o.finish(cx);
        }
        if let Some(a) = &mut self.arr {
            a.finish(cx);
        }
        self.committed()
    }

    fn committed(&self) -> bool {
        self.calls > 0
            || self.args.is_some()
            || self.obj.as_ref().is_some_and(CallObject::committed)
            || self.arr.as_ref().is_some_and(CallArray::committed)
    }
}
