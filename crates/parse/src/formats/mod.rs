//! The formats, one family per file, and their ordered registry.
//!
//! # How to add a format
//!
//! 1. Add a variant to [`Format`], its corpus name to `Format::as_str` and a place in
//!    [`Format::ALL`] (the order is the order of `--list-formats` and of the detection table
//!    in `detect.rs`, whose more specific markers must come before more general ones).
//! 2. Describe it in its family's `syntax` function as an engine `Syntax`: reasoning
//!    delimiters, dropped wrappers, call-block openers, and a `make` function that builds the
//!    block state machine for an opener. Reuse the shared machines where the syntax allows:
//!    `CallObject`/`CallArray` (JSON calls), `JsonArgs` (a JSON argument object),
//!    `XmlBlock` (XML-style parameters with schema typing), `KwargsCall` (python-style
//!    arguments), `LiteralArgs` (Gemma literals).
//! 3. A block only consumes input; before its first commit (README L7) it may return
//!    `Step::Diverged`, after which the engine re-reads its text as content. After a commit it
//!    never diverges; cut or invalid arguments are healed by the shared machines.
//! 4. Add cases to the corpus and a detection marker to `detect.rs`.

mod deepseek;
mod functionary;
mod gemma;
mod harmony;
mod json;
mod kimi;
mod mistral;
mod pythonic;
mod xml;

use crate::engine::Syntax;
use crate::error::ParseError;

/// An output format (the corpus's names; see the crate docs for the syntax of each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// No tool syntax; `<think>` reasoning at the start.
    ContentOnly,
    /// The whole output is one JSON object (`tool_call`, `tool_calls` or `response`).
    Generic,
    /// `[TOOL_CALLS]` + a JSON array of calls.
    MistralNemo,
    /// Mistral Nemo calls with `[THINK]` reasoning.
    Magistral,
    /// `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{…}`.
    MistralArgs,
    /// One JSON `{"name", "parameters"}` object at the start.
    Llama3x,
    /// Llama 3.x with `<|python_tag|>NAME.call(k=v)` built-in tools.
    Llama3xBuiltin,
    /// `<function=NAME>{…}</function>` and `<|python_tag|>` raw code.
    FunctionaryV31,
    /// Recipient lines: `all\n`, `NAME\n{…}`, `>>>NAME\n…`.
    FunctionaryV32,
    /// `<tool_call>{…}</tool_call>` with `<think>`.
    Hermes,
    /// DeepSeek R1 tool-call tokens with a fenced JSON body.
    DeepseekR1,
    /// DeepSeek V3.1 tool-call tokens.
    DeepseekV31,
    /// DeepSeek V3.2/V4 DSML markup.
    DeepseekDsml,
    /// Cohere Command R7B actions.
    CommandR7b,
    /// ` functools[` + a JSON array.
    FirefunctionV2,
    /// IBM Granite 3.x `<|tool_call|>` + a JSON array.
    Granite,
    /// OpenAI harmony (gpt-oss).
    GptOss,
    /// ByteDance Seed-OSS XML.
    SeedOss,
    /// NVIDIA Nemotron v2 `<TOOLCALL>[…]</TOOLCALL>`.
    NemotronV2,
    /// Qwen3-Coder XML parameters.
    Qwen3CoderXml,
    /// Swiss AI Apertus short-form JSON.
    Apertus,
    /// LiquidAI LFM2 python-style calls.
    Lfm2,
    /// MiniMax M2 `<invoke>` XML.
    MinimaxM2,
    /// GLM 4.5 `<arg_key>`/`<arg_value>`.
    Glm45,
    /// Moonshot Kimi K2 tool-call tokens.
    KimiK2,
    /// ServiceNow Apriel 1.5 `<tool_calls>[…]</tool_calls>`.
    Apriel15,
    /// Google Gemma 4 `<|tool_call>call:NAME{…}<tool_call|>`.
    Gemma4,
    /// Google FunctionGemma `<start_function_call>`.
    FunctionGemma,
    /// Sber GigaChat 3 `function call` messages.
    GigachatV3,
}

impl Format {
    /// Every format, in registry order.
    pub const ALL: [Format; 29] = [
        Format::ContentOnly,
        Format::Generic,
        Format::MistralNemo,
        Format::Magistral,
        Format::MistralArgs,
        Format::Llama3x,
        Format::Llama3xBuiltin,
        Format::FunctionaryV31,
        Format::FunctionaryV32,
        Format::Hermes,
        Format::DeepseekR1,
        Format::DeepseekV31,
        Format::DeepseekDsml,
        Format::CommandR7b,
        Format::FirefunctionV2,
        Format::Granite,
        Format::GptOss,
        Format::SeedOss,
        Format::NemotronV2,
        Format::Qwen3CoderXml,
        Format::Apertus,
        Format::Lfm2,
        Format::MinimaxM2,
        Format::Glm45,
        Format::KimiK2,
        Format::Apriel15,
        Format::Gemma4,
        Format::FunctionGemma,
        Format::GigachatV3,
    ];

    /// The format's name, as in the corpus (`hermes`, `qwen3_coder_xml`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::ContentOnly => "content_only",
            Format::Generic => "generic",
            Format::MistralNemo => "mistral_nemo",
            Format::Magistral => "magistral",
            Format::MistralArgs => "mistral_args",
            Format::Llama3x => "llama3x",
            Format::Llama3xBuiltin => "llama3x_builtin",
            Format::FunctionaryV31 => "functionary_v3_1",
            Format::FunctionaryV32 => "functionary_v3_2",
            Format::Hermes => "hermes",
            Format::DeepseekR1 => "deepseek_r1",
            Format::DeepseekV31 => "deepseek_v3_1",
            Format::DeepseekDsml => "deepseek_dsml",
            Format::CommandR7b => "command_r7b",
            Format::FirefunctionV2 => "firefunction_v2",
            Format::Granite => "granite",
            Format::GptOss => "gpt_oss",
            Format::SeedOss => "seed_oss",
            Format::NemotronV2 => "nemotron_v2",
            Format::Qwen3CoderXml => "qwen3_coder_xml",
            Format::Apertus => "apertus",
            Format::Lfm2 => "lfm2",
            Format::MinimaxM2 => "minimax_m2",
            Format::Glm45 => "glm_4_5",
            Format::KimiK2 => "kimi_k2",
            Format::Apriel15 => "apriel_1_5",
            Format::Gemma4 => "gemma4",
            Format::FunctionGemma => "function_gemma",
            Format::GigachatV3 => "gigachat_v3",
        }
    }

    /// The engine description of this format.
    pub(crate) fn syntax(self) -> Syntax {
        match self {
            Format::ContentOnly
            | Format::Generic
            | Format::MistralNemo
            | Format::Magistral
            | Format::Llama3x
            | Format::Hermes
            | Format::CommandR7b
            | Format::FirefunctionV2
            | Format::Granite
            | Format::NemotronV2
            | Format::Apertus
            | Format::Apriel15
            | Format::GigachatV3 => json::syntax(self),
            Format::MistralArgs => mistral::syntax(self),
            Format::Llama3xBuiltin | Format::Lfm2 => pythonic::syntax(self),
            Format::FunctionaryV31 | Format::FunctionaryV32 => functionary::syntax(self),
            Format::DeepseekR1 | Format::DeepseekV31 => deepseek::syntax(self),
            Format::DeepseekDsml
            | Format::SeedOss
            | Format::Qwen3CoderXml
            | Format::MinimaxM2
            | Format::Glm45 => xml::syntax(self),
            Format::GptOss => harmony::syntax(self),
            Format::KimiK2 => kimi::syntax(self),
            Format::Gemma4 | Format::FunctionGemma => gemma::syntax(self),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Format {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| ParseError::UnknownFormat {
                name: s.to_owned(),
                known: Format::ALL
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// `<think>` … `</think>` at the start.
pub(crate) const THINK: crate::engine::Reasoning = crate::engine::Reasoning {
    open: &["<think>"],
    close: &["</think>"],
    interleaved: false,
};
