//! Functionary v3.1 (`<function=NAME>{json}</function>`, `<|python_tag|>` raw code) and v3.2
//! (recipient lines: `all\n` text, `NAME\n{json}`, `python\n` raw code, later `>>>NAME\n`).

use crate::call_json::{optional_close, JsonArgs};
use crate::engine::{Block, Cx, Open, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::{escape_into, JsonStep};
use crate::seq::{name_char, peek, skip_until, until, Until};
use crate::Format;

pub(super) fn syntax(f: Format) -> Syntax {
    if f == Format::FunctionaryV31 {
        Syntax {
            reasoning: None,
            drop: &[],
            verbatim: &[],
            openers: &["<function=", "<|python_tag|>"],
            start: false,
            make: |open| {
                if open == Open::Marker(1) {
                    Box::new(CallBlock::raw_python())
                } else {
                    Box::new(CallBlock::new(St::Name, &[">"], &["</function>"]))
                }
            },
            ids: IdStyle::Call,
        }
    } else {
        Syntax {
            reasoning: None,
            drop: &[],
            verbatim: &[],
            openers: &[">>>"],
            start: true,
            make: |_| Box::new(CallBlock::new(St::Name, &["\n"], &[])),
            ids: IdStyle::Call,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Name,
    ArgsStart,
    Args,
    Raw,
    Close,
    Skip,
}

/// A named call with a JSON body, or raw python code to the end of the output.
#[derive(Debug)]
struct CallBlock {
    st: St,
    name_end: &'static [&'static str],
    close: &'static [&'static str],
    name: String,
    args: JsonArgs,
    committed: bool,
    open: bool,
}

impl CallBlock {
    fn new(st: St, name_end: &'static [&'static str], close: &'static [&'static str]) -> Self {
        CallBlock {
            st,
            name_end,
            close,
            name: String::new(),
            args: JsonArgs::default(),
            committed: false,
            open: false,
        }
    }

    fn raw_python() -> Self {
        let mut b = CallBlock::new(St::Raw, &[], &[]);
        b.name = "python".into();
        b
    }

    fn raw(&mut self, rest: &str, cx: &mut Cx<'_>) {
        if !self.committed {
            cx.out.start_call(&self.name, None);
            cx.out.args("{\"code\": \"");
            self.committed = true;
            self.open = true;
        }
        let mut s = String::new();
        escape_into(rest, &mut s);
        cx.out.args(&s);
    }
}

impl Block for CallBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::Name => match until(rest, self.name_end, name_char, eof) {
                    Until::Found { len, end, .. } if len > 0 => {
                        rest[..len].clone_into(&mut self.name);
                        i += end;
                        if self.name == "all" && self.close.is_empty() {
                            return Step::Done(i);
                        }
                        self.st = St::ArgsStart;
                    }
                    Until::Need => return Step::Need(i),
                    _ => return Step::Diverged,
                },
                St::ArgsStart => match peek(rest) {
                    Some((_, '{')) => {
                        cx.out.start_call(&self.name, None);
                        self.committed = true;
                        self.open = true;
                        self.st = St::Args;
                    }
                    Some(_) if self.name == "python" && self.close.is_empty() => self.st = St::Raw,
                    None if !eof => return Step::Need(i),
                    _ => return Step::Diverged,
                },
                St::Raw => {
                    if rest.is_empty() && !self.committed {
                        return if eof { Step::Diverged } else { Step::Need(i) };
                    }
                    self.raw(rest, cx);
                    return Step::Need(input.len());
                }
                St::Args => match self.args.feed(rest, cx) {
                    JsonStep::Need => return Step::Need(input.len()),
                    JsonStep::Done(n) => {
                        self.open = false;
                        i += n;
                        self.st = St::Close;
                    }
                    JsonStep::Invalid(n) => {
                        self.open = false;
                        i += n;
                        self.st = St::Skip;
                    }
                },
                St::Close => {
                    return optional_close(rest, self.close, eof, i);
                }
                St::Skip => return skip_until(rest, self.close, eof, i, true),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.open {
            if self.st == St::Raw {
                cx.out.args("\"}");
            } else {
                self.args.finish(cx);
            }
            self.open = false;
        }
        self.committed
    }

    fn committed(&self) -> bool {
        self.committed
    }
}
