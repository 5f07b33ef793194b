//! Rewrites of the template source where Jinja's syntax or semantics have no minijinja
//! counterpart:
//!
//! - `{% generation %}…{% endgeneration %}` (transformers' assistant-mask tag, which renders its
//!   body unchanged) becomes `{% if true %}…{% endif %}`, keeping its whitespace control;
//! - `{% for x in EXPR … %}` becomes `{% for x in (EXPR)|__wick_iter … %}`, so that iterating
//!   `none` fails as in Python (minijinja iterates it as empty).
//!
//! `{% raw %}` blocks are left alone.

/// The filter a `for` loop's iterable goes through.
pub(crate) const ITER_FILTER: &str = "__wick_iter";

pub(crate) fn rewrite(source: &str) -> String {
    let mut out = String::with_capacity(source.len() + 64);
    let mut rest = source;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        // The end marker after the opening `{%` (in `{%}` the `%` is the opener's).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let body_start = inner
            .find(|c: char| c != '-' && c != '+' && !c.is_whitespace())
            .unwrap_or(inner.len());
        let body_end = inner
            .rfind(|c: char| c != '-' && c != '+' && !c.is_whitespace())
            .map_or(body_start, |i| {
                i + inner[i..].chars().next().map_or(1, char::len_utf8)
            })
            .max(body_start);
        let (lead, body, trail) = (
            &inner[..body_start],
            &inner[body_start..body_end],
            &inner[body_end..],
        );
        if body == "raw" {
            // Copy the raw block unchanged, up to and including its end tag.
            let after = &tag[end + 2..];
            let stop = find_endraw(after).unwrap_or(after.len());
            out.push_str(&tag[..end + 2 + stop]);
            rest = &after[stop..];
            continue;
        }
        let new_body = match body {
            "generation" => Some("if true".to_owned()),
            "endgeneration" => Some("endif".to_owned()),
            b if b.starts_with("for ") || b.starts_with("for\t") || b.starts_with("for\n") => {
                rewrite_for(b)
            }
            _ => None,
        };
        match new_body {
            Some(b) => {
                out.push_str("{%");
                out.push_str(lead);
                out.push_str(&b);
                out.push_str(trail);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The offset just past the `{% endraw %}` tag in `s`.
fn find_endraw(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = s[from..].find("{%") {
        let start = from + at;
        let end = start + 2 + s[start + 2..].find("%}")?;
        let body =
            s[start + 2..end].trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
        if body == "endraw" {
            return Some(end + 2);
        }
        from = end + 2;
    }
    None
}

/// `for TARGET in EXPR [if COND] [recursive]` with `EXPR` wrapped in the iteration filter.
fn rewrite_for(body: &str) -> Option<String> {
    let words = top_level_words(body);
    let in_at = words.iter().find(|(_, w)| *w == "in")?.0;
    let expr_start = in_at + 2;
    let expr_end = words
        .iter()
        .find(|(i, w)| *i > expr_start && (*w == "if" || *w == "recursive"))
        .map_or(body.len(), |(i, _)| *i);
    let expr = body[expr_start..expr_end].trim();
    if expr.is_empty() {
        return None;
    }
    let tail = &body[expr_end..];
    let sep = if tail.is_empty() { "" } else { " " };
    Some(format!(
        "{} ({expr})|{ITER_FILTER}{sep}{tail}",
        &body[..expr_start]
    ))
}

/// The identifiers standing at nesting depth 0 (outside brackets and strings), with offsets.
fn top_level_words(s: &str) -> Vec<(usize, &str)> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'\'' | b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                i += 1;
            }
            b')' | b']' | b'}' => {
                depth -= 1;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let preceded_by_dot = start > 0 && bytes[start - 1] == b'.';
                if depth == 0 && !preceded_by_dot {
                    out.push((start, &s[start..i]));
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_plain_blocks() {
        assert_eq!(
            rewrite("a{%- generation %}b{% endgeneration -%}c{% if x %}{% endif %}"),
            "a{%- if true %}b{% endif -%}c{% if x %}{% endif %}"
        );
    }

    #[test]
    fn for_loops_iterate_through_the_filter() {
        assert_eq!(
            rewrite("{%- for k, v in d.items() if v recursive -%}"),
            "{%- for k, v in (d.items())|__wick_iter if v recursive -%}"
        );
        assert_eq!(
            rewrite("{% for m in messages[1:] %}"),
            "{% for m in (messages[1:])|__wick_iter %}"
        );
        assert_eq!(
            rewrite("{% for x in ['in', 'if'] %}"),
            "{% for x in (['in', 'if'])|__wick_iter %}"
        );
    }

    #[test]
    fn raw_blocks_are_untouched() {
        let src = "{% raw %}{% for x in y %}{% endraw %}{% for a in b %}";
        assert_eq!(
            rewrite(src),
            "{% raw %}{% for x in y %}{% endraw %}{% for a in (b)|__wick_iter %}"
        );
    }

    #[test]
    fn a_tag_whose_percent_is_shared_with_its_opener_is_not_a_panic() {
        // Found by the jinja_render fuzz target: `{%}` made the tag end before it began.
        for src in [
            "{%}",
            "a{%}b",
            "{% raw %}{%}",
            "{%}%}",
            "{%- raw -%}x{%}{% endraw %}",
            // Also found by it: a tag ending in a multi-byte character.
            "{% if x ｜%}",
            "{%- set é -%}",
        ] {
            let _ = rewrite(src);
        }
        assert_eq!(rewrite("{%}"), "{%}");
    }
}
