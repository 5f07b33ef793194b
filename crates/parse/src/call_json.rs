//! JSON-encoded calls: an argument object streamed into fragments ([`JsonArgs`]), a call
//! object `{"name": N, "arguments": {…}}` with configurable keys ([`CallObject`]), and a
//! JSON array of call objects ([`CallArray`]).

use crate::engine::{Cx, Step};
use crate::json_stream::{JsonStep, JsonStream, StrDecoder, StrStep};
use crate::scan::{lit, scan, ws_len, Hit, Lit};

/// Streams one JSON argument object into the current call's fragments.
#[derive(Debug, Clone)]
pub(crate) struct JsonArgs {
    js: JsonStream,
    buf: String,
}

impl Default for JsonArgs {
    fn default() -> Self {
        JsonArgs {
            js: JsonStream::object(),
            buf: String::new(),
        }
    }
}

impl JsonArgs {
    /// Feeds JSON text that starts at (or before, whitespace) the object's `{`.
    pub(crate) fn feed(&mut self, s: &str, cx: &mut Cx<'_>) -> JsonStep {
        self.buf.clear();
        let step = self.js.feed(s, &mut self.buf);
        cx.out.args(&self.buf);
        step
    }

    pub(crate) fn is_done(&self) -> bool {
        self.js.is_done()
    }

    /// Closes the object (healing a cut one; `{}` when it never started).
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>) {
        self.buf.clear();
        let started = self.js.started();
        self.js.heal(&mut self.buf);
        if !started && self.buf.is_empty() {
            self.buf.push_str("{}");
        }
        cx.out.args(&self.buf);
    }
}

/// The keys of a call object.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallKeys {
    pub(crate) name: &'static [&'static str],
    pub(crate) args: &'static [&'static str],
    /// Keys whose string value is the call id when it precedes the arguments.
    pub(crate) id: &'static [&'static str],
    /// Other keys allowed before the name.
    pub(crate) skip: &'static [&'static str],
    /// `{"NAME": {args}}`: the single key is the name.
    pub(crate) short_form: bool,
}

/// `{"name", "arguments"}` (also `parameters`).
pub(crate) const NAME_ARGS: CallKeys = CallKeys {
    name: &["name"],
    args: &["arguments", "parameters"],
    id: &["id"],
    skip: &["type"],
    short_form: false,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Name,
    Id,
    Args,
    Skip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Co {
    Open,
    KeyStart,
    Key,
    Colon,
    Value(Role),
    Text(Role),
    Skip,
    Args,
    ArgsStr,
    After,
    Done,
}

/// What a [`CallObject`] feed ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CoStep {
    Need(usize),
    Done(usize),
    Diverged,
    /// Invalid JSON after commit at this offset; arguments are already closed (L10).
    Invalid(usize),
}

/// One call object; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct CallObject {
    keys: CallKeys,
    st: Co,
    dec: StrDecoder,
    text: String,
    name: Option<String>,
    id: Option<String>,
    skip: JsonStream,
    args: JsonArgs,
    args_str: StrDecoder,
    decoded: String,
    committed: bool,
}

impl CallObject {
    pub(crate) fn new(keys: CallKeys) -> Self {
        CallObject {
            keys,
            st: Co::Open,
            dec: StrDecoder::default(),
            text: String::new(),
            name: None,
            id: None,
            skip: JsonStream::new(),
            args: JsonArgs::default(),
            args_str: StrDecoder::default(),
            decoded: String::new(),
            committed: false,
        }
    }

    pub(crate) fn committed(&self) -> bool {
        self.committed
    }

    fn commit(&mut self, cx: &mut Cx<'_>) {
        let name = self.name.clone().unwrap_or_default();
        cx.out.start_call(&name, self.id.take());
        self.committed = true;
    }

    fn role(&self, key: &str) -> Option<Role> {
        if self.keys.short_form && self.name.is_none() {
            return Some(Role::Args);
        }
        if self.keys.name.contains(&key) && self.name.is_none() {
            Some(Role::Name)
        } else if self.keys.args.contains(&key) && !self.committed {
            self.name.as_ref().map(|_| Role::Args)
        } else if self.keys.id.contains(&key) && !self.committed {
            Some(Role::Id)
        } else if self.committed || self.name.is_some() || self.keys.skip.contains(&key) {
            Some(Role::Skip)
        } else {
            None
        }
    }

    /// Feeds text starting where the previous feed stopped.
    #[allow(clippy::too_many_lines)]
    pub(crate) fn feed(&mut self, s: &str, eof: bool, cx: &mut Cx<'_>) -> CoStep {
        let mut i = 0;
        loop {
            let rest = &s[i..];
            match self.st {
                Co::Done => return CoStep::Done(i),
                Co::Open | Co::KeyStart | Co::Colon | Co::After | Co::Value(_) => {
                    let ws = ws_len(rest);
                    i += ws;
                    let Some(c) = s[i..].chars().next() else {
                        return CoStep::Need(i);
                    };
                    match (self.st, c) {
                        (Co::Open, '{') | (Co::After, ',') => self.st = Co::KeyStart,
                        (Co::KeyStart, '"') => {
                            self.text.clear();
                            self.dec = StrDecoder::default();
                            self.st = Co::Key;
                        }
                        (Co::KeyStart, '}') if !self.committed && self.name.is_none() => {
                            return CoStep::Diverged
                        }
                        (Co::Colon, ':') => {
                            let key = std::mem::take(&mut self.text);
                            match self.role(&key) {
                                Some(Role::Args) if self.keys.short_form && self.name.is_none() => {
                                    self.name = Some(key);
                                    self.st = Co::Value(Role::Args);
                                }
                                Some(r) => self.st = Co::Value(r),
                                None => return CoStep::Diverged,
                            }
                        }
                        (Co::After | Co::KeyStart, '}') => {
                            if !self.committed {
                                if self.name.is_none() {
                                    return CoStep::Diverged;
                                }
                                self.commit(cx);
                                cx.out.args("{}");
                            }
                            self.st = Co::Done;
                            return CoStep::Done(i + 1);
                        }
                        (Co::Value(Role::Name | Role::Id), '"') => {
                            let Co::Value(r) = self.st else {
                                unreachable!()
                            };
                            self.text.clear();
                            self.dec = StrDecoder::default();
                            self.st = Co::Text(r);
                        }
                        (Co::Value(Role::Args), _) => {
                            self.commit(cx);
                            match c {
                                '{' => self.st = Co::Args,
                                '"' => {
                                    self.st = Co::ArgsStr;
                                    i += 1;
                                }
                                _ => {
                                    cx.out.args("{}");
                                    self.skip = JsonStream::new();
                                    self.st = Co::Skip;
                                }
                            }
                            continue;
                        }
                        (Co::Value(Role::Skip | Role::Id), _) => {
                            self.skip = JsonStream::new();
                            self.st = Co::Skip;
                            continue;
                        }
                        _ if self.committed => {
                            return CoStep::Invalid(i);
                        }
                        _ => return CoStep::Diverged,
                    }
                    i += c.len_utf8();
                }
                Co::Key | Co::Text(_) => match self.dec.feed(rest, &mut self.text) {
                    StrStep::Need => return CoStep::Need(s.len()),
                    StrStep::Done(n) => {
                        i += n;
                        self.st = match self.st {
                            Co::Key => Co::Colon,
                            Co::Text(Role::Name) => {
                                if self.text.is_empty() {
                                    return CoStep::Diverged;
                                }
                                self.name = Some(std::mem::take(&mut self.text));
                                Co::After
                            }
                            _ => {
                                self.id = Some(std::mem::take(&mut self.text));
                                Co::After
                            }
                        };
                    }
                    StrStep::Invalid(_) => return CoStep::Diverged,
                },
                Co::Skip => {
                    let mut sink = String::new();
                    match self.skip.feed(rest, &mut sink) {
                        JsonStep::Need => {
                            if eof {
                                self.st = Co::After;
                                return CoStep::Need(s.len());
                            }
                            return CoStep::Need(s.len());
                        }
                        JsonStep::Done(n) => {
                            i += n;
                            self.st = Co::After;
                        }
                        JsonStep::Invalid(n) if self.committed => return CoStep::Invalid(i + n),
                        JsonStep::Invalid(_) => return CoStep::Diverged,
                    }
                }
                Co::Args => match self.args.feed(rest, cx) {
                    JsonStep::Need => return CoStep::Need(s.len()),
                    JsonStep::Done(n) => {
                        i += n;
                        self.st = Co::After;
                    }
                    JsonStep::Invalid(n) => {
                        self.st = Co::Done;
                        return CoStep::Invalid(i + n);
                    }
                },
                Co::ArgsStr => {
                    self.decoded.clear();
                    let step = self.args_str.feed(rest, &mut self.decoded);
                    if !self.args.is_done() {
                        let decoded = std::mem::take(&mut self.decoded);
                        self.args.feed(&decoded, cx);
                    }
                    match step {
                        StrStep::Need => return CoStep::Need(s.len()),
                        StrStep::Done(n) => {
                            self.args.finish(cx);
                            i += n;
                            self.st = Co::After;
                        }
                        StrStep::Invalid(n) => {
                            self.args.finish(cx);
                            self.st = Co::Done;
                            return CoStep::Invalid(i + n);
                        }
                    }
                }
            }
        }
    }

    /// End of output: heals an open call. Returns whether the call was committed.
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if !self.committed {
            return false;
        }
        if matches!(self.st, Co::Args | Co::ArgsStr) {
            self.args.finish(cx);
        }
        self.st = Co::Done;
        true
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ar {
    Open,
    Elem,
    AfterElem,
    Close,
    Skip,
}

/// A JSON array of call objects, optionally followed by a close marker.
#[derive(Debug, Clone)]
pub(crate) struct CallArray {
    keys: CallKeys,
    close: &'static [&'static str],
    st: Ar,
    obj: CallObject,
    calls: usize,
}

impl CallArray {
    /// An array block; `opened` when the opener already included the `[`.
    pub(crate) fn new(keys: CallKeys, close: &'static [&'static str], opened: bool) -> Self {
        CallArray {
            keys,
            close,
            st: if opened { Ar::Elem } else { Ar::Open },
            obj: CallObject::new(keys),
            calls: 0,
        }
    }

    pub(crate) fn committed(&self) -> bool {
        self.calls > 0 || self.obj.committed()
    }

    /// Not a call where one was expected: diverge, or (after a call) drop the rest.
    fn bail(&mut self) -> Option<Step> {
        if self.committed() {
            self.st = Ar::Skip;
            None
        } else {
            Some(Step::Diverged)
        }
    }

    pub(crate) fn step(&mut self, s: &str, eof: bool, cx: &mut Cx<'_>) -> Step {
        let mut i = 0;
        loop {
            let rest = &s[i..];
            match self.st {
                Ar::Open | Ar::AfterElem => {
                    let ws = ws_len(rest);
                    let Some(c) = rest[ws..].chars().next() else {
                        return Step::Need(i);
                    };
                    match (self.st, c) {
                        (Ar::Open, '[') | (Ar::AfterElem, ',') => self.st = Ar::Elem,
                        (Ar::AfterElem, ']') => self.st = Ar::Close,
                        _ => {
                            if let Some(step) = self.bail() {
                                return step;
                            }
                            continue;
                        }
                    }
                    i += ws + 1;
                }
                Ar::Elem => match self.obj.feed(rest, eof, cx) {
                    CoStep::Need(n) => return Step::Need(i + n),
                    CoStep::Done(n) => {
                        i += n;
                        self.calls += 1;
                        self.obj = CallObject::new(self.keys);
                        self.st = Ar::AfterElem;
                    }
                    CoStep::Diverged => {
                        if let Some(step) = self.bail() {
                            return step;
                        }
                    }
                    CoStep::Invalid(n) => {
                        self.calls += 1;
                        i += n;
                        self.st = Ar::Skip;
                    }
                },
                Ar::Close => {
                    return optional_close(rest, self.close, eof, i);
                }
                Ar::Skip => return skip_to(rest, self.close, eof, i),
            }
        }
    }

    /// End of output: heals an open call; whether anything was committed.
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.st == Ar::Elem {
            self.obj.finish(cx);
        }
        self.committed()
    }
}

/// Skips text up to and including one of `close` (after `base` consumed bytes); without
/// close markers, skips everything.
pub(crate) fn skip_to(rest: &str, close: &[&str], eof: bool, base: usize) -> Step {
    match scan(rest, close, eof) {
        Hit::Full { at, idx } => Step::Done(base + at + close[idx].len()),
        Hit::Partial { at } => Step::Need(base + at),
        Hit::None => Step::Need(base + rest.len()),
    }
}

/// The optional closing marker of a call at `rest` (after `base` consumed bytes): consumed
/// when present, awaited while cut short, and not required when absent or when there is none.
pub(crate) fn optional_close(rest: &str, close: &[&str], eof: bool, base: usize) -> Step {
    if close.is_empty() {
        return Step::Done(base);
    }
    match lit(rest, close, true, eof) {
        Lit::Match { len, .. } => Step::Done(base + len),
        Lit::Partial => Step::Need(base),
        Lit::No => Step::Done(base),
    }
}

/// The calls of a block that holds one call after another, each with streamed JSON
/// arguments (DeepSeek, Kimi): the open call's arguments and how many calls are done.
#[derive(Debug, Default)]
pub(crate) struct CallRun {
    /// The open call's arguments.
    pub(crate) args: JsonArgs,
    /// Calls finished so far.
    pub(crate) calls: usize,
    /// Whether a call is open (its arguments are streaming).
    pub(crate) open: bool,
}

impl CallRun {
    /// The end of output: an open call's arguments are healed and closed. Whether the block
    /// produced any call.
    pub(crate) fn finish(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.open {
            self.args.finish(cx);
            self.open = false;
            self.calls += 1;
        }
        self.calls > 0
    }

    /// Whether the block has produced or opened a call.
    pub(crate) fn committed(&self) -> bool {
        self.calls > 0 || self.open
    }
}

/// An optional marker at `rest`: its length when present, 0 when absent, `None` while it
/// may still arrive (a cut prefix of it).
pub(crate) fn optional_marker(rest: &str, marker: &[&str], eof: bool) -> Option<usize> {
    match lit(rest, marker, true, eof) {
        Lit::Match { len, .. } => Some(len),
        Lit::Partial => None,
        Lit::No => Some(0),
    }
}
