//! The format-independent driver: top-level text, reasoning blocks (start tag, forced open,
//! redundant open tag, interleaving), wrappers, and call blocks run by per-format state
//! machines. It keeps the unconsumed input in one buffer; an uncommitted block's text stays
//! there so that a divergence can be turned back into text (README L7), and a call opened
//! inside unclosed reasoning runs in a speculative sub-engine until the reasoning's fate is
//! known (L6).

use std::sync::Arc;

use crate::event::Event;
use crate::ids::IdStyle;
use crate::out::Out;
use crate::scan::{lit, scan, ws_len, Hit, Lit};
use crate::tools::ToolSchemas;

/// What a block's `step` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Consumed this many bytes and needs more input to go on.
    Need(usize),
    /// The block ended after this many bytes.
    Done(usize),
    /// Not a call after all (only before the block's first commit).
    Diverged,
}

/// Context given to blocks.
#[derive(Debug)]
pub(crate) struct Cx<'a> {
    pub(crate) out: &'a mut Out,
    pub(crate) tools: &'a ToolSchemas,
}

/// A call block's state machine, created when its opener is seen.
pub(crate) trait Block: std::fmt::Debug + Send {
    /// Consumes a prefix of `input` (the text after what was consumed before). With `eof`
    /// no more input follows.
    fn step(&mut self, input: &str, eof: bool, cx: &mut Cx<'_>) -> Step;
    /// The output ended inside the block: heal an open call and return `true`, or return
    /// `false` when nothing was committed (the block's text is then re-read as text).
    fn finish(&mut self, cx: &mut Cx<'_>) -> bool;
    /// Whether a call was committed (the block can no longer diverge).
    fn committed(&self) -> bool;
}

/// How a block was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// At the very start of the output (formats whose call is the whole output).
    Start,
    /// By opener marker `n` of the syntax.
    Marker(usize),
}

/// Reasoning delimiters of a format.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reasoning {
    pub(crate) open: &'static [&'static str],
    pub(crate) close: &'static [&'static str],
    /// A new block may start after text (GLM 4.5).
    pub(crate) interleaved: bool,
}

/// Builds a block for an opening.
pub(crate) type MakeBlock = fn(Open) -> Box<dyn Block>;

/// A format's syntax, as the engine sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Syntax {
    pub(crate) reasoning: Option<Reasoning>,
    /// Wrapper markers dropped from text (README L15).
    pub(crate) drop: &'static [&'static str],
    /// Text blocks whose markers are dropped and inside which nothing else is recognised.
    pub(crate) verbatim: &'static [(&'static str, &'static str)],
    /// Markers that open a call block.
    pub(crate) openers: &'static [&'static str],
    /// Whether a block may open at the start of the output without a marker.
    pub(crate) start: bool,
    pub(crate) make: MakeBlock,
    pub(crate) ids: IdStyle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Opener(usize),
    Drop,
    Verbatim(usize),
    ReasonOpen,
}

#[derive(Debug)]
struct BlockRun {
    block: Box<dyn Block>,
    start: usize,
    opener_len: usize,
}

#[derive(Debug)]
struct SpecRun {
    sub: Box<Engine>,
    start: usize,
    opener_len: usize,
    scan: usize,
    fed: usize,
    pending: Out,
    committed: bool,
}

#[derive(Debug)]
enum Mode {
    Start,
    ForcedStart,
    Reasoning,
    Text,
    Verbatim(usize),
    Block(BlockRun),
    Spec(Box<SpecRun>),
}

/// The driver; see the module docs.
#[derive(Debug)]
pub(crate) struct Engine {
    syn: Syntax,
    tools: Arc<ToolSchemas>,
    buf: String,
    pos: usize,
    mode: Mode,
    pub(crate) out: Out,
    text_markers: Vec<(&'static str, Marker)>,
    reason_markers: Vec<(&'static str, Option<usize>)>,
}

impl Engine {
    pub(crate) fn new(syn: Syntax, tools: Arc<ToolSchemas>, out: Out, forced_open: bool) -> Self {
        let mut text_markers: Vec<(&'static str, Marker)> = Vec::new();
        for (i, m) in syn.openers.iter().enumerate() {
            text_markers.push((m, Marker::Opener(i)));
        }
        for m in syn.drop {
            text_markers.push((m, Marker::Drop));
        }
        for (i, (open, _)) in syn.verbatim.iter().enumerate() {
            text_markers.push((open, Marker::Verbatim(i)));
        }
        let mut reason_markers = Vec::new();
        if let Some(r) = syn.reasoning {
            if r.interleaved {
                for m in r.open {
                    text_markers.push((m, Marker::ReasonOpen));
                }
            }
            for m in r.close {
                reason_markers.push((*m, None));
            }
            for (i, m) in syn.openers.iter().enumerate() {
                reason_markers.push((*m, Some(i)));
            }
        }
        let mode = match (
            forced_open && syn.reasoning.is_some(),
            syn.reasoning.is_some() || syn.start,
        ) {
            (true, _) => Mode::ForcedStart,
            (false, true) => Mode::Start,
            (false, false) => Mode::Text,
        };
        Engine {
            syn,
            tools,
            buf: String::new(),
            pos: 0,
            mode,
            out,
            text_markers,
            reason_markers,
        }
    }

    fn sub_engine(&self) -> Engine {
        let mut e = Engine::new(self.syn, Arc::clone(&self.tools), self.out.fork(), false);
        e.mode = Mode::Text;
        e
    }

    /// Feeds text; events accumulate in `self.out`.
    pub(crate) fn feed(&mut self, s: &str) {
        self.buf.push_str(s);
        self.run(false);
        self.compact();
    }

    /// Ends the input, resolving every hold.
    pub(crate) fn finish(&mut self) {
        self.run(true);
    }

    fn compact(&mut self) {
        let keep = match &self.mode {
            Mode::Block(b) if !b.block.committed() => b.start,
            Mode::Spec(s) => s.start,
            _ => self.pos,
        };
        if keep < 4096 || keep < self.buf.len() / 2 {
            return;
        }
        self.buf.drain(..keep);
        self.pos -= keep;
        match &mut self.mode {
            Mode::Block(b) => b.start = b.start.saturating_sub(keep),
            Mode::Spec(s) => {
                s.start -= keep;
                s.scan -= keep;
                s.fed -= keep;
            }
            _ => {}
        }
    }

    fn run(&mut self, eof: bool) {
        loop {
            let progressed = match std::mem::replace(&mut self.mode, Mode::Text) {
                Mode::Start => self.start(false, eof),
                Mode::ForcedStart => self.start(true, eof),
                Mode::Reasoning => self.reasoning(eof),
                Mode::Text => self.text(eof),
                Mode::Verbatim(i) => self.verbatim(i, eof),
                Mode::Block(b) => self.block(b, eof),
                Mode::Spec(s) => self.spec(s, eof),
            };
            if !progressed {
                return;
            }
        }
    }

    fn start(&mut self, forced: bool, eof: bool) -> bool {
        let rest = &self.buf[self.pos..];
        let ws = ws_len(rest);
        let after = &rest[ws..];
        if after.is_empty() && !eof {
            self.mode = if forced {
                Mode::ForcedStart
            } else {
                Mode::Start
            };
            return false;
        }
        if let Some(r) = self.syn.reasoning {
            match lit(after, r.open, false, eof) {
                Lit::Match { len, .. } => {
                    self.pos += ws + len;
                    self.mode = Mode::Reasoning;
                    return true;
                }
                Lit::Partial if !r.open.is_empty() => {
                    self.mode = if forced {
                        Mode::ForcedStart
                    } else {
                        Mode::Start
                    };
                    return false;
                }
                _ => {}
            }
        }
        if forced {
            self.mode = Mode::Reasoning;
        } else if self.syn.start && !after.is_empty() {
            self.pos += ws;
            self.open_block(Open::Start, 0);
        } else {
            self.mode = Mode::Text;
        }
        true
    }

    fn open_block(&mut self, open: Open, opener_len: usize) {
        let block = (self.syn.make)(open);
        self.mode = Mode::Block(BlockRun {
            block,
            start: self.pos,
            opener_len,
        });
        self.pos += opener_len;
    }

    fn text(&mut self, eof: bool) -> bool {
        let markers: Vec<&str> = self.text_markers.iter().map(|m| m.0).collect();
        let rest = &self.buf[self.pos..];
        match scan(rest, &markers, eof) {
            Hit::Full { at, idx } => {
                let (m, kind) = self.text_markers[idx];
                self.out.content(&rest[..at]);
                self.pos += at;
                match kind {
                    Marker::Opener(i) => self.open_block(Open::Marker(i), m.len()),
                    Marker::Drop => {
                        self.pos += m.len();
                        self.mode = Mode::Text;
                    }
                    Marker::Verbatim(i) => {
                        self.pos += m.len();
                        self.mode = Mode::Verbatim(i);
                    }
                    Marker::ReasonOpen => {
                        self.pos += m.len();
                        self.mode = Mode::Reasoning;
                    }
                }
                true
            }
            Hit::Partial { at } => {
                self.out.content(&rest[..at]);
                self.pos += at;
                false
            }
            Hit::None => {
                self.out.content(rest);
                self.pos = self.buf.len();
                false
            }
        }
    }

    fn verbatim(&mut self, i: usize, eof: bool) -> bool {
        let close = self.syn.verbatim[i].1;
        let rest = &self.buf[self.pos..];
        match scan(rest, &[close], eof) {
            Hit::Full { at, .. } => {
                self.out.content(&rest[..at]);
                self.pos += at + close.len();
                self.mode = Mode::Text;
                true
            }
            Hit::Partial { at } => {
                self.out.content(&rest[..at]);
                self.pos += at;
                self.mode = Mode::Verbatim(i);
                false
            }
            Hit::None => {
                self.out.content(rest);
                self.pos = self.buf.len();
                self.mode = Mode::Verbatim(i);
                false
            }
        }
    }

    fn reasoning(&mut self, eof: bool) -> bool {
        let markers: Vec<&str> = self.reason_markers.iter().map(|m| m.0).collect();
        let rest = &self.buf[self.pos..];
        match scan(rest, &markers, eof) {
            Hit::Full { at, idx } => {
                let (m, opener) = self.reason_markers[idx];
                self.out.reasoning(&rest[..at]);
                self.pos += at;
                if opener.is_none() {
                    self.pos += m.len();
                    self.mode = Mode::Text;
                } else {
                    {
                        let sub = Box::new(self.sub_engine());
                        let pending = sub.out.fork();
                        self.mode = Mode::Spec(Box::new(SpecRun {
                            sub,
                            start: self.pos,
                            opener_len: m.len(),
                            scan: self.pos + m.len(),
                            fed: self.pos,
                            pending,
                            committed: false,
                        }));
                    }
                }
                true
            }
            Hit::Partial { at } => {
                self.out.reasoning(&rest[..at]);
                self.pos += at;
                self.mode = Mode::Reasoning;
                false
            }
            Hit::None => {
                self.out.reasoning(rest);
                self.pos = self.buf.len();
                self.mode = Mode::Reasoning;
                false
            }
        }
    }

    fn block(&mut self, mut b: BlockRun, eof: bool) -> bool {
        let mut cx = Cx {
            out: &mut self.out,
            tools: &self.tools,
        };
        let input = &self.buf[self.pos..];
        match b.block.step(input, eof, &mut cx) {
            Step::Done(n) => {
                self.pos += n;
                self.mode = Mode::Text;
                true
            }
            Step::Need(n) => {
                self.pos += n;
                if !eof {
                    self.mode = Mode::Block(b);
                    return false;
                }
                if b.block.finish(&mut cx) {
                    self.pos = self.buf.len();
                    self.mode = Mode::Text;
                } else {
                    self.rewind(&b);
                }
                true
            }
            Step::Diverged => {
                self.rewind(&b);
                true
            }
        }
    }

    fn rewind(&mut self, b: &BlockRun) {
        let end = b.start + b.opener_len;
        let opener = &self.buf[b.start..end];
        self.out.content(opener);
        self.pos = end;
        self.mode = Mode::Text;
    }

    fn spec(&mut self, mut s: Box<SpecRun>, eof: bool) -> bool {
        let close: &[&str] = self.syn.reasoning.map_or(&[], |r| r.close);
        match scan(&self.buf[s.scan..], close, eof) {
            Hit::Full { at, idx } => {
                let q = s.scan + at;
                self.out.reasoning(&self.buf[s.start..q]);
                self.pos = q + close[idx].len();
                self.mode = Mode::Text;
                return true;
            }
            Hit::Partial { at } => s.scan += at,
            Hit::None => s.scan = self.buf.len(),
        }
        s.sub.feed(&self.buf[s.fed..]);
        s.fed = self.buf.len();
        if eof {
            s.sub.finish();
        }
        let events = std::mem::take(&mut s.sub.out.events);
        if !s.committed {
            match events.iter().find(|e| !matches!(e, Event::Reasoning(_))) {
                Some(Event::Content(_)) => {
                    let end = s.start + s.opener_len;
                    self.out.reasoning(&self.buf[s.start..end]);
                    self.pos = end;
                    self.mode = Mode::Reasoning;
                    return true;
                }
                Some(_) => s.committed = true,
                None => {}
            }
        }
        s.pending.events.extend(events);
        if eof {
            let mut pending = s.pending;
            pending.ids = s.sub.out.ids.clone();
            let calls = s.sub.out.calls();
            debug_assert!(calls >= pending.calls());
            let mut adopted = s.sub.out.fork();
            adopted.events = pending.events;
            self.out.adopt(adopted);
            self.pos = self.buf.len();
            self.mode = Mode::Text;
            return false;
        }
        self.pos = self.buf.len();
        self.mode = Mode::Spec(s);
        false
    }
}
