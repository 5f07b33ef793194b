//! llama.cpp's named (built-in) chat templates: the names, detection from a Jinja source, and
//! renderings that keep template text and message content in separate segments.

mod detect;
mod error;

use std::fmt;
use std::str::FromStr;

use wick_types::Message;

use crate::Segments;

pub use error::NamedError;

/// llama.cpp's named (built-in) chat templates, one variant per name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NamedTemplate {
    /// `bailing`
    Bailing,
    /// `bailing-think`
    BailingThink,
    /// `bailing2`
    Bailing2,
    /// `chatglm3`
    Chatglm3,
    /// `chatglm4`
    Chatglm4,
    /// `chatml`
    Chatml,
    /// `command-r`
    CommandR,
    /// `deepseek`
    Deepseek,
    /// `deepseek-ocr`
    DeepseekOcr,
    /// `deepseek2`
    Deepseek2,
    /// `deepseek3`
    Deepseek3,
    /// `exaone-moe`
    ExaoneMoe,
    /// `exaone3`
    Exaone3,
    /// `exaone4`
    Exaone4,
    /// `falcon3`
    Falcon3,
    /// `gemma`
    Gemma,
    /// `gigachat`
    Gigachat,
    /// `glmedge`
    Glmedge,
    /// `gpt-oss`
    GptOss,
    /// `granite`
    Granite,
    /// `granite-4.0`
    Granite40,
    /// `granite-4.1`
    Granite41,
    /// `grok-2`
    Grok2,
    /// `hunyuan-dense`
    HunyuanDense,
    /// `hunyuan-moe`
    HunyuanMoe,
    /// `hunyuan-vl`
    HunyuanVl,
    /// `kimi-k2`
    KimiK2,
    /// `llama2`
    Llama2,
    /// `llama2-sys`
    Llama2Sys,
    /// `llama2-sys-bos`
    Llama2SysBos,
    /// `llama2-sys-strip`
    Llama2SysStrip,
    /// `llama3`
    Llama3,
    /// `llama4`
    Llama4,
    /// `megrez`
    Megrez,
    /// `minicpm`
    Minicpm,
    /// `mistral-v1`
    MistralV1,
    /// `mistral-v3`
    MistralV3,
    /// `mistral-v3-tekken`
    MistralV3Tekken,
    /// `mistral-v7`
    MistralV7,
    /// `mistral-v7-tekken`
    MistralV7Tekken,
    /// `monarch`
    Monarch,
    /// `openchat`
    Openchat,
    /// `orion`
    Orion,
    /// `pangu-embedded`
    PanguEmbedded,
    /// `phi3`
    Phi3,
    /// `phi4`
    Phi4,
    /// `rwkv-world`
    RwkvWorld,
    /// `seed_oss`
    SeedOss,
    /// `smolvlm`
    Smolvlm,
    /// `solar-open`
    SolarOpen,
    /// `vicuna`
    Vicuna,
    /// `vicuna-orca`
    VicunaOrca,
    /// `yandex`
    Yandex,
    /// `zephyr`
    Zephyr,
}

impl NamedTemplate {
    /// Every named template, in llama.cpp's sorted name order.
    pub const ALL: &'static [NamedTemplate] = &[
        NamedTemplate::Bailing,
        NamedTemplate::BailingThink,
        NamedTemplate::Bailing2,
        NamedTemplate::Chatglm3,
        NamedTemplate::Chatglm4,
        NamedTemplate::Chatml,
        NamedTemplate::CommandR,
        NamedTemplate::Deepseek,
        NamedTemplate::DeepseekOcr,
        NamedTemplate::Deepseek2,
        NamedTemplate::Deepseek3,
        NamedTemplate::ExaoneMoe,
        NamedTemplate::Exaone3,
        NamedTemplate::Exaone4,
        NamedTemplate::Falcon3,
        NamedTemplate::Gemma,
        NamedTemplate::Gigachat,
        NamedTemplate::Glmedge,
        NamedTemplate::GptOss,
        NamedTemplate::Granite,
        NamedTemplate::Granite40,
        NamedTemplate::Granite41,
        NamedTemplate::Grok2,
        NamedTemplate::HunyuanDense,
        NamedTemplate::HunyuanMoe,
        NamedTemplate::HunyuanVl,
        NamedTemplate::KimiK2,
        NamedTemplate::Llama2,
        NamedTemplate::Llama2Sys,
        NamedTemplate::Llama2SysBos,
        NamedTemplate::Llama2SysStrip,
        NamedTemplate::Llama3,
        NamedTemplate::Llama4,
        NamedTemplate::Megrez,
        NamedTemplate::Minicpm,
        NamedTemplate::MistralV1,
        NamedTemplate::MistralV3,
        NamedTemplate::MistralV3Tekken,
        NamedTemplate::MistralV7,
        NamedTemplate::MistralV7Tekken,
        NamedTemplate::Monarch,
        NamedTemplate::Openchat,
        NamedTemplate::Orion,
        NamedTemplate::PanguEmbedded,
        NamedTemplate::Phi3,
        NamedTemplate::Phi4,
        NamedTemplate::RwkvWorld,
        NamedTemplate::SeedOss,
        NamedTemplate::Smolvlm,
        NamedTemplate::SolarOpen,
        NamedTemplate::Vicuna,
        NamedTemplate::VicunaOrca,
        NamedTemplate::Yandex,
        NamedTemplate::Zephyr,
    ];

    /// llama.cpp's name for the template (`"chatml"`, `"llama3"`, …).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            NamedTemplate::Bailing => "bailing",
            NamedTemplate::BailingThink => "bailing-think",
            NamedTemplate::Bailing2 => "bailing2",
            NamedTemplate::Chatglm3 => "chatglm3",
            NamedTemplate::Chatglm4 => "chatglm4",
            NamedTemplate::Chatml => "chatml",
            NamedTemplate::CommandR => "command-r",
            NamedTemplate::Deepseek => "deepseek",
            NamedTemplate::DeepseekOcr => "deepseek-ocr",
            NamedTemplate::Deepseek2 => "deepseek2",
            NamedTemplate::Deepseek3 => "deepseek3",
            NamedTemplate::ExaoneMoe => "exaone-moe",
            NamedTemplate::Exaone3 => "exaone3",
            NamedTemplate::Exaone4 => "exaone4",
            NamedTemplate::Falcon3 => "falcon3",
            NamedTemplate::Gemma => "gemma",
            NamedTemplate::Gigachat => "gigachat",
            NamedTemplate::Glmedge => "glmedge",
            NamedTemplate::GptOss => "gpt-oss",
            NamedTemplate::Granite => "granite",
            NamedTemplate::Granite40 => "granite-4.0",
            NamedTemplate::Granite41 => "granite-4.1",
            NamedTemplate::Grok2 => "grok-2",
            NamedTemplate::HunyuanDense => "hunyuan-dense",
            NamedTemplate::HunyuanMoe => "hunyuan-moe",
            NamedTemplate::HunyuanVl => "hunyuan-vl",
            NamedTemplate::KimiK2 => "kimi-k2",
            NamedTemplate::Llama2 => "llama2",
            NamedTemplate::Llama2Sys => "llama2-sys",
            NamedTemplate::Llama2SysBos => "llama2-sys-bos",
            NamedTemplate::Llama2SysStrip => "llama2-sys-strip",
            NamedTemplate::Llama3 => "llama3",
            NamedTemplate::Llama4 => "llama4",
            NamedTemplate::Megrez => "megrez",
            NamedTemplate::Minicpm => "minicpm",
            NamedTemplate::MistralV1 => "mistral-v1",
            NamedTemplate::MistralV3 => "mistral-v3",
            NamedTemplate::MistralV3Tekken => "mistral-v3-tekken",
            NamedTemplate::MistralV7 => "mistral-v7",
            NamedTemplate::MistralV7Tekken => "mistral-v7-tekken",
            NamedTemplate::Monarch => "monarch",
            NamedTemplate::Openchat => "openchat",
            NamedTemplate::Orion => "orion",
            NamedTemplate::PanguEmbedded => "pangu-embedded",
            NamedTemplate::Phi3 => "phi3",
            NamedTemplate::Phi4 => "phi4",
            NamedTemplate::RwkvWorld => "rwkv-world",
            NamedTemplate::SeedOss => "seed_oss",
            NamedTemplate::Smolvlm => "smolvlm",
            NamedTemplate::SolarOpen => "solar-open",
            NamedTemplate::Vicuna => "vicuna",
            NamedTemplate::VicunaOrca => "vicuna-orca",
            NamedTemplate::Yandex => "yandex",
            NamedTemplate::Zephyr => "zephyr",
        }
    }
}
impl NamedTemplate {
    /// The template whose rules llama.cpp's `llm_chat_detect_template` picks for a Jinja
    /// source (or for a source that is exactly a template name); `None` where llama.cpp knows
    /// none.
    #[must_use]
    pub fn detect(jinja_source: &str) -> Option<NamedTemplate> {
        detect::detect(jinja_source)
    }

    /// Renders `messages` as llama.cpp's `llm_chat_apply_template` does, template text as
    /// control segments and message content as content segments.
    ///
    /// # Errors
    ///
    /// [`NamedError::UnsupportedRole`] or [`NamedError::UnsupportedConversation`] where
    /// llama.cpp fails for this template and conversation.
    pub fn render(
        self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Segments, NamedError> {
        let _ = (messages, add_generation_prompt);
        Err(NamedError::UnsupportedConversation {
            template: self,
            reason: "not implemented yet",
        })
    }

    /// The strings that end a turn of this template (its end-of-turn and stop texts).
    #[must_use]
    pub fn stops(self) -> &'static [&'static str] {
        &[]
    }
}

impl FromStr for NamedTemplate {
    type Err = NamedError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        NamedTemplate::ALL
            .iter()
            .copied()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| NamedError::UnknownName {
                name: name.to_owned(),
            })
    }
}

impl fmt::Display for NamedTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
