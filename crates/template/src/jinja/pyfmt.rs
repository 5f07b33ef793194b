//! Python's way of turning values into text, as Jinja under transformers does it: `str()` for
//! printing (`None`, `True`, dict and list `repr`), and `json.dumps` for the `tojson` filter.
//!
//! Characters for which `raw` answers true (the tracking marks of a tracked render) are written
//! unescaped, so that marks survive `repr` and `tojson` exactly where the text they mark does.

use std::fmt::Write;

use minijinja::value::ValueKind;
use minijinja::{Error, ErrorKind, Value};

/// Characters passed through unescaped.
pub(crate) type Raw<'a> = &'a dyn Fn(char) -> bool;

fn type_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// Python `str(value)`, what `{{ value }}` prints.
pub(crate) fn py_str(value: &Value, raw: Raw<'_>, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => {
            out.push_str(value.as_str().unwrap_or_default());
            Ok(())
        }
        _ => py_repr(value, raw, out),
    }
}

/// Python `repr(value)`.
pub(crate) fn py_repr(value: &Value, raw: Raw<'_>, out: &mut String) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::None => {
            out.push_str("None");
            Ok(())
        }
        ValueKind::Bool => {
            out.push_str(if value.is_true() { "True" } else { "False" });
            Ok(())
        }
        ValueKind::Number => {
            push_number(value, out);
            Ok(())
        }
        ValueKind::String => {
            repr_str(value.as_str().unwrap_or_default(), raw, out);
            Ok(())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            if is_generator(value) {
                out.push_str("<generator object>");
                return Ok(());
            }
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&item, raw, out)?;
            }
            out.push(']');
            Ok(())
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&key, raw, out)?;
                out.push_str(": ");
                py_repr(&value.get_item(&key)?, raw, out)?;
            }
            out.push('}');
            Ok(())
        }
        _ => {
            let _ = write!(out, "{value}");
            Ok(())
        }
    }
}

/// Whether `value` is a lazy one-shot iterable (Python's generators: `map(...)` without `|list`).
fn is_generator(value: &Value) -> bool {
    super::pyfilters::is_generator(value)
}

fn push_number(value: &Value, out: &mut String) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
    } else if let Ok(f) = f64::try_from(value.clone()) {
        push_float(f, out);
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, positional for exponents -4..16,
/// else `d.ddde+XX`.
pub(crate) fn push_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = f.to_string();
        out.push_str(&s);
        if !s.contains('.') {
            out.push_str(".0");
        }
    } else {
        out.push_str(mantissa);
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

/// Python's `repr(str)`: single quotes unless the text holds `'` and no `"`.
fn repr_str(s: &str, raw: Raw<'_>, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if raw(c) || is_printable(c) => out.push(c),
            c => {
                let n = u32::from(c);
                let _ = match n {
                    0..=0xff => write!(out, "\\x{n:02x}"),
                    0x100..=0xffff => write!(out, "\\u{n:04x}"),
                    _ => write!(out, "\\U{n:08x}"),
                };
            }
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for one character, approximated without the Unicode tables:
/// control, format, separator (other than the space), private-use and surrogate characters
/// are not printable.
fn is_printable(c: char) -> bool {
    let n = u32::from(c);
    !(c.is_control()
        || matches!(
            n,
            0xa0 | 0xad
                | 0x1680
                | 0x180e
                | 0x2000..=0x200f
                | 0x2028..=0x202f
                | 0x205f..=0x206f
                | 0x3000
                | 0xfeff
                | 0xe000..=0xf8ff
                | 0xfff9..=0xfffb
                | 0xf0000..
        ))
}

/// The arguments of transformers' `tojson`.
#[derive(Debug, Default)]
pub(crate) struct JsonOpts {
    pub(crate) ensure_ascii: bool,
    /// Indent per level, `None` for a single line.
    pub(crate) indent: Option<String>,
    pub(crate) item_sep: Option<String>,
    pub(crate) key_sep: Option<String>,
    pub(crate) sort_keys: bool,
}

/// Python `json.dumps(value, ...)`.
pub(crate) fn json_dumps(value: &Value, opts: &JsonOpts, raw: Raw<'_>) -> Result<String, Error> {
    let item_sep = opts
        .item_sep
        .clone()
        .unwrap_or_else(|| if opts.indent.is_some() { "," } else { ", " }.into());
    let key_sep = opts.key_sep.clone().unwrap_or_else(|| ": ".into());
    let mut w = JsonWriter {
        opts,
        item_sep,
        key_sep,
        raw,
        out: String::new(),
    };
    w.value(value, 0)?;
    Ok(w.out)
}

struct JsonWriter<'a> {
    opts: &'a JsonOpts,
    item_sep: String,
    key_sep: String,
    raw: Raw<'a>,
    out: String,
}

impl JsonWriter<'_> {
    fn value(&mut self, value: &Value, depth: usize) -> Result<(), Error> {
        if depth > 500 {
            return Err(type_error("tojson: value nested too deeply"));
        }
        match value.kind() {
            ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => push_number(value, &mut self.out),
            ValueKind::String => self.string(value.as_str().unwrap_or_default()),
            ValueKind::Seq => self.seq(value, depth)?,
            ValueKind::Iterable if !is_generator(value) => self.seq(value, depth)?,
            ValueKind::Map => self.map(value, depth)?,
            ValueKind::Undefined => {
                return Err(type_error(
                    "TypeError: Object of type Undefined is not JSON serializable",
                ))
            }
            _ => {
                return Err(type_error(format!(
                    "TypeError: Object of type {} is not JSON serializable",
                    if is_generator(value) {
                        "generator"
                    } else {
                        "object"
                    }
                )))
            }
        }
        Ok(())
    }

    fn newline(&mut self, depth: usize) {
        if let Some(indent) = &self.opts.indent {
            self.out.push('\n');
            for _ in 0..depth {
                self.out.push_str(indent);
            }
        }
    }

    fn seq(&mut self, value: &Value, depth: usize) -> Result<(), Error> {
        let items: Vec<Value> = value.try_iter()?.collect();
        if items.is_empty() {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(depth + 1);
            self.value(item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push(']');
        Ok(())
    }

    fn map(&mut self, value: &Value, depth: usize) -> Result<(), Error> {
        let mut keys: Vec<Value> = value.try_iter()?.collect();
        if keys.is_empty() {
            self.out.push_str("{}");
            return Ok(());
        }
        if self.opts.sort_keys {
            keys.sort_by_cached_key(|k| sort_key(k, self.raw));
        }
        self.out.push('{');
        for (i, key) in keys.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(depth + 1);
            self.key(key)?;
            let sep = self.key_sep.clone();
            self.out.push_str(&sep);
            self.value(&value.get_item(key)?, depth + 1)?;
        }
        self.newline(depth);
        self.out.push('}');
        Ok(())
    }

    fn key(&mut self, key: &Value) -> Result<(), Error> {
        match key.kind() {
            ValueKind::String => self.string(key.as_str().unwrap_or_default()),
            ValueKind::None => self.out.push_str("\"null\""),
            ValueKind::Bool | ValueKind::Number => {
                let mut s = String::new();
                self.out.push('"');
                if key.kind() == ValueKind::Bool {
                    s.push_str(if key.is_true() { "true" } else { "false" });
                } else {
                    push_number(key, &mut s);
                }
                self.out.push_str(&s);
                self.out.push('"');
            }
            _ => {
                return Err(type_error(
                    "TypeError: keys must be str, int, float, bool or None",
                ))
            }
        }
        Ok(())
    }

    fn string(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{8}' => self.out.push_str("\\b"),
                '\u{c}' => self.out.push_str("\\f"),
                c if (self.raw)(c) => self.out.push(c),
                c if u32::from(c) < 0x20 || (self.opts.ensure_ascii && !c.is_ascii()) => {
                    let mut buf = [0u16; 2];
                    for unit in c.encode_utf16(&mut buf) {
                        let _ = write!(self.out, "\\u{unit:04x}");
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }
}

/// Sort keys the way Python compares strings (by code point), ignoring pass-through marks.
fn sort_key(key: &Value, raw: Raw<'_>) -> String {
    key.as_str().map_or_else(
        || key.to_string(),
        |s| s.chars().filter(|&c| !raw(c)).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: char) -> bool {
        false
    }

    fn dumps(v: &serde_json::Value, opts: &JsonOpts) -> String {
        json_dumps(&Value::from_serialize(v), opts, &none).unwrap()
    }

    #[test]
    fn json_matches_python_defaults() {
        let v = serde_json::json!({"b": [1, 2.5, true, null], "a": "é\"\n<"});
        assert_eq!(
            dumps(&v, &JsonOpts::default()),
            r#"{"b": [1, 2.5, true, null], "a": "é\"\n<"}"#
        );
        let opts = JsonOpts {
            indent: Some("  ".into()),
            sort_keys: true,
            ensure_ascii: true,
            ..JsonOpts::default()
        };
        assert_eq!(
            dumps(&v, &opts),
            "{\n  \"a\": \"\\u00e9\\\"\\n<\",\n  \"b\": [\n    1,\n    2.5,\n    true,\n    null\n  ]\n}"
        );
        assert_eq!(dumps(&serde_json::json!({}), &JsonOpts::default()), "{}");
    }

    #[test]
    fn floats_print_like_python() {
        let f = |x: f64| {
            let mut s = String::new();
            push_float(x, &mut s);
            s
        };
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(22.5), "22.5");
        assert_eq!(f(1e-5), "1e-05");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(123_456_789_012_345.0), "123456789012345.0");
    }

    #[test]
    fn repr_matches_python() {
        let v = Value::from_serialize(serde_json::json!({
            "type": "function", "n": null, "ok": false, "q": "it's", "l": ["a\tb"]
        }));
        let mut out = String::new();
        py_str(&v, &none, &mut out).unwrap();
        assert_eq!(
            out,
            r#"{'type': 'function', 'n': None, 'ok': False, 'q': "it's", 'l': ['a\tb']}"#
        );
    }
}
