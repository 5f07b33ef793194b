//! The stub's grammars: one rule of literal alternatives, `root ::= "yes" | "no"`, from GBNF or
//! from a JSON schema `{"enum": ["yes", "no"]}` (whose alternatives are the JSON strings).

use std::fmt::Write;

use wick_types::{Grammar, TokenId};

use super::vocab::{Kind, Vocab};
use crate::{BackendError, Result};

/// What the stub can parse, for error messages.
const GBNF_FORM: &str =
    r#"the stub backend only supports one rule of literal alternatives: root ::= "a" | "b""#;
const SCHEMA_FORM: &str = r#"the stub backend has no JSON-schema support beyond {"enum": ["a", "b"]} (string values only)"#;

/// A grammar of literal alternatives and the text generated under it so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LiteralGrammar {
    alternatives: Vec<Vec<u8>>,
    /// The bytes generated since the grammar was set (or the sampler cleared).
    text: Vec<u8>,
}

impl LiteralGrammar {
    /// Parses a grammar.
    ///
    /// # Errors
    ///
    /// [`BackendError::Grammar`] for anything but literal alternatives.
    pub(super) fn parse(grammar: &Grammar) -> Result<Self> {
        let alternatives = match grammar {
            Grammar::Gbnf(src) => parse_gbnf(src)?,
            Grammar::JsonSchema(schema) => parse_enum_schema(schema)?,
            _ => return Err(error(format!("unknown grammar kind; {GBNF_FORM}"))),
        };
        Ok(LiteralGrammar {
            alternatives,
            text: Vec::new(),
        })
    }

    /// The literal alternatives.
    #[cfg(test)]
    pub(super) fn alternatives(&self) -> &[Vec<u8>] {
        &self.alternatives
    }

    /// Forgets the generated text: the grammar starts over.
    pub(super) fn reset(&mut self) {
        self.text.clear();
    }

    /// Whether appending `bytes` keeps the generated text a prefix of some alternative.
    fn allows(&self, bytes: &[u8]) -> bool {
        self.alternatives.iter().any(|alt| {
            alt.len() >= self.text.len() + bytes.len()
                && alt.starts_with(&self.text)
                && alt[self.text.len()..].starts_with(bytes)
        })
    }

    /// Whether the generated text is a whole alternative, so generation may end.
    fn complete(&self) -> bool {
        self.alternatives.contains(&self.text)
    }

    /// Bans (sets to `-inf`) the logit of every token the grammar does not allow next: control
    /// tokens always, EOG tokens unless the text is complete, other tokens unless they keep the
    /// text a prefix of an alternative.
    pub(super) fn mask(&self, vocab: &Vocab, logits: &mut [f64]) {
        let complete = self.complete();
        for (id, logit) in (0..vocab.n_vocab()).zip(logits.iter_mut()) {
            let allowed = match vocab.kind(id) {
                Kind::Eog => complete,
                Kind::Control => false,
                Kind::TextByte | Kind::RareByte | Kind::Piece => vocab
                    .token_bytes(TokenId(id))
                    .is_some_and(|bytes| self.allows(bytes)),
            };
            if !allowed {
                *logit = f64::NEG_INFINITY;
            }
        }
    }

    /// Records a sampled token: its bytes extend the text (control tokens add nothing).
    pub(super) fn accept(&mut self, vocab: &Vocab, token: TokenId) {
        if !Vocab::is_control(token) {
            if let Some(bytes) = vocab.token_bytes(token) {
                self.text.extend_from_slice(bytes);
            }
        }
    }
}

fn error(reason: String) -> BackendError {
    BackendError::Grammar { reason }
}

/// A cursor over grammar or schema text.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl Cursor<'_> {
    fn skip_ws(&mut self, comments: bool) {
        loop {
            match self.rest.first() {
                Some(b' ' | b'\t' | b'\r' | b'\n') => self.rest = &self.rest[1..],
                Some(b'#') if comments => {
                    let end = self.rest.iter().position(|&b| b == b'\n');
                    self.rest = end.map_or(&[], |i| &self.rest[i..]);
                }
                _ => return,
            }
        }
    }

    fn eat(&mut self, token: &[u8]) -> bool {
        let found = self.rest.starts_with(token);
        if found {
            self.rest = &self.rest[token.len()..];
        }
        found
    }

    fn next(&mut self) -> Option<u8> {
        let (&b, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(b)
    }

    /// What is next, for error messages.
    fn near(&self) -> String {
        let shown = String::from_utf8_lossy(&self.rest[..self.rest.len().min(20)]).into_owned();
        if shown.is_empty() {
            "the end of the text".to_owned()
        } else {
            format!("`{shown}`")
        }
    }
}

/// Parses `root ::= "a" | "b" | ...` into the alternatives' bytes.
fn parse_gbnf(src: &str) -> Result<Vec<Vec<u8>>> {
    let mut c = Cursor {
        rest: src.as_bytes(),
    };
    c.skip_ws(true);
    if !c.eat(b"root") {
        return Err(error(format!("missing `root ::=`; {GBNF_FORM}")));
    }
    c.skip_ws(true);
    if !c.eat(b"::=") {
        return Err(error(format!("missing `::=` after `root`; {GBNF_FORM}")));
    }
    let mut alternatives = Vec::new();
    loop {
        c.skip_ws(true);
        if !c.eat(b"\"") {
            return Err(error(format!(
                "expected a string literal, found {}; {GBNF_FORM}",
                c.near()
            )));
        }
        alternatives.push(gbnf_literal(&mut c)?);
        c.skip_ws(true);
        if c.rest.is_empty() {
            return Ok(alternatives);
        }
        if !c.eat(b"|") {
            return Err(error(format!(
                "unsupported syntax at {} (other rules or operators); {GBNF_FORM}",
                c.near()
            )));
        }
    }
}

/// The bytes of a GBNF string literal whose opening quote was just read.
fn gbnf_literal(c: &mut Cursor<'_>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        match c.next() {
            None => return Err(error(format!("unterminated string literal; {GBNF_FORM}"))),
            Some(b'"') => return Ok(out),
            Some(b'\\') => out.push(match c.next() {
                Some(b'"') => b'"',
                Some(b'\\') => b'\\',
                Some(b'n') => b'\n',
                Some(b't') => b'\t',
                Some(b'r') => b'\r',
                Some(other) => {
                    return Err(error(format!(
                        "unsupported escape `\\{}`; {GBNF_FORM}",
                        char::from(other)
                    )))
                }
                None => return Err(error(format!("unterminated string literal; {GBNF_FORM}"))),
            }),
            Some(b) => out.push(b),
        }
    }
}

/// Parses `{"enum": [...]}` (optionally with `"type": "string"`) into the JSON encodings of the
/// enum's strings.
fn parse_enum_schema(schema: &str) -> Result<Vec<Vec<u8>>> {
    let unsupported = || error(SCHEMA_FORM.to_owned());
    let mut c = Cursor {
        rest: schema.as_bytes(),
    };
    c.skip_ws(false);
    if !c.eat(b"{") {
        return Err(unsupported());
    }
    let mut values = None;
    loop {
        c.skip_ws(false);
        if !c.eat(b"\"") {
            return Err(unsupported());
        }
        let key = json_string(&mut c)?;
        c.skip_ws(false);
        if !c.eat(b":") {
            return Err(unsupported());
        }
        c.skip_ws(false);
        match key.as_str() {
            "enum" if values.is_none() => values = Some(json_string_array(&mut c)?),
            "type" if c.eat(b"\"") && json_string(&mut c)? == "string" => {}
            _ => return Err(unsupported()),
        }
        c.skip_ws(false);
        if c.eat(b"}") {
            break;
        }
        if !c.eat(b",") {
            return Err(unsupported());
        }
    }
    c.skip_ws(false);
    match values {
        Some(values) if c.rest.is_empty() && !values.is_empty() => {
            Ok(values.iter().map(|v| json_encode(v).into_bytes()).collect())
        }
        _ => Err(unsupported()),
    }
}

/// `[ "a", "b" ]`, at the opening bracket.
fn json_string_array(c: &mut Cursor<'_>) -> Result<Vec<String>> {
    let unsupported = || error(SCHEMA_FORM.to_owned());
    if !c.eat(b"[") {
        return Err(unsupported());
    }
    let mut out = Vec::new();
    c.skip_ws(false);
    if c.eat(b"]") {
        return Ok(out);
    }
    loop {
        c.skip_ws(false);
        if !c.eat(b"\"") {
            return Err(unsupported());
        }
        out.push(json_string(c)?);
        c.skip_ws(false);
        if c.eat(b"]") {
            return Ok(out);
        }
        if !c.eat(b",") {
            return Err(unsupported());
        }
    }
}

/// A JSON string whose opening quote was just read.
fn json_string(c: &mut Cursor<'_>) -> Result<String> {
    let bad = |what: &str| error(format!("invalid JSON schema: {what}"));
    let mut out = Vec::new();
    loop {
        match c.next() {
            None => return Err(bad("unterminated string")),
            Some(b'"') => break,
            Some(b'\\') => {
                let ch = match c.next() {
                    Some(b'"') => '"',
                    Some(b'\\') => '\\',
                    Some(b'/') => '/',
                    Some(b'b') => '\u{8}',
                    Some(b'f') => '\u{c}',
                    Some(b'n') => '\n',
                    Some(b'r') => '\r',
                    Some(b't') => '\t',
                    Some(b'u') => json_unicode_escape(c).ok_or_else(|| bad("bad \\u escape"))?,
                    _ => return Err(bad("bad escape")),
                };
                out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes());
            }
            Some(b) if b < 0x20 => return Err(bad("control character in a string")),
            Some(b) => out.push(b),
        }
    }
    // Bytes between ASCII delimiters of a `&str` are whole UTF-8 characters.
    String::from_utf8(out).map_err(|_| bad("invalid UTF-8"))
}

/// The character of a `\uXXXX` escape (with its low surrogate when it is a high one).
fn json_unicode_escape(c: &mut Cursor<'_>) -> Option<char> {
    fn hex4(c: &mut Cursor<'_>) -> Option<u32> {
        let digits = c.rest.get(..4)?;
        let n = u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        c.rest = &c.rest[4..];
        Some(n)
    }
    let hi = hex4(c)?;
    if (0xD800..0xDC00).contains(&hi) {
        if !c.eat(b"\\u") {
            return None;
        }
        let lo = hex4(c)?;
        if !(0xDC00..0xE000).contains(&lo) {
            return None;
        }
        return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
    }
    char::from_u32(hi)
}

/// `s` as a JSON string, escaped the way `serde_json` writes it.
fn json_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gbnf(src: &str) -> Result<LiteralGrammar> {
        LiteralGrammar::parse(&Grammar::Gbnf(src.to_owned()))
    }

    fn schema(src: &str) -> Result<LiteralGrammar> {
        LiteralGrammar::parse(&Grammar::JsonSchema(src.to_owned()))
    }

    fn reason(err: BackendError) -> String {
        match err {
            BackendError::Grammar { reason } => reason,
            other => panic!("expected a grammar error, got {other:?}"),
        }
    }

    #[test]
    fn parses_literal_alternatives_with_escapes() {
        let g = gbnf(
            "# a comment\nroot ::= \"yes\" | \"no\"\n  | \"say \\\"hi\\\"\\n\" | \"a\\\\b\" | \"\"",
        )
        .unwrap();
        let alts: Vec<&[u8]> = g.alternatives().iter().map(Vec::as_slice).collect();
        assert_eq!(alts, [&b"yes"[..], b"no", b"say \"hi\"\n", b"a\\b", b""]);
        let g = gbnf("root::=\"日本\"").unwrap();
        assert_eq!(g.alternatives(), ["日本".as_bytes()]);
    }

    #[test]
    fn rejects_everything_else_with_a_reason() {
        for (src, expect) in [
            ("", "missing `root ::=`"),
            ("start ::= \"a\"", "missing `root ::=`"),
            ("root = \"a\"", "missing `::=`"),
            ("root ::= \"abc", "unterminated"),
            ("root ::= \"a\\", "unterminated"),
            ("root ::= \"a\" \"b\"", "unsupported syntax"),
            ("root ::= \"a\"\nother ::= \"b\"", "unsupported syntax"),
            ("root ::= [a-z]+", "expected a string literal"),
            ("root ::= \"a\"*", "unsupported syntax"),
            ("root ::= \"a\" |", "expected a string literal"),
            ("root ::= \"\\x41\"", "unsupported escape"),
        ] {
            let reason = reason(gbnf(src).unwrap_err());
            assert!(reason.contains(expect), "{src:?}: {reason}");
            assert!(reason.contains("literal alternatives"), "{src:?}: {reason}");
        }
    }

    #[test]
    fn enum_schemas_become_json_literals_and_other_schemas_are_rejected() {
        let g = schema(
            r#" { "type": "string", "enum" : ["red", "say \"hi\"", "\u00e9\ud83e\udd80\n"] } "#,
        )
        .unwrap();
        let alts: Vec<String> = g
            .alternatives()
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        assert_eq!(alts, [r#""red""#, r#""say \"hi\"""#, "\"é🦀\\n\""]);

        for bad in [
            r#"{"type": "object"}"#,
            r#"{"enum": []}"#,
            r#"{"enum": [1, 2]}"#,
            r#"{"enum": ["a"], "minLength": 1}"#,
            r#"{"enum": ["a"]} trailing"#,
            r#"{"enum": ["a"], "enum": ["b"]}"#,
            r#"{"type": "number", "enum": ["a"]}"#,
            r#"{"enum": ["\ud800"]}"#,
            r#"{"enum": ["unterminated]}"#,
            "not json",
        ] {
            let reason = reason(schema(bad).unwrap_err());
            assert!(
                reason.contains("JSON-schema support") || reason.contains("invalid JSON schema"),
                "{bad}: {reason}"
            );
        }
    }

    #[test]
    fn mask_allows_only_prefix_extensions_then_eog() {
        let vocab = Vocab::new();
        let mut g = gbnf(r#"root ::= "Hello" | "He""#).unwrap();
        let allowed = |g: &LiteralGrammar| {
            let mut logits = vec![0.0; vocab.n_vocab() as usize];
            g.mask(&vocab, &mut logits);
            (0..vocab.n_vocab())
                .filter(|&i| logits[i as usize] == 0.0)
                .map(TokenId)
                .collect::<Vec<_>>()
        };
        let first = allowed(&g);
        let hello = vocab.tokenize("Hello", false);
        assert_eq!(hello.len(), 1);
        assert!(first.contains(&hello[0]));
        assert!(first.contains(&TokenId(7 + u32::from(b'H'))));
        assert!(first.iter().all(|t| !Vocab::is_control(*t)));

        g.accept(&vocab, TokenId(7 + u32::from(b'H')));
        g.accept(&vocab, TokenId(7 + u32::from(b'e')));
        let mid = allowed(&g);
        assert!(
            mid.contains(&TokenId(0)) && mid.contains(&TokenId(2)),
            "`He` is complete"
        );
        assert!(mid.contains(&TokenId(7 + u32::from(b'l'))));
        assert!(
            !mid.contains(&TokenId(1)),
            "non-EOG control tokens stay banned"
        );

        g.accept(&vocab, TokenId(7 + u32::from(b'l')));
        g.accept(&vocab, TokenId(7 + u32::from(b'l')));
        g.accept(&vocab, TokenId(7 + u32::from(b'o')));
        assert_eq!(allowed(&g), [TokenId(0), TokenId(2)], "only EOG is left");
        g.accept(&vocab, TokenId(0));
        assert_eq!(allowed(&g), [TokenId(0), TokenId(2)], "EOG adds no text");

        g.reset();
        assert_eq!(allowed(&g), first);
    }
}
