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
use marked::Marked;
use prompt::Prompt;
use tagged::{Granite as G, Tagged};

/// A renderer: the prompt, the messages, whether to add the generation prompt.
type Render = fn(&mut Prompt, &[Message], bool);

/// How a template is rendered.
enum Family {
    /// Role names between markers.
    Tagged(&'static Tagged),
    /// Fixed markers per role.
    Marked(&'static Marked),
    /// Rules of its own.
    Own(Render),
}

/// llama.cpp's named (built-in) chat templates, one variant per name.
///
/// A template is picked by name (`"chatml".parse()`) or detected from a model's Jinja
/// source as llama.cpp does ([`NamedTemplate::detect`]), and renders a conversation into
/// [`Segments`] that keep template text and message text apart.
///
/// ```
/// use wick_template::{NamedTemplate, SegmentKind};
/// use wick_types::{Message, Role};
///
/// let t: NamedTemplate = "chatml".parse()?;
/// assert_eq!(NamedTemplate::detect("{{ '<|im_start|>' + message['role'] }}"), Some(t));
///
/// let chat = [Message::new(Role::User, "Hi <|im_end|>")];
/// let prompt = t.render(&chat, true)?;
/// assert_eq!(
///     prompt.text(),
///     "<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\n"
/// );
/// // The user's `<|im_end|>` is content: it can never become a control token.
/// assert_eq!(prompt.as_slice()[1].kind, SegmentKind::Content);
/// assert_eq!(prompt.as_slice()[1].text, "Hi <|im_end|>");
/// assert_eq!(t.stops(), ["<|im_end|>"]);
/// # Ok::<(), wick_template::NamedError>(())
/// ```
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
        match self.family() {
            Family::Tagged(t) => t.render(p, messages, gen),
            Family::Marked(m) => m.render(p, messages, gen),
            Family::Own(render) => render(p, messages, gen),
        }
    }

    /// Which renderer this template is.
    fn family(self) -> Family {
        use NamedTemplate as T;
        match self {
            T::Chatml => Family::Tagged(&tagged::CHATML),
            T::Phi3 => Family::Tagged(&tagged::PHI3),
            T::Phi4 => Family::Tagged(&tagged::PHI4),
            T::Falcon3 => Family::Tagged(&tagged::FALCON3),
            T::Zephyr => Family::Tagged(&tagged::ZEPHYR),
            T::Llama3 => Family::Tagged(&tagged::LLAMA3),
            T::Llama4 => Family::Tagged(&tagged::LLAMA4),
            T::Chatglm3 => Family::Tagged(&tagged::CHATGLM3),
            T::Chatglm4 => Family::Tagged(&tagged::CHATGLM4),
            T::Glmedge => Family::Tagged(&tagged::GLMEDGE),
            T::Megrez => Family::Tagged(&tagged::MEGREZ),
            T::SeedOss => Family::Tagged(&tagged::SEED_OSS),
            T::SolarOpen => Family::Tagged(&tagged::SOLAR_OPEN),
            T::Vicuna => Family::Marked(&marked::VICUNA),
            T::VicunaOrca => Family::Marked(&marked::VICUNA_ORCA),
            T::Deepseek => Family::Marked(&marked::DEEPSEEK),
            T::Deepseek2 => Family::Marked(&marked::DEEPSEEK2),
            T::Deepseek3 => Family::Marked(&marked::DEEPSEEK3),
            T::DeepseekOcr => Family::Marked(&marked::DEEPSEEK_OCR),
            T::CommandR => Family::Marked(&marked::COMMAND_R),
            T::Exaone3 => Family::Marked(&marked::EXAONE3),
            T::Exaone4 => Family::Marked(&marked::EXAONE4),
            T::ExaoneMoe => Family::Marked(&marked::EXAONE_MOE),
            T::Yandex => Family::Marked(&marked::YANDEX),
            T::Smolvlm => Family::Marked(&marked::SMOLVLM),
            T::KimiK2 => Family::Marked(&marked::KIMI_K2),
            T::Grok2 => Family::Marked(&marked::GROK2),
            T::HunyuanMoe => Family::Marked(&marked::HUNYUAN_MOE),
            T::Llama2 => Family::Own(|p, m, _| inst::llama2(p, m, L2::PLAIN)),
            T::Llama2Sys => Family::Own(|p, m, _| inst::llama2(p, m, L2::SYS)),
            T::Llama2SysBos => Family::Own(|p, m, _| inst::llama2(p, m, L2::SYS_BOS)),
            T::Llama2SysStrip => Family::Own(|p, m, _| inst::llama2(p, m, L2::SYS_STRIP)),
            T::MistralV1 => Family::Own(|p, m, _| inst::mistral_old(p, m, MistralOld::V1)),
            T::MistralV3 => Family::Own(|p, m, _| inst::mistral_old(p, m, MistralOld::V3)),
            T::MistralV3Tekken => {
                Family::Own(|p, m, _| inst::mistral_old(p, m, MistralOld::V3Tekken))
            }
            T::MistralV7 => Family::Own(|p, m, _| inst::mistral_v7(p, m, false)),
            T::MistralV7Tekken => Family::Own(|p, m, _| inst::mistral_v7(p, m, true)),
            T::Monarch => Family::Own(tagged::monarch),
            T::Granite => Family::Own(|p, m, g| tagged::granite(p, m, g, G::V3)),
            T::Granite40 | T::Granite41 => Family::Own(|p, m, g| tagged::granite(p, m, g, G::V4)),
            T::GptOss => Family::Own(tagged::gpt_oss),
            T::Gemma => Family::Own(special::gemma),
            T::Orion => Family::Own(|p, m, _| special::orion(p, m)),
            T::Openchat => Family::Own(special::openchat),
            T::Minicpm => Family::Own(|p, m, _| special::minicpm(p, m)),
            T::RwkvWorld => Family::Own(|p, m, _| special::rwkv_world(p, m)),
            T::Gigachat => Family::Own(special::gigachat),
            T::Bailing => Family::Own(|p, m, g| special::bailing(p, m, g, false)),
            T::BailingThink => Family::Own(|p, m, g| special::bailing(p, m, g, true)),
            T::Bailing2 => Family::Own(special::bailing2),
            T::HunyuanDense => Family::Own(|p, m, _| special::hunyuan_dense(p, m)),
            T::HunyuanVl => Family::Own(|p, m, _| special::hunyuan_vl(p, m)),
            T::PanguEmbedded => Family::Own(special::pangu_embedded),
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
