//! The minijinja environment, set up the way transformers sets up Jinja for chat templates.

use std::sync::Arc;

use minijinja::value::Rest;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, UndefinedBehavior, Value};

use super::marks::marks_of;
use super::markup;
use super::methods;
use super::pyfilters;
use super::pyfmt;
use super::source;
use super::strftime::DateTime;

/// The message of a `raise_exception(msg)` call, carried as the error's source.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Raised(pub(crate) String);

/// The name the template is registered under.
pub(crate) const NAME: &str = "chat_template";

/// Builds the environment for one template source.
pub(crate) fn build(
    source: &str,
    fuel: u64,
    now: Option<DateTime>,
) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(false);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_fuel(Some(fuel));
    env.set_recursion_limit(200);
    env.set_formatter(format_value);
    env.set_unknown_method_callback(methods::call_method);
    env.add_filter("tojson", methods::tojson_filter);
    env.add_filter("trim", methods::trim_filter);
    env.add_filter("length", methods::length_filter);
    env.add_filter("count", methods::length_filter);
    env.add_filter("string", methods::string_filter);
    env.add_function("raise_exception", raise_exception);
    let clock = Arc::new(now);
    env.add_function("strftime_now", move |format: String| {
        let t = (*clock).unwrap_or_else(DateTime::now_utc);
        t.strftime(&format)
    });
    env.add_function("cycler", minijinja_contrib::globals::cycler);
    env.add_function("joiner", minijinja_contrib::globals::joiner);
    env.add_filter(source::ITER_FILTER, pyfilters::for_iterable);
    env.add_filter("map", pyfilters::map);
    env.add_filter("select", pyfilters::select);
    env.add_filter("reject", pyfilters::reject);
    env.add_filter("selectattr", pyfilters::selectattr);
    env.add_filter("rejectattr", pyfilters::rejectattr);
    env.add_filter("indent", pyfilters::indent);
    env.add_test("iterable", pyfilters::is_iterable);
    env.add_function(markup::ADD_FN, markup::add);
    env.add_template_owned(NAME, markup::rewrite(&source::rewrite(source)))?;
    Ok(env)
}

/// `{{ value }}`: Python's `str(value)`; marks pass unescaped through `repr`.
fn format_value(
    out: &mut minijinja::Output<'_>,
    state: &State<'_, '_>,
    value: &Value,
) -> Result<(), Error> {
    let marks = marks_of(state);
    let mut s = String::new();
    pyfmt::py_str(value, &|c| marks.is_some_and(|m| m.contains(c)), &mut s)?;
    out.write_str(&s)
        .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
}

// minijinja passes function arguments by value.
#[allow(clippy::needless_pass_by_value)]
fn raise_exception(message: Rest<Value>) -> Result<Value, Error> {
    let text = message
        .0
        .first()
        .map(|v| v.as_str().map_or_else(|| v.to_string(), ToOwned::to_owned))
        .unwrap_or_default();
    Err(Error::new(ErrorKind::InvalidOperation, text.clone()).with_source(Raised(text)))
}
