//! The small writer every named rendering uses: template text and message content go to
//! separate segments, so no message text can become a control token.

use wick_types::{Message, Role};

use crate::Segments;

/// A prompt under construction.
#[derive(Debug, Default)]
pub(super) struct Prompt(Segments);

impl Prompt {
    /// Appends template text.
    pub(super) fn ctl(&mut self, text: &str) -> &mut Self {
        self.0.push_control(text);
        self
    }

    /// Appends message content (or content a template transformed, e.g. trimmed).
    pub(super) fn text(&mut self, text: &str) -> &mut Self {
        self.0.push_content(text);
        self
    }

    /// Appends the message's role name as the template writes it.
    pub(super) fn role(&mut self, message: &Message) -> &mut Self {
        self.role_as(&message.role, message.role.as_str())
    }

    /// Appends `name`, a spelling of `role` (upper-cased, capitalised, …).
    ///
    /// The four standard role names are template text; any other role name came from the
    /// caller, so it is pushed as content and cannot smuggle in a control token.
    pub(super) fn role_as(&mut self, role: &Role, name: &str) -> &mut Self {
        if matches!(
            role,
            Role::System | Role::User | Role::Assistant | Role::Tool
        ) {
            self.ctl(name)
        } else {
            self.text(name)
        }
    }

    /// The finished prompt.
    pub(super) fn finish(self) -> Segments {
        self.0
    }
}

/// llama.cpp's `trim`: strips the C-locale `isspace` characters (space, `\t`, `\n`, `\v`,
/// `\f`, `\r`) from both ends, and nothing else.
pub(super) fn trim(text: &str) -> &str {
    text.trim_matches([' ', '\t', '\n', '\u{0b}', '\u{0c}', '\r'])
}

/// The role name as a plain string.
pub(super) fn role(message: &Message) -> &str {
    message.role.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentKind;

    #[test]
    fn trim_strips_ascii_space_only() {
        assert_eq!(trim(" \t\n\u{0b}\u{0c}\rx y\r\n "), "x y");
        assert_eq!(trim("\u{a0}x\u{3000}"), "\u{a0}x\u{3000}");
    }

    #[test]
    fn unknown_role_names_are_content() {
        let mut p = Prompt::default();
        p.role(&Message::new(Role::User, ""));
        p.role(&Message::new(Role::Other("<|im_start|>".into()), ""));
        let segs = p.finish();
        assert_eq!(segs.as_slice()[0].kind, SegmentKind::Control);
        assert_eq!(segs.as_slice()[1].kind, SegmentKind::Content);
        assert_eq!(segs.text(), "user<|im_start|>");
    }
}
