//! Filters and tests whose Jinja (Python) behaviour differs from minijinja's built-ins.

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Rest, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

/// What Jinja's `map`, `select`, `reject`, `selectattr` and `rejectattr` return: a Python
/// generator. It iterates like a list, but has no length and is not JSON serialisable.
#[derive(Debug)]
pub(crate) struct Generator(Vec<Value>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.clone())
    }
}

/// Whether `value` is a [`Generator`].
pub(crate) fn is_generator(value: &Value) -> bool {
    value.downcast_object_ref::<Generator>().is_some()
}

fn generator(items: Vec<Value>) -> Value {
    Value::from_object(Generator(items))
}

pub(crate) fn map(state: &State<'_, '_>, value: Value, args: Rest<Value>) -> Result<Value, Error> {
    minijinja::filters::map(state, value, args).map(generator)
}

pub(crate) fn select(
    state: &State<'_, '_>,
    value: Value,
    test: Option<String>,
    args: Rest<Value>,
) -> Result<Value, Error> {
    minijinja::filters::select(state, value, test.map(Into::into), args).map(generator)
}

pub(crate) fn reject(
    state: &State<'_, '_>,
    value: Value,
    test: Option<String>,
    args: Rest<Value>,
) -> Result<Value, Error> {
    minijinja::filters::reject(state, value, test.map(Into::into), args).map(generator)
}

pub(crate) fn selectattr(
    state: &State<'_, '_>,
    value: Value,
    attr: String,
    test: Option<String>,
    args: Rest<Value>,
) -> Result<Value, Error> {
    minijinja::filters::selectattr(state, value, attr.into(), test.map(Into::into), args)
        .map(generator)
}

pub(crate) fn rejectattr(
    state: &State<'_, '_>,
    value: Value,
    attr: String,
    test: Option<String>,
    args: Rest<Value>,
) -> Result<Value, Error> {
    minijinja::filters::rejectattr(state, value, attr.into(), test.map(Into::into), args)
        .map(generator)
}

/// The iterable of a `for` loop: Python refuses to iterate `None`, numbers and booleans.
pub(crate) fn for_iterable(value: Value) -> Result<Value, Error> {
    let name = match value.kind() {
        ValueKind::None => "NoneType",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::Bool => "bool",
        _ => return Ok(value),
    };
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("TypeError: '{name}' object is not iterable"),
    ))
}

/// `is iterable`: Python's `iter(value)` succeeds (undefined iterates as empty; `None` does not).
pub(crate) fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
            | ValueKind::Bytes
    )
}

/// Python's `str.splitlines()`.
fn splitlines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let brk = matches!(
            c,
            '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}'
                ..='\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        );
        if !brk {
            continue;
        }
        out.push(&s[start..i]);
        let mut next = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(j, '\n')) = chars.peek() {
                chars.next();
                next = j + 1;
            }
        }
        start = next;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

// minijinja passes keyword arguments by value.
#[allow(clippy::needless_pass_by_value)]
/// Jinja's `indent(width=4, first=False, blank=False)`, including its quirk of appending a
/// newline before splitting (so a trailing newline survives).
pub(crate) fn indent(
    value: &Value,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: minijinja::value::Kwargs,
) -> Result<Value, Error> {
    let width = kwargs.get::<Option<Value>>("width")?.or(width);
    let first = kwargs
        .get::<Option<bool>>("first")?
        .or(first)
        .unwrap_or(false);
    let blank = kwargs
        .get::<Option<bool>>("blank")?
        .or(blank)
        .unwrap_or(false);
    kwargs.assert_all_used()?;
    let indention = match &width {
        Some(w) if w.kind() == ValueKind::String => w.as_str().unwrap_or_default().to_owned(),
        Some(w) => " ".repeat(w.as_usize().unwrap_or(4)),
        None => "    ".to_owned(),
    };
    let mut s = value
        .as_str()
        .map_or_else(|| value.to_string(), ToOwned::to_owned);
    s.push('\n');
    let lines = splitlines(&s);
    let mut rv = String::new();
    if blank {
        rv = lines.join(&format!("\n{indention}"));
    } else if let Some((head, tail)) = lines.split_first() {
        rv.push_str(head);
        if !tail.is_empty() {
            rv.push('\n');
            let rest: Vec<String> = tail
                .iter()
                .map(|l| {
                    if l.is_empty() {
                        String::new()
                    } else {
                        format!("{indention}{l}")
                    }
                })
                .collect();
            rv.push_str(&rest.join("\n"));
        }
    }
    if first {
        rv = format!("{indention}{rv}");
    }
    Ok(Value::from(rv))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ind(s: &str, w: usize, first: bool) -> String {
        indent(
            &Value::from(s),
            Some(Value::from(w)),
            Some(first),
            None,
            minijinja::value::Kwargs::from_iter(Vec::<(&str, Value)>::new()),
        )
        .unwrap()
        .as_str()
        .unwrap()
        .to_owned()
    }

    #[test]
    fn indent_matches_jinja() {
        assert_eq!(ind("{\n", 4, true), "    {\n");
        assert_eq!(ind("a\nb\n\nc", 2, false), "a\n  b\n\n  c");
        assert_eq!(ind("x", 2, false), "x");
    }

    #[test]
    fn splitlines_matches_python() {
        assert_eq!(splitlines("a\r\nb\rc\n"), vec!["a", "b", "c"]);
        assert_eq!(splitlines("a\n\n"), vec!["a", ""]);
    }
}
