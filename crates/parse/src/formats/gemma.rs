//! Gemma 4 (`<|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>`, thought channel) and
//! FunctionGemma (`<start_function_call>call:NAME{k:<escape>v<escape>}<end_function_call>`).

use crate::call_json::optional_close;
use crate::engine::{Block, Cx, Reasoning, Step, Syntax};
use crate::ids::IdStyle;
use crate::literal::{ConvStep, LitArgs, LitConv};
use crate::scan::{lit, Lit};
use crate::seq::{name_char, until, Until};
use crate::Format;

pub(super) fn syntax(f: Format) -> Syntax {
    if f == Format::Gemma4 {
        Syntax {
            reasoning: Some(Reasoning {
                open: &["<|channel>thought"],
                close: &["<channel|>"],
                interleaved: false,
            }),
            drop: &["<channel|>"],
            verbatim: &[],
            openers: &["<|tool_call>"],
            start: false,
            make: |_| Box::new(GemmaBlock::new("<|\"|>", &["<tool_call|>"])),
            ids: IdStyle::Call,
        }
    } else {
        Syntax {
            reasoning: None,
            drop: &[],
            verbatim: &[],
            openers: &["<start_function_call>"],
            start: false,
            make: |_| Box::new(GemmaBlock::new("<escape>", &["<end_function_call>"])),
            ids: IdStyle::Call,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Call,
    Name,
    Args,
    Close,
}

#[derive(Debug)]
struct GemmaBlock {
    delim: &'static str,
    close: &'static [&'static str],
    st: St,
    args: Option<LitArgs>,
    done: bool,
}

impl GemmaBlock {
    fn new(delim: &'static str, close: &'static [&'static str]) -> Self {
        GemmaBlock {
            delim,
            close,
            st: St::Call,
            args: None,
            done: false,
        }
    }
}

impl Block for GemmaBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::Call => match lit(rest, &["call:"], true, eof) {
                    Lit::Match { len, .. } => {
                        i += len;
                        self.st = St::Name;
                    }
                    Lit::Partial => return Step::Need(i),
                    Lit::No => return Step::Diverged,
                },
                St::Name => match until(rest, &["{"], name_char, eof) {
                    Until::Found { len, end, .. } if len > 0 => {
                        cx.out.start_call(&rest[..len], None);
                        self.args = Some(LitArgs::start(LitConv::gemma(self.delim), cx));
                        i += end;
                        self.st = St::Args;
                    }
                    Until::Need => return Step::Need(i),
                    _ => return Step::Diverged,
                },
                St::Args => {
                    let args = self.args.as_mut().expect("invariant: set in Name");
                    match args.feed(rest, cx) {
                        ConvStep::Need(n) => return Step::Need(i + n),
                        ConvStep::Done(n) => {
                            self.args = None;
                            self.done = true;
                            i += n;
                            self.st = St::Close;
                        }
                    }
                }
                St::Close => return optional_close(rest, self.close, eof, i),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if let Some(a) = &mut self.args {
            a.finish(cx);
            self.args = None;
            self.done = true;
        }
        self.done
    }

    fn committed(&self) -> bool {
        self.done || self.args.is_some()
    }
}
