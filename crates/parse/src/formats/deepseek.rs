//! DeepSeek R1 (fenced JSON after `function<｜tool▁sep｜>NAME`) and V3.1
//! (`NAME<｜tool▁sep｜>{json}`) tool-call tokens.

use super::THINK;
use crate::call_json::{optional_marker, CallRun, JsonArgs};
use crate::engine::{Block, Cx, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::JsonStep;
use crate::scan::{lit, Lit};
use crate::seq::{line_char, peek, skip_until, until, Until};
use crate::Format;

const OPENERS: &[&str] = &[
    "<｜tool▁calls▁begin｜>",
    "<｜tool_calls_begin｜>",
    "<｜tool calls begin｜>",
    "<｜tool\\_calls\\_begin｜>",
    "<｜tool▁calls｜>",
];
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const SEP: &str = "<｜tool▁sep｜>";

pub(super) fn syntax(f: Format) -> Syntax {
    Syntax {
        reasoning: Some(THINK),
        drop: &[],
        verbatim: &[],
        openers: OPENERS,
        start: false,
        make: if f == Format::DeepseekR1 {
            |_| Box::new(CallsBlock::new(true))
        } else {
            |_| Box::new(CallsBlock::new(false))
        },
        ids: IdStyle::Call,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    CallStart,
    Head,
    Name,
    Fence,
    ArgsStart,
    Args,
    CloseFence,
    CallEnd,
    Skip,
}

#[derive(Debug)]
struct CallsBlock {
    fenced: bool,
    st: St,
    name: String,
    run: CallRun,
}

impl CallsBlock {
    fn new(fenced: bool) -> Self {
        CallsBlock {
            fenced,
            st: St::CallStart,
            name: String::new(),
            run: CallRun::default(),
        }
    }

    fn stop(&self, i: usize) -> Step {
        if self.run.calls > 0 {
            Step::Done(i)
        } else {
            Step::Diverged
        }
    }
}

impl Block for CallsBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::CallStart => match lit(rest, &[CALL_BEGIN, CALLS_END], true, eof) {
                    Lit::Match { idx: 0, len } => {
                        i += len;
                        self.st = St::Head;
                    }
                    Lit::Match { len, .. } => return Step::Done(i + len),
                    Lit::Partial => return Step::Need(i),
                    Lit::No if self.run.calls == 0 => self.st = St::Head,
                    Lit::No => return Step::Done(i),
                },
                St::Head => match until(rest, &[SEP], line_char, eof) {
                    Until::Found { len, end, .. } if len > 0 || self.fenced => {
                        if !self.fenced {
                            rest[..len].trim().clone_into(&mut self.name);
                        }
                        i += end;
                        self.st = if self.fenced { St::Name } else { St::ArgsStart };
                    }
                    Until::Need => return Step::Need(i),
                    _ => return self.stop(i),
                },
                St::Name => match until(rest, &["\n", "```"], line_char, eof) {
                    Until::Found { len, .. } if len > 0 => {
                        rest[..len].trim().clone_into(&mut self.name);
                        i += len;
                        self.st = St::Fence;
                    }
                    Until::Need => return Step::Need(i),
                    _ => return self.stop(i),
                },
                St::Fence => match lit(rest, &["```json", "```"], true, eof) {
                    Lit::Match { len, .. } => {
                        i += len;
                        self.st = St::ArgsStart;
                    }
                    Lit::Partial => return Step::Need(i),
                    Lit::No => return self.stop(i),
                },
                St::ArgsStart => match peek(rest) {
                    Some((_, '{')) if !self.name.is_empty() => {
                        cx.out.start_call(&self.name, None);
                        self.run.open = true;
                        self.st = St::Args;
                    }
                    None if !eof => return Step::Need(i),
                    _ => return self.stop(i),
                },
                St::Args => match self.run.args.feed(rest, cx) {
                    JsonStep::Need => return Step::Need(input.len()),
                    JsonStep::Done(n) => {
                        self.run.open = false;
                        self.run.calls += 1;
                        self.run.args = JsonArgs::default();
                        i += n;
                        self.st = if self.fenced {
                            St::CloseFence
                        } else {
                            St::CallEnd
                        };
                    }
                    JsonStep::Invalid(n) => {
                        self.run.open = false;
                        self.run.calls += 1;
                        i += n;
                        self.st = St::Skip;
                    }
                },
                St::CloseFence => match lit(rest, &["```"], true, eof) {
                    Lit::Match { len, .. } => {
                        i += len;
                        self.st = St::CallEnd;
                    }
                    Lit::Partial => return Step::Need(i),
                    Lit::No => self.st = St::CallEnd,
                },
                St::CallEnd => match optional_marker(rest, &[CALL_END], eof) {
                    Some(len) => {
                        i += len;
                        self.st = St::CallStart;
                    }
                    None => return Step::Need(i),
                },
                St::Skip => match skip_until(rest, &[CALL_END], eof, i, true) {
                    Step::Done(n) => {
                        i = n;
                        self.st = St::CallStart;
                    }
                    other => return other,
                },
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        self.run.finish(cx)
    }

    fn committed(&self) -> bool {
        self.run.committed()
    }
}
