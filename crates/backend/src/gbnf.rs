//! A checker for GBNF, llama.cpp's grammar syntax, that says what is wrong and where.
//!
//! llama.cpp's own parser answers a bad grammar with a null pointer and prints the whole
//! grammar to stderr, so the caller learns nothing and a user's grammar lands in the server
//! log. [`check_gbnf`] follows the same syntax (rules `name ::= alternatives`, literals,
//! character classes, `<token>`s, groups, `.`, `*` `+` `?` `{m,n}`, `#` comments) and the same
//! semantic checks (every referenced rule defined, a `root` rule, repetition limits, no left
//! recursion), and reports the first problem with its line and column.

use std::collections::{BTreeMap, BTreeSet};

/// llama.cpp's limit on repetition counts (`MAX_REPETITION_THRESHOLD`).
const MAX_REPETITIONS: u64 = 2000;

/// What is wrong with a grammar, and where (1-based line and column, in characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct GbnfError {
    /// The line of the problem.
    pub line: usize,
    /// The column of the problem.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// Checks `text` as a GBNF grammar whose start rule is `root`.
///
/// # Errors
///
/// The first [`GbnfError`] found.
///
/// ```
/// use wick_backend::check_gbnf;
///
/// assert!(check_gbnf("root ::= \"yes\" | \"no\"").is_ok());
/// let e = check_gbnf("root ::= answer").unwrap_err();
/// assert_eq!(e.to_string(), "line 1, column 10: the rule `answer` is used but never defined");
/// ```
pub fn check_gbnf(text: &str) -> Result<(), GbnfError> {
    let mut parser = Parser {
        text,
        pos: 0,
        rules: BTreeMap::new(),
        refs: Vec::new(),
    };
    parser.rules_all()?;
    for (name, at) in &parser.refs {
        if !parser.rules.contains_key(name) {
            return Err(
                parser.error_at(*at, format!("the rule `{name}` is used but never defined"))
            );
        }
    }
    if !parser.rules.contains_key("root") {
        return Err(parser.error_at(text.len(), "the grammar has no `root` rule".to_owned()));
    }
    if let Some((name, at)) = left_recursion(&parser.rules) {
        return Err(parser.error_at(
            at,
            format!("the rule `{name}` is left-recursive, which llama.cpp does not support"),
        ));
    }
    Ok(())
}

/// One alternative: a sequence of items.
type Alt = Vec<Item>;

#[derive(Debug)]
struct Item {
    kind: Kind,
    /// Whether a repetition lets it match nothing (`*`, `?`, `{0,…}`).
    optional: bool,
}

#[derive(Debug)]
enum Kind {
    /// A literal, a character class, `.` or a token: matches something, or (`""`) nothing.
    Terminal { empty: bool },
    /// A reference to a rule.
    Ref(String),
    /// A parenthesized group.
    Group(Vec<Alt>),
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
    /// Each rule's alternatives and where its name stands.
    rules: BTreeMap<String, (Vec<Alt>, usize)>,
    /// Every rule reference and where it stands.
    refs: Vec<(String, usize)>,
}

impl Parser<'_> {
    fn error_at(&self, at: usize, message: String) -> GbnfError {
        let before = &self.text[..at.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        GbnfError {
            line,
            column,
            message,
        }
    }

    fn error(&self, message: impl Into<String>) -> GbnfError {
        self.error_at(self.pos, message.into())
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.text[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Skips spaces, tabs and comments, and line breaks when `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\r' && c != '\n') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expecting a rule name (letters, digits and `-`)"));
        }
        Ok(self.text[start..self.pos].to_owned())
    }

    fn rules_all(&mut self) -> Result<(), GbnfError> {
        self.space(true);
        while self.pos < self.text.len() {
            self.rule()?;
        }
        Ok(())
    }

    fn rule(&mut self) -> Result<(), GbnfError> {
        let at = self.pos;
        let name = self.name()?;
        self.space(false);
        if !self.text[self.pos..].starts_with("::=") {
            return Err(self.error(format!("expecting `::=` after the rule name `{name}`")));
        }
        self.pos += 3;
        self.space(true);
        let alts = self.alternates(false)?;
        match self.peek() {
            None => {}
            Some('\r' | '\n') => {
                self.bump();
            }
            Some(c) => return Err(self.error(format!("unexpected `{c}`; expecting a line break"))),
        }
        self.space(true);
        // A rule defined twice keeps its last definition, as in llama.cpp.
        self.rules.insert(name, (alts, at));
        Ok(())
    }

    fn alternates(&mut self, nested: bool) -> Result<Vec<Alt>, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    fn sequence(&mut self, nested: bool) -> Result<Alt, GbnfError> {
        let mut items: Alt = Vec::new();
        while let Some(c) = self.peek() {
            let kind = match c {
                '"' => {
                    self.pos += 1;
                    let mut empty = true;
                    while self.peek() != Some('"') {
                        self.char_in("the literal")?;
                        empty = false;
                    }
                    self.pos += 1;
                    Kind::Terminal { empty }
                }
                '[' => {
                    self.pos += 1;
                    if self.peek() == Some('^') {
                        self.pos += 1;
                    }
                    while self.peek() != Some(']') {
                        self.char_in("the character class")?;
                        if self.peek() == Some('-') && self.peek2() != Some(']') {
                            self.pos += 1;
                            self.char_in("the character class")?;
                        }
                    }
                    self.pos += 1;
                    Kind::Terminal { empty: false }
                }
                '<' | '!' => {
                    self.token()?;
                    Kind::Terminal { empty: false }
                }
                '.' => {
                    self.pos += 1;
                    Kind::Terminal { empty: false }
                }
                '(' => {
                    self.pos += 1;
                    self.space(true);
                    let alts = self.alternates(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.error("expecting `)` to close the group"));
                    }
                    self.pos += 1;
                    Kind::Group(alts)
                }
                '*' | '+' | '?' | '{' => {
                    if items.is_empty() {
                        return Err(self.error(format!("`{c}` must follow an item to repeat")));
                    }
                    let optional = self.repetition()?;
                    if let Some(last) = items.last_mut() {
                        last.optional |= optional;
                    }
                    self.space(nested);
                    continue;
                }
                c if is_word_char(c) => {
                    let at = self.pos;
                    let name = self.name()?;
                    self.refs.push((name.clone(), at));
                    Kind::Ref(name)
                }
                _ => break,
            };
            items.push(Item {
                kind,
                optional: false,
            });
            self.space(nested);
        }
        Ok(items)
    }

    /// One character of a literal or class, escapes included.
    fn char_in(&mut self, what: &str) -> Result<(), GbnfError> {
        match self.bump() {
            None => Err(self.error(format!("unexpected end of the grammar inside {what}"))),
            Some('\\') => {
                let at = self.pos;
                let digits = match self.bump() {
                    Some('x') => 2,
                    Some('u') => 4,
                    Some('U') => 8,
                    Some('t' | 'r' | 'n' | '\\' | '"' | '[' | ']' | '-') => return Ok(()),
                    _ => {
                        return Err(self.error_at(at - 1, format!("unknown escape in {what}")));
                    }
                };
                for _ in 0..digits {
                    if !self.bump().is_some_and(|c| c.is_ascii_hexdigit()) {
                        return Err(self.error_at(at - 1, format!("expecting {digits} hex digits")));
                    }
                }
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }

    /// `<[id]>`, `<text>` or `!` before either.
    fn token(&mut self) -> Result<(), GbnfError> {
        if self.peek() == Some('!') {
            self.pos += 1;
        }
        if self.bump() != Some('<') {
            return Err(self.error("expecting `<` to open a token"));
        }
        if self.peek() == Some('[') {
            self.pos += 1;
            let digits = self.digits()?;
            if digits > u64::from(u32::MAX) {
                return Err(self.error("the token id is too large"));
            }
            for close in [']', '>'] {
                if self.peek() != Some(close) {
                    return Err(self.error("expecting `]>` to close the token id"));
                }
                self.pos += 1;
            }
            return Ok(());
        }
        while self.peek().is_some_and(|c| c != '>') {
            self.bump();
        }
        if self.bump() != Some('>') {
            return Err(self.error("expecting `>` to close the token"));
        }
        Ok(())
    }

    fn digits(&mut self) -> Result<u64, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expecting a number"));
        }
        self.text[start..self.pos]
            .parse()
            .map_err(|_| self.error_at(start, "the number is too large".to_owned()))
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`; whether it allows zero.
    fn repetition(&mut self) -> Result<bool, GbnfError> {
        let c = self.bump();
        if c != Some('{') {
            return Ok(c != Some('+'));
        }
        self.space(true);
        let at = self.pos;
        let min = self.digits()?;
        if min > MAX_REPETITIONS {
            return Err(self.error_at(at, format!("repetitions are limited to {MAX_REPETITIONS}")));
        }
        self.space(true);
        match self.bump() {
            Some('}') => return Ok(min == 0),
            Some(',') => {}
            _ => return Err(self.error("expecting `,` or `}` in a repetition")),
        }
        self.space(true);
        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
            let max_at = self.pos;
            let max = self.digits()?;
            if max < min {
                return Err(self.error_at(max_at, "the maximum is below the minimum".to_owned()));
            }
            self.space(true);
        }
        if self.bump() != Some('}') {
            return Err(self.error("expecting `}` to close the repetition"));
        }
        Ok(min == 0)
    }
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// The first rule that can reach itself without consuming anything, and where it is defined.
fn left_recursion(rules: &BTreeMap<String, (Vec<Alt>, usize)>) -> Option<(String, usize)> {
    let nullable = nullable_rules(rules);
    for (name, (alts, at)) in rules {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&str> = Vec::new();
        leading_refs(alts, &nullable, &mut todo);
        while let Some(next) = todo.pop() {
            if next == name {
                return Some((name.clone(), *at));
            }
            if seen.insert(next) {
                if let Some((alts, _)) = rules.get(next) {
                    leading_refs(alts, &nullable, &mut todo);
                }
            }
        }
    }
    None
}

/// The rules that can match nothing (a fixed point).
fn nullable_rules(rules: &BTreeMap<String, (Vec<Alt>, usize)>) -> BTreeSet<&str> {
    let mut nullable = BTreeSet::new();
    loop {
        let before = nullable.len();
        for (name, (alts, _)) in rules {
            if alts_nullable(alts, &nullable) {
                nullable.insert(name.as_str());
            }
        }
        if nullable.len() == before {
            return nullable;
        }
    }
}

fn alts_nullable(alts: &[Alt], nullable: &BTreeSet<&str>) -> bool {
    alts.iter()
        .any(|alt| alt.iter().all(|item| item_nullable(item, nullable)))
}

fn item_nullable(item: &Item, nullable: &BTreeSet<&str>) -> bool {
    item.optional
        || match &item.kind {
            Kind::Terminal { empty } => *empty,
            Kind::Ref(name) => nullable.contains(name.as_str()),
            Kind::Group(alts) => alts_nullable(alts, nullable),
        }
}

/// The rules each alternative of `alts` may start with.
fn leading_refs<'a>(alts: &'a [Alt], nullable: &BTreeSet<&str>, out: &mut Vec<&'a str>) {
    for alt in alts {
        for item in alt {
            match &item.kind {
                Kind::Ref(name) => out.push(name),
                Kind::Group(inner) => leading_refs(inner, nullable, out),
                Kind::Terminal { .. } => {}
            }
            if !item_nullable(item, nullable) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests;
