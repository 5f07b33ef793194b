//! The `[INST]` family: llama2 and its variants, mistral v1/v3/v3-tekken/v7/v7-tekken.
//!
//! None of these writes a generation prompt: the prompt already ends in `[/INST]`.

use wick_types::Message;

use super::prompt::{role, trim, Prompt};

/// How a llama2-family template differs from plain `llama2`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Llama2 {
    /// System messages go inside `<<SYS>>` markers (otherwise: the text and a newline).
    pub(super) sys_markers: bool,
    /// Turns after the first open with `<s>[INST] `.
    pub(super) bos_in_history: bool,
    /// Every message is trimmed.
    pub(super) strip: bool,
}

impl Llama2 {
    /// `llama2`: a system message is bare text and a newline.
    pub(super) const PLAIN: Llama2 = Llama2 {
        sys_markers: false,
        bos_in_history: false,
        strip: false,
    };
    /// `llama2-sys`: system messages in `<<SYS>>` markers.
    pub(super) const SYS: Llama2 = Llama2 {
        sys_markers: true,
        ..Llama2::PLAIN
    };
    /// `llama2-sys-bos`: as llama2-sys, with `<s>` opening later turns.
    pub(super) const SYS_BOS: Llama2 = Llama2 {
        bos_in_history: true,
        ..Llama2::SYS
    };
    /// `llama2-sys-strip`: as llama2-sys, every message trimmed.
    pub(super) const SYS_STRIP: Llama2 = Llama2 {
        strip: true,
        ..Llama2::SYS
    };
}

/// llama2, llama2-sys, llama2-sys-bos, llama2-sys-strip.
///
/// `[INST] ` opens once at the start and again only after an assistant turn; any role other
/// than system and user is rendered as an assistant turn.
pub(super) fn llama2(p: &mut Prompt, messages: &[Message], v: Llama2) {
    p.ctl("[INST] ");
    let mut inside_turn = true;
    for m in messages {
        let content = if v.strip {
            trim(&m.content)
        } else {
            &m.content
        };
        if !inside_turn {
            inside_turn = true;
            p.ctl(if v.bos_in_history {
                "<s>[INST] "
            } else {
                "[INST] "
            });
        }
        match role(m) {
            "system" if v.sys_markers => {
                p.ctl("<<SYS>>\n").text(content).ctl("\n<</SYS>>\n\n");
            }
            "system" => {
                p.text(content).ctl("\n");
            }
            "user" => {
                p.text(content).ctl(" [/INST]");
            }
            _ => {
                p.text(content).ctl("</s>");
                inside_turn = false;
            }
        }
    }
}

/// Which of the three older official mistral templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MistralOld {
    /// `mistral-v1`: ` [INST] … [/INST]` with spaces around.
    V1,
    /// `mistral-v3`: `[INST] …[/INST]`, assistant replies trimmed.
    V3,
    /// `mistral-v3-tekken`: `[INST]…[/INST]`, no spaces.
    V3Tekken,
}

/// mistral-v1, mistral-v3, mistral-v3-tekken: a system message goes inside the current
/// `[INST]`, followed by a blank line; any role other than system and user is an assistant
/// turn.
pub(super) fn mistral_old(p: &mut Prompt, messages: &[Message], v: MistralOld) {
    let lead = if v == MistralOld::V1 { " " } else { "" };
    let trail = if v == MistralOld::V3Tekken { "" } else { " " };
    let mut inside_turn = false;
    for m in messages {
        if !inside_turn {
            p.ctl(lead).ctl("[INST]").ctl(trail);
            inside_turn = true;
        }
        match role(m) {
            "system" => {
                p.text(&m.content).ctl("\n\n");
            }
            "user" => {
                p.text(&m.content).ctl(lead).ctl("[/INST]");
            }
            _ => {
                let content = if v == MistralOld::V3 {
                    trim(&m.content)
                } else {
                    &m.content
                };
                p.ctl(trail).text(content).ctl("</s>");
                inside_turn = false;
            }
        }
    }
}

/// mistral-v7 (`tekken == false`, a space after each opening marker) and mistral-v7-tekken.
pub(super) fn mistral_v7(p: &mut Prompt, messages: &[Message], tekken: bool) {
    let space = if tekken { "" } else { " " };
    for m in messages {
        match role(m) {
            "system" => {
                p.ctl("[SYSTEM_PROMPT]").ctl(space);
                p.text(&m.content).ctl("[/SYSTEM_PROMPT]");
            }
            "user" => {
                p.ctl("[INST]").ctl(space).text(&m.content).ctl("[/INST]");
            }
            _ => {
                p.ctl(space).text(&m.content).ctl("</s>");
            }
        }
    }
}
