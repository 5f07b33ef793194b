//! Kimi K2: `<|tool_calls_section_begin|>` + per call
//! `<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}<|tool_call_end|>`;
//! the id is `functions.NAME:IDX`.

use super::THINK;
use crate::call_json::{optional_marker, CallRun, JsonArgs};
use crate::engine::{Block, Cx, Open, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::JsonStep;
use crate::scan::{lit, Lit};
use crate::seq::{name_char, peek, skip_until, until, Until};
use crate::Format;

const SECTION: &str = "<|tool_calls_section_begin|>";
const SECTION_END: &str = "<|tool_calls_section_end|>";
const CALL: &str = "<|tool_call_begin|>";
const ARG: &str = "<|tool_call_argument_begin|>";
const CALL_END: &str = "<|tool_call_end|>";

pub(super) fn syntax(_f: Format) -> Syntax {
    Syntax {
        reasoning: Some(THINK),
        drop: &[],
        verbatim: &[],
        openers: &[SECTION, CALL],
        start: false,
        make: |open| Box::new(KimiBlock::new(open == Open::Marker(1))),
        ids: IdStyle::Call,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    CallStart,
    Id,
    ArgsStart,
    Args,
    CallEnd,
    Skip,
}

#[derive(Debug)]
struct KimiBlock {
    st: St,
    id: String,
    run: CallRun,
}

impl KimiBlock {
    fn new(in_call: bool) -> Self {
        KimiBlock {
            st: if in_call { St::Id } else { St::CallStart },
            id: String::new(),
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

/// `functions.get_weather:0` → `get_weather`.
fn name_of(id: &str) -> &str {
    let id = id.strip_prefix("functions.").unwrap_or(id);
    match id.rsplit_once(':') {
        Some((name, idx)) if idx.chars().all(|c| c.is_ascii_digit()) => name,
        _ => id,
    }
}

impl Block for KimiBlock {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::CallStart => match lit(rest, &[CALL, SECTION_END], true, eof) {
                    Lit::Match { idx: 0, len } => {
                        i += len;
                        self.st = St::Id;
                    }
                    Lit::Match { len, .. } => return Step::Done(i + len),
                    Lit::Partial => return Step::Need(i),
                    Lit::No => return self.stop(i),
                },
                St::Id => match until(rest, &[ARG], name_char, eof) {
                    Until::Found { len, end, .. } if !name_of(rest[..len].trim()).is_empty() => {
                        rest[..len].trim().clone_into(&mut self.id);
                        i += end;
                        self.st = St::ArgsStart;
                    }
                    Until::Need => return Step::Need(i),
                    _ => return self.stop(i),
                },
                St::ArgsStart => match peek(rest) {
                    Some((_, '{')) => {
                        let id = std::mem::take(&mut self.id);
                        cx.out.start_call(name_of(&id), Some(id.clone()));
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
                        self.st = St::CallEnd;
                    }
                    JsonStep::Invalid(n) => {
                        self.run.open = false;
                        self.run.calls += 1;
                        self.run.args = JsonArgs::default();
                        i += n;
                        self.st = St::Skip;
                    }
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
