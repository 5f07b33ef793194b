//! Python string methods and the filters whose result depends on where marks sit.
//!
//! In an unmarked render these are Python's methods (through minijinja-contrib's pycompat).
//! In a tracked render a marked string behaves as if the marks were not there: `strip` removes
//! whitespace through marks, `startswith` ignores them, `split` re-opens and re-closes the
//! content each piece is cut from, `length` does not count them.

use minijinja::value::{from_args, Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, State, Value};

use super::marks::{is_marked, marks_of, Marks};

/// The unknown-method callback: Python methods on strings, dicts and lists.
pub(crate) fn call_method(
    state: &State<'_, '_>,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(marks) = marks_of(state).filter(|&m| is_marked(m, value)) {
        let s = value.as_str().unwrap_or_default();
        match method {
            "strip" | "lstrip" | "rstrip" => {
                let (chars,): (Option<&str>,) = from_args(args)?;
                let (left, right) = (method != "rstrip", method != "lstrip");
                return Ok(Value::from(strip(marks, s, chars, left, right)));
            }
            "startswith" | "endswith" => {
                let plain = Value::from(marks.strip(s));
                return minijinja_contrib::pycompat::unknown_method_callback(
                    state, &plain, method, args,
                );
            }
            "split" => return split(marks, s, args),
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// `str.strip` / `lstrip` / `rstrip` (Python: no argument strips Unicode whitespace), with
/// marks transparent: they are kept and stripping goes on past them.
pub(crate) fn strip(marks: Marks, s: &str, chars: Option<&str>, left: bool, right: bool) -> String {
    let strippable = |c: char| match chars {
        Some(set) => set.contains(c),
        None => c.is_whitespace(),
    };
    let cs: Vec<char> = s.chars().collect();
    let mut keep = vec![true; cs.len()];
    if left {
        for (i, &c) in cs.iter().enumerate() {
            if marks.contains(c) {
                continue;
            }
            if !strippable(c) {
                break;
            }
            keep[i] = false;
        }
    }
    if right {
        for (i, &c) in cs.iter().enumerate().rev() {
            if marks.contains(c) {
                continue;
            }
            if !strippable(c) {
                break;
            }
            keep[i] = false;
        }
    }
    let out: String = cs
        .iter()
        .zip(keep)
        .filter_map(|(&c, k)| k.then_some(c))
        .collect();
    marks.drop_empty_pairs(&out)
}

/// `str.split(sep=None, maxsplit=-1)` over a marked string: each piece re-balanced.
fn split(marks: Marks, s: &str, args: &[Value]) -> Result<Value, Error> {
    let (sep, maxsplit): (Option<&str>, Option<i64>) = from_args(args)?;
    let max = maxsplit
        .filter(|&n| n >= 0)
        .and_then(|n| usize::try_from(n).ok());
    let raw: Vec<&str> = match sep {
        Some("") => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "ValueError: empty separator",
            ))
        }
        Some(sep) => match max {
            Some(n) => s.splitn(n + 1, sep).collect(),
            None => s.split(sep).collect(),
        },
        None => split_whitespace(marks, s, max),
    };
    // The content open where each piece starts, tracked over everything before it (pieces a
    // whitespace split dropped included).
    let mut open = None;
    let mut cursor = 0;
    let mut out = Vec::with_capacity(raw.len());
    for piece in raw {
        let start = piece.as_ptr() as usize - s.as_ptr() as usize;
        open = marks.open_after(open, &s[cursor..start]);
        out.push(Value::from(marks.rebalance(open, piece)));
        open = marks.open_after(open, piece);
        cursor = start + piece.len();
    }
    Ok(Value::from(out))
}

/// Python's `split()` without a separator: runs of whitespace separate, empty pieces vanish.
/// Pieces holding only marks vanish too (they would be empty without marks).
fn split_whitespace(marks: Marks, s: &str, max: Option<usize>) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            break;
        }
        if max.is_some_and(|m| out.len() >= m) {
            out.push(trimmed.trim_end());
            break;
        }
        let end = trimmed.find(char::is_whitespace).unwrap_or(trimmed.len());
        if trimmed[..end].chars().any(|c| !marks.contains(c)) {
            out.push(&trimmed[..end]);
        }
        rest = &trimmed[end..];
    }
    out
}

/// `trim(value, chars=None)`.
pub(crate) fn trim_filter(state: &State<'_, '_>, value: &Value, chars: Option<String>) -> Value {
    let s = value
        .as_str()
        .map_or_else(|| value.to_string(), ToOwned::to_owned);
    Value::from(match marks_of(state) {
        Some(marks) => strip(marks, &s, chars.as_deref(), true, true),
        None => match chars {
            Some(set) => s.trim_matches(|c| set.contains(c)).to_owned(),
            None => s.trim().to_owned(),
        },
    })
}

/// `length(value)` / `count(value)`: Python's `len`, not counting marks.
pub(crate) fn length_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let n = match marks_of(state) {
            Some(marks) => s.chars().filter(|&c| !marks.contains(c)).count(),
            None => s.chars().count(),
        };
        return Ok(Value::from(n));
    }
    match value.kind() {
        ValueKind::Seq | ValueKind::Map => Ok(Value::from(value.len().unwrap_or(0))),
        ValueKind::Iterable if !super::pyfilters::is_generator(value) => {
            Ok(Value::from(value.try_iter()?.count()))
        }
        ValueKind::Undefined => Ok(Value::from(0)),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "TypeError: object of type '{}' has no len()",
                if super::pyfilters::is_generator(value) {
                    "generator".to_owned()
                } else {
                    value.kind().to_string()
                }
            ),
        )),
    }
}

/// `string(value)`: Python's `str`.
pub(crate) fn string_filter(state: &State<'_, '_>, value: &Value) -> Result<Value, Error> {
    if value.kind() == ValueKind::String {
        return Ok(value.clone());
    }
    let mut out = String::new();
    let marks = marks_of(state);
    super::pyfmt::py_str(value, &|c| marks.is_some_and(|m| m.contains(c)), &mut out)?;
    Ok(Value::from(out))
}

// minijinja passes keyword arguments by value.
#[allow(clippy::needless_pass_by_value)]
/// `tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
pub(crate) fn tojson_filter(
    state: &State<'_, '_>,
    value: &Value,
    indent: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let mut opts = super::pyfmt::JsonOpts::default();
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        Some(v) => Some(v),
        None => indent,
    };
    opts.indent = match indent {
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_owned(),
            None => " ".repeat(v.as_usize().unwrap_or(0)),
        }),
        None => None,
    };
    opts.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")? {
        if !seps.is_none() {
            let items: Vec<Value> = seps.try_iter()?.collect();
            if let [item, key] = items.as_slice() {
                opts.item_sep = item.as_str().map(ToOwned::to_owned);
                opts.key_sep = key.as_str().map(ToOwned::to_owned);
            }
        }
    }
    kwargs.assert_all_used()?;
    let marks = marks_of(state);
    let text = super::pyfmt::json_dumps(value, &opts, &|c| marks.is_some_and(|m| m.contains(c)))?;
    Ok(Value::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_goes_through_marks() {
        let m = Marks::choose(["x"]).unwrap();
        let s = format!("<{}>", m.wrap(1, "  hi  "));
        assert_eq!(strip(m, &s, None, true, true), s);
        let s = m.wrap(1, "  hi \n");
        assert_eq!(strip(m, &s, None, true, true), m.wrap(1, "hi"));
        assert_eq!(strip(m, &s, Some(" "), true, false), m.wrap(1, "hi \n"));
        assert_eq!(strip(m, &m.wrap(1, "   "), None, true, true), "");
    }

    #[test]
    fn whitespace_split_drops_mark_only_pieces() {
        let m = Marks::choose(["x"]).unwrap();
        let s = m.wrap(2, " a  b ");
        let pieces = split_whitespace(m, &s, None);
        assert_eq!(pieces.len(), 2);
    }
}
