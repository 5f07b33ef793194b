//! Templates with fixed markers per role (the role name itself is never written): vicuna,
//! deepseek, command-r, exaone, yandex, smolvlm, kimi-k2, grok-2, hunyuan-moe, deepseek-ocr.

use wick_types::Message;

use super::prompt::{role, trim, Prompt};

/// The markers around one role's messages.
#[derive(Debug, Clone, Copy)]
pub(super) struct Turn {
    /// The role name this applies to.
    role: &'static str,
    /// Before the content.
    open: &'static str,
    /// After the content.
    close: &'static str,
    /// Whether the content is trimmed.
    trim: bool,
}

/// A turn whose content is written as given.
pub(super) const fn turn(role: &'static str, open: &'static str, close: &'static str) -> Turn {
    Turn {
        role,
        open,
        close,
        trim: false,
    }
}

/// A turn whose content is trimmed.
pub(super) const fn trimmed(role: &'static str, open: &'static str, close: &'static str) -> Turn {
    Turn {
        role,
        open,
        close,
        trim: true,
    }
}

/// `prefix`, then each message between the markers of its role (messages of a role with no
/// turn use `other`, or are left out when that is `None`), then `generation` when asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Marked {
    /// Written once, before the first message.
    pub(super) prefix: &'static str,
    /// The roles the template knows.
    pub(super) turns: &'static [Turn],
    /// Markers for every other role; `None`: such messages are dropped.
    pub(super) other: Option<(&'static str, &'static str)>,
    /// The generation prompt (empty for templates that have none).
    pub(super) generation: &'static str,
}

impl Marked {
    /// Renders `messages`.
    pub(super) fn render(&self, p: &mut Prompt, messages: &[Message], add_generation: bool) {
        p.ctl(self.prefix);
        for m in messages {
            if let Some(t) = self.turns.iter().find(|t| t.role == role(m)) {
                let content = if t.trim { trim(&m.content) } else { &m.content };
                p.ctl(t.open).text(content).ctl(t.close);
            } else if let Some((open, close)) = self.other {
                p.ctl(open).text(&m.content).ctl(close);
            }
        }
        if add_generation {
            p.ctl(self.generation);
        }
    }
}

const fn marked(turns: &'static [Turn], generation: &'static str) -> Marked {
    Marked {
        prefix: "",
        turns,
        other: None,
        generation,
    }
}

pub(super) const VICUNA: Marked = marked(
    &[
        turn("system", "", "\n\n"),
        turn("user", "USER: ", "\n"),
        turn("assistant", "ASSISTANT: ", "</s>\n"),
    ],
    "ASSISTANT:",
);
pub(super) const VICUNA_ORCA: Marked = marked(
    &[
        turn("system", "SYSTEM: ", "\n"),
        turn("user", "USER: ", "\n"),
        turn("assistant", "ASSISTANT: ", "</s>\n"),
    ],
    "ASSISTANT:",
);
pub(super) const DEEPSEEK: Marked = marked(
    &[
        turn("system", "", ""),
        turn("user", "### Instruction:\n", "\n"),
        turn("assistant", "### Response:\n", "\n<|EOT|>\n"),
    ],
    "### Response:\n",
);
pub(super) const DEEPSEEK2: Marked = marked(
    &[
        turn("system", "", "\n\n"),
        turn("user", "User: ", "\n\n"),
        turn("assistant", "Assistant: ", "<｜end▁of▁sentence｜>"),
    ],
    "Assistant:",
);
pub(super) const DEEPSEEK3: Marked = marked(
    &[
        turn("system", "", "\n\n"),
        turn("user", "<｜User｜>", ""),
        turn("assistant", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    ],
    "<｜Assistant｜>",
);
/// deepseek-ocr: no template at all, the contents one after another.
pub(super) const DEEPSEEK_OCR: Marked = Marked {
    other: Some(("", "")),
    ..marked(&[], "")
};
pub(super) const COMMAND_R: Marked = marked(
    &[
        trimmed(
            "system",
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
        trimmed(
            "user",
            "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
        trimmed(
            "assistant",
            "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        ),
    ],
    "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
);
pub(super) const EXAONE3: Marked = marked(
    &[
        trimmed("system", "[|system|]", "[|endofturn|]\n"),
        trimmed("user", "[|user|]", "\n"),
        trimmed("assistant", "[|assistant|]", "[|endofturn|]\n"),
    ],
    "[|assistant|]",
);
pub(super) const EXAONE4: Marked = marked(
    &[
        trimmed("system", "[|system|]", "[|endofturn|]\n"),
        trimmed("user", "[|user|]", "\n"),
        trimmed("assistant", "[|assistant|]", "[|endofturn|]\n"),
        trimmed("tool", "[|tool|]", "[|endofturn|]\n"),
    ],
    "[|assistant|]",
);
pub(super) const EXAONE_MOE: Marked = marked(
    &[
        trimmed("system", "<|system|>\n", "<|endofturn|>\n"),
        trimmed("user", "<|user|>\n", "<|endofturn|>\n"),
        trimmed("assistant", "<|assistant|>\n", "<|endofturn|>\n"),
        trimmed("tool", "<|tool|>\n", "<|endofturn|>\n"),
    ],
    "<|assistant|>\n",
);
/// yandex: system messages are dropped.
pub(super) const YANDEX: Marked = marked(
    &[
        turn("user", " Пользователь: ", "\n\n"),
        turn("assistant", " Ассистент: ", "\n\n"),
    ],
    " Ассистент:[SEP]",
);
/// smolvlm: `<|im_start|>` is its BOS; every role but system and user is the assistant.
pub(super) const SMOLVLM: Marked = Marked {
    prefix: "<|im_start|>",
    other: Some(("Assistant: ", "<end_of_utterance>\n")),
    ..marked(
        &[
            turn("system", "", "\n\n"),
            turn("user", "User: ", "<end_of_utterance>\n"),
        ],
        "Assistant:",
    )
};
/// kimi-k2: a message of any other role is its content and `<|im_end|>`, with no header.
pub(super) const KIMI_K2: Marked = Marked {
    other: Some(("", "<|im_end|>")),
    ..marked(
        &[
            turn("system", "<|im_system|>system<|im_middle|>", "<|im_end|>"),
            turn("user", "<|im_user|>user<|im_middle|>", "<|im_end|>"),
            turn(
                "assistant",
                "<|im_assistant|>assistant<|im_middle|>",
                "<|im_end|>",
            ),
            turn("tool", "<|im_system|>tool<|im_middle|>", "<|im_end|>"),
        ],
        "<|im_assistant|>assistant<|im_middle|>",
    )
};
pub(super) const GROK2: Marked = marked(
    &[
        trimmed("system", "System: ", "<|separator|>\n\n"),
        trimmed("user", "Human: ", "<|separator|>\n\n"),
        turn("assistant", "Assistant: ", "<|separator|>\n\n"),
    ],
    "Assistant:",
);
/// hunyuan-moe: no generation prompt; every role but system and assistant is the user.
pub(super) const HUNYUAN_MOE: Marked = Marked {
    other: Some(("<|startoftext|>", "<|extra_0|>")),
    ..marked(
        &[
            turn("system", "<|startoftext|>", "<|extra_4|>"),
            turn("assistant", "", "<|eos|>"),
        ],
        "",
    )
};
