//! (not yet implemented)
use crate::engine::Syntax;
use crate::Format;

#[allow(dead_code)]
pub(super) fn syntax(_f: Format) -> Syntax {
    super::json::syntax(Format::ContentOnly)
}
