//! The end-of-turn texts of each named template.

use super::NamedTemplate;
use super::NamedTemplate as T;

/// See [`NamedTemplate::stops`].
pub(super) fn stops(t: NamedTemplate) -> &'static [&'static str] {
    match t {
        T::Chatml | T::Phi4 | T::KimiK2 => &["<|im_end|>"],
        T::Llama2
        | T::Llama2Sys
        | T::Llama2SysBos
        | T::Llama2SysStrip
        | T::MistralV1
        | T::MistralV3
        | T::MistralV3Tekken
        | T::MistralV7
        | T::MistralV7Tekken
        | T::Monarch
        | T::Orion
        | T::Vicuna
        | T::VicunaOrca => &["</s>"],
        T::Phi3 | T::SolarOpen => &["<|end|>"],
        // falcon3 ends a turn with a bare newline: the next turn's marker is the stop.
        T::Falcon3 => &["<|user|>", "<|endoftext|>"],
        T::Zephyr => &["<|endoftext|>"],
        T::Gemma => &["<end_of_turn>"],
        T::Openchat => &["<|end_of_turn|>"],
        T::Deepseek => &["<|EOT|>"],
        T::Deepseek2 | T::Deepseek3 => &["<｜end▁of▁sentence｜>"],
        T::DeepseekOcr => &[],
        T::CommandR => &["<|END_OF_TURN_TOKEN|>"],
        T::Llama3 => &["<|eot_id|>"],
        T::Llama4 => &["<|eot|>"],
        T::Chatglm3 | T::Chatglm4 | T::Glmedge => &["<|user|>", "<|observation|>"],
        T::Minicpm => &["<用户>"],
        T::Exaone3 | T::Exaone4 => &["[|endofturn|]"],
        T::ExaoneMoe => &["<|endofturn|>"],
        // Both define a blank line as the end of a turn.
        T::RwkvWorld | T::Yandex => &["\n\n"],
        T::Granite | T::Granite40 | T::Granite41 => &["<|end_of_text|>"],
        T::Gigachat => &["<|message_sep|>"],
        T::Megrez => &["<|turn_end|>"],
        T::Bailing | T::BailingThink => &["<role>"],
        T::Bailing2 => &["<|role_end|>"],
        T::Smolvlm => &["<end_of_utterance>"],
        T::HunyuanMoe => &["<|eos|>"],
        T::GptOss => &["<|return|>", "<|call|>"],
        T::HunyuanDense => &["<｜hy_place▁holder▁no▁2｜>"],
        T::HunyuanVl => &["<｜hy_Assistant｜>"],
        T::SeedOss => &["<seed:eos>"],
        T::Grok2 => &["<|separator|>"],
        T::PanguEmbedded => &["[unused10]"],
    }
}
