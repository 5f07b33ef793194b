//! llama.cpp's `llm_chat_detect_template`: which named template a Jinja source is, by plain
//! substring tests checked in llama.cpp's order (the first match wins, so the order is the
//! rule: `<|im_start|>` must win over everything, phi3's `<|end|>` over glmedge, …).

use super::NamedTemplate;
use super::NamedTemplate as T;

/// What detection finds: a named template, or llama.cpp's `dots1`, which is detectable but
/// has no name (and so no [`NamedTemplate`]).
enum Found {
    Named(NamedTemplate),
    Dots1,
}

/// See [`NamedTemplate::detect`].
pub(super) fn detect(source: &str) -> Option<NamedTemplate> {
    if let Ok(named) = source.parse() {
        return Some(named);
    }
    match by_content(source)? {
        Found::Named(t) => Some(t),
        Found::Dots1 => None,
    }
}

/// The substring rules, in llama.cpp's order.
fn by_content(t: &str) -> Option<Found> {
    let has = |needle: &str| t.contains(needle);
    let named = |n| Some(Found::Named(n));
    if has("<|im_start|>") {
        return if has("<|im_sep|>") {
            named(T::Phi4)
        } else if has("<end_of_utterance>") {
            named(T::Smolvlm)
        } else {
            named(T::Chatml)
        };
    }
    if t.starts_with("mistral") || has("[INST]") {
        return named(inst_family(t));
    }
    if has("<|assistant|>") && has("<|end|>") {
        return named(T::Phi3);
    }
    if has("[gMASK]<sop>") {
        return named(T::Chatglm4);
    }
    if has("<|assistant|>") && has("<|user|>") {
        return if has("<|tool_declare|>") {
            named(T::ExaoneMoe)
        } else if has("</s>") {
            named(T::Falcon3)
        } else {
            named(T::Glmedge)
        };
    }
    if has("<|{{ item['role'] }}|>") && has("<|begin_of_image|>") {
        return named(T::Glmedge);
    }
    if has("<|user|>") && has("<|endoftext|>") {
        return named(T::Zephyr);
    }
    if has("bos_token + message['role']") {
        return named(T::Monarch);
    }
    if has("<start_of_turn>") {
        return named(T::Gemma);
    }
    early_families(t)
        .or_else(|| later_families(t))
        .map(Found::Named)
        .or_else(|| has("<|endofuserprompt|>").then_some(Found::Dots1))
        .or_else(|| latest_families(t).map(Found::Named))
}

/// The `[INST]` family: mistral v7, v1, v3, v3-tekken, then the llama2 variants.
fn inst_family(t: &str) -> NamedTemplate {
    let has = |needle: &str| t.contains(needle);
    if has("[SYSTEM_PROMPT]") {
        T::MistralV7
    } else if has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]") {
        if has(" [INST]") {
            T::MistralV1
        } else if has("\"[INST]\"") {
            T::MistralV3Tekken
        } else {
            T::MistralV3
        }
    } else if has("content.strip()") {
        T::Llama2SysStrip
    } else if has("bos_token + '[INST]") {
        T::Llama2SysBos
    } else if has("<<SYS>>") {
        T::Llama2Sys
    } else {
        T::Llama2
    }
}

/// Orion through granite, in llama.cpp's order.
fn early_families(t: &str) -> Option<T> {
    let has = |needle: &str| t.contains(needle);
    let found = if has("'\\n\\nAssistant: ' + eos_token") {
        T::Orion
    } else if has("GPT4 Correct ") {
        T::Openchat
    } else if has("USER: ") && has("ASSISTANT: ") {
        if has("SYSTEM: ") {
            T::VicunaOrca
        } else {
            T::Vicuna
        }
    } else if has("### Instruction:") && has("<|EOT|>") {
        T::Deepseek
    } else if has("<|START_OF_TURN_TOKEN|>") && has("<|USER_TOKEN|>") {
        T::CommandR
    } else if has("<|start_header_id|>") && has("<|end_header_id|>") {
        T::Llama3
    } else if has("[gMASK]sop") {
        T::Chatglm3
    } else if has("<用户>") {
        T::Minicpm
    } else if has("'Assistant: ' + message['content'] + eos_token") {
        T::Deepseek2
    } else if has("<｜Assistant｜>") && has("<｜User｜>") && has("<｜end▁of▁sentence｜>")
    {
        T::Deepseek3
    } else if has("[|system|]") && has("[|assistant|]") && has("[|endofturn|]") {
        if has("[|tool|]") {
            T::Exaone4
        } else {
            T::Exaone3
        }
    } else if has("rwkv-world") || has("{{- 'User: ' + message['content']|trim + '\\n\\n' -}}") {
        T::RwkvWorld
    } else if has("<|start_of_role|>") {
        granite(t)
    } else {
        return None;
    };
    Some(found)
}

/// Which granite: tool-call markup with the 4.0 default system message is 4.0, without it
/// 4.1, and no tool-call markup at all the 3.x template.
fn granite(t: &str) -> NamedTemplate {
    let tools = t.contains("<tool_call>") || t.contains("<tools>");
    if tools && t.contains("g4_default_system_message") {
        T::Granite40
    } else if tools {
        T::Granite41
    } else {
        T::Granite
    }
}

/// Gigachat through llama4 (the rules checked before dots1).
fn later_families(t: &str) -> Option<T> {
    let has = |needle: &str| t.contains(needle);
    let bailing = has("<role>ASSISTANT</role>");
    let found = if has(
        "message['role'] + additional_special_tokens[0] + message['content'] + \
         additional_special_tokens[1]",
    ) {
        T::Gigachat
    } else if has("<|role_start|>") {
        T::Megrez
    } else if has(" Ассистент:") {
        T::Yandex
    } else if bailing && has("'HUMAN'") {
        T::Bailing
    } else if bailing && has("\"HUMAN\"") && has("<think>") {
        T::BailingThink
    } else if bailing && has("<role>HUMAN</role>") && has("<|role_end|>") {
        T::Bailing2
    } else if has("<|header_start|>") && has("<|header_end|>") {
        T::Llama4
    } else {
        return None;
    };
    Some(found)
}

/// Hunyuan-moe through solar-open (the rules checked after dots1).
fn latest_families(t: &str) -> Option<T> {
    let has = |needle: &str| t.contains(needle);
    let found = if has("<|extra_0|>") && has("<|extra_4|>") {
        T::HunyuanMoe
    } else if has("<|start|>") && has("<|channel|>") {
        T::GptOss
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_begin▁of▁sentence｜>") {
        T::HunyuanVl
    } else if has("<｜hy_Assistant｜>") && has("<｜hy_place▁holder▁no▁3｜>") {
        T::HunyuanDense
    } else if has("<|im_assistant|>assistant<|im_middle|>") {
        T::KimiK2
    } else if has("<seed:bos>") {
        T::SeedOss
    } else if has("'Assistant: '  + message['content'] + '<|separator|>") {
        T::Grok2
    } else if has("[unused9]系统：[unused10]") {
        T::PanguEmbedded
    } else if has("<|begin|>") && has("<|end|>") && has("<|content|>") {
        T::SolarOpen
    } else {
        return None;
    };
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_select_directly() {
        for &t in NamedTemplate::ALL {
            assert_eq!(detect(t.as_str()), Some(t));
        }
    }

    #[test]
    fn order_decides_between_overlapping_rules() {
        // chatml's marker wins over everything after it.
        assert_eq!(detect("<|im_start|>[INST]"), Some(T::Chatml));
        assert_eq!(detect("<|im_start|><|im_sep|>"), Some(T::Phi4));
        // phi3 needs <|end|>; without it the same markers are glmedge or falcon3.
        assert_eq!(detect("<|assistant|><|user|><|end|>"), Some(T::Phi3));
        assert_eq!(detect("<|assistant|><|user|>"), Some(T::Glmedge));
        assert_eq!(detect("<|assistant|><|user|></s>"), Some(T::Falcon3));
        assert_eq!(
            detect("<|assistant|><|user|><|tool_declare|></s>"),
            Some(T::ExaoneMoe)
        );
        // "mistral" must be a prefix, not just anywhere.
        assert_eq!(detect("mistral"), Some(T::Llama2));
        assert_eq!(detect("mistral-ish [SYSTEM_PROMPT]"), Some(T::MistralV7));
        assert_eq!(detect("my mistral"), None);
    }

    #[test]
    fn dots1_is_detected_but_has_no_name() {
        assert_eq!(detect("<|endofuserprompt|><|extra_0|><|extra_4|>"), None);
        assert_eq!(detect("<|extra_0|><|extra_4|>"), Some(T::HunyuanMoe));
    }

    #[test]
    fn granite_generations() {
        assert_eq!(detect("<|start_of_role|>"), Some(T::Granite));
        assert_eq!(detect("<|start_of_role|><tools>"), Some(T::Granite41));
        assert_eq!(
            detect("<|start_of_role|><tool_call>g4_default_system_message"),
            Some(T::Granite40)
        );
    }

    #[test]
    fn unknown_source_is_none() {
        assert_eq!(detect(""), None);
        assert_eq!(detect("{{ messages }}"), None);
    }
}
