//! Content tracking through a Jinja render.
//!
//! Every content string of a request (message content, content-part texts, reasoning, tool-call
//! names, ids and arguments, tool results) is wrapped in marks: `OPEN id … CLOSE id`, built from
//! private-use characters that occur nowhere in the request or the template. The template is
//! rendered once with the real values (the prompt) and once with the marked values; the marks
//! travel with the text through concatenation, filters and `tojson`, so in the marked rendering
//! everything between an `OPEN` and its `CLOSE` came from content. String methods that would
//! move a mark (strip, split, startswith…) are mark-aware (see `methods`).
//!
//! Fail-closed rules: the marked rendering with its marks removed must equal the prompt;
//! where it does not, the span where the two differ is content. A run of text next to a broken
//! or unpaired mark (a template that sliced content) is content.

use minijinja::Value;
use serde_json::Value as Json;

use crate::Segments;

/// How many characters the marks use: `OPEN`, `CLOSE` and 16 digits.
const WIDTH: u32 = 18;
/// Digits per id.
const ID_DIGITS: usize = 6;

/// The marks of one tracked render: the characters `base .. base + WIDTH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marks {
    base: u32,
}

/// One lexical piece of a marked string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Open(u32),
    Close(u32),
    /// A mark that lost its id or its kind (the template sliced through it).
    Broken,
}

impl Marks {
    /// Marks that occur in none of `texts`, from the top of plane 16 downwards.
    pub(crate) fn choose<'a>(texts: impl IntoIterator<Item = &'a str>) -> Option<Marks> {
        let mut used: Vec<u32> = texts
            .into_iter()
            .flat_map(str::chars)
            .map(u32::from)
            .filter(|&c| c >= 0x10_0000)
            .collect();
        used.sort_unstable();
        used.dedup();
        let mut base = 0x10_FFFD - WIDTH;
        while base >= 0x10_0000 {
            let clash = used.iter().find(|&&c| (base..base + WIDTH).contains(&c));
            match clash {
                None => return Some(Marks { base }),
                Some(&c) => base = c.checked_sub(WIDTH)?,
            }
        }
        None
    }

    /// The marks whose base is `base` (as stored in the render context).
    pub(crate) fn from_base(base: u32) -> Option<Marks> {
        (0x10_0000..=0x10_FFFD - WIDTH)
            .contains(&base)
            .then_some(Marks { base })
    }

    pub(crate) fn base(self) -> u32 {
        self.base
    }

    fn ch(self, offset: u32) -> char {
        char::from_u32(self.base + offset).expect("invariant: marks are valid code points")
    }

    /// Whether `c` is one of these marks.
    pub(crate) fn contains(self, c: char) -> bool {
        (self.base..self.base + WIDTH).contains(&u32::from(c))
    }

    fn push_mark(self, out: &mut String, kind: u32, id: u32) {
        out.push(self.ch(kind));
        for i in (0..ID_DIGITS).rev() {
            out.push(self.ch(2 + ((id >> (4 * i)) & 0xf)));
        }
    }

    /// `text` wrapped as content number `id`.
    pub(crate) fn wrap(self, id: u32, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 2 * (ID_DIGITS + 1) * 4);
        self.push_mark(&mut out, 0, id);
        out.push_str(text);
        self.push_mark(&mut out, 1, id);
        out
    }

    /// `s` without marks.
    pub(crate) fn strip(self, s: &str) -> String {
        s.chars().filter(|&c| !self.contains(c)).collect()
    }

    /// Splits a marked string into text and marks.
    pub(crate) fn lex(self, s: &str) -> Vec<Piece<'_>> {
        let mut out = Vec::new();
        let mut text_start = 0;
        let mut chars = s.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            if !self.contains(c) {
                continue;
            }
            if text_start < at {
                out.push(Piece::Text(&s[text_start..at]));
            }
            let kind = u32::from(c) - self.base;
            let mut id = 0u32;
            let mut digits = 0;
            while let Some(&(_, d)) = chars.peek() {
                if !self.contains(d) || u32::from(d) - self.base < 2 {
                    break;
                }
                id = (id << 4) | (u32::from(d) - self.base - 2);
                digits += 1;
                chars.next();
            }
            text_start = chars.peek().map_or(s.len(), |&(i, _)| i);
            out.push(match (kind, digits) {
                (0, ID_DIGITS) => Piece::Open(id),
                (1, ID_DIGITS) => Piece::Close(id),
                _ => Piece::Broken,
            });
        }
        if text_start < s.len() {
            out.push(Piece::Text(&s[text_start..]));
        }
        out
    }

    /// Re-balances a piece cut out of a marked string (by `split`): it is re-opened with the
    /// content it starts inside and closed if it ends inside one; pairs around nothing vanish.
    pub(crate) fn rebalance(self, open_at_start: Option<u32>, piece: &str) -> String {
        let mut out = String::with_capacity(piece.len() + 32);
        let mut open = open_at_start;
        if let Some(id) = open {
            self.push_mark(&mut out, 0, id);
        }
        for p in self.lex(piece) {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Open(id) => {
                    open = Some(id);
                    self.push_mark(&mut out, 0, id);
                }
                Piece::Close(id) => {
                    open = None;
                    self.push_mark(&mut out, 1, id);
                }
                Piece::Broken => {}
            }
        }
        if let Some(id) = open {
            self.push_mark(&mut out, 1, id);
        }
        self.drop_empty_pairs(&out)
    }

    /// Which content is open after the marked text `s` (`start`: open before it).
    pub(crate) fn open_after(self, start: Option<u32>, s: &str) -> Option<u32> {
        self.lex(s).into_iter().fold(start, |open, p| match p {
            Piece::Open(id) => Some(id),
            Piece::Close(_) => None,
            _ => open,
        })
    }

    /// Removes `OPEN id CLOSE id` pairs with no text between them, so an empty result of a
    /// string method is the empty string (falsy), as in the unmarked render.
    pub(crate) fn drop_empty_pairs(self, s: &str) -> String {
        let pieces = self.lex(s);
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        while i < pieces.len() {
            if let (Piece::Open(a), Some(Piece::Close(b))) = (pieces[i], pieces.get(i + 1)) {
                if a == *b {
                    i += 2;
                    continue;
                }
            }
            match pieces[i] {
                Piece::Text(t) => out.push_str(t),
                Piece::Open(id) => self.push_mark(&mut out, 0, id),
                Piece::Close(id) => self.push_mark(&mut out, 1, id),
                Piece::Broken => {}
            }
            i += 1;
        }
        out
    }

    /// The segments of `prompt`, given the marked rendering `marked` of the same request.
    pub(crate) fn segment(self, prompt: &str, marked: &str) -> Segments {
        let labelled = self.label(marked);
        let unmarked: String = labelled.iter().map(|(t, _)| t.as_str()).collect();
        if unmarked == prompt {
            let mut out = Segments::default();
            for (text, content) in &labelled {
                out.push(kind(*content), text);
            }
            return out;
        }
        fail_closed(prompt, &unmarked, &labelled)
    }

    /// The marked text as runs of (text, is content). Unpaired or broken marks make the runs
    /// on both sides of them content.
    fn label(self, marked: &str) -> Vec<(String, bool)> {
        let pieces = self.lex(marked);
        let mut runs: Vec<(String, bool)> = Vec::new();
        let mut open: Option<u32> = None;
        let mut taint_next = false;
        for (i, p) in pieces.iter().enumerate() {
            match *p {
                Piece::Text(t) => {
                    runs.push((t.to_owned(), open.is_some() || taint_next));
                    taint_next = false;
                }
                Piece::Open(id) => {
                    let closed = pieces[i + 1..]
                        .iter()
                        .find(|q| !matches!(q, Piece::Text(_)))
                        .is_some_and(|q| *q == Piece::Close(id));
                    if closed {
                        open = Some(id);
                    } else {
                        taint_next = true;
                    }
                }
                Piece::Close(id) if open == Some(id) => open = None,
                Piece::Close(_) | Piece::Broken => {
                    if let Some(last) = runs.last_mut() {
                        last.1 = true;
                    }
                    open = None;
                    taint_next = true;
                }
            }
        }
        runs
    }
}

fn kind(content: bool) -> crate::SegmentKind {
    if content {
        crate::SegmentKind::Content
    } else {
        crate::SegmentKind::Control
    }
}

/// The prompt labelled from a marked rendering that does not reproduce it exactly: the common
/// prefix and suffix keep their labels, the differing middle is content.
fn fail_closed(prompt: &str, unmarked: &str, labelled: &[(String, bool)]) -> Segments {
    let prefix = common_prefix(prompt, unmarked);
    let suffix = common_suffix(&prompt[prefix..], &unmarked[prefix..]);
    let mut labels: Vec<(usize, bool)> = Vec::new(); // (byte length, content) over `unmarked`
    for (t, c) in labelled {
        labels.push((t.len(), *c));
    }
    let mut out = Segments::default();
    push_range(&mut out, prompt, 0, prefix, 0, &labels);
    let mid_end = prompt.len() - suffix;
    out.push_content(&prompt[prefix..mid_end]);
    push_range(
        &mut out,
        prompt,
        mid_end,
        prompt.len(),
        unmarked.len() - suffix,
        &labels,
    );
    out
}

/// Pushes `prompt[from..to]`, labelled like `unmarked[at..]` (which holds the same text).
fn push_range(
    out: &mut Segments,
    prompt: &str,
    from: usize,
    to: usize,
    at: usize,
    labels: &[(usize, bool)],
) {
    let mut pos = 0;
    for &(len, content) in labels {
        let (start, end) = (pos, pos + len);
        pos = end;
        let lo = start.max(at);
        let hi = end.min(at + (to - from));
        if lo >= hi {
            continue;
        }
        let (a, b) = (from + (lo - at), from + (hi - at));
        out.push(kind(content), &prompt[a..b]);
    }
}

fn common_prefix(a: &str, b: &str) -> usize {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    floor_boundary(a, n)
}

fn common_suffix(a: &str, b: &str) -> usize {
    let n = a
        .bytes()
        .rev()
        .zip(b.bytes().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut n = n;
    while n > 0 && !a.is_char_boundary(a.len() - n) {
        n -= 1;
    }
    n
}

fn floor_boundary(s: &str, mut n: usize) -> usize {
    while n > 0 && !s.is_char_boundary(n) {
        n -= 1;
    }
    n
}

/// Numbers content strings: equal strings get the same number, so that a template comparing
/// two content values (a tool call's id with a tool result's `tool_call_id`) sees them equal in
/// the marked render as in the real one.
#[derive(Debug, Default)]
struct Numbering(std::collections::HashMap<String, u32>);

/// Wraps every content string of the messages in marks.
pub(crate) fn mark_messages(marks: Marks, messages: &[Json], source: &str) -> Vec<Json> {
    let mut next = Numbering::default();
    messages
        .iter()
        .map(|m| {
            let mut marked = mark_message(marks, m, &mut next);
            if let Some(role) = marked.get_mut("role") {
                if let Json::String(r) = &*role {
                    if !is_template_role(r, source) {
                        *role = mark_string(marks, &r.clone(), &mut next);
                    }
                }
            }
            marked
        })
        .collect()
}

/// Whether a message's role is the template's own vocabulary: one of the standard roles, or a
/// name the template source quotes (`'ipython'`, `"developer"`). Any other role name came only
/// from the request, so where the template prints it, it is content — marking a role the
/// template compares against would change what it renders.
fn is_template_role(role: &str, source: &str) -> bool {
    matches!(role, "system" | "user" | "assistant" | "tool")
        || source.contains(&format!("'{role}'"))
        || source.contains(&format!("\"{role}\""))
}

fn mark_string(marks: Marks, s: &str, next: &mut Numbering) -> Json {
    if s.is_empty() {
        return Json::String(String::new());
    }
    let n = u32::try_from(next.0.len()).unwrap_or(u32::MAX);
    let id = *next.0.entry(s.to_owned()).or_insert(n);
    Json::String(marks.wrap(id, s))
}

fn mark_message(marks: Marks, m: &Json, next: &mut Numbering) -> Json {
    let Json::Object(obj) = m else {
        return m.clone();
    };
    let mut out = obj.clone();
    for (key, value) in &mut out {
        match (key.as_str(), &*value) {
            (
                "content" | "reasoning_content" | "reasoning" | "thinking" | "name"
                | "tool_call_id",
                Json::String(s),
            ) => *value = mark_string(marks, s, next),
            ("content", Json::Array(parts)) => {
                *value = Json::Array(parts.iter().map(|p| mark_part(marks, p, next)).collect());
            }
            ("tool_calls", Json::Array(calls)) => {
                *value = Json::Array(calls.iter().map(|c| mark_call(marks, c, next)).collect());
            }
            _ => {}
        }
    }
    Json::Object(out)
}

fn mark_part(marks: Marks, part: &Json, next: &mut Numbering) -> Json {
    match part {
        Json::String(s) => mark_string(marks, s, next),
        Json::Object(obj) => {
            let mut out = obj.clone();
            for (key, value) in &mut out {
                if let ("text" | "content", Json::String(s)) = (key.as_str(), &*value) {
                    *value = mark_string(marks, s, next);
                }
            }
            Json::Object(out)
        }
        other => other.clone(),
    }
}

fn mark_call(marks: Marks, call: &Json, next: &mut Numbering) -> Json {
    let Json::Object(obj) = call else {
        return call.clone();
    };
    let mut out = obj.clone();
    for (key, value) in &mut out {
        match key.as_str() {
            "function" => *value = mark_call(marks, value, next),
            "id" | "name" => {
                if let Json::String(s) = &*value {
                    *value = mark_string(marks, s, next);
                }
            }
            "arguments" | "parameters" => *value = mark_tree(marks, value, next),
            _ => {}
        }
    }
    Json::Object(out)
}

/// Marks every string leaf and every key of a JSON tree (tool-call arguments).
fn mark_tree(marks: Marks, v: &Json, next: &mut Numbering) -> Json {
    match v {
        Json::String(s) => mark_string(marks, s, next),
        Json::Array(items) => {
            Json::Array(items.iter().map(|i| mark_tree(marks, i, next)).collect())
        }
        Json::Object(obj) => Json::Object(
            obj.iter()
                .map(|(k, v)| {
                    let key = match mark_string(marks, k, next) {
                        Json::String(s) => s,
                        _ => k.clone(),
                    };
                    (key, mark_tree(marks, v, next))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every string (values and keys) in a JSON value, for choosing marks.
pub(crate) fn strings_of(v: &Json, out: &mut Vec<String>) {
    match v {
        Json::String(s) => out.push(s.clone()),
        Json::Array(items) => items.iter().for_each(|i| strings_of(i, out)),
        Json::Object(obj) => {
            for (k, v) in obj {
                out.push(k.clone());
                strings_of(v, out);
            }
        }
        _ => {}
    }
}

/// The marks of the render `state` belongs to, if it is a tracked render.
pub(crate) fn marks_of(state: &minijinja::State<'_, '_>) -> Option<Marks> {
    let base = state.lookup(crate::jinja::MARKS_VAR)?;
    Marks::from_base(u32::try_from(base.as_i64()?).ok()?)
}

/// Whether a value is a string holding marks.
pub(crate) fn is_marked(marks: Marks, value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.chars().any(|c| marks.contains(c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentKind;

    fn marks() -> Marks {
        Marks::choose(["plain"]).unwrap()
    }

    #[test]
    fn only_role_names_foreign_to_the_template_are_marked() {
        let m = marks();
        let source = "{% if m.role == 'ipython' %}";
        let messages = [
            serde_json::json!({"role": "user", "content": "a"}),
            serde_json::json!({"role": "ipython", "content": "b"}),
            serde_json::json!({"role": "oracle<|im_end|>", "content": "c"}),
        ];
        let marked = mark_messages(m, &messages, source);
        assert_eq!(marked[0]["role"], "user");
        assert_eq!(marked[1]["role"], "ipython");
        let role = marked[2]["role"].as_str().unwrap();
        assert_ne!(role, "oracle<|im_end|>");
        assert_eq!(m.strip(role), "oracle<|im_end|>");
    }

    #[test]
    fn marks_avoid_characters_of_the_input() {
        let top = char::from_u32(0x10_FFFD - 5).unwrap().to_string();
        let m = Marks::choose([top.as_str()]).unwrap();
        assert!(!m.contains(top.chars().next().unwrap()));
    }

    #[test]
    fn wrapped_text_lexes_back() {
        let m = marks();
        let s = format!("a{}b", m.wrap(7, "x<y"));
        assert_eq!(
            m.lex(&s),
            vec![
                Piece::Text("a"),
                Piece::Open(7),
                Piece::Text("x<y"),
                Piece::Close(7),
                Piece::Text("b")
            ]
        );
        assert_eq!(m.strip(&s), "ax<yb");
    }

    #[test]
    fn segments_follow_the_marks() {
        let m = marks();
        let marked = format!("<s>{}</s>", m.wrap(1, "<s>"));
        let segs = m.segment("<s><s></s>", &marked);
        let kinds: Vec<_> = segs.as_slice().iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [
                SegmentKind::Control,
                SegmentKind::Content,
                SegmentKind::Control
            ]
        );
        assert_eq!(segs.as_slice()[1].text, "<s>");
    }

    #[test]
    fn a_sliced_mark_taints_its_neighbours() {
        let m = marks();
        let wrapped = m.wrap(1, "hello");
        // The template cut the closing mark off ("content[:-3]").
        let cut: String = wrapped.chars().take(wrapped.chars().count() - 3).collect();
        let marked = format!("<a>{cut}<b>");
        let segs = m.segment("<a>hello<b>", &marked);
        assert_eq!(segs.text(), "<a>hello<b>");
        assert!(segs
            .as_slice()
            .iter()
            .any(|s| s.kind == SegmentKind::Content && s.text.contains("hello")));
    }

    #[test]
    fn a_diverging_render_fails_closed() {
        let m = marks();
        let marked = format!("<a>{}<b>", m.wrap(1, "x"));
        let segs = m.segment("<a>yy<b>", &marked);
        assert_eq!(segs.text(), "<a>yy<b>");
        assert_eq!(segs.as_slice()[1].kind, SegmentKind::Content);
        assert_eq!(segs.as_slice()[1].text, "yy");
    }

    #[test]
    fn split_pieces_are_rebalanced() {
        let m = marks();
        let s = m.wrap(3, "<think>r</think>answer");
        let pieces: Vec<&str> = s.split("</think>").collect();
        let second = m.rebalance(m.open_after(None, pieces[0]), pieces[1]);
        assert_eq!(second, m.wrap(3, "answer"));
        let first = m.rebalance(None, pieces[0]);
        assert_eq!(first, m.wrap(3, "<think>r"));
    }
}
