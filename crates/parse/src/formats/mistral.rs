//! `mistral_args`: `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}`, one call per `[TOOL_CALLS]`.

use crate::call_json::JsonArgs;
use crate::engine::{Block, Cx, Reasoning, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::JsonStep;
use crate::seq::{name_char, peek, skip_until, until, Until};
use crate::Format;

pub(super) fn syntax(_f: Format) -> Syntax {
    Syntax {
        reasoning: Some(Reasoning {
            open: &["[THINK]"],
            close: &["[/THINK]"],
            interleaved: false,
        }),
        drop: &[],
        verbatim: &[],
        openers: &["[TOOL_CALLS]"],
        start: false,
        make: |_| Box::new(ArgsBlock::default()),
        ids: IdStyle::Mistral,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum St {
    #[default]
    Name,
    Id,
    ArgsStart,
    Args,
    Skip,
}

#[derive(Debug, Default)]
struct ArgsBlock {
    st: St,
    name: String,
    id: Option<String>,
    args: JsonArgs,
    committed: bool,
}

impl Block for ArgsBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::Name | St::Id => {
                    let terms: &[&str] = if self.st == St::Name {
                        &["[CALL_ID]", "[ARGS]"]
                    } else {
                        &["[ARGS]"]
                    };
                    match until(rest, terms, name_char, eof) {
                        Until::Found { len, idx, end } if len > 0 => {
                            if self.st == St::Name {
                                rest[..len].clone_into(&mut self.name);
                                self.st = if idx == 0 { St::Id } else { St::ArgsStart };
                            } else {
                                self.id = Some(rest[..len].to_owned());
                                self.st = St::ArgsStart;
                            }
                            i += end;
                        }
                        Until::Need => return Step::Need(i),
                        _ => return Step::Diverged,
                    }
                }
                St::ArgsStart => match peek(rest) {
                    Some((_, '{')) => {
                        cx.out.start_call(&self.name, self.id.take());
                        self.committed = true;
                        self.st = St::Args;
                    }
                    None if !eof => return Step::Need(i),
                    _ => return Step::Diverged,
                },
                St::Args => match self.args.feed(rest, cx) {
                    JsonStep::Need => return Step::Need(input.len()),
                    JsonStep::Done(n) => return Step::Done(i + n),
                    JsonStep::Invalid(n) => {
                        i += n;
                        self.st = St::Skip;
                    }
                },
                St::Skip => return skip_until(rest, &["[TOOL_CALLS]"], eof, i, false),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.committed && self.st == St::Args {
            self.args.finish(cx);
        }
        self.committed
    }

    fn committed(&self) -> bool {
        self.committed
    }
}
