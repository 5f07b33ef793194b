//! gpt-oss harmony: messages `<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY`
//! ending at `<|end|>` (or `<|call|>`/`<|return|>`, usually the stop token, so absent); later
//! messages start `<|start|>assistant[ to=RECIPIENT]`. `analysis` is reasoning; `final` and
//! recipient-less `commentary` are content; `functions.NAME` recipients are calls; other
//! recipients (built-in tools) are dropped.
//!
//! The generation prompt ends inside the first message's header (`<|start|>assistant`), so the
//! output may begin in the middle of it: with `<|channel|>`, with the role's recipient
//! (` to=functions.NAME<|channel|>…`), or, after a prompt that also wrote `<|channel|>`, with the
//! channel name (`final<|message|>…`). All three are read as that header, never as content.

use crate::call_json::{optional_close, JsonArgs};
use crate::engine::{Block, Cx, Open, Step, Syntax};
use crate::ids::IdStyle;
use crate::json_stream::JsonStep;
use crate::scan::{scan, Hit};
use crate::seq::{peek, until, Until};
use crate::Format;

const MESSAGE: &str = "<|message|>";
const ENDS: &[&str] = &[
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|start|>",
    "<|channel|>",
];

pub(super) fn syntax(_f: Format) -> Syntax {
    Syntax {
        reasoning: None,
        drop: &[],
        verbatim: &[],
        openers: &["<|channel|>", "<|start|>"],
        start: true,
        make: |open| {
            Box::new(Message::new(match open {
                Open::Marker(0) => Opened::Channel,
                Open::Marker(_) => Opened::Start,
                Open::Start => Opened::Output,
            }))
        },
        ids: IdStyle::Call,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    Call,
    Drop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    Header,
    Body(Body),
    ArgsStart,
    Args,
    End,
}

/// Where a message's header began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// At `<|channel|>`: the channel comes first.
    Channel,
    /// At `<|start|>`: the role (`assistant[ to=R]`), then `<|channel|>`.
    Start,
    /// At the start of the output, somewhere inside the header the prompt opened.
    Output,
}

/// How the output may begin inside a header: the role's recipient, the channel marker, a
/// channel name.
const HEADER_STARTS: &[&str] = &["to=", "<|channel|>", "analysis", "final", "commentary"];

/// Headers are short and on one line.
const MAX_HEADER: usize = 256;

/// Whether `text` (the output's start, up to what arrived) can still be, or begin, a header:
/// so text that merely starts with a channel's word (`finally`) is content at once.
fn may_begin_header(text: &str) -> bool {
    let head = text.split(MESSAGE).next().unwrap_or(text);
    if head.len() > MAX_HEADER || head.contains('\n') {
        return false;
    }
    HEADER_STARTS.iter().any(|s| match text.strip_prefix(s) {
        // A channel's name ends at a space (` to=…`, ` json`) or a marker.
        Some(after) if !s.ends_with(['=', '>']) => {
            after.is_empty() || after.starts_with([' ', '<'])
        }
        Some(_) => true,
        None => s.starts_with(text),
    })
}

#[derive(Debug)]
struct Message {
    st: St,
    opened: Opened,
    args: JsonArgs,
    committed: bool,
    open: bool,
}

impl Message {
    fn new(opened: Opened) -> Self {
        Message {
            st: St::Header,
            opened,
            args: JsonArgs::default(),
            committed: false,
            open: false,
        }
    }

    /// Reads `[assistant[ to=R]]<|channel|>CHANNEL[ to=R][ <|constrain|>json]`.
    fn header(&self, h: &str) -> Option<(Body, Option<String>)> {
        let (role, channel) = match (self.opened, h.split_once("<|channel|>")) {
            (Opened::Channel, _) | (Opened::Output, None) => ("", h),
            (Opened::Start | Opened::Output, Some((role, ch))) => (role, ch),
            (Opened::Start, None) => return None,
        };
        let mut recipient = None;
        for word in role.split_whitespace().chain(channel.split_whitespace()) {
            if let Some(r) = word.strip_prefix("to=") {
                recipient = Some(r.to_owned());
            }
        }
        let channel = channel.split_whitespace().next().unwrap_or("");
        let body = match (channel, &recipient) {
            (_, Some(r)) if r.starts_with("functions.") => Body::Call,
            (_, Some(_)) => Body::Drop,
            ("analysis", None) => Body::Reasoning,
            ("final" | "commentary", None) => Body::Content,
            _ => return None,
        };
        let name = recipient.map(|r| r.strip_prefix("functions.").unwrap_or(&r).to_owned());
        Some((body, name))
    }
}

fn any(_: char) -> bool {
    true
}

impl Block for Message {
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &input[i..];
            match self.st {
                St::Header if self.opened == Opened::Output && !may_begin_header(rest) => {
                    return Step::Diverged;
                }
                St::Header => match until(rest, &[MESSAGE], any, eof) {
                    Until::Found { len, end, .. } => {
                        let Some((body, name)) = self.header(&rest[..len]) else {
                            return Step::Diverged;
                        };
                        i += end;
                        if body == Body::Call {
                            self.st = St::ArgsStart;
                            let name = name.unwrap_or_default();
                            if name.is_empty() {
                                return Step::Diverged;
                            }
                            cx.out.start_call(&name, None);
                            self.open = true;
                        } else {
                            self.st = St::Body(body);
                        }
                        self.committed = true;
                    }
                    Until::Need => return Step::Need(i),
                    Until::Bad => return Step::Diverged,
                },
                St::Body(kind) => {
                    let (text, next) = match scan(rest, ENDS, eof) {
                        Hit::Full { at, idx } => {
                            let end = if idx < 3 { ENDS[idx].len() } else { 0 };
                            (&rest[..at], Some(i + at + end))
                        }
                        Hit::Partial { at } => (&rest[..at], None),
                        Hit::None => (rest, None),
                    };
                    match kind {
                        Body::Reasoning => cx.out.reasoning(text),
                        Body::Content => cx.out.content(text),
                        Body::Call | Body::Drop => {}
                    }
                    return match next {
                        Some(n) => Step::Done(n),
                        None => Step::Need(i + text.len()),
                    };
                }
                St::ArgsStart => match peek(rest) {
                    Some((_, '{')) => self.st = St::Args,
                    None if !eof => return Step::Need(i),
                    _ => {
                        self.args.finish(cx);
                        self.open = false;
                        self.st = St::Body(Body::Drop);
                    }
                },
                St::Args => match self.args.feed(rest, cx) {
                    JsonStep::Need => return Step::Need(input.len()),
                    JsonStep::Done(n) => {
                        self.open = false;
                        i += n;
                        self.st = St::End;
                    }
                    JsonStep::Invalid(n) => {
                        self.open = false;
                        i += n;
                        self.st = St::Body(Body::Drop);
                    }
                },
                St::End => return optional_close(rest, &["<|call|>", "<|end|>"], eof, i),
            }
        }
    }

    fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.open {
            self.args.finish(cx);
            self.open = false;
        }
        self.committed
    }

    fn committed(&self) -> bool {
        self.committed
    }
}
