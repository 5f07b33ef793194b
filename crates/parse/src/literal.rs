//! Converts python-style keyword arguments (`k="v", n=1, flag=True`) and Gemma object
//! literals (`{k:<|"|>v<|"|>,n:1}`) into JSON text, incrementally; the JSON then goes
//! through the JSON streamer, which holds and heals it like any JSON argument object.

use crate::json_stream::escape_into;

/// Which literal syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Python literals: `'…'`/`"…"` strings, `True`/`False`/`None`, tuples.
    Python,
    /// Gemma: strings between this delimiter, bare keys.
    Gemma(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// Top-level keyword arguments, closed by `)`.
    Kwargs,
    /// An object whose keys may be bare.
    Obj,
    Arr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Where a key may start (after `(`, `{` or `,` in a keyed context).
    Key,
    /// Inside a bare key.
    BareKey,
    /// Anywhere else outside strings.
    Value,
    /// Inside a bare word (literal or number).
    Word,
    /// Inside a string; for python, the quote char.
    Str(char),
    /// After `\` in a python string.
    Esc(char),
    Done,
}

/// See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct LitConv {
    dialect: Dialect,
    stack: Vec<Ctx>,
    st: St,
    word: String,
}

/// What one feed ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConvStep {
    /// Consumed this many bytes; needs more.
    Need(usize),
    /// The top level closed after this many bytes.
    Done(usize),
}

impl LitConv {
    /// A converter positioned just inside `(` of keyword arguments.
    pub(crate) fn kwargs() -> Self {
        LitConv {
            dialect: Dialect::Python,
            stack: vec![Ctx::Kwargs],
            st: St::Key,
            word: String::new(),
        }
    }

    /// A converter positioned just inside the `{` of a Gemma object.
    pub(crate) fn gemma(delim: &'static str) -> Self {
        LitConv {
            dialect: Dialect::Gemma(delim),
            stack: vec![Ctx::Obj],
            st: St::Key,
            word: String::new(),
        }
    }

    fn keyed(&self) -> bool {
        matches!(self.stack.last(), Some(Ctx::Kwargs | Ctx::Obj))
    }

    fn flush_word(&mut self, out: &mut String) {
        let w = std::mem::take(&mut self.word);
        let w = match (self.dialect, w.as_str()) {
            (Dialect::Python, "True") => "true",
            (Dialect::Python, "False") => "false",
            (Dialect::Python, "None") => "null",
            _ => w.as_str(),
        };
        out.push_str(w);
    }

    /// Feeds text, appending JSON text to `out`.
    #[allow(clippy::too_many_lines)]
    pub(crate) fn feed(&mut self, s: &str, out: &mut String) -> ConvStep {
        let mut i = 0;
        while i < s.len() {
            let rest = &s[i..];
            if let Dialect::Gemma(delim) = self.dialect {
                if matches!(self.st, St::Str(_)) {
                    let Some(at) = rest.find(delim) else {
                        let keep = partial_suffix(rest, delim);
                        escape_into(&rest[..rest.len() - keep], out);
                        return ConvStep::Need(s.len() - keep);
                    };
                    escape_into(&rest[..at], out);
                    out.push('"');
                    self.st = St::Value;
                    i += at + delim.len();
                    continue;
                }
                if matches!(self.st, St::Key | St::Value) && delim.starts_with(rest) {
                    return ConvStep::Need(i);
                }
                if matches!(self.st, St::Key | St::Value) && rest.starts_with(delim) {
                    out.push('"');
                    self.st = St::Str('"');
                    i += delim.len();
                    continue;
                }
            }
            let c = rest.chars().next().expect("invariant: i < len");
            i += c.len_utf8();
            match self.st {
                St::Done => return ConvStep::Done(i - c.len_utf8()),
                St::Str(q) => match c {
                    '\\' => self.st = St::Esc(q),
                    c if c == q => {
                        out.push('"');
                        self.st = St::Value;
                    }
                    '"' => out.push_str("\\\""),
                    c => escape_into(c.encode_utf8(&mut [0; 4]), out),
                },
                St::Esc(q) => {
                    match c {
                        '\'' => out.push('\''),
                        'n' | 't' | 'r' | 'b' | 'f' | '/' | '\\' | '"' | 'u' => {
                            out.push('\\');
                            out.push(c);
                        }
                        c => escape_into(c.encode_utf8(&mut [0; 4]), out),
                    }
                    self.st = St::Str(q);
                }
                St::BareKey => {
                    if c.is_alphanumeric() || c == '_' || c == '-' {
                        escape_into(c.encode_utf8(&mut [0; 4]), out);
                    } else {
                        out.push('"');
                        self.st = St::Value;
                        i -= c.len_utf8();
                    }
                }
                St::Word => {
                    if c.is_alphanumeric() || matches!(c, '.' | '+' | '-' | '_') {
                        self.word.push(c);
                    } else {
                        self.flush_word(out);
                        self.st = St::Value;
                        i -= c.len_utf8();
                    }
                }
                St::Key | St::Value => {
                    if self.st == St::Key && self.keyed() && (c.is_alphabetic() || c == '_') {
                        out.push('"');
                        escape_into(c.encode_utf8(&mut [0; 4]), out);
                        self.st = St::BareKey;
                        continue;
                    }
                    match c {
                        '=' | ':' => {
                            out.push(':');
                            out.push(' ');
                        }
                        ',' => {
                            out.push_str(", ");
                            self.st = if self.keyed() { St::Key } else { St::Value };
                            continue;
                        }
                        '{' => {
                            out.push('{');
                            self.stack.push(Ctx::Obj);
                            self.st = St::Key;
                            continue;
                        }
                        '[' | '(' => {
                            out.push('[');
                            self.stack.push(Ctx::Arr);
                        }
                        '}' | ']' | ')' => {
                            let top = self.stack.pop();
                            out.push(if matches!(top, Some(Ctx::Arr)) {
                                ']'
                            } else {
                                '}'
                            });
                            if self.stack.is_empty() {
                                self.st = St::Done;
                                return ConvStep::Done(i);
                            }
                        }
                        '"' | '\'' if self.dialect == Dialect::Python => {
                            out.push('"');
                            self.st = St::Str(c);
                            continue;
                        }
                        c if c.is_whitespace() => continue,
                        c => {
                            self.word.push(c);
                            self.st = St::Word;
                            continue;
                        }
                    }
                    self.st = St::Value;
                }
            }
        }
        ConvStep::Need(s.len())
    }

    /// End of output: a bare word in progress is passed on (the JSON streamer decides
    /// whether it is a complete literal).
    pub(crate) fn flush(&mut self, out: &mut String) {
        if self.st == St::Word {
            self.flush_word(out);
        }
    }
}

/// Length of the longest suffix of `s` that is a proper prefix of `delim`.
fn partial_suffix(s: &str, delim: &str) -> usize {
    (1..delim.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && delim.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(mut c: LitConv, s: &str) -> String {
        let mut out = String::new();
        c.feed(s, &mut out);
        out
    }

    #[test]
    fn python_kwargs() {
        let out = conv(
            LitConv::kwargs(),
            r#"a="x\n", b={"t": True, 'n': None}, c=(1, 2.5))"#,
        );
        assert_eq!(
            out,
            r#"{"a": "x\n", "b": {"t": true, "n": null}, "c": [1, 2.5]}"#[1..]
        );
    }

    #[test]
    fn gemma_object() {
        let out = conv(
            LitConv::gemma("<|\"|>"),
            "a:<|\"|>x \"q\"<|\"|>,n:-1,l:[1,<|\"|>z<|\"|>],o:{k:true}}",
        );
        assert_eq!(
            out,
            r#""a": "x \"q\"", "n": -1, "l": [1, "z"], "o": {"k": true}}"#
        );
    }
}

/// Literal arguments streamed into the current call: converter + JSON streamer.
#[derive(Debug, Clone)]
pub(crate) struct LitArgs {
    conv: LitConv,
    js: crate::json_stream::JsonStream,
    json: String,
    out: String,
}

impl LitArgs {
    /// Starts the object (writes `{`).
    pub(crate) fn start(conv: LitConv, cx: &mut crate::engine::Cx<'_>) -> Self {
        let mut a = LitArgs {
            conv,
            js: crate::json_stream::JsonStream::new(),
            json: String::new(),
            out: String::new(),
        };
        a.push("{", cx);
        a
    }

    fn push(&mut self, json: &str, cx: &mut crate::engine::Cx<'_>) {
        if self.js.is_done() {
            return;
        }
        self.out.clear();
        self.js.feed(json, &mut self.out);
        cx.out.args(&self.out);
    }

    /// Feeds literal text.
    pub(crate) fn feed(&mut self, s: &str, cx: &mut crate::engine::Cx<'_>) -> ConvStep {
        self.json.clear();
        let step = self.conv.feed(s, &mut self.json);
        let json = std::mem::take(&mut self.json);
        self.push(&json, cx);
        if matches!(step, ConvStep::Done(_)) && !self.js.is_done() {
            // The literal closed where its JSON did not (e.g. a stray quote): heal.
            self.out.clear();
            self.js.heal(&mut self.out);
            cx.out.args(&self.out);
        }
        step
    }

    /// Closes the object (healing a cut one).
    pub(crate) fn finish(&mut self, cx: &mut crate::engine::Cx<'_>) {
        self.json.clear();
        self.conv.flush(&mut self.json);
        let json = std::mem::take(&mut self.json);
        self.push(&json, cx);
        self.out.clear();
        self.js.heal(&mut self.out);
        cx.out.args(&self.out);
    }
}
