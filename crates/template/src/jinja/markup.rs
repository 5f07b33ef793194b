//! jinja2's `Markup` arithmetic, which minijinja does not have.
//!
//! In jinja2 (and so in transformers, whose renderings are the reference), `|safe` makes a
//! `Markup` string, and `Markup + x` escapes `x` (`"` → `&#34;`, `'` → `&#39;`, `&`, `<`, `>`)
//! even with autoescaping off; the result is `Markup` again. `x + Markup` is a plain
//! concatenation (`str.__add__` accepts any string). Some real templates depend on it, e.g.
//! Functionary v3.1 writes `"Use the function '"|safe + name + "' to '"|safe + description`.
//!
//! minijinja's `+` drops the "safe" mark, so templates that can make `Markup` (they use
//! `safe` or `escape`) get every binary `+` in their tags rewritten as a call to
//! [`ADD_FN`], which implements jinja2's rules. Other templates are left as they are.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// The function every binary `+` becomes.
pub(crate) const ADD_FN: &str = "__wick_add";

/// Words that end an operand of `+` (lower precedence than `+`, or statement syntax).
const BOUNDARY_WORDS: &[&str] = &[
    "and",
    "or",
    "not",
    "if",
    "else",
    "in",
    "recursive",
    "for",
    "set",
    "with",
    "without",
    "context",
    "import",
    "from",
    "as",
];

/// Operators that end an operand of `+`.
const BOUNDARY_OPS: &[&str] = &[",", ":", "=", "==", "!=", "<", ">", "<=", ">="];

/// Rewrites the binary `+` of every tag when the template can make `Markup`.
pub(crate) fn rewrite(source: &str) -> String {
    if !(source.contains("safe") || source.contains("escape")) {
        return source.to_owned();
    }
    let mut out = String::with_capacity(source.len() + 64);
    let mut rest = source;
    while let Some(at) = rest.find('{') {
        let (open, close) = match rest.as_bytes().get(at + 1) {
            Some(b'{') => ("{{", "}}"),
            Some(b'%') => ("{%", "%}"),
            Some(b'#') => {
                // Comments are copied as they are.
                let end = rest[at..].find("#}").map_or(rest.len(), |e| at + e + 2);
                out.push_str(&rest[..end]);
                rest = &rest[end..];
                continue;
            }
            _ => {
                out.push_str(&rest[..=at]);
                rest = &rest[at + 1..];
                continue;
            }
        };
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag_end(tag, close) else {
            out.push_str(tag);
            return out;
        };
        let body = &tag[2..end];
        if open == "{%" && is_raw(body) {
            // `{% raw %}` … `{% endraw %}` is copied as it is.
            let stop = tag
                .find("endraw")
                .and_then(|e| tag[e..].find("%}").map(|c| e + c + 2));
            let stop = stop.unwrap_or(tag.len());
            out.push_str(&tag[..stop]);
            rest = &tag[stop..];
            continue;
        }
        let lead = body.len() - body.trim_start_matches(['-', '+']).len();
        // Counted after `lead`, which may already hold every character (`{{-}}`).
        let trail = body[lead..].len() - body[lead..].trim_end_matches(['-', '+']).len();
        let inner = &body[lead..body.len() - trail];
        out.push_str(open);
        out.push_str(&body[..lead]);
        out.push_str(&expr(&tokens(inner)));
        out.push_str(&body[body.len() - trail..]);
        out.push_str(close);
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

fn is_raw(body: &str) -> bool {
    body.trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace()) == "raw"
}

/// Where `close` ends the tag that `tag` opens, outside string literals.
fn tag_end(tag: &str, close: &str) -> Option<usize> {
    let bytes = tag.as_bytes();
    let mut i = 2;
    while i + 1 < bytes.len() {
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            _ if bytes[i..].starts_with(close.as_bytes()) => return Some(i),
            _ => i += 1,
        }
    }
    None
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Space(&'a str),
    Word(&'a str),
    Literal(&'a str),
    Op(&'a str),
    Group(char, Vec<Tok<'a>>, char),
}

/// The tokens of a tag's inside; brackets become nested groups.
fn tokens(s: &str) -> Vec<Tok<'_>> {
    let mut pos = 0;
    let mut out = group(s, &mut pos);
    // Unbalanced closers end a group early: keep what is left as it is.
    while pos < s.len() {
        out.push(Tok::Literal(&s[pos..=pos]));
        pos += 1;
        out.extend(group(s, &mut pos));
    }
    out
}

fn group<'a>(s: &'a str, pos: &mut usize) -> Vec<Tok<'a>> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    while *pos < bytes.len() {
        let start = *pos;
        let c = bytes[start];
        match c {
            // The group's own closer, or an unbalanced one: the caller decides.
            b')' | b']' | b'}' => return out,
            b'(' | b'[' | b'{' => {
                let want = match c {
                    b'(' => b')',
                    b'[' => b']',
                    _ => b'}',
                };
                *pos += 1;
                let inner = group(s, pos);
                let closed = bytes.get(*pos) == Some(&want);
                if closed {
                    *pos += 1;
                }
                out.push(Tok::Group(
                    char::from(c),
                    inner,
                    if closed { char::from(want) } else { '\0' },
                ));
            }
            b'"' | b'\'' => {
                *pos += 1;
                while *pos < bytes.len() && bytes[*pos] != c {
                    *pos += if bytes[*pos] == b'\\' { 2 } else { 1 };
                }
                *pos = (*pos + 1).min(bytes.len());
                // An escape may have stepped into a multi-byte character.
                while !s.is_char_boundary(*pos) {
                    *pos += 1;
                }
                out.push(Tok::Literal(&s[start..*pos]));
            }
            c if c.is_ascii_whitespace() => {
                while *pos < bytes.len() && bytes[*pos].is_ascii_whitespace() {
                    *pos += 1;
                }
                out.push(Tok::Space(&s[start..*pos]));
            }
            c if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 => {
                while *pos < bytes.len()
                    && (bytes[*pos].is_ascii_alphanumeric()
                        || bytes[*pos] == b'_'
                        || bytes[*pos] >= 0x80)
                {
                    *pos += 1;
                }
                let text = &s[start..*pos];
                if c.is_ascii_digit() {
                    out.push(Tok::Literal(text));
                } else {
                    out.push(Tok::Word(text));
                }
            }
            _ => {
                let two = s.get(start..start + 2).unwrap_or("");
                let len = if ["**", "//", "==", "!=", "<=", ">="].contains(&two) {
                    2
                } else {
                    1
                };
                *pos += len;
                out.push(Tok::Op(&s[start..*pos]));
            }
        }
    }
    out
}

/// Writes `toks` back, with every binary `+` as an [`ADD_FN`] call.
fn expr(toks: &[Tok<'_>]) -> String {
    let mut out = String::new();
    let mut region: Vec<&Tok<'_>> = Vec::new();
    let mut after_is = false;
    for t in toks {
        let boundary = match t {
            Tok::Word(w) if *w == "is" => {
                after_is = true;
                false
            }
            Tok::Word(w) if after_is && *w == "not" => false,
            Tok::Word(w) => {
                after_is = false;
                BOUNDARY_WORDS.contains(w)
            }
            Tok::Op(o) => {
                after_is = false;
                BOUNDARY_OPS.contains(o)
            }
            Tok::Space(_) => false,
            _ => {
                after_is = false;
                false
            }
        };
        if boundary {
            out.push_str(&sum(&region));
            region.clear();
            out.push_str(&text(t));
        } else {
            region.push(t);
        }
    }
    out.push_str(&sum(&region));
    out
}

/// A run of tokens without a boundary: terms joined by binary `+` and `-`.
fn sum(region: &[&Tok<'_>]) -> String {
    let mut terms: Vec<String> = vec![String::new()];
    let mut ops: Vec<&str> = Vec::new();
    let mut operand = false;
    for t in region {
        match t {
            Tok::Op(o @ ("+" | "-")) if operand => {
                ops.push(o);
                terms.push(String::new());
                operand = false;
            }
            Tok::Space(_) => terms.last_mut().expect("one term").push_str(&text(t)),
            Tok::Op(_) => {
                terms.last_mut().expect("one term").push_str(&text(t));
                operand = false;
            }
            _ => {
                terms.last_mut().expect("one term").push_str(&text(t));
                operand = true;
            }
        }
    }
    if !ops.contains(&"+") {
        return terms.join_with(&ops);
    }
    let first = &terms[0];
    let lead = &first[..first.len() - first.trim_start().len()];
    let last = terms.last().expect("one term");
    let trail = &last[last.trim_end().len()..];
    let mut acc = first.trim().to_owned();
    for (op, term) in ops.iter().zip(&terms[1..]) {
        acc = if *op == "+" {
            format!("{ADD_FN}({acc}, {})", term.trim())
        } else {
            format!("({acc} - {})", term.trim())
        };
    }
    format!("{lead}{acc}{trail}")
}

/// A token as text, nested groups rewritten.
fn text(t: &Tok<'_>) -> String {
    match t {
        Tok::Space(s) | Tok::Word(s) | Tok::Literal(s) | Tok::Op(s) => (*s).to_owned(),
        Tok::Group(open, inner, close) => {
            let mut s = String::new();
            s.push(*open);
            s.push_str(&expr(inner));
            if *close != '\0' {
                s.push(*close);
            }
            s
        }
    }
}

trait JoinWith {
    fn join_with(&self, ops: &[&str]) -> String;
}

impl JoinWith for Vec<String> {
    /// The terms joined back with their operators.
    fn join_with(&self, ops: &[&str]) -> String {
        let mut out = self[0].clone();
        for (op, term) in ops.iter().zip(&self[1..]) {
            out.push_str(op);
            out.push_str(term);
        }
        out
    }
}

/// markupsafe's `escape`.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `a + b` by jinja2's rules: `Markup + str` escapes the string and stays `Markup`; otherwise
/// numbers add, strings and lists concatenate.
// minijinja passes function arguments by value.
#[allow(clippy::needless_pass_by_value)]
pub(crate) fn add(a: Value, b: Value) -> Result<Value, Error> {
    let unsupported = || {
        Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "unsupported operand types for +: {} and {}",
                a.kind(),
                b.kind()
            ),
        )
    };
    match (a.kind(), b.kind()) {
        (ValueKind::String, ValueKind::String) => {
            let (x, y) = (a.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
            Ok(if a.is_safe() {
                let y = if b.is_safe() { y.to_owned() } else { escape(y) };
                Value::from_safe_string(format!("{x}{y}"))
            } else {
                Value::from(format!("{x}{y}"))
            })
        }
        (ValueKind::Number, ValueKind::Number) => {
            if a.is_integer() && b.is_integer() {
                let (x, y) = (i64::try_from(a.clone()), i64::try_from(b.clone()));
                if let (Ok(x), Ok(y)) = (x, y) {
                    return x.checked_add(y).map(Value::from).ok_or_else(unsupported);
                }
            }
            let (x, y) = (f64::try_from(a.clone()), f64::try_from(b.clone()));
            match (x, y) {
                (Ok(x), Ok(y)) => Ok(Value::from(x + y)),
                _ => Err(unsupported()),
            }
        }
        (ValueKind::Seq, ValueKind::Seq) => {
            let items: Vec<Value> = a.try_iter()?.chain(b.try_iter()?).collect();
            Ok(Value::from(items))
        }
        _ => Err(unsupported()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binary_plus_becomes_a_call_and_nothing_else_changes() {
        let cases = [
            ("{{ a + b }}", "{{ __wick_add(a, b) }}"),
            (
                "{{- a + b + c -}}",
                "{{- __wick_add(__wick_add(a, b), c) -}}",
            ),
            ("{{ a - b + c }}", "{{ __wick_add((a - b), c) }}"),
            (
                "{{ \"'\"|safe + t[\"name\"] + \"' x\"|safe }}",
                "{{ __wick_add(__wick_add(\"'\"|safe, t[\"name\"]), \"' x\"|safe) }}",
            ),
            ("{% set s = 'x' + y %}", "{% set s = __wick_add('x', y) %}"),
            ("{{ f(a + b, c) }}", "{{ f(__wick_add(a, b), c) }}"),
            ("{{ d['k' + n] }}", "{{ d[__wick_add('k', n)] }}"),
            (
                "{{ x if a + 1 > 2 else y }}",
                "{{ x if __wick_add(a, 1) > 2 else y }}",
            ),
            ("{{ a + -1 }}", "{{ __wick_add(a, -1) }}"),
            ("{{ 'a+b' ~ c }}", "{{ 'a+b' ~ c }}"),
            ("{{ -a }}{# a + b #}", "{{ -a }}{# a + b #}"),
            (
                "{% raw %}{{ a + b }}{% endraw %}",
                "{% raw %}{{ a + b }}{% endraw %}",
            ),
            (
                "{{ a * 2 + b|length }}",
                "{{ __wick_add(a * 2, b|length) }}",
            ),
            (
                "{{ x is not none + 1 }}",
                "{{ __wick_add(x is not none, 1) }}",
            ),
            ("{{ '}}' + a }}", "{{ __wick_add('}}', a) }}"),
        ];
        for (src, want) in cases {
            let src = format!("{{{{ ''|safe }}}}{src}");
            let want = format!("{{{{ ''|safe }}}}{want}");
            assert_eq!(rewrite(&src), want, "{src}");
        }
        // Templates that cannot make Markup are left alone.
        assert_eq!(rewrite("{{ a + b }}"), "{{ a + b }}");
    }

    #[test]
    fn broken_tags_are_copied_not_a_panic() {
        for src in [
            "{{ a + (b }}",
            "{{ a + ]] }}",
            "{% safe",
            "{{ ')' + }}",
            "safe {{ + }}",
            "{{",
            // Found by the jinja_render fuzz target: multi-byte characters in and after tags.
            "safe {{ '\\｜' + a }}",
            "safe {{ \"\\é\" }}",
            "safe {% x ｜%}",
            "safe {{ a ｜}}",
            "safe {{-}}",
            "safe {%+%}",
        ] {
            let _ = rewrite(src);
        }
    }
}
