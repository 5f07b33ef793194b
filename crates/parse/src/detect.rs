//! Picking a format from a chat template's source by the markers it uses.

use crate::Format;

/// Marker tests in order: the more specific first (`<tool_calls>` before `<tool_call>`,
/// Qwen3-Coder's `<function=`+`<parameter=` before Functionary's `<function=`).
const TABLE: &[(&[&str], Format)] = &[
    (&["<｜DSML｜"], Format::DeepseekDsml),
    (&["<｜tool▁calls▁begin｜>", "```json"], Format::DeepseekR1),
    (&["<｜tool▁calls▁begin｜>"], Format::DeepseekV31),
    (&["<|tool_calls_section_begin|>"], Format::KimiK2),
    (&["<|channel|>", "<|message|>"], Format::GptOss),
    (&["<minimax:tool_call>"], Format::MinimaxM2),
    (&["<seed:tool_call>"], Format::SeedOss),
    (&["<arg_key>"], Format::Glm45),
    (&["<function=", "<parameter="], Format::Qwen3CoderXml),
    (&[">>>all"], Format::FunctionaryV32),
    (&["<function="], Format::FunctionaryV31),
    (&["<|START_ACTION|>"], Format::CommandR7b),
    (&["<|tool_call_start|>"], Format::Lfm2),
    (&["<|tools_prefix|>"], Format::Apertus),
    (&["<|tool_call>"], Format::Gemma4),
    (&["<start_function_call>"], Format::FunctionGemma),
    (&["<TOOLCALL>"], Format::NemotronV2),
    (&["<tool_calls>"], Format::Apriel15),
    (&["[TOOL_CALLS]", "[ARGS]"], Format::MistralArgs),
    (&["[TOOL_CALLS]", "[THINK]"], Format::Magistral),
    (&["[TOOL_CALLS]"], Format::MistralNemo),
    (&[" functools["], Format::FirefunctionV2),
    (&["<|tool_call|>"], Format::Granite),
    (&["<|role_sep|>", "function call"], Format::GigachatV3),
    (&["<|function_call|>"], Format::GigachatV3),
    (&["<|python_tag|>", "brave_search"], Format::Llama3xBuiltin),
    (&["<|start_header_id|>", "ipython"], Format::Llama3x),
    (&["<tool_call>"], Format::Hermes),
];

impl Format {
    /// Picks the format of a Jinja chat template by the markers in its source: the first
    /// row of the detection table whose markers all occur; otherwise [`Format::Generic`] when
    /// the template handles `tools`, else [`Format::ContentOnly`].
    pub fn detect(template: &str) -> Format {
        TABLE
            .iter()
            .find(|(markers, _)| markers.iter().all(|m| template.contains(m)))
            .map_or_else(
                || {
                    if template.contains("tools") {
                        Format::Generic
                    } else {
                        Format::ContentOnly
                    }
                },
                |(_, f)| *f,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_by_markers() {
        assert_eq!(Format::detect("{{ '<tool_call>' }}"), Format::Hermes);
        assert_eq!(Format::detect("<tool_calls>[...]"), Format::Apriel15);
        assert_eq!(
            Format::detect("<function={{n}}><parameter=x>"),
            Format::Qwen3CoderXml
        );
        assert_eq!(
            Format::detect("[TOOL_CALLS]{{n}}[ARGS]"),
            Format::MistralArgs
        );
        assert_eq!(Format::detect("{% if tools %}"), Format::Generic);
        assert_eq!(Format::detect("{{ messages }}"), Format::ContentOnly);
    }
}
