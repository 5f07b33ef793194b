//! An incremental JSON value streamer: it passes JSON text through as soon as each piece is
//! certain to stay (README S1), and closes a cut value into valid JSON (healing H1–H5).
//!
//! Held back until safe: a member's `,` + key + `:` until its value starts, numbers and
//! literals until they end, partial escapes and an unpaired high surrogate.

/// A container on the nesting stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Obj,
    Arr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// Before the top-level value.
    Top,
    /// After `{`: a key or `}`.
    ObjFirst,
    /// After `,` in an object: a key.
    ObjKey,
    /// Inside a key.
    Key,
    /// After `\` inside a key.
    KeyEsc,
    /// Inside `\uXXXX` in a key, with this many hex digits seen.
    KeyU(u8),
    /// After a key: `:`.
    Colon,
    /// After `:` or `,` in an array: a value.
    Value,
    /// After `[`: a value or `]`.
    ArrFirst,
    /// After a value: `,` or a closing bracket.
    After,
    /// Inside a string value.
    Str,
    /// After `\` in a string value.
    StrEsc,
    /// Inside `\uXXXX` with this many hex digits seen.
    StrU(u8),
    /// A number or literal in progress (kept in `hold`).
    Scalar,
    /// The top-level value is complete (or healed).
    Done,
}

/// What one [`JsonStream::feed`] call ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonStep {
    /// All input consumed; the value is not complete.
    Need,
    /// The value ended after this many bytes of the input.
    Done(usize),
    /// Invalid JSON at this byte offset; the value was closed at the last valid point.
    Invalid(usize),
}

/// Streams one JSON value; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct JsonStream {
    stack: Vec<Frame>,
    st: St,
    hold: String,
    scalar_start: usize,
    esc: String,
    high: Option<String>,
    emitted: bool,
    object_only: bool,
}

impl Default for JsonStream {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonStream {
    /// A streamer expecting one value of any kind.
    pub(crate) fn new() -> Self {
        JsonStream {
            stack: Vec::new(),
            st: St::Top,
            hold: String::new(),
            scalar_start: 0,
            esc: String::new(),
            high: None,
            emitted: false,
            object_only: false,
        }
    }

    /// A streamer that accepts only a JSON object (anything else is invalid).
    pub(crate) fn object() -> Self {
        JsonStream {
            object_only: true,
            ..Self::new()
        }
    }

    /// Whether the top-level value is complete.
    pub(crate) fn is_done(&self) -> bool {
        self.st == St::Done
    }

    /// Whether anything was written to the output yet.
    pub(crate) fn started(&self) -> bool {
        self.emitted
    }

    /// Feeds `s`, appending safe JSON text to `out`.
    pub(crate) fn feed(&mut self, s: &str, out: &mut String) -> JsonStep {
        let before = out.len();
        let step = self.feed_inner(s, out);
        if out.len() > before {
            self.emitted = true;
        }
        step
    }

    fn feed_inner(&mut self, s: &str, out: &mut String) -> JsonStep {
        let mut i = 0;
        while i < s.len() {
            if self.st == St::Done {
                return JsonStep::Done(i);
            }
            if self.st == St::Str {
                // Fast path: copy the run of plain string characters.
                let rest = &s[i..];
                let run = rest
                    .bytes()
                    .position(|b| b == b'"' || b == b'\\' || b < 0x20)
                    .unwrap_or(rest.len());
                if run > 0 {
                    self.flush_high_lone();
                    out.push_str(&rest[..run]);
                    i += run;
                    continue;
                }
            }
            let c = s[i..].chars().next().expect("invariant: i < len");
            match self.push(c, out) {
                Push::Ok => i += c.len_utf8(),
                Push::Done => return JsonStep::Done(i + c.len_utf8()),
                Push::DoneBefore => return JsonStep::Done(i),
                Push::Invalid => {
                    self.heal(out);
                    return JsonStep::Invalid(i);
                }
            }
        }
        JsonStep::Need
    }

    fn flush_high_lone(&mut self) {
        // An unpaired high surrogate followed by a plain character: drop it.
        self.high = None;
    }

    fn flush(&mut self, out: &mut String) {
        out.push_str(&self.hold);
        self.hold.clear();
    }

    fn ws(&mut self, c: char, out: &mut String) {
        if self.hold.is_empty() {
            out.push(c);
        } else {
            self.hold.push(c);
        }
    }

    fn open(&mut self, c: char, out: &mut String) -> Push {
        self.flush(out);
        out.push(c);
        if c == '{' {
            self.stack.push(Frame::Obj);
            self.st = St::ObjFirst;
        } else {
            self.stack.push(Frame::Arr);
            self.st = St::ArrFirst;
        }
        Push::Ok
    }

    fn close(&mut self, c: char, out: &mut String) -> Push {
        let want = if c == '}' { Frame::Obj } else { Frame::Arr };
        if self.stack.last() != Some(&want) {
            return Push::Invalid;
        }
        self.stack.pop();
        self.hold.clear();
        out.push(c);
        self.after_value()
    }

    fn after_value(&mut self) -> Push {
        if self.stack.is_empty() {
            self.st = St::Done;
            Push::Done
        } else {
            self.st = St::After;
            Push::Ok
        }
    }

    fn value_start(&mut self, c: char, out: &mut String) -> Push {
        match c {
            '"' => {
                self.flush(out);
                out.push('"');
                self.st = St::Str;
                Push::Ok
            }
            '{' | '[' => self.open(c, out),
            '-' | '0'..='9' | 't' | 'f' | 'n' => {
                self.scalar_start = self.hold.len();
                self.hold.push(c);
                self.st = St::Scalar;
                Push::Ok
            }
            _ => Push::Invalid,
        }
    }

    #[allow(clippy::too_many_lines)]
    fn push(&mut self, c: char, out: &mut String) -> Push {
        let ws = matches!(c, ' ' | '\t' | '\n' | '\r');
        match self.st {
            St::Top => {
                if ws {
                    return Push::Ok;
                }
                if self.object_only && c != '{' {
                    return Push::Invalid;
                }
                let r = self.value_start(c, out);
                if self.st == St::Scalar {
                    self.scalar_start = 0;
                }
                r
            }
            St::ObjFirst | St::ObjKey => {
                if ws {
                    self.ws(c, out);
                    Push::Ok
                } else if c == '"' {
                    self.hold.push(c);
                    self.st = St::Key;
                    Push::Ok
                } else if c == '}' && self.st == St::ObjFirst {
                    self.close(c, out)
                } else {
                    Push::Invalid
                }
            }
            St::Key => {
                if (c as u32) < 0x20 {
                    return Push::Invalid;
                }
                self.hold.push(c);
                match c {
                    '\\' => self.st = St::KeyEsc,
                    '"' => self.st = St::Colon,
                    _ => {}
                }
                Push::Ok
            }
            St::KeyEsc => {
                if !matches!(c, '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' | 'u') {
                    return Push::Invalid;
                }
                self.hold.push(c);
                self.st = if c == 'u' { St::KeyU(0) } else { St::Key };
                Push::Ok
            }
            St::KeyU(n) => {
                if !c.is_ascii_hexdigit() {
                    return Push::Invalid;
                }
                self.hold.push(c);
                if n < 3 {
                    self.st = St::KeyU(n + 1);
                    return Push::Ok;
                }
                let code = u32::from_str_radix(&self.hold[self.hold.len() - 4..], 16)
                    .expect("invariant: 4 hex digits");
                if (0xD800..0xE000).contains(&code) {
                    // Surrogate escapes in keys are not supported: invalid.
                    return Push::Invalid;
                }
                self.st = St::Key;
                Push::Ok
            }
            St::Colon => {
                if ws {
                    self.hold.push(c);
                    Push::Ok
                } else if c == ':' {
                    self.hold.push(c);
                    self.st = St::Value;
                    Push::Ok
                } else {
                    Push::Invalid
                }
            }
            St::Value | St::ArrFirst => {
                if ws {
                    self.ws(c, out);
                    Push::Ok
                } else if c == ']' && self.st == St::ArrFirst {
                    self.close(c, out)
                } else {
                    self.value_start(c, out)
                }
            }
            St::After => {
                if ws {
                    out.push(c);
                    return Push::Ok;
                }
                match (c, self.stack.last()) {
                    (',', Some(Frame::Obj)) => {
                        self.hold.push(',');
                        self.st = St::ObjKey;
                        Push::Ok
                    }
                    (',', Some(Frame::Arr)) => {
                        self.hold.push(',');
                        self.st = St::Value;
                        Push::Ok
                    }
                    ('}' | ']', _) => self.close(c, out),
                    _ => Push::Invalid,
                }
            }
            St::Str => self.push_str_char(c, out),
            St::StrEsc => {
                if c == 'u' {
                    self.esc.push('u');
                    self.st = St::StrU(0);
                    Push::Ok
                } else if matches!(c, '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') {
                    self.high = None;
                    out.push('\\');
                    out.push(c);
                    self.esc.clear();
                    self.st = St::Str;
                    Push::Ok
                } else {
                    Push::Invalid
                }
            }
            St::StrU(n) => {
                if !c.is_ascii_hexdigit() {
                    return Push::Invalid;
                }
                self.esc.push(c);
                if n < 3 {
                    self.st = St::StrU(n + 1);
                    return Push::Ok;
                }
                self.st = St::Str;
                let code =
                    u32::from_str_radix(&self.esc[2..], 16).expect("invariant: 4 hex digits");
                let esc = std::mem::take(&mut self.esc);
                if (0xDC00..0xE000).contains(&code) {
                    if let Some(high) = self.high.take() {
                        out.push_str(&high);
                        out.push_str(&esc);
                    }
                } else if (0xD800..0xDC00).contains(&code) {
                    self.high = Some(esc);
                } else {
                    self.high = None;
                    out.push_str(&esc);
                }
                Push::Ok
            }
            St::Scalar => {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-') {
                    self.hold.push(c);
                    return Push::Ok;
                }
                if !valid_scalar(&self.hold[self.scalar_start..]) {
                    return Push::Invalid;
                }
                self.flush(out);
                if self.stack.is_empty() {
                    self.st = St::Done;
                    return Push::DoneBefore;
                }
                self.st = St::After;
                self.push(c, out)
            }
            St::Done => Push::DoneBefore,
        }
    }

    fn push_str_char(&mut self, c: char, out: &mut String) -> Push {
        match c {
            '"' => {
                self.high = None;
                out.push('"');
                self.after_value()
            }
            '\\' => {
                self.esc.clear();
                self.esc.push('\\');
                self.st = St::StrEsc;
                Push::Ok
            }
            c if (c as u32) < 0x20 => {
                // A raw control character: escape it so the text stays valid JSON.
                self.high = None;
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    _ => push_u_escape(c, out),
                }
                Push::Ok
            }
            c => {
                self.high = None;
                out.push(c);
                Push::Ok
            }
        }
    }

    /// Closes the value at the last valid point (H1–H5), appending the closing text.
    /// Returns whether anything valid was produced (false when the value never started).
    pub(crate) fn heal(&mut self, out: &mut String) -> bool {
        let before = out.len();
        match self.st {
            St::Done => return true,
            St::Top => {
                self.st = St::Done;
                return false;
            }
            St::Str | St::StrEsc | St::StrU(_) => {
                self.esc.clear();
                self.high = None;
                out.push('"');
            }
            St::Scalar => {
                if valid_scalar(&self.hold[self.scalar_start..]) {
                    self.flush(out);
                } else {
                    self.hold.clear();
                    if self.stack.is_empty() {
                        self.st = St::Done;
                        return false;
                    }
                }
            }
            _ => self.hold.clear(),
        }
        self.hold.clear();
        while let Some(f) = self.stack.pop() {
            out.push(if f == Frame::Obj { '}' } else { ']' });
        }
        self.st = St::Done;
        if out.len() > before {
            self.emitted = true;
        }
        true
    }
}

enum Push {
    Ok,
    Done,
    DoneBefore,
    Invalid,
}

/// Whether `s` is a complete JSON number or literal.
pub(crate) fn valid_scalar(s: &str) -> bool {
    matches!(s, "true" | "false" | "null") || valid_number(s)
}

/// Whether `s` is a JSON number as written (`12`, `-3.5e2`; not `12.`, `-`, `1e`, `01`).
pub(crate) fn valid_number(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(b.first() == Some(&b'-'));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let int_start = i;
    let n = digits(&mut i);
    if n == 0 || (n > 1 && b[int_start] == b'0') {
        return false;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// Decodes the body of a JSON string (after its opening quote), incrementally.
#[derive(Debug, Clone, Default)]
pub(crate) struct StrDecoder {
    esc: String,
    high: Option<u32>,
}

/// What one [`StrDecoder::feed`] call ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrStep {
    /// All input consumed, string still open.
    Need,
    /// The closing quote ended the string after this many bytes.
    Done(usize),
    /// Invalid escape at this byte offset.
    Invalid(usize),
}

impl StrDecoder {
    /// Feeds `s`, appending decoded text to `out`.
    pub(crate) fn feed(&mut self, s: &str, out: &mut String) -> StrStep {
        for (i, c) in s.char_indices() {
            if self.esc.is_empty() {
                match c {
                    '"' => return StrStep::Done(i + 1),
                    '\\' => self.esc.push('\\'),
                    c => {
                        self.lone_high(out);
                        out.push(c);
                    }
                }
                continue;
            }
            self.esc.push(c);
            if self.esc.len() == 2 {
                let d = match c {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'u' => continue,
                    _ => return StrStep::Invalid(i),
                };
                self.lone_high(out);
                out.push(d);
                self.esc.clear();
            } else if !c.is_ascii_hexdigit() {
                return StrStep::Invalid(i);
            } else if self.esc.len() == 6 {
                let code = u32::from_str_radix(&self.esc[2..], 16).expect("invariant: hex");
                self.esc.clear();
                self.code(code, out);
            }
        }
        StrStep::Need
    }

    fn lone_high(&mut self, out: &mut String) {
        if self.high.take().is_some() {
            out.push('\u{FFFD}');
        }
    }

    fn code(&mut self, code: u32, out: &mut String) {
        if (0xD800..0xDC00).contains(&code) {
            self.lone_high(out);
            self.high = Some(code);
        } else if (0xDC00..0xE000).contains(&code) {
            match self.high.take() {
                Some(h) => {
                    let c = 0x10000 + ((h - 0xD800) << 10) + (code - 0xDC00);
                    out.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
                }
                None => out.push('\u{FFFD}'),
            }
        } else {
            self.lone_high(out);
            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
        }
    }
}

fn push_u_escape(c: char, out: &mut String) {
    use std::fmt::Write;
    let _ = write!(out, "\\u{:04x}", c as u32);
}

/// Appends `s` to `out` as the body of a JSON string (escaped, without quotes).
pub(crate) fn escape_into(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => push_u_escape(c, out),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(chunks: &[&str]) -> (String, Option<JsonStep>) {
        let mut j = JsonStream::new();
        let mut out = String::new();
        for c in chunks {
            let step = j.feed(c, &mut out);
            if step != JsonStep::Need {
                return (out, Some(step));
            }
        }
        j.heal(&mut out);
        (out, None)
    }

    #[test]
    fn passes_complete_objects_verbatim() {
        let s = r#"{"a": [1, 2.5, "x\n\u00e9"], "b": {"c": true}} tail"#;
        let (out, step) = stream(&[s]);
        assert_eq!(out, &s[..s.len() - 5]);
        assert_eq!(step, Some(JsonStep::Done(s.len() - 5)));
    }

    #[test]
    fn heals_cut_values() {
        let cases = [
            (r#"{"a": "hel"#, r#"{"a": "hel"}"#),
            (r#"{"a": "x\u00"#, r#"{"a": "x"}"#),
            (r#"{"a": 1, "b": 12."#, r#"{"a": 1}"#),
            (r#"{"a": 1, "b": 12"#, r#"{"a": 1, "b": 12}"#),
            (r#"{"a": 1, "b": tr"#, r#"{"a": 1}"#),
            (r#"{"a": 1, "lim"#, r#"{"a": 1}"#),
            (r#"{"a": [1, {"b": "c"#, r#"{"a": [1, {"b": "c"}]}"#),
            (r#"{"a": "\ud83c"#, r#"{"a": ""}"#),
        ];
        for (input, want) in cases {
            let (out, step) = stream(&[input]);
            assert_eq!(step, None, "{input}");
            assert_eq!(out, want, "{input}");
            serde_json::from_str::<serde_json::Value>(&out).expect(want);
        }
    }

    #[test]
    fn trailing_comma_closes_at_last_valid_point() {
        let (out, step) = stream(&[r#"{"city": "Paris",}"#]);
        assert_eq!(out, r#"{"city": "Paris"}"#);
        assert_eq!(step, Some(JsonStep::Invalid(17)));
    }

    #[test]
    fn byte_chunks_give_the_same_text() {
        let s = r#"{"t": "Zoë 👋 \"q\" \ud83c\udf89", "n": [-1.5e3, null]}"#;
        let chars: Vec<String> = s.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(stream(&refs).0, stream(&[s]).0);
    }

    #[test]
    fn numbers() {
        for ok in ["0", "-1", "1.5", "1e5", "-0.5E-3"] {
            assert!(valid_number(ok), "{ok}");
        }
        for bad in ["", "-", "1.", "1e", "01", "+1", ".5"] {
            assert!(!valid_number(bad), "{bad}");
        }
    }

    #[test]
    fn decodes_strings() {
        let mut d = StrDecoder::default();
        let mut out = String::new();
        assert_eq!(d.feed(r"a\n\u00e9\ud83c", &mut out), StrStep::Need);
        assert_eq!(d.feed(r#"\udf89" x"#, &mut out), StrStep::Done(7));
        assert_eq!(out, "a\né🎉");
    }
}
