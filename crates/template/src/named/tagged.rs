//! Templates that write each message's role name between two markers: chatml and its many
//! relatives (phi, zephyr, llama3/4, glm, granite, megrez, seed-oss, solar-open, gpt-oss, …).

use wick_types::Message;

use super::prompt::{role, trim, Prompt};

/// Which messages a tagged template trims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trim {
    /// None.
    Nothing,
    /// Every message.
    All,
    /// Only assistant messages.
    Assistant,
}

/// `prefix`, then `open` + role + `mid` + content + `close` per message, then `generation`
/// when a generation prompt is asked for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tagged {
    /// Written once, before the first message.
    pub(super) prefix: &'static str,
    /// Before the role name.
    pub(super) open: &'static str,
    /// Between the role name and the content.
    pub(super) mid: &'static str,
    /// After the content.
    pub(super) close: &'static str,
    /// The generation prompt.
    pub(super) generation: &'static str,
    /// Which contents are trimmed.
    pub(super) trim: Trim,
}

impl Tagged {
    /// A tagged template with no prefix that trims nothing.
    pub(super) const fn new(
        open: &'static str,
        mid: &'static str,
        close: &'static str,
        generation: &'static str,
    ) -> Self {
        Tagged {
            prefix: "",
            open,
            mid,
            close,
            generation,
            trim: Trim::Nothing,
        }
    }

    /// The same template with a prefix.
    pub(super) const fn prefixed(self, prefix: &'static str) -> Self {
        Tagged { prefix, ..self }
    }

    /// The same template trimming `trim`.
    pub(super) const fn trimming(self, trim: Trim) -> Self {
        Tagged { trim, ..self }
    }

    /// Renders `messages`.
    pub(super) fn render(&self, p: &mut Prompt, messages: &[Message], add_generation: bool) {
        p.ctl(self.prefix);
        for m in messages {
            let trimmed = match self.trim {
                Trim::Nothing => false,
                Trim::All => true,
                Trim::Assistant => role(m) == "assistant",
            };
            let content = if trimmed {
                trim(&m.content)
            } else {
                &m.content
            };
            p.ctl(self.open).role(m).ctl(self.mid);
            p.text(content).ctl(self.close);
        }
        if add_generation {
            p.ctl(self.generation);
        }
    }
}

pub(super) const CHATML: Tagged = Tagged::new(
    "<|im_start|>",
    "\n",
    "<|im_end|>\n",
    "<|im_start|>assistant\n",
);
pub(super) const PHI3: Tagged = Tagged::new("<|", "|>\n", "<|end|>\n", "<|assistant|>\n");
pub(super) const PHI4: Tagged = Tagged::new(
    "<|im_start|>",
    "<|im_sep|>",
    "<|im_end|>",
    "<|im_start|>assistant<|im_sep|>",
);
pub(super) const FALCON3: Tagged = Tagged::new("<|", "|>\n", "\n", "<|assistant|>\n");
pub(super) const ZEPHYR: Tagged = Tagged::new("<|", "|>\n", "<|endoftext|>\n", "<|assistant|>\n");
pub(super) const LLAMA3: Tagged = Tagged::new(
    "<|start_header_id|>",
    "<|end_header_id|>\n\n",
    "<|eot_id|>",
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
)
.trimming(Trim::All);
pub(super) const LLAMA4: Tagged = Tagged::new(
    "<|header_start|>",
    "<|header_end|>\n\n",
    "<|eot|>",
    "<|header_start|>assistant<|header_end|>\n\n",
)
.trimming(Trim::All);
pub(super) const CHATGLM3: Tagged =
    Tagged::new("<|", "|>\n ", "", "<|assistant|>").prefixed("[gMASK]sop");
pub(super) const CHATGLM4: Tagged =
    Tagged::new("<|", "|>\n", "", "<|assistant|>\n").prefixed("[gMASK]<sop>");
pub(super) const GLMEDGE: Tagged = Tagged::new("<|", "|>\n", "", "<|assistant|>");
pub(super) const MEGREZ: Tagged = Tagged::new(
    "<|role_start|>",
    "<|role_end|>",
    "<|turn_end|>",
    "<|role_start|>assistant<|role_end|>",
);
pub(super) const SEED_OSS: Tagged =
    Tagged::new("<seed:bos>", "\n", "<seed:eos>", "<seed:bos>assistant\n")
        .trimming(Trim::Assistant);
pub(super) const SOLAR_OPEN: Tagged =
    Tagged::new("<|begin|>", "<|content|>", "<|end|>", "<|begin|>assistant");

/// monarch: chatml-like, with `<s>` opening every message but the first.
pub(super) fn monarch(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            p.ctl("<s>");
        }
        p.role(m).ctl("\n").text(&m.content).ctl("</s>\n");
    }
    if add_generation {
        p.ctl("<s>assistant\n");
    }
}

/// Which granite template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Granite {
    /// `granite` (3.x): an `assistant_tool_call` message keeps its role name.
    V3,
    /// `granite-4.0` and `granite-4.1`: an `assistant_tool_call` message is an assistant
    /// turn.
    V4,
}

/// granite, granite-4.0, granite-4.1: a message of role `assistant_tool_call` gets
/// `<|tool_call|>` before its content.
pub(super) fn granite(p: &mut Prompt, messages: &[Message], add_generation: bool, v: Granite) {
    for m in messages {
        let tool_call = role(m) == "assistant_tool_call";
        if tool_call && v == Granite::V4 {
            p.ctl("<|start_of_role|>assistant<|end_of_role|>");
        } else {
            p.ctl("<|start_of_role|>").role(m).ctl("<|end_of_role|>");
        }
        if tool_call {
            p.ctl("<|tool_call|>");
        }
        p.text(&m.content).ctl("<|end_of_text|>\n");
    }
    if add_generation {
        p.ctl("<|start_of_role|>assistant<|end_of_role|>");
    }
}

/// gpt-oss (harmony): assistant turns end in `<|return|>`, all others in `<|end|>`.
pub(super) fn gpt_oss(p: &mut Prompt, messages: &[Message], add_generation: bool) {
    for m in messages {
        let close = if role(m) == "assistant" {
            "<|return|>"
        } else {
            "<|end|>"
        };
        p.ctl("<|start|>").role(m).ctl("<|message|>");
        p.text(&m.content).ctl(close);
    }
    if add_generation {
        p.ctl("<|start|>assistant");
    }
}
