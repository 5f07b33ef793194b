//! llama.cpp's named (built-in) chat templates: the names, detection from a Jinja source, and
//! renderings that keep template text and message content in separate segments.

mod detect;
mod error;
mod inst;
mod marked;
mod prompt;
mod special;
mod stops;
mod tagged;

use std::fmt;
use std::str::FromStr;

use wick_types::Message;

use crate::Segments;

pub use error::NamedError;

use inst::{Llama2 as L2, MistralOld};
use prompt::Prompt;
use tagged::Granite as G;

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
    /// control segments and message content (trimmed, where the template trims) as content
    /// segments. Role names other than the four standard ones are content too.
    ///
    /// Roles the template has no rule for are handled as llama.cpp handles them: dropped by
    /// some templates, written verbatim or treated as the assistant by others. Templates
    /// that have no generation prompt ignore `add_generation_prompt`.
    ///
    /// # Errors
    ///
    /// [`NamedError::UnsupportedRole`] or [`NamedError::UnsupportedConversation`] where
    /// llama.cpp fails for this template and conversation; llama.cpp's renderer accepts
    /// every conversation for the 54 named templates, so none does today.
    pub fn render(
        self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Segments, NamedError> {
        let mut p = Prompt::default();
        self.render_into(&mut p, messages, add_generation_prompt);
        Ok(p.finish())
    }

    /// Dispatches to the family renderer.
    fn render_into(self, p: &mut Prompt, messages: &[Message], gen: bool) {
        use NamedTemplate as T;
        let llama2 = |sys_markers, bos_in_history, strip| L2 {
            sys_markers,
            bos_in_history,
            strip,
        };
        match self {
            T::Chatml => tagged::CHATML.render(p, messages, gen),
            T::Phi3 => tagged::PHI3.render(p, messages, gen),
            T::Phi4 => tagged::PHI4.render(p, messages, gen),
            T::Falcon3 => tagged::FALCON3.render(p, messages, gen),
            T::Zephyr => tagged::ZEPHYR.render(p, messages, gen),
            T::Llama3 => tagged::LLAMA3.render(p, messages, gen),
            T::Llama4 => tagged::LLAMA4.render(p, messages, gen),
            T::Chatglm3 => tagged::CHATGLM3.render(p, messages, gen),
            T::Chatglm4 => tagged::CHATGLM4.render(p, messages, gen),
            T::Glmedge => tagged::GLMEDGE.render(p, messages, gen),
            T::Megrez => tagged::MEGREZ.render(p, messages, gen),
            T::SeedOss => tagged::SEED_OSS.render(p, messages, gen),
            T::SolarOpen => tagged::SOLAR_OPEN.render(p, messages, gen),
            T::Monarch => tagged::monarch(p, messages, gen),
            T::Granite => tagged::granite(p, messages, gen, G::V3),
            T::Granite40 | T::Granite41 => tagged::granite(p, messages, gen, G::V4),
            T::GptOss => tagged::gpt_oss(p, messages, gen),
            T::Llama2 => inst::llama2(p, messages, llama2(false, false, false)),
            T::Llama2Sys => inst::llama2(p, messages, llama2(true, false, false)),
            T::Llama2SysBos => inst::llama2(p, messages, llama2(true, true, false)),
            T::Llama2SysStrip => inst::llama2(p, messages, llama2(true, false, true)),
            T::MistralV1 => inst::mistral_old(p, messages, MistralOld::V1),
            T::MistralV3 => inst::mistral_old(p, messages, MistralOld::V3),
            T::MistralV3Tekken => inst::mistral_old(p, messages, MistralOld::V3Tekken),
            T::MistralV7 => inst::mistral_v7(p, messages, false),
            T::MistralV7Tekken => inst::mistral_v7(p, messages, true),
            _ => self.render_other(p, messages, gen),
        }
    }

    /// The marked and special families.
    fn render_other(self, p: &mut Prompt, messages: &[Message], gen: bool) {
        use NamedTemplate as T;
        let marked = match self {
            T::Vicuna => marked::VICUNA,
            T::VicunaOrca => marked::VICUNA_ORCA,
            T::Deepseek => marked::DEEPSEEK,
            T::Deepseek2 => marked::DEEPSEEK2,
            T::Deepseek3 => marked::DEEPSEEK3,
            T::DeepseekOcr => marked::DEEPSEEK_OCR,
            T::CommandR => marked::COMMAND_R,
            T::Exaone3 => marked::EXAONE3,
            T::Exaone4 => marked::EXAONE4,
            T::ExaoneMoe => marked::EXAONE_MOE,
            T::Yandex => marked::YANDEX,
            T::Smolvlm => marked::SMOLVLM,
            T::KimiK2 => marked::KIMI_K2,
            T::Grok2 => marked::GROK2,
            T::HunyuanMoe => marked::HUNYUAN_MOE,
            _ => return self.render_special(p, messages, gen),
        };
        marked.render(p, messages, gen);
    }

    /// Templates with a rule of their own.
    fn render_special(self, p: &mut Prompt, messages: &[Message], gen: bool) {
        use NamedTemplate as T;
        match self {
            T::Gemma => special::gemma(p, messages, gen),
            T::Orion => special::orion(p, messages),
            T::Openchat => special::openchat(p, messages, gen),
            T::Minicpm => special::minicpm(p, messages),
            T::RwkvWorld => special::rwkv_world(p, messages),
            T::Gigachat => special::gigachat(p, messages, gen),
            T::Bailing => special::bailing(p, messages, gen, false),
            T::BailingThink => special::bailing(p, messages, gen, true),
            T::Bailing2 => special::bailing2(p, messages, gen),
            T::HunyuanDense => special::hunyuan_dense(p, messages),
            T::HunyuanVl => special::hunyuan_vl(p, messages),
            T::PanguEmbedded => special::pangu_embedded(p, messages, gen),
            _ => unreachable!("every template is rendered by exactly one family: {self}"),
        }
    }

    /// The texts that end a model turn in this template: the marker it writes after an
    /// assistant message, or, where it writes none, the marker that opens the next turn.
    /// Empty for `deepseek-ocr`, which has no markup at all.
    #[must_use]
    pub fn stops(self) -> &'static [&'static str] {
        stops::stops(self)
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
